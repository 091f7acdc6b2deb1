//! A picture of a run (issue 12, item 3): `--trace FILE.json`, the attempts on a timeline that
//! Perfetto and `chrome://tracing` open, and `--graph-out FILE.dot`, the graph with each task
//! coloured by its final state, for `dot -Tsvg`.
//!
//! # The trace (`docs/semantics.md`, Part C, "A picture of the run")
//! The [Chrome trace-event format] as a JSON object: `traceEvents` holds
//!
//! * one *complete* event (`"ph": "X"`) per attempt ([`AttemptSpan`]): `name` the task id, `ts`
//!   and `dur` in whole microseconds since the start of the run (the origin of the report's
//!   wall time), `pid` 1, `tid` the attempt's worker slot plus 1, and `args` `{id,
//!   generation, attempt, attempts, outcome, exit_status, error, critical_path}`;
//! * one `thread_name` metadata event (`"ph": "M"`) per slot, `slot 1` to `slot N`, and one
//!   `process_name` naming the run.
//!
//! A slot is one of the `-j` places an attempt runs in: each attempt takes the lowest slot free
//! when it starts, waiting while all are taken ([`crate::run::Slots`]), so the spans of one
//! lane never overlap and there are never more than `-j` lanes (a task waiting for its retry
//! delay holds none). The spans
//! of the tasks on the critical path (the summary line's) have `args.critical_path` true and
//! `cname` [`CRITICAL_CNAME`]; `otherData` repeats the path and its length.
//!
//! # The graph
//! DOT where `A -> B` means *A depends on B* (what [`crate::graph::dot`] reads back), drawn
//! bottom to top so that the first tasks are at the top. Each task is a node labelled with its
//! id and its final state (`failed: exit status 1`, `blocked: plugins failed`, ...), filled
//! with its state's colour ([`state_style`]) and with the state as its `class` (a CSS class in
//! SVG output). Ids are quoted by [`dot_quote`], labels by [`dot_label`].
//!
//! [Chrome trace-event format]: https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use lockstep_contract::TaskState;
use serde_json::{Value, json};

use crate::graph::TaskGraph;
use crate::run::{AttemptSpan, RunReport, TaskRecord};

/// The trace's `cname` of the spans on the critical path (a colour of the trace viewer's
/// palette, used for nothing else).
pub const CRITICAL_CNAME: &str = "yellow";

/// Whole microseconds of `d`, rounded down (so that an end read before a start is never
/// after it).
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The Chrome trace of a run: the module docs say what it holds. `title` names the process
/// lane. O(attempts + slots).
pub fn chrome_trace(report: &RunReport, jobs: usize, title: &str) -> Value {
    let critical: HashSet<&str> = report.critical_path.iter().map(String::as_str).collect();
    let lanes = report
        .spans
        .iter()
        .map(|s| s.slot + 1)
        .max()
        .unwrap_or(0)
        .max(jobs);
    let mut events = Vec::with_capacity(report.spans.len() + lanes + 1);
    events.push(json!({
        "name": "process_name", "ph": "M", "pid": 1, "tid": 0,
        "args": { "name": title },
    }));
    for slot in 0..lanes {
        events.push(json!({
            "name": "thread_name", "ph": "M", "pid": 1, "tid": slot + 1,
            "args": { "name": format!("slot {}", slot + 1) },
        }));
        events.push(json!({
            "name": "thread_sort_index", "ph": "M", "pid": 1, "tid": slot + 1,
            "args": { "sort_index": slot + 1 },
        }));
    }
    for span in &report.spans {
        events.push(span_event(span, critical.contains(span.id.as_str())));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "jobs": jobs,
            "wall_us": micros(report.wall),
            "critical_path": report.critical_path,
            "critical_path_us": micros(report.critical_time),
        },
    })
}

/// The complete event (`"ph": "X"`) of one attempt.
fn span_event(span: &AttemptSpan, critical: bool) -> Value {
    let ts = micros(span.start);
    let mut event = json!({
        "name": span.id,
        "cat": "attempt",
        "ph": "X",
        "ts": ts,
        "dur": micros(span.end).saturating_sub(ts),
        "pid": 1,
        "tid": span.slot + 1,
        "args": {
            "id": span.id,
            "generation": span.generation,
            "attempt": span.attempt,
            "attempts": span.attempts,
            "outcome": span.outcome.name(),
            "exit_status": span.exit,
            "error": span.error,
            "critical_path": critical,
        },
    });
    if critical {
        event["cname"] = json!(CRITICAL_CNAME);
    }
    event
}

