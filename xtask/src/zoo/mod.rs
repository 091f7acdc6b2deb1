//! `cargo xtask zoo`: every seeded bug of `lockstep_sync::BUGS` against the suites.
//!
//! 1. Builds the seeded test binaries once per checker flavour (normal, shuttle, loom; each
//!    in its own target directory, `RUSTFLAGS` with `--cfg lockstep_bug`).
//! 2. Runs every selected suite once with no bug (the baseline); any failure there stops the
//!    zoo with a non-zero exit, since a suite that fails without a bug proves nothing.
//!    Suites run in their nominal order of cost (unit tests, model comparisons, property
//!    tests, scenarios, stress, shuttle, loom); the baseline's times are printed beside it.
//! 3. For each bug, runs the suites of its part with `LOCKSTEP_BUG=<bug>`, each with a
//!    timeout (four times its baseline plus 30 s, at most `--timeout`), and records which
//!    caught it, the time from the start of the binary to its first `FAILED` line, the
//!    failing test, and the replay artifact (the proptest seed, the shuttle schedule, or the
//!    test itself for loom and deterministic tests). With `--first` it stops at the first
//!    suite that catches the bug (CI mode); otherwise it runs the full matrix.
//! 4. Prints the tables (and with `--write-doc` puts them into `docs/bug-zoo.md` between the
//!    generated-section markers), and exits non-zero if any bug was caught by no suite.
//!
//! Full logs, with the command that replays each failure, go to
//! `target-zoo/zoo/<bug>/<suite>.log`.

mod plan;
mod report;
mod run;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use plan::{Binary, BugPlan, Flavour, PLANS, SUITES, Suite};
use run::{Built, Ending, RunOutput};

/// Arguments of `cargo xtask zoo`.
#[derive(Debug, clap::Args)]
pub struct ZooArgs {
    /// Run only this bug (repeatable). Default: `LOCKSTEP_BUG` if set, else every bug.
    #[arg(long = "bug", value_name = "NAME")]
    bugs: Vec<String>,
    /// Run only this suite (repeatable). Default: every suite.
    #[arg(long = "suite", value_name = "NAME")]
    suites: Vec<String>,
    /// CI mode: for each bug, stop at the first suite that catches it.
    #[arg(long)]
    first: bool,
    /// Write the tables into docs/bug-zoo.md (only for a full matrix: no --first, --bug or
    /// --suite).
    #[arg(long)]
    write_doc: bool,
    /// The longest any one run may take, in seconds.
    #[arg(long, default_value_t = 300, value_name = "SECS")]
    timeout: u64,
    /// The seed given to every run (PROPTEST_RNG_SEED, QUICKCHECK_SEED and
    /// LOCKSTEP_STRESS_SEED), so that generated inputs are the same from run to run and their
    /// failures replay.
    #[arg(long, default_value_t = 1, value_name = "SEED")]
    proptest_seed: u64,
    /// List the bugs and the suites, and exit.
    #[arg(long)]
    list: bool,
    /// Run every suite's baseline even when its binary is the one of a recorded passing
    /// baseline (see "Baselines are reused" in docs/bug-zoo.md).
    #[arg(long)]
    rerun_baseline: bool,
    /// Build the chosen suites and run their baselines only (no bug seeded), recording each
    /// that passes, then exit: non-zero if any fails, with the end of its log. A later zoo
    /// run reuses the recorded baselines, so CI's shuttle and loom stages run the
    /// interleaving suites this way and the zoo stage does not run them a second time.
    #[arg(long, conflicts_with_all = ["first", "write_doc", "bugs"])]
    baseline_only: bool,
}

/// How many lines of a failing baseline's output are printed (the whole log is on disk).
const BASELINE_TAIL_LINES: usize = 80;

/// The last `n` lines of a run's stdout, then of its stderr (each marked), for printing.
fn log_tail(out: &RunOutput, n: usize) -> String {
    let tail = |text: &str| {
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    };
    format!(
        "  ----- end of stdout -----\n{}\n  ----- end of stderr -----\n{}",
        tail(&out.stdout),
        tail(&out.stderr)
    )
}

