//! `cargo xtask report`: measures the verification suites and writes the measurements
//! section of `docs/verification.md` (between `<!-- measurements:begin -->` and
//! `<!-- measurements:end -->`).
//!
//! For every suite it builds the test binaries first (not timed), then runs each binary once
//! with `--nocapture` (timed: wall time of the run only) and reads what it prints:
//!
//! * libtest's `test result: ok. N passed; F failed; I ignored; ...` line (the tests run);
//! * the suites' own `lockstep-stats: KEY=N ... test=NAME` lines (stdout), one per property,
//!   shuttle test, loom model or stress test: proptest and quickcheck print `cases=`, shuttle
//!   `schedules=` (executions, counted by `tests/src/shuttle_run.rs`), loom `executions=`
//!   (counted in the model closure), the stress test `rounds=` and `ops=`.
//!
//! The builds are those of `.ci/run`: unit and integration tests in the dev profile, shuttle
//! (`--cfg shuttle`, `target-shuttle`) and loom (`--cfg loom -C debug-assertions`,
//! `target-loom`, `LOOM_MAX_PREEMPTIONS=2`) in release. (`.ci/run` adds `--cfg lockstep_bug`
//! and uses the zoo's target directories, so that the zoo reuses its checker builds; with
//! `LOCKSTEP_BUG` unset no seed is on, so the same code runs.)
//!
//! Fuzzing: every cargo-fuzz target (nightly, AddressSanitizer, as `fuzz/ci.sh`) runs for
//! `--fuzz-seconds` seconds with `-print_final_stats=1`; the report takes libFuzzer's
//! `stat::number_of_executed_units` and `stat::average_exec_per_sec` (with
//! `ASAN_OPTIONS=detect_stack_use_after_return=0`, as `fuzz/ci.sh`). New corpus entries go
//! to a temporary directory, so the committed corpora are read but never changed.
//!
//! The whole `.ci/run` time is not measured here (it takes most of an hour): `.ci/run` writes
//! `target/ci-times.txt` (a `started DATE at COMMIT` line, one `STAGE SECONDS` line per
//! finished stage, `total SECONDS` at the end) and the report copies it when present.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;

/// The marker lines the generated section goes between.
const BEGIN: &str = "<!-- measurements:begin -->";
/// See [`BEGIN`].
const END: &str = "<!-- measurements:end -->";

/// Options of `cargo xtask report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Seconds each fuzz target runs.
    #[arg(long, default_value_t = 20)]
    fuzz_seconds: u64,
    /// Do not run the fuzz targets.
    #[arg(long)]
    skip_fuzz: bool,
    /// Do not build or run the loom suite.
    #[arg(long)]
    skip_loom: bool,
    /// Do not build or run the shuttle suites.
    #[arg(long)]
    skip_shuttle: bool,
    /// The file whose measurements section is replaced (relative to the workspace root).
    #[arg(long, default_value = "docs/verification.md")]
    output: PathBuf,
}

/// How a group of test binaries is built and run.
struct Flavour {
    /// The group's name in the report.
    name: &'static str,
    /// `RUSTFLAGS` for the build (and nothing else set).
    rustflags: Option<&'static str>,
    /// `CARGO_TARGET_DIR`, if not the default.
    target_dir: Option<&'static str>,
    /// Release profile.
    release: bool,
    /// The cargo arguments choosing the binaries (after `test --no-run`).
    select: &'static [&'static str],
    /// Environment of the runs.
    run_env: &'static [(&'static str, &'static str)],
}

/// The groups, in the order of `.ci/run`.
const UNIT: Flavour = Flavour {
    name: "unit",
    rustflags: None,
    target_dir: None,
    release: false,
    select: &["--workspace", "--lib"],
    run_env: &[],
};
/// See [`UNIT`].
const INTEGRATION: Flavour = Flavour {
    name: "integration",
    rustflags: None,
    target_dir: None,
    release: false,
    select: &["-p", "lockstep-tests", "--tests"],
    run_env: &[],
};
/// See [`UNIT`].
const SHUTTLE: Flavour = Flavour {
    name: "shuttle",
    rustflags: Some("--cfg shuttle"),
    target_dir: Some("target-shuttle"),
    release: true,
    select: &["-p", "lockstep-tests", "--test", "shuttle_*"],
    run_env: &[],
};
/// See [`UNIT`].
const LOOM: Flavour = Flavour {
    name: "loom",
    rustflags: Some("--cfg loom -C debug-assertions"),
    target_dir: Some("target-loom"),
    release: true,
    select: &["-p", "lockstep-tests", "--test", "loom_*"],
    run_env: &[("LOOM_MAX_PREEMPTIONS", "2")],
};

