//! Running shuttle tests with persisted, replayable failures (compiled only with
//! `--cfg shuttle`).
//!
//! [`check`] (or the [`crate::shuttle_check!`] macro, which names the test after the
//! `#[test]` function it is written in) runs
//! a test closure under shuttle's random scheduler and its PCT scheduler (both at once, in a
//! `PortfolioRunner`, when both are asked for). Every scheduler is wrapped so that the
//! schedule of the execution in progress is recorded; when an execution fails, its schedule
//! is written to a file (in a portfolio, the first scheduler's failure):
//!
//! ```text
//! <target dir>/shuttle-failures/<suite>.<test>.<n>.schedule
//! ```
//!
//! (`LOCKSTEP_SHUTTLE_FAILURE_DIR` chooses another directory), and the exact command that
//! replays it is printed. The schedule is also printed in shuttle's own form
//! (`failing schedule:` then the schedule between quotes) for log scrapers.
//!
//! Replaying: run the same test binary with `LOCKSTEP_SHUTTLE_REPLAY=<file>`:
//!
//! ```text
//! LOCKSTEP_SHUTTLE_REPLAY=target-shuttle/shuttle-failures/shuttle_dag.claims_race.000.schedule \
//!   RUSTFLAGS="--cfg shuttle" CARGO_TARGET_DIR=target-shuttle \
//!   cargo test -p lockstep-tests --release --test shuttle_dag -- --exact claims_race
//! ```
//!
//! The file is checked before shuttle sees it: it must be readable, its `# test:` header must
//! name the test being run (a bare shuttle schedule without header is accepted with a note),
//! and its schedule must decode (hex, shuttle's version byte, lengths that fit). A schedule
//! that decodes but does not fit the test (recorded from another build: other code, another
//! `LOCKSTEP_BUG`) stops with a message saying so instead of shuttle's internal assertion.
//!
//! Iteration counts: `SHUTTLE_ITERATIONS=n` replaces both the random and the PCT count of
//! every test (for a longer campaign, or a quick smoke run).
//!
//! The file format: `#` lines (`test`, `scheduler`, `build`, `replay`), then shuttle's
//! serialised schedule (version byte `0x91`, then varints: task-id bit width, step count,
//! seed; then the steps as a bit string: `0` + task id, or `1` for a random draw), in hex.

use std::fmt;
use std::fs;
use std::io::Write;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use shuttle::scheduler::{
    PctScheduler, RandomScheduler, ReplayScheduler, Schedule, Scheduler, Task, TaskId,
    UncontrolledNondeterminismCheckScheduler,
};
use shuttle::{Config, FailurePersistence, PortfolioRunner, Runner};

/// The variable naming a schedule file to replay instead of searching.
pub const REPLAY_ENV: &str = "LOCKSTEP_SHUTTLE_REPLAY";
/// The variable naming the directory failing schedules are written to.
pub const DIR_ENV: &str = "LOCKSTEP_SHUTTLE_FAILURE_DIR";
/// The variable replacing every test's iteration counts.
pub const ITERATIONS_ENV: &str = "SHUTTLE_ITERATIONS";

/// How many schedules a test runs under each scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Random schedules (0: none).
    pub random: usize,
    /// PCT schedules (0: none).
    pub pct: usize,
    /// PCT's bug depth: the number of priority change points plus one.
    pub depth: usize,
}

impl Plan {
    /// `n` random schedules only.
    pub const fn random(n: usize) -> Self {
        Plan {
            random: n,
            pct: 0,
            depth: 0,
        }
    }

    /// `random` random and `pct` PCT schedules of depth `depth`, run at once.
    pub const fn both(random: usize, pct: usize, depth: usize) -> Self {
        Plan { random, pct, depth }
    }

    /// The counts with each non-zero count replaced by `over`, if given.
    fn effective(self, over: Option<usize>) -> Self {
        match over {
            Some(n) => Plan {
                random: if self.random > 0 { n } else { 0 },
                pct: if self.pct > 0 { n } else { 0 },
                depth: self.depth,
            },
            None => self,
        }
    }
}

/// Where [`check_with`] reads its switches from; [`Settings::from_env`] is what [`check`]
/// uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Replay this schedule file instead of searching (`LOCKSTEP_SHUTTLE_REPLAY`).
    pub replay: Option<PathBuf>,
    /// Write failing schedules here (`LOCKSTEP_SHUTTLE_FAILURE_DIR`, else
    /// `<target dir>/shuttle-failures`).
    pub failure_dir: PathBuf,
    /// Replace every non-zero iteration count (`SHUTTLE_ITERATIONS`; ignored unless a
    /// number).
    pub iterations: Option<usize>,
}