/// After a test has failed, how long the binary may go on (its failure report is printed
/// when every test has finished) before it is killed and the failing test rerun alone.
const GRACE: Duration = Duration::from_secs(15);
/// The same in `--first` mode, where time matters more than the rest of the binary.
const GRACE_FIRST: Duration = Duration::from_secs(3);

/// The result of one suite against one bug.
#[derive(Debug, Clone)]
pub struct SuiteResult {
    /// The suite.
    pub suite: &'static Suite,
    /// How the run ended.
    pub ending: Ending,
    /// Time to the first failure (or the whole run, or the timeout).
    pub time: Duration,
    /// The first panic message of the failing test.
    pub message: Option<String>,
    /// How to replay the failure, short form (for the table).
    pub artifact: Option<String>,
    /// The command that reruns the failing test (the suite, for a crash or a hang) with this
    /// bug: the `replay:` line at the top of the log. `None` when the suite passed.
    pub replay: Option<String>,
    /// The log of the run (`target-zoo/zoo/<bug>/<suite>.log`).
    pub log: PathBuf,
}

impl SuiteResult {
    /// True if the suite noticed the bug: a failed test, a crash or a hang.
    pub fn caught(&self) -> bool {
        !matches!(self.ending, Ending::Passed)
    }
}

/// Everything the zoo found about one bug.
#[derive(Debug, Clone)]
pub struct BugResult {
    /// The bug.
    pub plan: &'static BugPlan,
    /// Every suite run against it, in the order run.
    pub results: Vec<SuiteResult>,
}

impl BugResult {
    /// The first suite (in the order run) that caught it.
    pub fn first_catch(&self) -> Option<&SuiteResult> {
        self.results.iter().find(|r| r.caught())
    }

    /// The cheapest suite (in `ordered`) that caught it with a failure or a crash, else the
    /// cheapest that hung: a failing test says what went wrong, a hang only that something did.
    pub fn best_catch(&self, ordered: &[&Suite]) -> Option<&SuiteResult> {
        let cost = |r: &&SuiteResult| {
            (
                matches!(r.ending, Ending::TimedOut),
                ordered.iter().position(|s| s.name == r.suite.name),
            )
        };
        self.results.iter().filter(|r| r.caught()).min_by_key(cost)
    }
}

