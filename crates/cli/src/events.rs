//! `--events FILE`: a JSON-lines stream of what a run did, for machines.
//!
//! One JSON object per line (written with `serde_json`, flushed line by line, so a reader
//! may follow the file while the run goes on and a killed run leaves only whole lines).
//! Every object has `event` (its kind) and `ts_ms`, the wall-clock time it was written in
//! milliseconds since the Unix epoch (1970-01-01T00:00:00Z). The kinds:
//!
//! | `event` | when | fields besides `event` and `ts_ms` |
//! |---|---|---|
//! | `claimed` | a task's attempt got a worker (in memory: it took one of the `-j` slots, just before it starts; `--store`/`worker`: the store granted a lease) | `id`, `generation`, `attempt` |
//! | `started` | its command (or simulated sleep) is about to start | `id`, `generation`, `attempt` |
//! | `finished` | the attempt ended | `id`, `generation`, `attempt`, `outcome` (`succeeded`, `failed`, `interrupted`; with a store also `fenced`: a worker stopped the command because a lease renewal showed that another claim had taken the version, so the attempt did not fail and its result is refused), `exit_code` (the command's exit status, or `null`: no command, killed by a signal, not started), `exit` (how it exited, e.g. `exit status 1`, `killed by signal 15`, or `null`), `error` (why it failed, or `null`), `duration_ms` |
//! | `blocked` | a task will not run because a dependency failed or was cancelled | `id`, `generation`, `cause` (`{"id", "generation", "state"}`: the failed or cancelled task at the root) |
//! | `cancelled` | a task was cancelled before it ran | `id`, `generation`, `cause` (`Ctrl-C`, `SIGTERM`, `--fail-fast after X failed`, or `null`) |
//! | `interrupted` | a stop (Ctrl-C, SIGTERM) ended a task that had run: its running attempt was stopped (after that attempt's `finished`, outcome `interrupted`), or the attempt after a failed one was not made (stopped during the retry delay or the wait for a slot; that failed attempt's `finished` says `failed`); with a store, the task was given back | `id`, `generation` and `attempt` (the last attempt made), `how` (`killed by signal 15`; `exit status 1; attempt 2 not made`) |
//! | `graph_error` | the graph cannot run (a configuration error, not a task failure; nothing runs, exit 2) | `problems` (the lines `lockstep check` prints), `cycles` (each `A -> B -> A`), `hints` (the `hint: ...` lines naming the `--exclude-task` that would break each cycle) |
//! | `metrics` | last, once the run ended (also after a `graph_error`, and after a `lockstep worker` gave up on its store: exit 2) | [`Metrics`] |
//!
//! `generation` and `attempt`: in memory attempt k of a task is generation k (`attempt` =
//! `generation`). With `--store` (`run --store`, `lockstep worker`) `generation` is the store's
//! (a retry, or a resumed run, is a new generation), `attempt` is how many times the store
//! has claimed that generation (1; 2 and more after a lease was lost and the version claimed
//! again), and `claimed`, `started`, `finished` also carry the claim's fencing fields `owner`
//! (the lease owner, `HOST:PID/THREAD`) and `epoch` (the store's claim counter). An attempt is
//! so named by `(id, generation, attempt)`. A `finished` attempt's result may still be
//! refused by the store's fence (another claim owns the version); `metrics` counts those as
//! `claim_conflicts`.
//!
//! For one attempt of a task the order is always `claimed`, `started`, `finished` (each
//! written before the next happens), one `finished` per attempt; a retry is a new `claimed`
//! with the next generation, written after the failed attempt's `finished`.
//! In memory a task is blocked when a required dependency fails: the `blocked` lines of a
//! failure are written right after its `finished` line (before the failure settles, so
//! before any task that optionally depends on a blocked one is claimed), naming it (the
//! generation of its last attempt) as the cause, for every task it blocks, in file order; a task that two
//! failures would block is blocked by the first (`run::Blocking`). `cancelled` and
//! `interrupted` lines are written when the run has settled (the executor decides
//! cancellations inside its release path, which carries no hook). With a store (`run
//! --store`, `lockstep worker`), the worker that reported a failure writes `blocked` for the
//! versions it blocked once the store recorded it, before that worker claims again (their
//! cause is that attempt's version; other workers' lines may come between); a failure that
//! `run --store` retries writes none (its retry unblocks them), its last attempt's does, and
//! so does a retry that `--fail-fast` drops, when it is dropped. `run --store` then writes,
//! when the run has settled, the `blocked` and `cancelled` lines of the store's final
//! snapshot that were not written yet: those a cancel blocked, those of an earlier run,
//! those of a failure whose retry a stop (Ctrl-C, SIGTERM) dropped, and those left out
//! because the store answered a report as already recorded or refused the snapshot. A `lockstep worker`, when it ends, writes `cancelled` for the versions
//! cancelled while it ran and `blocked` for those a cancel blocked meanwhile (a snapshot at
//! its start and one at its end). A version's `blocked` line is written once per file.

