//! `--timings` on `check` and `run`: one line per phase on standard error, in order, with
//! what each phase handled, then a total; standard output unchanged. Times are parsed but
//! never compared with anything but themselves (no test asserts a speed).

use std::path::{Path, PathBuf};

use assert_cmd::cargo::cargo_bin_cmd;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

/// One parsed `timings:` line.
#[derive(Debug)]
struct Line {
    phase: String,
    seconds: f64,
    percent: f64,
    detail: String,
}

/// Every `timings:` line of `stderr`, parsed: `timings: PHASE WALL UNIT PERCENT% [DETAIL]`.
fn timing_lines(stderr: &str) -> Vec<Line> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("timings: "))
        .map(|rest| {
            let mut words = rest.split_whitespace();
            let phase = words.next().expect("a phase").to_string();
            let value: f64 = words.next().expect("a time").parse().expect("a number");
            let scale = match words.next().expect("a unit") {
                "µs" => 1e-6,
                "ms" => 1e-3,
                "s" => 1.0,
                other => panic!("unknown unit {other:?} in {rest:?}"),
            };
            let percent: f64 = words
                .next()
                .and_then(|p| p.strip_suffix('%'))
                .expect("a percentage")
                .parse()
                .expect("a number");
            let detail = words.collect::<Vec<_>>().join(" ");
            Line {
                phase,
                seconds: value * scale,
                percent,
                detail,
            }
        })
        .collect()
}

fn phases(lines: &[Line]) -> Vec<&str> {
    lines.iter().map(|l| l.phase.as_str()).collect()
}

fn run(args: &[&str], file: &Path) -> (i32, String, String) {
    let out = cargo_bin_cmd!("lockstep")
        .args(&args[..1])
        .arg(file)
        .args(&args[1..])
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The total is the sum of the phases (to the printed precision) and says 100%.
fn assert_total_adds_up(lines: &[Line]) {
    let (total, phases) = lines.split_last().expect("at least the total");
    assert_eq!(total.phase, "total");
    assert_eq!(total.percent, 100.0);
    let sum: f64 = phases.iter().map(|l| l.seconds).sum();
    // Each printed time is rounded to 3-4 significant digits.
    assert!(
        (sum - total.seconds).abs() <= 0.01 * total.seconds + 1e-5 * lines.len() as f64,
        "{sum} vs {}",
        total.seconds
    );
    let percent: f64 = phases.iter().map(|l| l.percent).sum();
    assert_eq!(percent, 100.0, "the phases' percentages add up to 100");
}

#[test]
fn check_timings_name_each_phase_with_its_counts() {
    let file = example("pipeline.toml");
    let (code, stdout, stderr) = run(&["check", "--timings"], &file);
    assert_eq!(code, 0, "{stderr}");
    let lines = timing_lines(&stderr);
    assert_eq!(
        phases(&lines),
        ["read", "parse", "build", "validate", "total"]
    );
    let bytes = std::fs::metadata(&file).unwrap().len();
    assert_eq!(lines[0].detail.replace(',', ""), format!("{bytes} bytes"));
    assert_eq!(lines[1].detail, "9 task(s), 11 edge(s)");
    assert_eq!(
        lines[2].detail,
        "9 task(s), 11 edge(s) submitted to the scheduler"
    );
    assert!(
        lines[3].detail.starts_with("0 problem(s)"),
        "{}",
        lines[3].detail
    );
    assert_total_adds_up(&lines);
    // Standard output is what it is without the flag.
    let (_, plain, plain_err) = run(&["check"], &file);
    assert_eq!(stdout, plain);
    assert!(timing_lines(&plain_err).is_empty(), "{plain_err}");
}

#[test]
fn check_timings_count_the_problems_of_a_graph_that_cannot_run() {
    let (code, _, stderr) = run(&["check", "--timings"], &example("apt-ruby.dot"));
    assert_eq!(code, 1);
    let lines = timing_lines(&stderr);
    // Its cycles add the `hints` phase: which --exclude-task would break each.
    assert_eq!(
        phases(&lines),
        ["read", "parse", "build", "validate", "hints", "total"]
    );
    assert_eq!(
        lines[4].detail,
        "2 cycle(s), 5 task(s) tried as --exclude-task"
    );
    let problems: usize = lines[3]
        .detail
        .split(' ')
        .next()
        .unwrap()
        .replace(',', "")
        .parse()
        .unwrap();
    assert!(problems > 0, "{}", lines[3].detail);
    assert_total_adds_up(&lines);
}

#[test]
fn a_file_that_does_not_parse_still_prints_the_phases_that_ended() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.dot");
    std::fs::write(&bad, "digraph { a -> }").unwrap();
    let (code, _, stderr) = run(&["check", "--timings"], &bad);
    assert_eq!(code, 2, "{stderr}");
    let lines = timing_lines(&stderr);
    assert_eq!(phases(&lines), ["read", "parse", "total"]);
    assert_eq!(lines[0].detail, "16 bytes");
    assert_eq!(lines[1].detail, "stopped here", "the phase it stopped in");
    assert_total_adds_up(&lines);
}