/// Runs `cargo xtask zoo`.
///
/// # Errors
/// When a build fails, a binary cannot be started, or a file cannot be read or written.
pub fn run(args: &ZooArgs) -> Result<ExitCode> {
    plan::check_plans().map_err(anyhow::Error::msg)?;
    if args.list {
        print_list();
        return Ok(ExitCode::SUCCESS);
    }
    let mut names = args.bugs.clone();
    // `--baseline-only` seeds no bug, so `LOCKSTEP_BUG` must not narrow its suites either.
    if names.is_empty()
        && !args.baseline_only
        && let Ok(v) = std::env::var("LOCKSTEP_BUG")
        && !v.is_empty()
    {
        names.push(v);
    }
    for n in &names {
        if !lockstep_sync::is_listed_bug(n) {
            eprintln!(
                "error: there is no seeded bug called {n:?} (from --bug or LOCKSTEP_BUG).\n\
                 Known bugs (cargo xtask zoo --list): {}",
                PLANS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
            );
            return Ok(ExitCode::from(2));
        }
    }
    for s in &args.suites {
        if plan::suite(s).is_none() {
            eprintln!(
                "error: there is no suite called {s:?}. Known suites: {}",
                SUITES.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
            );
            return Ok(ExitCode::from(2));
        }
    }
    let full_matrix = names.is_empty() && args.suites.is_empty() && !args.first;
    if args.write_doc && !full_matrix {
        bail!("--write-doc needs the full matrix: no --first, --bug, --suite or LOCKSTEP_BUG");
    }
    let chosen: Vec<&'static Suite> = SUITES
        .iter()
        .filter(|s| args.suites.is_empty() || args.suites.iter().any(|n| n == s.name))
        .collect();
    let tested = |b: &BugPlan| chosen.iter().any(|s| s.part == b.part);
    let bugs: Vec<&'static BugPlan> = if names.is_empty() {
        // Every bug that a chosen suite can see (all of them unless --suite narrows it).
        PLANS.iter().filter(|p| tested(p)).collect()
    } else {
        PLANS
            .iter()
            .filter(|p| names.iter().any(|n| n == p.name))
            .collect()
    };
    if let Some(b) = bugs.iter().find(|b| !tested(b)) {
        bail!(
            "no chosen suite tests the {} part, where bug {} lives",
            b.part,
            b.name
        );
    }
    let suites: Vec<&'static Suite> = chosen
        .into_iter()
        .filter(|s| bugs.iter().any(|b| b.part == s.part))
        .collect();
    if suites.is_empty() {
        bail!("no bug to run");
    }

    let root = workspace_root();
    let started = Instant::now();
    let built = build_all(&root, &suites)?;
    let build_time = started.elapsed();

    // The baseline: every suite once, with no bug; a suite whose binary and seed are those
    // of a recorded passing baseline is not run again (its recorded time is used).
    println!("::: zoo: baseline (no bug seeded)");
    let max = Duration::from_secs(args.timeout);
    let mut baseline: HashMap<&str, Duration> = HashMap::new();
    let mut baseline_ok = true;
    let cache_path = baseline_cache_path(&root);
    let mut cache = BaselineCache::load(&cache_path);
    for s in &suites {
        let key = BaselineCache::key(&built[s.name], args.proptest_seed);
        if !args.rerun_baseline
            && let Some(t) = key.as_ref().and_then(|k| cache.passed(s.name, k))
        {
            println!(
                "  {:<15} passed in {} (recorded; its binary is unchanged: --rerun-baseline runs it)",
                s.name,
                secs(t)
            );
            baseline.insert(s.name, t);
            continue;
        }
        // A baseline's failure is not rerun alone (as a bug's is), so the binary is given
        // until `max` to print libtest's failure report after its other tests finish: cut
        // off after `GRACE`, the log would hold the `FAILED` line and not the panic.
        let out = run::run(
            &built[s.name],
            &s.binary.libtest_args(),
            &env(None, args),
            max,
            max,
        )?;
        let log = log_path(&root, "baseline", s.name);
        write_log(&log, s, None, args, &out)?;
        match &out.ending {
            Ending::Passed => {
                println!("  {:<15} passed in {}", s.name, secs(out.time));
                if let Some(k) = key {
                    cache.record(s.name, k, out.time);
                }
            }
            other => {
                cache.forget(s.name);
                baseline_ok = false;
                println!(
                    "  {:<15} FAILS WITH NO BUG SEEDED: {other:?} ({})",
                    s.name,
                    log.display()
                );
                // The log is in a target directory a CI run does not keep: its end here.
                println!("{}", log_tail(&out, BASELINE_TAIL_LINES));
            }
        }
        baseline.insert(s.name, out.time);
    }
    cache.save(&cache_path)?;
    if !baseline_ok {
        eprintln!(
            "error: a suite fails with no bug seeded; the zoo proves nothing until it passes"
        );
        return Ok(ExitCode::FAILURE);
    }
    if args.baseline_only {
        println!(
            "::: zoo: baselines recorded in {} (a zoo run reuses them while the binaries are unchanged)",
            cache_path.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    // Nominal cost order (unit, model, property, scenarios, stress, shuttle, loom): the
    // measured baseline is too noisy on a shared machine to order by, but it is printed.
    let ordered = suites.clone();

    let mut results = Vec::new();
    for b in &bugs {
        println!("::: zoo: {} ({})", b.name, plan::description(b.name));
        let mut order: Vec<&'static Suite> = ordered
            .iter()
            .copied()
            .filter(|s| s.part == b.part)
            .collect();
        if args.first
            && let Some(i) = order.iter().position(|s| s.name == b.first_try)
        {
            let s = order.remove(i);
            order.insert(0, s);
        }
        let mut bug = BugResult {
            plan: b,
            results: Vec::new(),
        };
        // In CI mode, the test that caught the bug last time, alone, before any whole suite
        // (`BugPlan::first_test`); a miss falls through to the whole suites below.
        let alone = if args.first {
            b.first_test.and_then(|t| {
                order
                    .first()
                    .filter(|s| s.name == b.first_try)
                    .map(|s| (*s, t))
            })
        } else {
            None
        };
        if let Some((s, test)) = alone {
            let limit = (baseline[s.name] * 4 + Duration::from_secs(30)).min(max);
            let exact = ["--exact".to_string(), test.to_string()];
            let r = run_suite(&root, &built[s.name], s, b.name, args, limit, &exact)?;
            println!(
                "  {:<15} {} (`{test}` alone)",
                s.name,
                report::cell(&r, false)
            );
            if r.caught() {
                print_replay(&root, &r);
                results.push(BugResult {
                    plan: b,
                    results: vec![r],
                });
                continue;
            }
            // A miss: the plan's test no longer catches the bug (or names no test). Said
            // loudly, and its log kept beside the whole suite's, which the run below writes.
            let kept = log_path(&root, b.name, &format!("{}.alone", s.name));
            std::fs::rename(&r.log, &kept)
                .with_context(|| format!("keeping {}", kept.display()))?;
            let text = std::fs::read_to_string(&kept).unwrap_or_default();
            let why = if text.contains("running 0 tests") {
                "matched no test: fix `first_test` in xtask/src/zoo/plan.rs"
            } else {
                "did not catch it"
            };
            println!(
                "  warning: `{test}` alone {why}; the whole suites follow (log: {})",
                kept.strip_prefix(&root).unwrap_or(&kept).display()
            );
        }
        for s in order {
            let limit = (baseline[s.name] * 4 + Duration::from_secs(30)).min(max);
            let r = run_suite(
                &root,
                &built[s.name],
                s,
                b.name,
                args,
                limit,
                &s.binary.libtest_args(),
            )?;
            println!("  {:<15} {}", s.name, report::cell(&r, false));
            print_replay(&root, &r);
            let caught = r.caught();
            bug.results.push(r);
            if caught && args.first {
                break;
            }
        }
        if bug.first_catch().is_none() {
            println!("  NOT CAUGHT by any suite");
        }
        results.push(bug);
    }

    let total = started.elapsed();
    let command = if args.write_doc {
        "cargo xtask zoo --write-doc".to_string()
    } else {
        std::iter::once("cargo xtask zoo".to_string())
            .chain(std::env::args().skip(2))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let tables = report::tables(&results, &ordered, &baseline, build_time, total, &command);
    println!("\n{tables}");
    if args.write_doc {
        let doc = root.join("docs/bug-zoo.md");
        report::write_doc(&doc, &tables)?;
        println!("::: zoo: tables written to {}", doc.display());
    }
    let missed: Vec<&str> = results
        .iter()
        .filter(|r| r.first_catch().is_none())
        .map(|r| r.plan.name)
        .collect();
    println!("::: zoo: {} bugs in {}", results.len(), secs(total));
    if missed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("error: caught by no suite: {}", missed.join(", "));
        Ok(ExitCode::FAILURE)
    }
}

/// Prints under a run that caught its bug the exact command that replays it, for every
/// flavour (the table's replay column is short), and the log's path.
fn print_replay(root: &Path, r: &SuiteResult) {
    if let Some(replay) = &r.replay {
        println!("    replay: {replay}");
        let log = r.log.strip_prefix(root).unwrap_or(&r.log);
        println!("    log:    {}", log.display());
    }
}

/// Runs suite `s` against `bug`, the test binary given `libtest_args` (the suite's own,
/// [`Binary::libtest_args`], or one test `--exact`); reruns the failing test alone if the
/// report was cut off.
fn run_suite(
    root: &Path,
    built: &Built,
    s: &'static Suite,
    bug: &str,
    args: &ZooArgs,
    limit: Duration,
    libtest_args: &[String],
) -> Result<SuiteResult> {
    let env = env(Some(bug), args);
    let grace = if args.first { GRACE_FIRST } else { GRACE };
    let mut out = run::run(built, libtest_args, &env, limit, grace)?;
    let mut section = None;
    if let Ending::Crashed { .. } = out.ending
        && let Some((test, message)) = run::crash_panic(&out.stderr, &out.stdout)
    {
        // A crash (say, a panic while unwinding, which aborts) names its test in the panic.
        out.ending = Ending::Failed { test };
        section = Some(message);
    }
    if let Ending::Failed { test } = &out.ending
        && section.is_none()
    {
        section = run::failure_section(&out.stdout, test).map(str::to_string);
        if section.is_none() {
            // Killed before the report: the failing test alone, to get its output.
            let again = run::run(
                built,
                &["--exact".to_string(), test.clone()],
                &env,
                limit,
                limit,
            )?;
            section = run::failure_section(&again.stdout, test).map(str::to_string);
            write_log(
                &log_path(root, bug, &format!("{}.rerun", s.name)),
                s,
                Some(bug),
                args,
                &again,
            )?;
        }
    }
    if let Ending::Failed { .. } = out.ending
        && section.is_none()
        && let Some((other, text)) = run::first_section(&out.stdout)
    {
        // The first test to fail printed nothing; name one that says why.
        out.ending = Ending::Failed { test: other };
        section = Some(text);
    }
    let log = log_path(root, bug, s.name);
    let replay = write_log(&log, s, Some(bug), args, &out)?;
    let message = section.as_deref().and_then(run::panic_message);
    let artifact = match &out.ending {
        Ending::Passed => None,
        Ending::TimedOut => Some("hang: rerun the suite".to_string()),
        Ending::Crashed { status } => Some(format!("crash ({status}): rerun the suite")),
        Ending::Failed { .. } => Some(artifact(root, s, section.as_deref(), args)),
    };
    let replay = (!matches!(out.ending, Ending::Passed)).then_some(replay);
    Ok(SuiteResult {
        suite: s,
        ending: out.ending,
        time: out.time,
        message,
        artifact,
        replay,
        log,
    })
}

/// The short replay artifact of a failed test.
fn artifact(root: &Path, s: &Suite, section: Option<&str>, args: &ZooArgs) -> String {
    if let Some(file) = section.and_then(run::schedule_file) {
        let shown = Path::new(&file)
            .strip_prefix(root)
            .map_or_else(|_| file.clone(), |p| p.display().to_string());
        return format!("shuttle schedule file `{shown}` (`LOCKSTEP_SHUTTLE_REPLAY=<file>`)");
    }
    if let Some(schedule) = section.and_then(run::shuttle_schedule) {
        let head: String = schedule.chars().take(12).collect();
        return format!(
            "shuttle schedule `{head}…` ({} chars, in the log; `shuttle::replay`)",
            schedule.len()
        );
    }
    if let Some(input) = section.and_then(run::proptest_minimal_input) {
        return format!(
            "`PROPTEST_RNG_SEED={}` (shrunk input, {} chars, in the log)",
            args.proptest_seed,
            input.len()
        );
    }
    if let Some(seed) = section.and_then(|x| run::printed_number(x, "LOCKSTEP_STRESS_SEED")) {
        return format!(
            "`LOCKSTEP_STRESS_SEED={seed}` (the operations; the interleaving was the OS's, so a \
             rerun may pass: the history is in the log)"
        );
    }
    if section.is_some_and(|x| x.contains("[quickcheck] TEST FAILED")) {
        return format!(
            "`QUICKCHECK_SEED={}` (the shrunk graph is in the message)",
            args.proptest_seed
        );
    }
    match s.flavour {
        Flavour::Loom => "the test (loom is exhaustive: it replays as is)".to_string(),
        Flavour::Shuttle => "the test (no schedule printed)".to_string(),
        Flavour::Normal => "the test (command in the log)".to_string(),
    }
}

/// The environment of a run: the bug (or none), a fixed proptest seed, no proptest
/// persistence (a seeded bug's failure must not land in a committed regression file), the
/// loom bound CI uses, short panics.
fn env(bug: Option<&str>, args: &ZooArgs) -> Vec<(&'static str, Option<String>)> {
    vec![
        ("LOCKSTEP_BUG", bug.map(str::to_string)),
        ("PROPTEST_RNG_SEED", Some(args.proptest_seed.to_string())),
        (
            "PROPTEST_DISABLE_FAILURE_PERSISTENCE",
            Some("1".to_string()),
        ),
        ("QUICKCHECK_SEED", Some(args.proptest_seed.to_string())),
        ("LOCKSTEP_STRESS_SEED", Some(args.proptest_seed.to_string())),
        (
            "LOOM_MAX_PREEMPTIONS",
            Some(std::env::var("LOOM_MAX_PREEMPTIONS").unwrap_or_else(|_| "2".to_string())),
        ),
        ("RUST_BACKTRACE", Some("0".to_string())),
    ]
}

/// Builds every flavour that has a selected suite.
fn build_all(root: &Path, suites: &[&'static Suite]) -> Result<HashMap<String, Built>> {
    let mut built = HashMap::new();
    for flavour in Flavour::ALL {
        let these: Vec<&Suite> = suites
            .iter()
            .copied()
            .filter(|s| s.flavour == flavour)
            .collect();
        if these.is_empty() {
            continue;
        }
        let t = Instant::now();
        println!(
            "::: zoo: building the {flavour} flavour (RUSTFLAGS=\"{}\", {})",
            flavour.rustflags(),
            flavour.target_dir()
        );
        built.extend(run::build(root, flavour, &these)?);
        println!(
            "::: zoo: built the {flavour} flavour in {}",
            secs(t.elapsed())
        );
    }
    Ok(built)
}

/// The workspace root: the parent of this package's directory.
fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// Where the passing baselines are recorded.
fn baseline_cache_path(root: &Path) -> PathBuf {
    root.join(Flavour::Normal.target_dir())
        .join("zoo")
        .join("baselines.json")
}

/// The passing baselines of earlier runs, by suite: the binary that passed (path, size and
/// modification time), the seed it ran with, and how long it took. A suite whose binary and
/// seed match is known to pass with no bug seeded, so `--bug` runs after the first do not
/// rerun it. A rebuilt binary (any change to its code) has a new modification time.
#[derive(Debug, Default)]
struct BaselineCache {
    entries: serde_json::Map<String, serde_json::Value>,
}

impl BaselineCache {
    /// The recorded baselines; none if the file is missing or unreadable (then every
    /// suite's baseline runs, as without a cache).
    fn load(path: &Path) -> Self {
        let entries = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v.as_object().cloned())
            .unwrap_or_default();
        Self { entries }
    }

    /// What identifies a baseline run: the binary's path, size and modification time (in
    /// nanoseconds since the epoch) and the seed. `None` if the binary cannot be read.
    fn key(built: &Built, seed: u64) -> Option<serde_json::Value> {
        let meta = std::fs::metadata(&built.exe).ok()?;
        let modified = meta
            .modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_nanos();
        Some(serde_json::json!({
            "exe": built.exe.display().to_string(),
            "len": meta.len(),
            "modified_ns": modified.to_string(),
            "seed": seed,
        }))
    }

    /// The recorded time of a passing baseline of `suite` with this key.
    fn passed(&self, suite: &str, key: &serde_json::Value) -> Option<Duration> {
        let e = self.entries.get(suite)?;
        if e.get("key")? != key {
            return None;
        }
        Some(Duration::from_millis(e.get("millis")?.as_u64()?))
    }

    fn record(&mut self, suite: &str, key: serde_json::Value, time: Duration) {
        let millis = u64::try_from(time.as_millis()).unwrap_or(u64::MAX);
        self.entries.insert(
            suite.to_string(),
            serde_json::json!({ "key": key, "millis": millis }),
        );
    }

    fn forget(&mut self, suite: &str) {
        self.entries.remove(suite);
    }

    fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text = serde_json::to_string_pretty(&self.entries)?;
        std::fs::write(path, text)?;
        Ok(())
    }
}