impl Settings {
    /// The settings from the environment variables named above.
    pub fn from_env() -> Self {
        Settings {
            replay: std::env::var_os(REPLAY_ENV).map(PathBuf::from),
            failure_dir: std::env::var_os(DIR_ENV).map_or_else(default_failure_dir, PathBuf::from),
            iterations: std::env::var(ITERATIONS_ENV)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok()),
        }
    }
}

/// Runs a scenario under [`check`] for the `#[test]` function it is written in: the suite
/// and test names come from the function's path (`shuttle_dag::claims_race` for
/// `fn claims_race` in `tests/tests/shuttle_dag.rs`), so a failure's replay command names the
/// test exactly. Evaluates to the number of executions.
///
/// ```ignore
/// #[test]
/// fn claims_race() {
///     lockstep_tests::shuttle_check!(Plan::random(10_000), claims_race_scenario);
/// }
/// ```
#[macro_export]
macro_rules! shuttle_check {
    ($plan:expr, $scenario:expr $(,)?) => {{
        fn here() {}
        let (suite, test) =
            $crate::shuttle_run::split_test_path(::std::any::type_name_of_val(&here));
        $crate::shuttle_run::check(suite, test, $plan, $scenario)
    }};
}

/// Splits `suite::module::test::here` (the path of a function declared inside a test) into
/// `("suite", "module::test")`, the test binary and libtest's name of the test.
pub fn split_test_path(path: &str) -> (&str, &str) {
    let path = path.strip_suffix("::here").unwrap_or(path);
    path.split_once("::").unwrap_or(("", path))
}

/// Runs `f` under shuttle as test `suite::test` with `plan`, or replays the schedule named by
/// `LOCKSTEP_SHUTTLE_REPLAY`; returns the number of executions.
///
/// On success prints one line to stderr: the schedules run per scheduler and the time.
///
/// # Panics
/// When an execution fails (after writing its schedule, see the module docs); when the
/// schedulers ran fewer executions than planned; when `plan` asks for no schedule; in replay
/// mode, when the file cannot be read, names another test, does not decode, or does not fit
/// this test.
pub fn check<F>(suite: &str, test: &str, plan: Plan, f: F) -> usize
where
    F: Fn() + Send + Sync + 'static,
{
    check_with(&Settings::from_env(), suite, test, plan, f)
}

/// [`check`] with explicit settings instead of the environment.
///
/// # Panics
/// As [`check`].
pub fn check_with<F>(settings: &Settings, suite: &str, test: &str, plan: Plan, f: F) -> usize
where
    F: Fn() + Send + Sync + 'static,
{
    lockstep_sync::set_before_abort(persist_active);
    if let Some(path) = &settings.replay {
        return replay(suite, test, path, f);
    }
    let plan = plan.effective(settings.iterations);
    assert!(
        plan.random + plan.pct > 0,
        "{suite}::{test}: the plan runs no schedule"
    );
    let executions = Arc::new(AtomicUsize::new(0));
    let counted = {
        let executions = Arc::clone(&executions);
        move || {
            executions.fetch_add(1, Ordering::Relaxed);
            f();
        }
    };
    let failed: Arc<Mutex<Vec<Recorded>>> = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        let config = config();
        let target = Arc::new(Target {
            dir: settings.failure_dir.clone(),
            suite: suite.to_string(),
            test: test.to_string(),
        });
        let random = (plan.random > 0).then(|| Recording {
            inner: RandomScheduler::new(plan.random),
            name: "random".to_string(),
            current: Arc::default(),
            failed: Arc::clone(&failed),
            target: Arc::clone(&target),
        });
        let pct = (plan.pct > 0).then(|| Recording {
            inner: PctScheduler::new(plan.depth, plan.pct),
            name: format!("pct(depth {})", plan.depth),
            current: Arc::default(),
            failed: Arc::clone(&failed),
            target: Arc::clone(&target),
        });
        match (random, pct) {
            (Some(r), Some(p)) => {
                let mut portfolio = PortfolioRunner::new(true, config);
                portfolio.add(r);
                portfolio.add(p);
                portfolio.run(counted);
            }
            (Some(r), None) => {
                Runner::new(r, config).run(counted);
            }
            (None, Some(p)) => {
                Runner::new(p, config).run(counted);
            }
            (None, None) => unreachable!("checked above"),
        }
    }));
    if let Err(payload) = outcome {
        // In a portfolio both schedulers may fail. Only the first failure is kept: its
        // execution ran to its end before it stopped the portfolio, whereas a later one may
        // have been stopped while its panicking task was still unwinding (shuttle keeps
        // scheduling then), leaving a schedule that does not replay ("schedule ended early").
        let recorded = std::mem::take(&mut *failed.lock().unwrap_or_else(|p| p.into_inner()));
        match recorded.first() {
            Some(r) => persist(&settings.failure_dir, suite, test, r),
            None => eprintln!(
                "lockstep shuttle: {suite}::{test} failed, but no schedule was recorded \
                 (the failure happened outside an execution)"
            ),
        }
        for later in recorded.iter().skip(1) {
            eprintln!(
                "lockstep shuttle: the {} scheduler failed too; its schedule is not kept (it \
                 may have been cut short when the first failure stopped the portfolio)",
                later.scheduler
            );
        }
        panic::resume_unwind(payload);
    }
    let ran = executions.load(Ordering::Relaxed);
    eprintln!(
        "{suite}::{test}: {} random + {} PCT(depth {}) schedules, {ran} executed in {:.1} s",
        plan.random,
        plan.pct,
        plan.depth,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        ran,
        plan.random + plan.pct,
        "{suite}::{test}: every planned schedule ran"
    );
    // The line `cargo xtask report` counts.
    println!("lockstep-stats: schedules={ran} test={test}");
    ran
}