/// One test binary to run.
struct Binary {
    /// The suite's name: the test target (`model_dag`) or, for unit tests, the crate.
    suite: String,
    /// The executable.
    exe: PathBuf,
    /// The package directory (cargo runs tests there).
    dir: PathBuf,
}

/// What one run of a test binary showed.
struct SuiteRun {
    flavour: &'static str,
    suite: String,
    passed: u64,
    failed: u64,
    ignored: u64,
    ok: bool,
    wall: Duration,
    /// `(test, key, value)` from the `lockstep-stats:` lines.
    stats: Vec<(String, String, u64)>,
}

/// One fuzz target's run.
struct FuzzRun {
    target: &'static str,
    executions: Option<u64>,
    per_second: Option<u64>,
    wall: Duration,
    ok: bool,
}

/// Runs the report (see the module docs); exit status 1 when a suite or fuzz target failed
/// (the section is still written, with the failures marked).
///
/// # Errors
/// When a build fails, a binary cannot be started, or the output file cannot be read, lacks
/// the markers, or cannot be written.
pub fn run(args: &ReportArgs) -> Result<ExitCode> {
    let root = workspace_root();
    let loadavg_before = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let started = Instant::now();

    let mut flavours = vec![UNIT, INTEGRATION];
    if !args.skip_shuttle {
        flavours.push(SHUTTLE);
    }
    if !args.skip_loom {
        flavours.push(LOOM);
    }
    let mut runs = Vec::new();
    for f in &flavours {
        let binaries = build(&root, f)?;
        for b in &binaries {
            runs.push(run_binary(f, b)?);
        }
    }
    let fuzz = if args.skip_fuzz {
        Vec::new()
    } else {
        run_fuzz(&root, args.fuzz_seconds)?
    };
    let loadavg_after = fs::read_to_string("/proc/loadavg").unwrap_or_default();

    let section = render(
        &root,
        args,
        &runs,
        &fuzz,
        started.elapsed(),
        [loadavg_before.trim(), loadavg_after.trim()],
    );
    let path = root.join(&args.output);
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let updated = replace_section(&text, &section)
        .with_context(|| format!("{}: the measurements markers", path.display()))?;
    fs::write(&path, updated).with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "report: wrote the measurements section of {} ({:.0} s)",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    let all_ok = runs.iter().all(|r| r.ok) && fuzz.iter().all(|f| f.ok);
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        eprintln!("report: some suites or fuzz targets FAILED (marked in the table)");
        ExitCode::from(1)
    })
}

/// The workspace root: the parent of this crate's directory.
pub(crate) fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// A `cargo` command in `root` with the flavour's build environment.
fn cargo(root: &Path, f: &Flavour) -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root);
    c.env_remove("RUSTFLAGS");
    if let Some(flags) = f.rustflags {
        c.env("RUSTFLAGS", flags);
    }
    if let Some(dir) = f.target_dir {
        c.env("CARGO_TARGET_DIR", root.join(dir));
    } else {
        c.env_remove("CARGO_TARGET_DIR");
    }
    c
}

/// Builds the flavour's test binaries (untimed) and lists them, suites in name order.
fn build(root: &Path, f: &Flavour) -> Result<Vec<Binary>> {
    eprintln!("report: building the {} tests", f.name);
    let mut c = cargo(root, f);
    c.args(["test", "--locked", "--no-run", "--message-format=json"]);
    if f.release {
        c.arg("--release");
    }
    c.args(f.select);
    c.stderr(Stdio::inherit());
    let out = c.output().context("starting cargo")?;
    if !out.status.success() {
        bail!("building the {} tests failed ({})", f.name, out.status);
    }
    let mut binaries = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" || msg["profile"]["test"] != true {
            continue;
        }
        let Some(exe) = msg["executable"].as_str() else {
            continue;
        };
        let kinds: Vec<&str> = msg["target"]["kind"]
            .as_array()
            .map(|k| k.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        let target = msg["target"]["name"].as_str().unwrap_or("?");
        let suite = match f.name {
            "unit" if kinds.contains(&"lib") => target.to_string(),
            "integration" => {
                // The shuttle and loom suites compile to nothing without their cfg.
                if !kinds.contains(&"test")
                    || target.starts_with("shuttle_")
                    || target.starts_with("loom_")
                {
                    continue;
                }
                target.to_string()
            }
            "shuttle" | "loom" if kinds.contains(&"test") => target.to_string(),
            _ => continue,
        };
        let manifest = PathBuf::from(msg["manifest_path"].as_str().unwrap_or(""));
        let dir = manifest
            .parent()
            .map_or_else(|| root.to_path_buf(), Path::to_path_buf);
        binaries.push(Binary {
            suite,
            exe: PathBuf::from(exe),
            dir,
        });
    }
    binaries.sort_by(|a, b| a.suite.cmp(&b.suite));
    binaries.dedup_by(|a, b| a.exe == b.exe);
    Ok(binaries)
}