use std::collections::HashSet;
use std::fs::File;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::{Value, json};

/// `fields` with the claim's `owner` and `epoch` added, when there is one.
fn with_claim(mut fields: Value, claim: Option<Claim<'_>>) -> Value {
    if let (Some(c), Value::Object(map)) = (claim, &mut fields) {
        map.insert("owner".into(), json!(c.owner));
        map.insert("epoch".into(), json!(c.epoch));
    }
    fields
}

/// Milliseconds since the Unix epoch, now (0 if the clock is before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The `--events` file: each [`EventSink::emit`] writes one JSON line, under a lock, so that
/// worker threads may write their tasks' events as they happen.
#[derive(Debug)]
pub struct EventSink {
    path: PathBuf,
    out: Mutex<Writer>,
    /// The versions `(id, generation)` whose `blocked` event was written: each is written
    /// once per file ([`EventSink::blocked`]).
    blocked_written: Mutex<HashSet<(String, u64)>>,
    /// The exclusive advisory lock on the file (none for standard output or error); last,
    /// so that it is released after the writer was flushed and closed.
    _lock: Option<Flock<File>>,
}

#[derive(Debug)]
struct Writer {
    file: BufWriter<File>,
    /// The first write error; later events are dropped and the run reports it.
    error: Option<std::io::Error>,
}

/// The store's claim an attempt ran under (`run --store` and `lockstep worker`): its lease
/// owner and epoch, the fencing token's parts besides the id and generation. Written as
/// `owner` and `epoch` in that attempt's `claimed`, `started` and `finished` events, so that
/// the attempts of one generation (a lease lost and the version claimed again) are told
/// apart, and matched with the store's records.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    /// The lease owner, `HOST:PID/THREAD`.
    pub owner: &'a str,
    /// The store's claim counter at this claim (unique per claim in one store).
    pub epoch: u64,
}

/// How an attempt ended, for a `finished` event.
#[derive(Debug, Clone, Default)]
pub struct Finish<'a> {
    /// `succeeded`, `failed` or `interrupted`.
    pub outcome: &'a str,
    /// The command's exit status, when it exited with one.
    pub exit_code: Option<i32>,
    /// How the command exited (`exit status 1`), when one ran.
    pub exit: Option<&'a str>,
    /// Why it failed.
    pub error: Option<&'a str>,
    /// How long the attempt ran.
    pub duration: Duration,
}