/// Runs `f` under shuttle's uncontrolled-nondeterminism check: each of `iterations` random
/// schedules is run twice, and the second run must make exactly the same scheduling decisions
/// and random draws. This is what makes a recorded schedule a complete reproduction (no clock,
/// no OS randomness, no `HashMap` iteration order steering the test). Returns the executions.
///
/// # Panics
/// When an execution is not reproducible (shuttle names the first divergence), or fails.
pub fn check_determinism<F>(iterations: usize, f: F) -> usize
where
    F: Fn() + Send + Sync + 'static,
{
    let executions = Arc::new(AtomicUsize::new(0));
    let counted = {
        let executions = Arc::clone(&executions);
        move || {
            executions.fetch_add(1, Ordering::Relaxed);
            f();
        }
    };
    let scheduler = UncontrolledNondeterminismCheckScheduler::new(RandomScheduler::new(iterations));
    Runner::new(scheduler, config()).run(counted);
    let ran = executions.load(Ordering::Relaxed);
    assert!(ran >= iterations, "{ran} of {iterations} schedules ran");
    // The line `cargo xtask report` counts (each schedule runs twice: both runs count).
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    println!("lockstep-stats: schedules={ran} test={test}");
    ran
}

/// Our configuration: shuttle's own persistence is off (we persist, see [`persist`]).
fn config() -> Config {
    let mut c = Config::new();
    c.failure_persistence = FailurePersistence::None;
    c
}

/// One step of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Task(usize),
    Random,
}

/// A recorded schedule and the scheduler that chose it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Recorded {
    scheduler: String,
    seed: u64,
    steps: Vec<Step>,
}

/// Where a failing schedule goes: the directory, and the test it names.
struct Target {
    dir: PathBuf,
    suite: String,
    test: String,
}

/// A scheduler that records what it chose for the current execution; dropped while its
/// runner unwinds from a failed execution, it hands that execution's schedule over (in the
/// order the runners fail: the first one's failure is what stops a portfolio).
///
/// A failure can also end the process without any unwinding reaching the runner: the pool
/// aborts when a panic unwinds through a `join` whose other half may still run elsewhere,
/// and shuttle's teardown of a failed execution unwinds the waiting worker there. For that
/// case each runner thread names its execution in progress in [`ACTIVE`], and
/// [`persist_active`] (registered with `lockstep_sync::set_before_abort`) writes it out
/// before the abort.
struct Recording<S> {
    inner: S,
    name: String,
    /// The execution in progress (shared with [`ACTIVE`] of the runner thread).
    current: Arc<Mutex<Recorded>>,
    failed: Arc<Mutex<Vec<Recorded>>>,
    target: Arc<Target>,
}

/// The recorded execution and the target of the scheduler on one thread.
type Active = (Arc<Mutex<Recorded>>, Arc<Target>);