/// Runs one test binary with `--nocapture` and parses what it printed.
fn run_binary(f: &Flavour, b: &Binary) -> Result<SuiteRun> {
    eprintln!("report: running {} ({})", b.suite, f.name);
    let mut c = Command::new(&b.exe);
    c.arg("--nocapture").current_dir(&b.dir);
    for (k, v) in f.run_env {
        c.env(k, v);
    }
    let start = Instant::now();
    let out = c
        .output()
        .with_context(|| format!("starting {}", b.exe.display()))?;
    let wall = start.elapsed();
    let run = parse_test_output(f.name, &b.suite, &out, wall);
    if !run.ok {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        eprintln!(
            "report: {} FAILED ({}); the end of its stderr:",
            b.suite, out.status
        );
        for l in tail.iter().rev() {
            eprintln!("    {l}");
        }
    }
    Ok(run)
}

/// Reads libtest's summary lines and the `lockstep-stats:` lines of one run.
fn parse_test_output(flavour: &'static str, suite: &str, out: &Output, wall: Duration) -> SuiteRun {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut run = SuiteRun {
        flavour,
        suite: suite.to_string(),
        passed: 0,
        failed: 0,
        ignored: 0,
        ok: out.status.success(),
        wall,
        stats: Vec::new(),
    };
    for line in stdout.lines() {
        if let Some(rest) = line.trim().strip_prefix("test result: ") {
            for part in rest.split(';') {
                let mut words = part.split_whitespace().rev();
                let (Some(what), Some(n)) = (words.next(), words.next()) else {
                    continue;
                };
                let Ok(n) = n.parse::<u64>() else { continue };
                match what {
                    "passed" => run.passed += n,
                    "failed" => run.failed += n,
                    "ignored" => run.ignored += n,
                    _ => {}
                }
            }
        }
        // Another test's output may precede the marker on the same line (no newline yet).
        if let Some(at) = line.find("lockstep-stats: ") {
            run.stats
                .extend(parse_stats(&line[at + "lockstep-stats: ".len()..]));
        }
    }
    run.ok &= run.failed == 0;
    run
}