/// The name of a task's final state in the picture: `succeeded`, `failed`, `blocked`,
/// `cancelled`, `interrupted` (running at Ctrl-C and did not succeed) or `not run` (any other
/// state).
pub fn final_state(t: &TaskRecord) -> &'static str {
    if t.interrupted.is_some() {
        return "interrupted";
    }
    match t.state {
        TaskState::Succeeded => "succeeded",
        TaskState::Failed => "failed",
        TaskState::Blocked => "blocked",
        TaskState::Cancelled => "cancelled",
        _ => "not run",
    }
}

/// The fill colour and node style of a final state ([`final_state`]), as the DOT output
/// writes them.
pub fn state_style(state: &str) -> (&'static str, &'static str) {
    match state {
        "succeeded" => ("palegreen", "rounded,filled"),
        "failed" => ("salmon", "rounded,filled"),
        "blocked" => ("orange", "rounded,filled"),
        "cancelled" => ("lightgrey", "rounded,filled"),
        "interrupted" => ("plum", "rounded,filled"),
        _ => ("white", "rounded,filled,dashed"),
    }
}

/// The second line of a task's label: its final state and what caused it (`failed: exit
/// status 1 (attempt 3/3)`, `blocked: plugins failed`, `cancelled: Ctrl-C`).
pub fn state_text(t: &TaskRecord) -> String {
    let attempt = if t.attempts > 1 && t.attempt > 0 {
        format!(" (attempt {}/{})", t.attempt, t.attempts)
    } else {
        String::new()
    };
    match final_state(t) {
        "interrupted" => format!(
            "interrupted: {}",
            t.interrupted.as_deref().unwrap_or_default()
        ),
        "succeeded" => format!("succeeded{attempt}"),
        "failed" => format!(
            "failed: {}{attempt}",
            t.error.as_deref().unwrap_or("failed")
        ),
        "blocked" => match &t.blocked_by {
            Some(c) => format!("blocked: {} {}", c.task, c.state),
            None => "blocked: cause unknown".to_string(),
        },
        "cancelled" => match &t.cancel_cause {
            Some(c) => format!("cancelled: {c}"),
            None => "cancelled".to_string(),
        },
        other => other.to_string(),
    }
}