thread_local! {
    /// The execution the scheduler on this thread is running (shuttle runs an execution's
    /// tasks as coroutines on its runner's thread, so an aborting task sees its own).
    static ACTIVE: std::cell::RefCell<Option<Active>> =
        const { std::cell::RefCell::new(None) };
}

/// Writes the schedule of this thread's execution in progress, if any (the process is about
/// to abort, so no `catch_unwind` in [`check_with`] will get to write it).
fn persist_active() {
    let active = ACTIVE.with(|a| a.try_borrow().ok().and_then(|a| a.clone()));
    match active {
        Some((current, target)) => {
            let r = current.lock().unwrap_or_else(|p| p.into_inner()).clone();
            eprintln!(
                "lockstep shuttle: the process is aborting during an execution of {}::{}; \
                 writing its schedule first",
                target.suite, target.test
            );
            persist(&target.dir, &target.suite, &target.test, &r);
        }
        None => eprintln!(
            "lockstep shuttle: the process is aborting outside a recorded search (a replay, \
             or no shuttle check running on this thread); no schedule to write"
        ),
    }
}

impl<S: Scheduler> Scheduler for Recording<S> {
    fn new_execution(&mut self) -> Option<Schedule> {
        let s = self.inner.new_execution()?;
        // Random and PCT start every execution from an empty schedule with a fresh seed.
        debug_assert!(s.is_empty(), "a scheduler that starts with a prefix");
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Recorded {
            scheduler: self.name.clone(),
            seed: s.seed,
            steps: Vec::new(),
        };
        ACTIVE.with(|a| {
            *a.borrow_mut() = Some((Arc::clone(&self.current), Arc::clone(&self.target)));
        });
        Some(s)
    }

    fn next_task(
        &mut self,
        runnable: &[&Task],
        current: Option<TaskId>,
        is_yielding: bool,
    ) -> Option<TaskId> {
        let t = self.inner.next_task(runnable, current, is_yielding)?;
        self.record(Step::Task(usize::from(t)));
        Some(t)
    }

    fn next_u64(&mut self) -> u64 {
        self.record(Step::Random);
        self.inner.next_u64()
    }
}

impl<S> Recording<S> {
    fn record(&self, step: Step) {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .steps
            .push(step);
    }
}

impl<S> Drop for Recording<S> {
    fn drop(&mut self) {
        ACTIVE.with(|a| {
            if let Ok(mut a) = a.try_borrow_mut() {
                *a = None;
            }
        });
        if std::thread::panicking() {
            let current =
                std::mem::take(&mut *self.current.lock().unwrap_or_else(|p| p.into_inner()));
            let mut failed = self.failed.lock().unwrap_or_else(|p| p.into_inner());
            failed.push(current);
        }
    }
}

/// The active seeded bug, for the file header and the replay command.
fn build_description() -> (String, String) {
    let bug = std::env::var("LOCKSTEP_BUG").unwrap_or_default();
    if cfg!(lockstep_bug) {
        let flags =
            "RUSTFLAGS=\"--cfg shuttle --cfg lockstep_bug\" CARGO_TARGET_DIR=target-zoo-shuttle";
        if bug.is_empty() {
            (
                "--cfg shuttle --cfg lockstep_bug, LOCKSTEP_BUG unset".into(),
                flags.into(),
            )
        } else {
            (
                format!("--cfg shuttle --cfg lockstep_bug, LOCKSTEP_BUG={bug}"),
                format!("LOCKSTEP_BUG={bug} {flags}"),
            )
        }
    } else {
        (
            "--cfg shuttle".into(),
            "RUSTFLAGS=\"--cfg shuttle\" CARGO_TARGET_DIR=target-shuttle".into(),
        )
    }
}

/// `shuttle-failures/` in the target directory of this test binary
/// (`<target>/<profile>/deps/<binary>`).
fn default_failure_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .unwrap_or_else(|| workspace_root().join("target"))
        .join("shuttle-failures")
}