fn log_path(root: &Path, bug: &str, suite: &str) -> PathBuf {
    root.join(Flavour::Normal.target_dir())
        .join("zoo")
        .join(bug)
        .join(format!("{suite}.log"))
}

/// The command that reruns `suite` (optionally one test of it) against `bug` with Cargo.
pub fn replay_command(s: &Suite, bug: Option<&str>, test: Option<&str>, args: &ZooArgs) -> String {
    let mut c = String::new();
    if let Some(b) = bug {
        let _ = write!(c, "LOCKSTEP_BUG={b} ");
    }
    let _ = write!(
        c,
        "PROPTEST_RNG_SEED={0} QUICKCHECK_SEED={0} LOCKSTEP_STRESS_SEED={0} \
         PROPTEST_DISABLE_FAILURE_PERSISTENCE=1 ",
        args.proptest_seed
    );
    if s.flavour == Flavour::Loom {
        c.push_str("LOOM_MAX_PREEMPTIONS=2 ");
    }
    let _ = write!(
        c,
        "RUSTFLAGS=\"{}\" CARGO_TARGET_DIR={} cargo test {}-p {} ",
        s.flavour.rustflags(),
        s.flavour.target_dir(),
        if s.flavour.release() {
            "--release "
        } else {
            ""
        },
        s.package
    );
    match s.binary {
        Binary::Lib(_) => c.push_str("--lib"),
        Binary::Test(t) | Binary::TestFiltered(t, _) => {
            let _ = write!(c, "--test {t}");
        }
    }
    if let Some(t) = test {
        let _ = write!(c, " -- --exact {t}");
    } else if let Binary::TestFiltered(_, filter) = s.binary {
        let _ = write!(c, " -- {filter}");
    }
    c
}