/// `KEY=N ... test=NAME` into `(NAME, KEY, N)` triples (NAME is the rest of the line).
fn parse_stats(rest: &str) -> Vec<(String, String, u64)> {
    let (counts, test) = match rest.find("test=") {
        Some(at) => (&rest[..at], rest[at + "test=".len()..].trim()),
        None => (rest, "?"),
    };
    counts
        .split_whitespace()
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((test.to_string(), k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// One cargo-fuzz target: `(name, --fuzz-dir, RUSTFLAGS, committed corpus, dictionary)`.
type FuzzTarget = (
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    &'static str,
    Option<&'static str>,
);

/// The targets of `fuzz/ci.sh`.
const FUZZ_TARGETS: &[FuzzTarget] = &[
    ("dag_ops", None, None, "fuzz/corpus/dag_ops", None),
    ("pool_ops", None, None, "fuzz/corpus/pool_ops", None),
    ("pool_threads", None, None, "fuzz/corpus/pool_threads", None),
    (
        "graph_files",
        None,
        None,
        "fuzz/corpus/graph_files",
        Some("fuzz/dicts/graph_files.dict"),
    ),
    (
        "schedules",
        Some("fuzz/schedules"),
        Some("--cfg shuttle"),
        "fuzz/schedules/corpus/schedules",
        None,
    ),
];

/// Builds (untimed) and runs every fuzz target for `seconds` seconds.
fn run_fuzz(root: &Path, seconds: u64) -> Result<Vec<FuzzRun>> {
    let fuzz_cmd = |fuzz_dir: Option<&str>, rustflags: Option<&str>| {
        let mut c = Command::new("cargo");
        c.current_dir(root).env_remove("CARGO_TARGET_DIR");
        c.env_remove("RUSTFLAGS");
        // As fuzz/ci.sh: every panic (the pool targets raise them on purpose) makes ASan
        // garbage-collect its fake stacks; stack use after return cannot happen in safe Rust.
        let asan = match std::env::var("ASAN_OPTIONS") {
            Ok(o) if !o.is_empty() => format!("{o}:detect_stack_use_after_return=0"),
            _ => "detect_stack_use_after_return=0".to_string(),
        };
        c.env("ASAN_OPTIONS", asan);
        if let Some(flags) = rustflags {
            c.env("RUSTFLAGS", flags);
        }
        c.args(["+nightly", "fuzz"]);
        (c, fuzz_dir.map(str::to_string))
    };
    let mut built = Vec::new();
    let mut runs = Vec::new();
    for &(target, fuzz_dir, rustflags, corpus, dict) in FUZZ_TARGETS {
        if !built.contains(&fuzz_dir) {
            eprintln!(
                "report: building the fuzz targets ({})",
                fuzz_dir.unwrap_or("fuzz")
            );
            let (mut c, dir) = fuzz_cmd(fuzz_dir, rustflags);
            c.arg("build");
            if let Some(d) = dir {
                c.args(["--fuzz-dir", &d]);
            }
            let status = c.status().context("starting cargo +nightly fuzz")?;
            if !status.success() {
                bail!("cargo +nightly fuzz build failed ({status})");
            }
            built.push(fuzz_dir);
        }
        eprintln!("report: fuzzing {target} for {seconds} s");
        let scratch =
            std::env::temp_dir().join(format!("lockstep-report-{target}-{}", std::process::id()));
        fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
        let (mut c, dir) = fuzz_cmd(fuzz_dir, rustflags);
        c.arg("run");
        if let Some(d) = dir {
            c.args(["--fuzz-dir", &d]);
        }
        c.arg(target).arg(&scratch).arg(root.join(corpus)).arg("--");
        c.args([
            format!("-max_total_time={seconds}"),
            "-timeout=20".to_string(),
            "-print_final_stats=1".to_string(),
        ]);
        if let Some(d) = dict {
            c.arg(format!("-dict={}", root.join(d).display()));
        }
        let start = Instant::now();
        let out = c.output().context("starting cargo +nightly fuzz run")?;
        let wall = start.elapsed();
        // Best effort: a leftover scratch directory only wastes space in the temp dir.
        let _ = fs::remove_dir_all(&scratch);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stat = |name: &str| {
            stderr.lines().find_map(|l| {
                l.trim()
                    .strip_prefix(name)
                    .and_then(|v| v.trim_start_matches(':').trim().parse::<u64>().ok())
            })
        };
        let run = FuzzRun {
            target,
            executions: stat("stat::number_of_executed_units"),
            per_second: stat("stat::average_exec_per_sec"),
            wall,
            ok: out.status.success(),
        };
        if !run.ok {
            eprintln!("report: fuzz target {target} FAILED ({}):", out.status);
            for l in stderr
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .iter()
                .rev()
            {
                eprintln!("    {l}");
            }
        }
        runs.push(run);
    }
    Ok(runs)
}

/// The output of a command, trimmed, or `unknown`.
fn command_line(program: &str, args: &[&str], dir: &Path) -> String {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".to_string())
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What a suite explored, from its stats lines: e.g. `2 properties, 512 cases`.
fn explored(run: &SuiteRun) -> String {
    let mut sums: BTreeMap<&str, (u64, usize)> = BTreeMap::new();
    for (_, k, v) in &run.stats {
        let e = sums.entry(k.as_str()).or_default();
        e.0 += v;
        e.1 += 1;
    }
    if sums.is_empty() {
        return "—".to_string();
    }
    let mut parts = Vec::new();
    for (k, (sum, lines)) in sums {
        let plural =
            |one: &str, many: &str| format!("{lines} {}, ", if lines == 1 { one } else { many });
        let who = match k {
            "cases" => plural("property", "properties"),
            "schedules" => plural("test", "tests"),
            "executions" => plural("model", "models"),
            _ => String::new(),
        };
        let unit = match k {
            "ops" => "operations",
            other => other,
        };
        parts.push(format!("{who}{} {unit}", thousands(sum)));
    }
    parts.join("; ")
}

/// The generated section (without the markers).
fn render(
    root: &Path,
    args: &ReportArgs,
    runs: &[SuiteRun],
    fuzz: &[FuzzRun],
    total: Duration,
    loadavg: [&str; 2],
) -> String {
    let commit = command_line("git", &["rev-parse", "--short", "HEAD"], root);
    let dirty = command_line(
        "git",
        &["status", "--porcelain", "--untracked-files=no"],
        root,
    );
    let dirty = if dirty.is_empty() || dirty == "unknown" {
        ""
    } else {
        " (with uncommitted changes in the working tree)"
    };
    let date = command_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"], root);
    let rustc = command_line("rustc", &["--version"], root);
    let nightly = command_line("rustc", &["+nightly", "--version"], root);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let la = |s: &str| s.split_whitespace().take(3).collect::<Vec<_>>().join(" ");

    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n_Generated by `cargo xtask report` on {date} at commit `{commit}`{dirty}; \
         {cores} cores (`nproc`), {rustc}{}._\n",
        if fuzz.is_empty() {
            String::new()
        } else {
            format!(", fuzzing on {nightly}")
        }
    );
    let _ = writeln!(
        s,
        "The machine is shared: other engineers were compiling in the same workspace while \
         this ran (load average {} before, {} after), so the wall times are noisy upper \
         bounds, not benchmarks. Counts are exact. Each binary is built first and only its run \
         is timed; the tests inside one binary run on libtest's default threads. The whole \
         report took {:.0} s.\n",
        la(loadavg[0]),
        la(loadavg[1]),
        total.as_secs_f64()
    );

    let _ = writeln!(s, "### Suites\n");
    let _ = writeln!(s, "| build | suite | tests | explored | wall time |");
    let _ = writeln!(s, "|---|---|---|---|---|");
    for r in runs {
        let status = if r.ok { "" } else { " **FAILED**" };
        let ignored = if r.ignored > 0 {
            format!(" ({} ignored)", r.ignored)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "| {} | `{}` | {}{ignored}{status} | {} | {:.1} s |",
            r.flavour,
            r.suite,
            r.passed,
            explored(r),
            r.wall.as_secs_f64()
        );
    }
    let skipped: Vec<&str> = [
        (args.skip_shuttle, "shuttle"),
        (args.skip_loom, "loom"),
        (args.skip_fuzz, "fuzz"),
    ]
    .iter()
    .filter(|(skip, _)| *skip)
    .map(|(_, n)| *n)
    .collect();
    if !skipped.is_empty() {
        let _ = writeln!(s, "\nNot run this time: {}.", skipped.join(", "));
    }
    let _ = writeln!(
        s,
        "\nBuilds: unit and integration as `cargo test` (dev profile); shuttle \
         `--cfg shuttle --release`; loom `--cfg loom -C debug-assertions --release`, \
         `LOOM_MAX_PREEMPTIONS=2`. Explored: proptest and quickcheck cases per property \
         (all passing), shuttle schedules executed (random + PCT; the determinism checks run \
         each schedule twice and count both), loom executions per model within the preemption \
         bound, stress rounds and operations."
    );

    let detail: Vec<&SuiteRun> = runs.iter().filter(|r| !r.stats.is_empty()).collect();
    if !detail.is_empty() {
        let _ = writeln!(s, "\n### Per property, test and model\n");
        let _ = writeln!(s, "| suite | test | explored |");
        let _ = writeln!(s, "|---|---|---|");
        for r in detail {
            let mut by_test: Vec<(&str, Vec<String>)> = Vec::new();
            for (test, k, v) in &r.stats {
                let item = format!("{} {k}", thousands(*v));
                match by_test.iter_mut().find(|(t, _)| *t == test.as_str()) {
                    Some((_, items)) => items.push(item),
                    None => by_test.push((test.as_str(), vec![item])),
                }
            }
            by_test.sort_by(|a, b| a.0.cmp(b.0));
            for (test, items) in by_test {
                let _ = writeln!(s, "| `{}` | `{test}` | {} |", r.suite, items.join(", "));
            }
        }
    }

    if !fuzz.is_empty() {
        let _ = writeln!(s, "\n### Fuzzing\n");
        let _ = writeln!(
            s,
            "Each target built with AddressSanitizer (`cargo +nightly fuzz`) and run for {} s \
             from its committed corpus (`-print_final_stats=1`; new inputs went to a scratch \
             directory).\n",
            args.fuzz_seconds
        );
        let _ = writeln!(s, "| target | executions | exec/s | wall time |");
        let _ = writeln!(s, "|---|---|---|---|");
        for f in fuzz {
            let opt = |v: Option<u64>| v.map_or_else(|| "?".to_string(), thousands);
            let status = if f.ok { "" } else { " **FAILED**" };
            let _ = writeln!(
                s,
                "| `{}`{status} | {} | {} | {:.0} s |",
                f.target,
                opt(f.executions),
                opt(f.per_second),
                f.wall.as_secs_f64()
            );
        }
    }

    let _ = writeln!(s, "\n### `.ci/run`\n");
    s.push_str(&ci_times(root));
    s
}

/// The `.ci/run` stage times from `target/ci-times.txt`, as a table, or why there are none.
fn ci_times(root: &Path) -> String {
    let path = root.join("target/ci-times.txt");
    let Ok(text) = fs::read_to_string(&path) else {
        return "Not measured yet: `.ci/run` writes its stage times to `target/ci-times.txt`; \
                run it, then `cargo xtask report` again.\n"
            .to_string();
    };
    let mut s = String::new();
    let mut started = None;
    let mut total = None;
    let mut stages = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("started ") {
            started = Some(rest.trim().to_string());
        } else if let Some((name, secs)) = line.split_once(' ') {
            let Ok(secs) = secs.trim().parse::<u64>() else {
                continue;
            };
            if name == "total" {
                total = Some(secs);
            } else {
                stages.push((name.to_string(), secs));
            }
        }
    }
    let _ = writeln!(
        s,
        "From `target/ci-times.txt`, written by the run of `.ci/run` started {} (same \
         machine, same caveat about noise).\n",
        started
            .as_deref()
            .unwrap_or("at an unknown date and commit")
    );
    let _ = writeln!(s, "| stage | wall time |");
    let _ = writeln!(s, "|---|---|");
    for (name, secs) in &stages {
        let _ = writeln!(s, "| {name} | {secs} s |");
    }
    match total {
        Some(t) => {
            let _ = writeln!(
                s,
                "| **all stages** | **{t} s** ({:.1} min) |",
                t as f64 / 60.0
            );
        }
        None => {
            let _ = writeln!(
                s,
                "\nThat run did not finish (a stage failed or it was interrupted): no total."
            );
        }
    }
    s
}

/// `text` with the lines between the measurement markers replaced by `section`.
///
/// # Errors
/// When either marker is missing or the end marker comes first.
fn replace_section(text: &str, section: &str) -> Result<String> {
    replace_section_between(text, section, BEGIN, END)
}

/// `text` with the lines between the `begin` and `end` marker lines replaced by `section`.
///
/// # Errors
/// When either marker is missing or the end marker comes first.
pub(crate) fn replace_section_between(
    text: &str,
    section: &str,
    begin: &str,
    end: &str,
) -> Result<String> {
    let Some(b) = text.find(begin) else {
        bail!("no {begin} line");
    };
    let after_begin = b + begin.len();
    let Some(e) = text[after_begin..].find(end) else {
        bail!("no {end} line after {begin}");
    };
    let e = after_begin + e;
    let mut out = String::with_capacity(text.len() + section.len());
    out.push_str(&text[..after_begin]);
    out.push('\n');
    out.push_str(section.trim_end());
    out.push_str("\n\n");
    out.push_str(&text[e..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_lines_parse_with_spaces_in_the_test_name() {
        assert_eq!(
            parse_stats("executions=42 test=root_spawns_child/1 workers"),
            vec![(
                "root_spawns_child/1 workers".to_string(),
                "executions".to_string(),
                42
            )]
        );
        assert_eq!(
            parse_stats("rounds=100 ops=100000 test=t"),
            vec![
                ("t".to_string(), "rounds".to_string(), 100),
                ("t".to_string(), "ops".to_string(), 100_000)
            ]
        );
    }

    #[test]
    fn the_section_goes_between_the_markers_and_replaces_the_old_one() {
        let doc = format!("a\n{BEGIN}\nold\n{END}\nb\n");
        let once = replace_section(&doc, "new").unwrap();
        assert_eq!(once, format!("a\n{BEGIN}\nnew\n\n{END}\nb\n"));
        assert_eq!(replace_section(&once, "new").unwrap(), once);
        assert!(replace_section("no markers", "x").is_err());
        assert!(replace_section(&format!("{END}\n{BEGIN}\n"), "x").is_err());
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