/// The workspace root (this crate's parent directory).
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Writes the failing schedule to a new file and prints where and how to replay it.
fn persist(dir: &Path, suite: &str, test: &str, r: &Recorded) {
    let hex = encode(r);
    let (build, flags) = build_description();
    let written = fs::create_dir_all(dir).and_then(|()| {
        let mut i = 0;
        loop {
            let path = dir.join(format!("{suite}.{test}.{i:03}.schedule"));
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(file) => break Ok((path, file)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => i += 1,
                Err(e) => break Err(e),
            }
        }
    });
    let command = |path: &Path| {
        format!(
            "{REPLAY_ENV}={} {flags} cargo test -p lockstep-tests --release --test {suite} -- --exact {test}",
            path.display()
        )
    };
    eprintln!("failing schedule:\n\"\n{hex}\n\"");
    match written {
        Ok((path, mut file)) => {
            let path = path.canonicalize().unwrap_or(path);
            let text = format!(
                "# Lockstep shuttle schedule (docs/verification.md, \"Replaying a failure\")\n\
                 # test: {suite}::{test}\n\
                 # scheduler: {}\n\
                 # build: {build}\n\
                 # replay: {}\n\
                 {hex}\n",
                r.scheduler,
                command(&path)
            );
            match file.write_all(text.as_bytes()) {
                Ok(()) => eprintln!(
                    "lockstep shuttle: {suite}::{test} failed under the {} scheduler; schedule \
                     written to {}\nreplay it with:\n  {}",
                    r.scheduler,
                    path.display(),
                    command(&path)
                ),
                Err(e) => eprintln!(
                    "lockstep shuttle: cannot write {}: {e}; the schedule is printed above",
                    path.display()
                ),
            }
        }
        Err(e) => eprintln!(
            "lockstep shuttle: cannot create a schedule file in {}: {e}; the schedule is \
             printed above",
            dir.display()
        ),
    }
}

// ---------------------------------------------------------------------------------------
// Shuttle's schedule encoding (version 2), written and checked here so that a damaged file
// is refused with a reason instead of a panic inside shuttle's decoder.
// ---------------------------------------------------------------------------------------

const MAGIC: u8 = 0x91;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let low = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(low);
            return;
        }
        out.push(low | 0x80);
    }
}

/// The schedule in shuttle's serialised form, as one hex line.
fn encode(r: &Recorded) -> String {
    let max = r
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Task(t) => Some(*t),
            Step::Random => None,
        })
        .max()
        .unwrap_or(0);
    let width = (usize::BITS - max.leading_zeros()).max(1) as usize;
    let mut bytes = vec![MAGIC];
    put_varint(&mut bytes, width as u64);
    put_varint(&mut bytes, r.steps.len() as u64);
    put_varint(&mut bytes, r.seed);
    let mut bits: Vec<bool> = Vec::new();
    for s in &r.steps {
        match s {
            Step::Task(t) => {
                bits.push(false);
                bits.extend((0..width).map(|b| (t >> b) & 1 == 1));
            }
            Step::Random => bits.push(true),
        }
    }
    for chunk in bits.chunks(8) {
        let byte = chunk
            .iter()
            .enumerate()
            .fold(0u8, |acc, (i, &b)| acc | (u8::from(b) << i));
        bytes.push(byte);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a schedule file was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleError {
    /// A character that is not a hex digit (position among the non-space characters).
    NotHex(usize),
    /// An odd number of hex digits.
    OddLength,
    /// No schedule at all.
    Empty,
    /// The first byte is not shuttle's schedule version `0x91`.
    Version(u8),
    /// A length field is cut off or too large.
    Truncated(&'static str),
    /// A task id wider than a machine word.
    Width(u64),
    /// Fewer step bits than the step count says.
    MissingSteps {
        /// Steps announced.
        announced: u64,
        /// Steps present.
        present: u64,
    },
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleError::NotHex(at) => write!(f, "character {at} is not a hex digit"),
            ScheduleError::OddLength => f.write_str("an odd number of hex digits"),
            ScheduleError::Empty => f.write_str("no schedule in the file"),
            ScheduleError::Version(b) => write!(
                f,
                "version byte {b:#04x}, not shuttle's {MAGIC:#04x} (another shuttle version, \
                 or not a schedule)"
            ),
            ScheduleError::Truncated(what) => write!(f, "the {what} field is cut off or too large"),
            ScheduleError::Width(w) => write!(f, "task ids of {w} bits"),
            ScheduleError::MissingSteps { announced, present } => write!(
                f,
                "the schedule announces {announced} steps but holds only {present}"
            ),
        }
    }
}

fn get_varint(bytes: &mut &[u8], what: &'static str) -> Result<u64, ScheduleError> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = bytes.split_first().ok_or(ScheduleError::Truncated(what))?;
        *bytes = rest;
        let part = u64::from(b & 0x7f);
        if shift == 63 && part > 1 {
            return Err(ScheduleError::Truncated(what));
        }
        v |= part << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(ScheduleError::Truncated(what))
}