/// Writes the log of run `out` of suite `s` to `path`: first the line `replay: <command>`
/// ([`replay_command`] for the failing test, or the whole suite), then how it ended and
/// everything it printed. Returns the command.
///
/// # Errors
/// If the directory or the file cannot be written.
fn write_log(
    path: &Path,
    s: &Suite,
    bug: Option<&str>,
    args: &ZooArgs,
    out: &RunOutput,
) -> Result<String> {
    let test = match &out.ending {
        Ending::Failed { test } => Some(test.as_str()),
        _ => None,
    };
    let replay = replay_command(s, bug, test, args);
    let text = format!(
        "replay: {}\nending: {:?} after {}\n\n===== stdout =====\n{}\n\n===== stderr =====\n{}\n",
        replay,
        out.ending,
        secs(out.time),
        out.stdout,
        out.stderr
    );
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(replay)
}

/// A duration in seconds, for humans.
pub fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 10.0 {
        format!("{s:.2} s")
    } else {
        format!("{s:.0} s")
    }
}

fn print_list() {
    println!("Bugs (LOCKSTEP_BUG=<name>, --bug <name>):");
    for p in PLANS {
        println!(
            "  {:<24} {:<9} {}",
            p.name,
            p.part,
            plan::description(p.name)
        );
    }
    println!("\nSuites (--suite <name>):");
    for s in SUITES {
        println!(
            "  {:<15} {:<9} {:<8} {}",
            s.name, s.part, s.flavour, s.package
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recorded passing baseline is reused only for the same binary (path, size,
    /// modification time) and seed, survives a save and a load, and is forgotten on a failure.
    #[test]
    fn a_baseline_is_reused_only_for_the_same_binary_and_seed() {
        let dir = std::env::temp_dir().join(format!("zoo-cache-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("suite-bin");
        std::fs::write(&exe, b"one").unwrap();
        let built = Built {
            exe: exe.clone(),
            cwd: dir.clone(),
        };
        let key = BaselineCache::key(&built, 1).expect("the binary exists");
        let mut cache = BaselineCache::default();
        assert_eq!(cache.passed("unit_dag", &key), None);
        cache.record("unit_dag", key.clone(), Duration::from_millis(1500));
        let path = dir.join("baselines.json");
        cache.save(&path).unwrap();
        let mut cache = BaselineCache::load(&path);
        assert_eq!(
            cache.passed("unit_dag", &key),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(cache.passed("model_dag", &key), None, "another suite");
        let other_seed = BaselineCache::key(&built, 2).unwrap();
        assert_eq!(cache.passed("unit_dag", &other_seed), None, "another seed");
        std::fs::write(&exe, b"rebuilt").unwrap();
        let rebuilt = BaselineCache::key(&built, 1).unwrap();
        assert_eq!(cache.passed("unit_dag", &rebuilt), None, "a rebuilt binary");
        cache.forget("unit_dag");
        assert_eq!(cache.passed("unit_dag", &key), None, "forgotten");
        std::fs::write(&path, b"not json").unwrap();
        assert!(
            BaselineCache::load(&path).entries.is_empty(),
            "unreadable: empty"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `.ci/run` names the interleaving suites one by one (its shuttle and loom stages run
    /// them as zoo baselines), so a new `tests/tests/shuttle_*.rs` or `loom_*.rs` would
    /// silently not run in CI: each must be named there, as a zoo suite (`--suite`) or as a
    /// plain test binary (`--test`).
    #[test]
    fn every_interleaving_test_file_runs_in_ci() {
        let root = workspace_root();
        let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
        let words: Vec<&str> = ci.split_whitespace().collect();
        let named = |flag: &str, name: &str| words.windows(2).any(|w| w == [flag, name]);
        let mut checked = 0;
        for entry in std::fs::read_dir(root.join("tests/tests")).unwrap() {
            let file = entry.unwrap().file_name().into_string().unwrap();
            let Some(name) = file.strip_suffix(".rs") else {
                continue;
            };
            if !(name.starts_with("shuttle_") || name.starts_with("loom_")) {
                continue;
            }
            checked += 1;
            let as_suite = named("--suite", name) && plan::suite(name).is_some();
            assert!(
                as_suite || named("--test", name),
                "tests/tests/{file} is run by no stage of .ci/run: add `--suite {name}` (and a \
                 zoo suite in xtask/src/zoo/plan.rs) or `--test {name}`"
            );
        }
        assert!(checked >= 7, "found only {checked} interleaving test files");
    }

    /// A failing baseline prints the last lines of both streams, nothing before them.
    #[test]
    fn a_log_tail_keeps_the_last_lines_of_each_stream() {
        let out = RunOutput {
            ending: Ending::Crashed {
                status: "signal 6".to_string(),
            },
            time: Duration::from_secs(1),
            stdout: (1..=5).map(|i| format!("out {i}\n")).collect(),
            stderr: "err 1\nerr 2\n".to_string(),
        };
        let tail = log_tail(&out, 2);
        assert!(tail.contains("out 4\nout 5"), "{tail}");
        assert!(!tail.contains("out 3"), "{tail}");
        assert!(tail.contains("err 1\nerr 2"), "{tail}");
        assert!(
            tail.find("end of stdout") < tail.find("end of stderr"),
            "{tail}"
        );
    }

    /// The replay command the runner prints is the first line of the log, for a suite of
    /// every flavour: the loom one included (it carries the loom bound and its cfg).
    #[test]
    fn the_printed_replay_is_the_first_line_of_the_log() {
        let args = ZooArgs {
            bugs: Vec::new(),
            suites: Vec::new(),
            first: false,
            write_doc: false,
            timeout: 300,
            proptest_seed: 1,
            list: false,
            rerun_baseline: false,
            baseline_only: false,
        };
        let dir = std::env::temp_dir().join(format!("zoo-log-test-{}", std::process::id()));
        for flavour in Flavour::ALL {
            let s = plan::SUITES
                .iter()
                .find(|s| s.flavour == flavour)
                .expect("a suite of every flavour");
            let out = RunOutput {
                ending: Ending::Failed {
                    test: "some_test".to_string(),
                },
                time: Duration::from_secs(1),
                stdout: String::new(),
                stderr: String::new(),
            };
            let path = dir.join(format!("{}.log", s.name));
            let replay = write_log(&path, s, Some("some_bug"), &args, &out).unwrap();
            let text = std::fs::read_to_string(&path).unwrap();
            assert_eq!(
                text.lines().next(),
                Some(format!("replay: {replay}").as_str())
            );
            assert!(replay.starts_with("LOCKSTEP_BUG=some_bug "), "{replay}");
            assert!(replay.ends_with(" -- --exact some_test"), "{replay}");
            assert!(
                replay.contains(&format!("CARGO_TARGET_DIR={} ", flavour.target_dir())),
                "{replay}"
            );
            if flavour == Flavour::Loom {
                assert!(replay.contains("LOOM_MAX_PREEMPTIONS=2 "), "{replay}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