#[test]
fn a_file_that_cannot_be_read_prints_the_read_it_stopped_in() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where a file is expected, and a file that does not exist.
    for path in [
        dir.path().join("graph.toml"),
        dir.path().join("missing.toml"),
    ] {
        if path.ends_with("graph.toml") {
            std::fs::create_dir(&path).unwrap();
        }
        let (code, _, stderr) = run(&["check", "--timings"], &path);
        assert_eq!(code, 2, "{stderr}");
        let lines = timing_lines(&stderr);
        assert_eq!(phases(&lines), ["read", "total"], "{stderr}");
        assert_eq!(lines[0].detail, "stopped here");
        assert!(
            lines[1].seconds > 0.0,
            "a command that did work is not 0 µs: {stderr}"
        );
        assert_total_adds_up(&lines);
    }
}

#[test]
fn run_timings_add_freeze_and_run() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.dot");
    std::fs::write(&file, "digraph { a -> b; a -> c; b -> c; d }\n").unwrap();
    let (code, stdout, stderr) = run(&["run", "--timings", "-j", "2"], &file);
    assert_eq!(code, 0, "{stderr}");
    let lines = timing_lines(&stderr);
    assert_eq!(
        phases(&lines),
        [
            "read", "parse", "build", "validate", "freeze", "run", "total"
        ]
    );
    assert_eq!(lines[1].detail, "4 task(s), 3 edge(s)");
    assert_eq!(lines[4].detail, "4 task(s), 3 edge(s) for the executor");
    assert_eq!(lines[5].detail, "4 task(s) settled with -j 2");
    assert_total_adds_up(&lines);
    assert!(stdout.contains("ok      a (no command)"), "{stdout}");
}

#[test]
fn dry_run_timings_end_with_the_schedule() {
    let (code, _, stderr) = run(
        &["run", "--timings", "--dry-run", "-j", "1"],
        &example("pipeline.toml"),
    );
    assert_eq!(code, 0, "{stderr}");
    let lines = timing_lines(&stderr);
    assert_eq!(
        phases(&lines),
        ["read", "parse", "build", "validate", "schedule", "total"]
    );
    assert_eq!(lines[4].detail, "9 task(s) claimed with -j 1");
    assert_total_adds_up(&lines);
}

#[test]
fn run_of_a_graph_that_cannot_run_stops_after_validate() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("g.dot");
    std::fs::write(&file, "digraph { a -> b; b -> a }\n").unwrap();
    let (code, _, stderr) = run(&["run", "--timings"], &file);
    assert_eq!(code, 2, "{stderr}");
    let lines = timing_lines(&stderr);
    // Validation found a cycle: the hints for it, then nothing else.
    assert_eq!(
        phases(&lines),
        ["read", "parse", "build", "validate", "hints", "total"]
    );
    assert!(
        lines[3].detail.starts_with("1 problem(s)"),
        "{}",
        lines[3].detail
    );
}