/// Decodes a schedule body (hex, whitespace ignored), checking every length.
fn decode(text: &str) -> Result<Recorded, ScheduleError> {
    let digits: Vec<char> = text.chars().filter(|c| !c.is_whitespace()).collect();
    if digits.is_empty() {
        return Err(ScheduleError::Empty);
    }
    if let Some(at) = digits.iter().position(|c| !c.is_ascii_hexdigit()) {
        return Err(ScheduleError::NotHex(at));
    }
    if digits.len() % 2 == 1 {
        return Err(ScheduleError::OddLength);
    }
    let bytes: Vec<u8> = digits
        .chunks(2)
        .map(|p| {
            let hi = p[0].to_digit(16).unwrap_or(0);
            let lo = p[1].to_digit(16).unwrap_or(0);
            (hi * 16 + lo) as u8
        })
        .collect();
    if bytes[0] != MAGIC {
        return Err(ScheduleError::Version(bytes[0]));
    }
    let mut rest = &bytes[1..];
    let width = get_varint(&mut rest, "task id width")?;
    if width == 0 || width > u64::from(usize::BITS) {
        return Err(ScheduleError::Width(width));
    }
    let announced = get_varint(&mut rest, "step count")?;
    let seed = get_varint(&mut rest, "seed")?;
    let width = width as usize;
    let total_bits = rest.len() * 8;
    let bit = |i: usize| (rest[i / 8] >> (i % 8)) & 1 == 1;
    let mut steps = Vec::new();
    let mut at = 0usize;
    while (steps.len() as u64) < announced {
        if at >= total_bits {
            break;
        }
        if bit(at) {
            steps.push(Step::Random);
            at += 1;
        } else {
            if at + 1 + width > total_bits {
                break;
            }
            let t = (0..width).fold(0usize, |acc, b| acc | (usize::from(bit(at + 1 + b)) << b));
            steps.push(Step::Task(t));
            at += 1 + width;
        }
    }
    if (steps.len() as u64) < announced {
        return Err(ScheduleError::MissingSteps {
            announced,
            present: steps.len() as u64,
        });
    }
    Ok(Recorded {
        scheduler: String::new(),
        seed,
        steps,
    })
}

/// A parsed schedule file: its header fields and its schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ScheduleFile {
    test: Option<String>,
    build: Option<String>,
    schedule: Recorded,
}

fn parse_file(text: &str) -> Result<ScheduleFile, ScheduleError> {
    let mut test = None;
    let mut build = None;
    let mut body = String::new();
    for line in text.lines() {
        if let Some(comment) = line.trim_start().strip_prefix('#') {
            let comment = comment.trim();
            if let Some(v) = comment.strip_prefix("test:") {
                test = Some(v.trim().to_string());
            } else if let Some(v) = comment.strip_prefix("build:") {
                build = Some(v.trim().to_string());
            }
        } else {
            body.push_str(line);
        }
    }
    Ok(ScheduleFile {
        test,
        build,
        schedule: decode(&body)?,
    })
}

/// The messages of shuttle's replay scheduler when a schedule does not fit the run.
const DIVERGENCE: [&str; 4] = [
    "schedule ended early",
    "scheduled task is not runnable",
    "expected context switch but next schedule step is random choice",
    "expected random choice but next schedule step is context switch",
];

fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<&str> {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
}