impl EventSink {
    /// Creates (or truncates) `path`; a `path` that is this process's standard output or
    /// error (`/dev/stdout`, `/dev/fd/2`, or the file either was redirected to) is written
    /// through a duplicate of that descriptor instead ([`std_stream`]).
    ///
    /// The file is held with an exclusive advisory lock (`flock(2)`, through `nix`) for as
    /// long as the sink lives, taken **before** it is truncated: two lockstep processes given
    /// one `--events` file (a `run --store` and a `worker` started with the same options)
    /// would otherwise each truncate it and write at their own offsets, over each other's
    /// lines. The second one is refused instead and the first one's file is left as it is.
    /// Standard output and error are not locked (a shared terminal or pipe keeps whole
    /// lines: each line is one `write`).
    ///
    /// # Errors
    /// The operating system's error (the caller names the path: exit status 2);
    /// [`std::io::ErrorKind::WouldBlock`] when another process holds the file's lock.
    pub fn create(path: &Path) -> std::io::Result<EventSink> {
        let mut lock = None;
        let file = match std_stream(path) {
            Some(stream) => stream,
            None => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)?;
                // Only a regular file is locked and truncated: a FIFO (opened above as the
                // shell would, waiting for a reader) or a device has nothing to truncate.
                if file.metadata()?.is_file() {
                    // A duplicate descriptor holds the lock: `flock` belongs to the open
                    // file description, which both share, so the lock lasts while either is
                    // open and is released when `lock` drops, after the writer (field order).
                    match Flock::lock(file.try_clone()?, FlockArg::LockExclusiveNonblock) {
                        Ok(held) => lock = Some(held),
                        Err((_, Errno::EWOULDBLOCK)) => {
                            return Err(std::io::Error::new(
                                std::io::ErrorKind::WouldBlock,
                                "another process is writing its events to this file (each run and \
                                 each worker needs a --events file of its own); the file was left \
                                 as it is",
                            ));
                        }
                        Err((_, errno)) => return Err(errno.into()),
                    }
                    file.set_len(0)?;
                }
                file
            }
        };
        Ok(EventSink {
            path: path.to_path_buf(),
            out: Mutex::new(Writer {
                file: BufWriter::new(file),
                error: None,
            }),
            blocked_written: Mutex::new(HashSet::new()),
            _lock: lock,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `{"event": KIND, "ts_ms": NOW, ...fields}` as one line and flushes it. `fields`
    /// must be a JSON object (other values are written under `value`).
    pub fn emit(&self, kind: &str, fields: Value) {
        let mut line = serde_json::Map::new();
        line.insert("event".into(), json!(kind));
        line.insert("ts_ms".into(), json!(now_ms()));
        match fields {
            Value::Object(map) => line.extend(map),
            Value::Null => {}
            other => {
                line.insert("value".into(), other);
            }
        }
        let mut w = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if w.error.is_some() {
            return;
        }
        // The whole line, newline included, in one buffer: the flush after an empty buffer
        // hands it to the file in one `write` (a line longer than the buffer goes straight
        // through, also in one), so a reader never sees half of one.
        let mut bytes = match serde_json::to_vec(&Value::Object(line)) {
            Ok(b) => b,
            Err(e) => {
                w.error = Some(std::io::Error::from(e));
                return;
            }
        };
        bytes.push(b'\n');
        let written = w.file.write_all(&bytes).and_then(|()| w.file.flush());
        if let Err(e) = written {
            w.error = Some(e);
        }
    }

    /// A `claimed` event (`claim`: the store's lease, with `--store`).
    pub fn claimed(&self, id: &str, generation: u64, attempt: u32, claim: Option<Claim<'_>>) {
        self.emit(
            "claimed",
            with_claim(
                json!({"id": id, "generation": generation, "attempt": attempt}),
                claim,
            ),
        );
    }

    /// A `started` event.
    pub fn started(&self, id: &str, generation: u64, attempt: u32, claim: Option<Claim<'_>>) {
        self.emit(
            "started",
            with_claim(
                json!({"id": id, "generation": generation, "attempt": attempt}),
                claim,
            ),
        );
    }

    // INVARIANT (C.events-order): per attempt of a task, `claimed`, `started` and `finished` are
    // written in that order by the one thread that runs it, each before the next step happens,
    // under the file's lock; a retry's `claimed` is written after the previous attempt's
    // `finished` (in memory the same thread; with `--store` the failure is reported to the
    // store, which the retry waits for, after `finished` is written). `blocked` names its cause.
    /// A `finished` event.
    pub fn finished(
        &self,
        id: &str,
        generation: u64,
        attempt: u32,
        claim: Option<Claim<'_>>,
        f: &Finish<'_>,
    ) {
        self.emit(
            "finished",
            with_claim(
                json!({
                    "id": id,
                    "generation": generation,
                    "attempt": attempt,
                    "outcome": f.outcome,
                    "exit_code": f.exit_code,
                    "exit": f.exit,
                    "error": f.error,
                    "duration_ms": ms(f.duration),
                }),
                claim,
            ),
        );
    }

    /// A `blocked` event: `id` will not run because `cause` (its root failed or cancelled
    /// task, at `cause_generation`, in state `cause_state`) did not succeed.
    ///
    /// At most once per version: a second call for the same `(id, generation)` writes
    /// nothing (`run --store` writes a final failure's `blocked` lines when its worker
    /// reports it, then every blocked task's from the store's final state). O(1) expected.
    pub fn blocked(&self, id: &str, generation: u64, cause: Option<(&str, u64, &str)>) {
        let first = self
            .blocked_written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((id.to_string(), generation));
        if !first {
            return;
        }
        let cause = cause.map(|(c, g, s)| json!({"id": c, "generation": g, "state": s}));
        self.emit(
            "blocked",
            json!({"id": id, "generation": generation, "cause": cause}),
        );
    }

    /// A `cancelled` event.
    pub fn cancelled(&self, id: &str, generation: u64, cause: Option<&str>) {
        self.emit(
            "cancelled",
            json!({"id": id, "generation": generation, "cause": cause}),
        );
    }

    /// An `interrupted` event: a stop (Ctrl-C, SIGTERM) ended `id` after attempt `attempt`
    /// (generation `generation`); `how` says how (`killed by signal 15`, `exit status 1;
    /// attempt 2 not made`).
    pub fn interrupted(&self, id: &str, generation: u64, attempt: u32, how: &str) {
        self.emit(
            "interrupted",
            json!({"id": id, "generation": generation, "attempt": attempt, "how": how}),
        );
    }

    /// A `graph_error` event: the graph cannot run (nothing ran).
    pub fn graph_error(&self, report: &crate::validate::Report) {
        let cycles: Vec<String> = report
            .graph
            .cycles
            .iter()
            .map(ToString::to_string)
            .chain(report.self_deps.iter().map(|s| format!("{s} -> {s}")))
            .collect();
        self.emit(
            "graph_error",
            json!({
                "problems": report.problem_lines(),
                "cycles": cycles,
                "hints": report.hint_lines(),
            }),
        );
    }

    /// The final `metrics` event.
    pub fn metrics(&self, m: &Metrics) {
        self.emit("metrics", serde_json::to_value(m).unwrap_or(Value::Null));
    }

    /// Flushes the file and returns the first write error, as `cannot write --events PATH:
    /// REASON`.
    ///
    /// # Errors
    /// The first error met while writing.
    pub fn finish(&self) -> Result<(), String> {
        let mut w = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let flushed = w.file.flush();
        match (w.error.take(), flushed) {
            (Some(e), _) | (None, Err(e)) => Err(format!(
                "cannot write --events {}: {e}",
                self.path.display()
            )),
            (None, Ok(())) => Ok(()),
        }
    }
}

/// Standard output or error, duplicated, when `path` is the same file as either (device and
/// inode): the events then share its file offset and the lines printed there interleave whole,
/// and the file is neither truncated nor reopened. Opening it again (`--events /dev/stdout >
/// out.txt`) gave a second offset, and each writer wrote over the other's lines.
fn std_stream(path: &Path) -> Option<File> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let target = std::fs::metadata(path).ok()?;
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    [stdout.as_fd(), stderr.as_fd()].into_iter().find_map(|fd| {
        let stream = File::from(fd.try_clone_to_owned().ok()?);
        let m = stream.metadata().ok()?;
        ((m.dev(), m.ino()) == (target.dev(), target.ino())).then_some(stream)
    })
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1_000_000.0).round() / 1000.0
}