/// `text` as a DOT quoted string that the DOT readers (Graphviz's and
/// [`crate::graph::dot`]) give back as `text`: `"` becomes `\"`; a backslash stays as it is
/// unless it would join the next character into an escape (a `"`, a line end, or the closing
/// quote), and then a line continuation (backslash, newline, which the reader removes) is put
/// after it; newlines stay literal (DOT has no other way to write one in an id). O(len).
pub fn dot_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => {
                out.push('\\');
                if matches!(chars.peek(), None | Some('"' | '\n' | '\r')) {
                    out.push_str("\\\n");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `text` as a DOT label (an escString: Graphviz reads `\n` as a line break and `\N`, `\G`,
/// ... as names), quoted by [`dot_quote`]: each backslash is doubled, each line end becomes
/// `\n`, so that the label shows `text` as it is.
pub fn dot_label(text: &str) -> String {
    let mut esc = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => esc.push_str("\\\\"),
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' | '\r' => esc.push_str("\\n"),
            c => esc.push(c),
        }
    }
    dot_quote(&esc)
}

/// The graph that ran, in DOT, each task coloured by its final state (module docs). Tasks in
/// file order, then edges in file order. O(V + E).
pub fn graph_dot(graph: &TaskGraph, report: &RunReport) -> String {
    let records: HashMap<&str, &TaskRecord> =
        report.tasks.iter().map(|t| (t.id.as_str(), t)).collect();
    let mut out = String::new();
    out.push_str(
        "// lockstep run: each task with its final state; `A -> B` means A depends on B.\n\
         // Draw it with: dot -Tsvg FILE.dot -o FILE.svg\n\
         digraph lockstep {\n  rankdir=BT;\n  \
         node [shape=box, fontname=\"Helvetica\"];\n",
    );
    for t in &graph.tasks {
        let (state, text) = match records.get(t.id.as_str()) {
            Some(r) => (final_state(r), state_text(r)),
            None => ("not run", "not run".to_string()),
        };
        let (fill, style) = state_style(state);
        let _ = writeln!(
            out,
            "  {} [label={}, style=\"{style}\", fillcolor=\"{fill}\", class=\"{}\"];",
            dot_quote(&t.id),
            dot_label(&format!("{}\n{text}", t.id)),
            state.replace(' ', "-")
        );
    }
    for t in &graph.tasks {
        for d in &t.deps {
            let _ = writeln!(out, "  {} -> {};", dot_quote(&t.id), dot_quote(d));
        }
        // Optional dependencies (`after`): dashed, and marked so that the file reads back
        // with the same kind of edge.
        for d in &t.after {
            let _ = writeln!(
                out,
                "  {} -> {} [optional=true, style=dashed];",
                dot_quote(&t.id),
                dot_quote(d)
            );
        }
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Format, ReadOptions, TaskSpec, read_str};

    #[test]
    fn quoted_ids_read_back_as_they_were() {
        let ids = [
            "plain",
            "say \"hi\"",
            "back\\slash",
            "ends with \\",
            "\\\"",
            "\\\\\"",
            "two\nlines",
            "cr\r\nlf",
            "\\\n",
            "node",
            "<html>",
            "é -> ü",
            "",
        ];
        let mut g = TaskGraph::default();
        for (i, id) in ids.iter().enumerate() {
            let deps: Vec<&str> = ids[..i].iter().rev().take(1).copied().collect();
            g.tasks.push(TaskSpec::new(*id, deps));
        }
        let mut text = String::from("digraph {\n");
        for t in &g.tasks {
            text.push_str(&format!(
                "  {} [label={}];\n",
                dot_quote(&t.id),
                dot_label(&t.id)
            ));
            for d in &t.deps {
                text.push_str(&format!("  {} -> {};\n", dot_quote(&t.id), dot_quote(d)));
            }
        }
        text.push_str("}\n");
        let back = read_str(
            &text,
            std::path::Path::new("x.dot"),
            Format::Dot,
            &ReadOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let got: Vec<(&str, Vec<&str>)> = back
            .tasks
            .iter()
            .map(|t| (t.id.as_str(), t.deps.iter().map(String::as_str).collect()))
            .collect();
        let want: Vec<(&str, Vec<&str>)> = g
            .tasks
            .iter()
            .map(|t| (t.id.as_str(), t.deps.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(got, want, "{text}");
    }

    fn record(id: &str, state: TaskState) -> TaskRecord {
        TaskRecord {
            id: id.to_string(),
            state,
            duration: None,
            error: None,
            blocked_by: None,
            optional_misses: Vec::new(),
            log: None,
            interrupted: None,
            attempt: 1,
            attempts: 1,
            generation: 1,
            cancel_cause: None,
        }
    }

    #[test]
    fn interrupted_and_not_run_tasks_have_their_own_colour_and_label() {
        let mut i = record("i", TaskState::Failed);
        i.error = Some("interrupted".to_string());
        i.interrupted = Some("killed by signal 15".to_string());
        let mut ok = record("ok", TaskState::Succeeded);
        (ok.attempt, ok.attempts) = (2, 3);
        let pending = record("p", TaskState::Pending);
        assert_eq!(
            [&i, &ok, &pending].map(|t| (final_state(t), state_text(t))),
            [
                (
                    "interrupted",
                    "interrupted: killed by signal 15".to_string()
                ),
                ("succeeded", "succeeded (attempt 2/3)".to_string()),
                ("not run", "not run".to_string()),
            ]
        );
        let g = TaskGraph {
            tasks: vec![
                TaskSpec::new("i", Vec::<String>::new()),
                TaskSpec::new("p", ["i"]),
            ],
            notes: vec![],
            warnings: vec![],
            pools: Default::default(),
        };
        let report = RunReport {
            tasks: vec![i, pending],
            counts: vec![],
            interrupted_tasks: 1,
            wall: Duration::ZERO,
            critical_time: Duration::ZERO,
            critical_path: vec![],
            interrupted: None,
            fail_fast: None,
            spans: vec![],
            output_errors: vec![],
            metrics: Default::default(),
        };
        let dot = graph_dot(&g, &report);
        assert!(
            dot.contains(
                "  \"i\" [label=\"i\\ninterrupted: killed by signal 15\", style=\"rounded,filled\", fillcolor=\"plum\", class=\"interrupted\"];\n"
            ),
            "{dot}"
        );
        assert!(
            dot.contains(
                "  \"p\" [label=\"p\\nnot run\", style=\"rounded,filled,dashed\", fillcolor=\"white\", class=\"not-run\"];\n  \"p\" -> \"i\";\n}\n"
            ),
            "{dot}"
        );
    }

    #[test]
    fn labels_double_backslashes_and_write_line_ends_as_escapes() {
        assert_eq!(dot_label("a\nb"), "\"a\\nb\"");
        assert_eq!(dot_label("x\\N"), "\"x\\\\N\"");
        assert_eq!(dot_label("a\r\nb\rc"), "\"a\\nb\\nc\"");
        assert_eq!(dot_quote("q\""), "\"q\\\"\"");
        assert_eq!(dot_quote("end\\"), "\"end\\\\\n\"");
    }
}