/// Replay mode: check the file, then run `f` once under shuttle's replay scheduler.
fn replay<F>(suite: &str, test: &str, given: &Path, f: F) -> usize
where
    F: Fn() + Send + Sync + 'static,
{
    // cargo runs test binaries in the package directory; accept paths relative to the
    // workspace root too (where the printed commands are run).
    let candidates = if given.is_absolute() {
        vec![given.to_path_buf()]
    } else {
        vec![given.to_path_buf(), workspace_root().join(given)]
    };
    let Some(path) = candidates.iter().find(|p| p.is_file()) else {
        let tried: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
        panic!(
            "{REPLAY_ENV}={}: no such file (tried {})",
            given.display(),
            tried.join(" and ")
        );
    };
    let text = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{REPLAY_ENV}={}: cannot read it: {e}", path.display()));
    let file = parse_file(&text).unwrap_or_else(|e| {
        panic!(
            "{REPLAY_ENV}={}: not a shuttle schedule: {e}",
            path.display()
        )
    });
    let me = format!("{suite}::{test}");
    match &file.test {
        Some(t) if *t != me => panic!(
            "{REPLAY_ENV}={}: this schedule was recorded by {t}, not by {me}; run that test \
             alone (`-- --exact {}` on its test binary)",
            path.display(),
            t.rsplit("::").next().unwrap_or(t)
        ),
        Some(_) => {}
        None => eprintln!(
            "lockstep shuttle: {} has no `# test:` header; replaying it as a bare shuttle \
             schedule for {me}",
            path.display()
        ),
    }
    let (build, _) = build_description();
    if let Some(recorded) = &file.build
        && *recorded != build
    {
        eprintln!(
            "lockstep shuttle: note: {} was recorded with `{recorded}`, this run is `{build}`; \
             the replay may not fit",
            path.display()
        );
    }
    let mut schedule = Schedule::new(file.schedule.seed);
    for s in &file.schedule.steps {
        match s {
            Step::Task(t) => schedule.push_task(TaskId::from(*t)),
            Step::Random => schedule.push_random(),
        }
    }
    eprintln!(
        "lockstep shuttle: replaying {} ({} steps) for {me}",
        path.display(),
        file.schedule.steps.len()
    );
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        Runner::new(ReplayScheduler::new_from_schedule(schedule), config()).run(f)
    }));
    match outcome {
        Ok(n) => {
            eprintln!(
                "lockstep shuttle: replayed {}: {me} passed (this schedule no longer fails)",
                path.display()
            );
            n
        }
        Err(payload) => {
            if let Some(m) = panic_message(payload.as_ref())
                && DIVERGENCE.iter().any(|d| m.starts_with(d))
            {
                panic!(
                    "{REPLAY_ENV}={}: the schedule does not fit {me} (shuttle: {m}); it was \
                     recorded from a different build (other code, or another LOCKSTEP_BUG / \
                     --cfg lockstep_bug) or by another test",
                    path.display()
                );
            }
            panic::resume_unwind(payload)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_round_trip_through_the_encoding() {
        let r = Recorded {
            scheduler: String::new(),
            seed: 0x1234_5678_9abc_def0,
            steps: vec![
                Step::Task(0),
                Step::Random,
                Step::Task(5),
                Step::Task(300),
                Step::Random,
            ],
        };
        assert_eq!(decode(&encode(&r)), Ok(r.clone()));
        let empty = Recorded::default();
        assert_eq!(decode(&encode(&empty)), Ok(empty));
    }

    #[test]
    fn damaged_schedules_are_refused_with_a_reason() {
        let good = encode(&Recorded {
            scheduler: String::new(),
            seed: 7,
            steps: vec![Step::Task(1); 20],
        });
        assert_eq!(decode(""), Err(ScheduleError::Empty));
        assert_eq!(decode("91zz"), Err(ScheduleError::NotHex(2)));
        assert_eq!(decode("910"), Err(ScheduleError::OddLength));
        assert_eq!(decode("80"), Err(ScheduleError::Version(0x80)));
        assert_eq!(decode("91"), Err(ScheduleError::Truncated("task id width")));
        assert_eq!(decode("9100"), Err(ScheduleError::Width(0)));
        let cut = &good[..good.len() - 2];
        assert!(matches!(
            decode(cut),
            Err(ScheduleError::MissingSteps { announced: 20, .. })
        ));
    }

    #[test]
    fn test_paths_split_into_suite_and_test() {
        fn here() {}
        assert_eq!(
            split_test_path(std::any::type_name_of_val(&here)),
            (
                "lockstep_tests",
                "shuttle_run::tests::test_paths_split_into_suite_and_test"
            )
        );
        assert_eq!(
            split_test_path("shuttle_dag::claims::here"),
            ("shuttle_dag", "claims")
        );
    }

    #[test]
    fn headers_name_the_test_and_the_build() {
        let body = encode(&Recorded::default());
        let f = parse_file(&format!(
            "# test: shuttle_dag::claims\n# build: --cfg shuttle\n{body}\n"
        ))
        .unwrap();
        assert_eq!(f.test.as_deref(), Some("shuttle_dag::claims"));
        assert_eq!(f.build.as_deref(), Some("--cfg shuttle"));
        assert_eq!(parse_file(&body).unwrap().test, None);
    }
}