/// A distribution of durations: how many, their sum and the largest, in milliseconds (three
/// decimals).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Stat {
    /// How many durations were added.
    pub count: u64,
    /// Their sum, in milliseconds.
    pub total_ms: f64,
    /// The largest, in milliseconds (0 when none).
    pub max_ms: f64,
}

impl Stat {
    /// Adds one duration.
    pub fn add(&mut self, d: Duration) {
        let v = ms(d);
        self.count += 1;
        self.total_ms = ((self.total_ms + v) * 1000.0).round() / 1000.0;
        if v > self.max_ms {
            self.max_ms = v;
        }
    }

    /// `total X s, max Y s over N`.
    fn text(&self) -> String {
        format!(
            "total {:.3} s, max {:.3} s over {}",
            self.total_ms / 1000.0,
            self.max_ms / 1000.0,
            self.count
        )
    }
}

/// The metrics of SPEC A8, counted where they happen, for the final `metrics` event and the
/// `metrics:` line of the end report.
///
/// In memory (`run` without `--store`) the executor is push-based: nothing claims against
/// anything else, and a task's result is delivered once by the function's return, so
/// `claim_conflicts`, `lease_expiries` and `duplicate_callbacks` are 0 by construction. With
/// `--store` and `worker` they come from the worker's counters: results refused by the fence,
/// lease renewals refused, and results the store recognised as duplicates.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Metrics {
    /// Tasks in the run (in memory: the graph; `worker`: the tasks this worker settled).
    pub tasks: usize,
    /// Tasks that succeeded.
    pub succeeded: usize,
    /// Tasks that failed (a task failure, not a graph error).
    pub failed: usize,
    /// Tasks blocked by a failed or cancelled dependency.
    pub blocked: usize,
    /// Tasks cancelled before they ran.
    pub cancelled: usize,
    /// Tasks running at Ctrl-C (or SIGTERM) that did not succeed.
    pub interrupted: usize,
    /// With a store: tasks of the file still pending, ready or running in the store when the
    /// run ended, other than the `interrupted` ones this process gave back (after Ctrl-C or
    /// SIGTERM; the next run or a worker takes them). So that `succeeded + failed + blocked +
    /// cancelled + interrupted + unsettled = tasks`, as in the `summary:` line. Always 0 in
    /// memory and for a `lockstep worker` (which counts only the tasks it settled).
    pub unsettled: usize,
    /// Attempts that ran (one `finished` event each).
    pub attempts: usize,
    /// Cycles found in the graph (self-dependencies included): non-zero only with a
    /// `graph_error`.
    pub cycles_found: usize,
    /// Optional dependencies (`after`, SPEC A8) that did not succeed, summed over the tasks
    /// that ran after them: each is a failure recorded with the task that ran anyway, never
    /// dropped (the `optional:` lines of the end report name them).
    pub optional_misses: usize,
    /// Claims or results refused because another claim owned the version (the fence).
    pub claim_conflicts: usize,
    /// Leases that expired while their task ran (renewal refused).
    pub lease_expiries: usize,
    /// Results the store had already recorded (a second callback for one version).
    pub duplicate_callbacks: usize,
    /// From the moment a task could run (the run's start for a task without dependencies,
    /// else its last dependency's `finished`) to its first `started`: time spent waiting for
    /// a worker slot, plus propagation. With a store, only for tasks whose dependencies all
    /// ran in this process during this run (the end of one that succeeded earlier or
    /// elsewhere is not known here); 0 for a `lockstep worker`.
    pub ready_wait: Stat,
    /// Each attempt's run time (`started` to `finished`).
    pub run_time: Stat,
    /// For tasks with dependencies: from the last dependency's `finished` to the task's first
    /// `claimed` (the scheduler releasing it and a worker taking it). With a store, for the
    /// same tasks as `ready_wait`, to the first start (a worker claims and starts in one step).
    pub propagation_latency: Stat,
    /// The run's wall time in milliseconds.
    pub wall_ms: f64,
}

impl Metrics {
    /// Sets the wall time.
    pub fn set_wall(&mut self, wall: Duration) {
        self.wall_ms = ms(wall);
    }

    /// The `metrics:` line of the end report.
    pub fn line(&self) -> String {
        format!(
            "metrics: ready-wait {}; run time {}; propagation latency {}; claim conflicts {}, lease expiries {}, duplicate callbacks {}, cycles found {}, optional misses {}",
            self.ready_wait.text(),
            self.run_time.text(),
            self.propagation_latency.text(),
            self.claim_conflicts,
            self.lease_expiries,
            self.duplicate_callbacks,
            self.cycles_found,
            self.optional_misses
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_versions_blocked_line_is_written_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.jsonl");
        let sink = EventSink::create(&path).unwrap();
        sink.blocked("c", 1, Some(("b", 2, "failed")));
        // The end pass of `run --store` lists it again: nothing is written.
        sink.blocked("c", 1, Some(("b", 2, "failed")));
        // Another version of the same task, or another task, is its own line.
        sink.blocked("c", 2, Some(("b", 3, "failed")));
        sink.blocked("d", 1, None);
        sink.finish().unwrap();
        let lines: Vec<Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let seen: Vec<(&str, u64)> = lines
            .iter()
            .map(|l| (l["id"].as_str().unwrap(), l["generation"].as_u64().unwrap()))
            .collect();
        assert_eq!(seen, [("c", 1), ("c", 2), ("d", 1)]);
        assert_eq!(lines[0]["cause"]["generation"], 2);
    }

    #[test]
    fn every_event_is_one_json_line_with_kind_and_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.jsonl");
        let sink = EventSink::create(&path).unwrap();
        sink.claimed("a\"b", 1, 1, None);
        sink.finished(
            "a\"b",
            1,
            1,
            Some(Claim {
                owner: "h:1/0",
                epoch: 7,
            }),
            &Finish {
                outcome: "failed",
                exit_code: Some(3),
                exit: Some("exit status 3"),
                error: Some("exit status 3"),
                duration: Duration::from_micros(1500),
            },
        );
        let mut m = Metrics::default();
        m.run_time.add(Duration::from_millis(2));
        sink.metrics(&m);
        sink.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["event"], "claimed");
        assert_eq!(lines[0]["id"], "a\"b");
        assert!(lines[0].get("owner").is_none() && lines[0].get("epoch").is_none());
        assert_eq!(
            (&lines[1]["owner"], &lines[1]["epoch"]),
            (&json!("h:1/0"), &json!(7))
        );
        assert!(lines[0]["ts_ms"].as_u64().unwrap() > 1_600_000_000_000);
        assert_eq!(lines[1]["exit_code"], 3);
        assert_eq!(lines[1]["duration_ms"], 1.5);
        assert_eq!(lines[2]["run_time"]["count"], 1);
        assert_eq!(lines[2]["run_time"]["max_ms"], 2.0);
    }
}
