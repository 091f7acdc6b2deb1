//! `lockstep`: check and run task graphs on the Lockstep scheduler and pool.
//!
//! ```text
//! lockstep check FILE [TASK...] [GRAPH OPTIONS]          (FILE `-`: standard input, with --format)
//! lockstep run FILE [TASK...] [-j N] [--dry-run] [--simulate MS] [--log-dir DIR] [--grace S] [--trace FILE] [--graph-out FILE] [ATTEMPTS] [GRAPH OPTIONS]
//! lockstep run FILE [TASK...] --store sqlite:PATH|postgres://...[#SCHEMA] [-j N] [--store-limit N] [--lease-ms MS] [--store-wait D] [--log-dir DIR] [--grace S] [ATTEMPTS]
//!   ATTEMPTS: [--retries N] [--retry-delay DURATION] [--timeout DURATION] [--fail-fast]
//! lockstep worker --store sqlite:PATH|postgres://...[#SCHEMA] [--root DIR] [--slots N] [--lease-ms MS] [--store-wait D] [--log-dir DIR] [--grace S]
//! lockstep status --store sqlite:PATH|postgres://...[#SCHEMA] [-v] [--json]
//! lockstep cancel --store sqlite:PATH|postgres://...[#SCHEMA] ID...
//! ```
//!
//! Exit status: 0 the graph can run / every task succeeded / the run finished and every task
//! the worker ran succeeded (`worker`) / the graph has no tasks (`check`, `run`: a warning says
//! there is nothing to do); 1 the graph cannot run (`check`) / some task failed, was blocked,
//! cancelled or interrupted (`run`) / a task the worker ran failed (`worker`), and after Ctrl-C
//! or SIGTERM (`run`, `run --store`, `worker`; a second one exits at once with 130, or 143 for
//! SIGTERM) / some task of the store has not succeeded (`status`); 2 unreadable input (missing file, parse error), bad options, a store that cannot
//! be opened or fails, and,
//! for `run`, a graph that cannot run.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use lockstep_cli::graph::{self, CheckInput, EdgeMatch, Format, ReadOptions, TaskGraph};
use lockstep_cli::run::{self, RunError, RunOptions};
use lockstep_cli::timings::{self, Timings};
use lockstep_cli::validate;

/// `eprintln!` that never panics: a standard error that cannot be written (a full device, a
/// pipe whose reader left) loses the line but keeps the exit status the caller chose.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// Check and run dependency graphs of tasks on the Lockstep scheduler and pool.
#[derive(Debug, Parser)]
#[command(name = "lockstep", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
    /// More diagnostics on standard error (repeatable: -v info, -vv debug: each task's claim,
    /// start and end, -vvv trace). With `run` (and `run --store`), it also lists every blocked
    /// task in the end report (by default each cause's line lists the first 5 and counts the
    /// rest) and prints a `metrics:` line; with `status`, it lists every id of each line (by
    /// default the first 5); other commands only add diagnostics. RUST_LOG, when set, chooses
    /// the diagnostics instead (e.g.
    /// RUST_LOG=lockstep_cli=debug) [default: warnings and errors only].
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Fewer diagnostics: no `note:` lines, and only errors from the diagnostics log
    /// (RUST_LOG, when set, still chooses). `warning:` lines are still printed: a likely typo
    /// that changed the graph (DOT `comand=`, `optinal=true`), a file with no tasks. Task
    /// lines and the end report are printed as without it [default: off].
    #[arg(short = 'q', long = "quiet", global = true, conflicts_with = "verbose")]
    quiet: bool,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Validate a graph: duplicate ids, unknown dependencies, self-dependencies, cycles.
    ///
    /// Prints a summary (tasks, edges, roots), then one line per problem; each task that
    /// depends on itself as `self-dependency: A`, followed by a `hint:` line (remove the
    /// dependency, or --exclude-task A); each longer cycle as `cycle: A -> B -> C -> A` (one
    /// per strongly connected component, the scheduler's canonical form), each followed by a
    /// `hint:` line naming the tasks whose --exclude-task alone would break it (or saying
    /// that none would), and, when one per cycle suffices (and there are several cycles,
    /// a self-dependency counting as one, or no other problem), a last `hint:` line with the
    /// options that break every cycle. Exit 0 when the graph can run, 1 when it
    /// cannot, 2 when the file cannot be read or parsed. A graph with no tasks (an empty
    /// file, or none left after --exclude-task) prints `warning: FILE has no tasks; nothing
    /// to do` and exits 0.
    Check {
        #[command(flatten)]
        graph: GraphArgs,
    },
    /// Run a graph: each task's command (`sh -c`) once its dependencies succeeded.
    ///
    /// Output of each task is printed when it ends, prefixed with `[ID] ` (or written to
    /// --log-dir). A failure blocks the task's descendants (not those that only run `after`
    /// it: they run anyway and the report names what they ran without); the end report lists them in
    /// one line per cause, with their count and first 5 ids (all with --verbose). Exit 0 only if every task succeeded, 1 otherwise, 2 for unreadable input, a
    /// graph that cannot run (nothing is run), or a --store that cannot be opened or fails.
    /// A graph with no tasks (an empty file, or none left after --exclude-task) prints
    /// `warning: FILE has no tasks; nothing to do` and exits 0 (a --store is not opened).
    ///
    /// A failed task runs again up to --retries times (or its own `retries`), each attempt a
    /// new generation; its dependents wait for the retries. An attempt running longer than
    /// --timeout (or its own `timeout`) is stopped and fails. --fail-fast starts nothing after
    /// the first failure with no retries left.
    ///
    /// Each command runs in its own process group; the task ends when the command exits, and
    /// processes it left running (`cmd &`) get SIGTERM, then SIGKILL after --grace. If lockstep
    /// dies, even by SIGKILL, its commands are killed too.
    ///
    /// Ctrl-C, SIGTERM or SIGHUP: queued tasks are cancelled (with --store: nothing more is
    /// claimed) and each running command gets SIGTERM, then SIGKILL after --grace; those that
    /// were running and did not succeed are reported `interrupted` (their own line and count;
    /// with --store they are given back to the store, so the next run claims them at once).
    /// After Ctrl-C the exit status is 1; a second Ctrl-C exits at once with 130 (143 for a
    /// second SIGTERM, 129 for a second SIGHUP).
    Run {
        #[command(flatten)]
        graph: GraphArgs,
        /// Run at most N tasks at once [default: the number of CPUs].
        #[arg(allow_negative_numbers = true, short = 'j', long = "jobs", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
        jobs: Option<u32>,
        /// Print the order tasks would be claimed in (completions simulated in claim order),
        /// without running anything [default: off: run].
        #[arg(long)]
        dry_run: bool,
        /// Run each task as a sleep of about MS milliseconds instead of its command
        /// [default: none: run the commands].
        #[arg(allow_negative_numbers = true, long, value_name = "MS")]
        simulate: Option<u64>,
        /// Write each task's output to DIR/NNNN-ID.log instead of printing it; NNNN is the
        /// task's 0-based position in the file (not counting tasks removed by
        /// --exclude-task or left out by TASK targets), and characters of ID other than letters, digits and `._-@+`
        /// become `_`. A failed task's line names its log. Retries append to the task's file.
        /// With --store, one file per generation: DIR/NNNN-ID.gG.log (G the generation), so
        /// that each retry and each resumed run has its own file [default: none: print each
        /// task's output when it ends, each line prefixed with `[ID] `].
        #[arg(long, value_name = "DIR")]
        log_dir: Option<PathBuf>,
        /// Never draw a progress bar [default: off: one is drawn when standard error is a
        /// terminal].
        #[arg(long)]
        no_progress: bool,
        /// Write what the run does to FILE as JSON lines, for machines: `claimed`,
        /// `started`, `finished` (outcome, exit status) for each attempt, `blocked` and
        /// `cancelled` tasks with their cause, `graph_error` for a graph that cannot run, and
        /// a final `metrics` line; `ts_ms` is milliseconds since the Unix epoch. Created
        /// before anything runs: a FILE that cannot be written is exit 2 [default: none].
        #[arg(long, value_name = "FILE", conflicts_with = "dry_run")]
        events: Option<PathBuf>,
        #[command(flatten)]
        picture: Box<PictureArgs>,
        #[command(flatten)]
        grace: GraceArg,
        #[command(flatten)]
        attempts: AttemptArgs,
        #[command(flatten)]
        durable: DurableRunArgs,
    },
    /// Work on a run kept in a store: claim tasks with leases, run them, report results.
    ///
    /// Several workers, on one or many machines, may share one store (started by `lockstep
    /// run FILE --store URL`). Each claims up to --slots tasks at once within the store's
    /// concurrency limit, renews its leases while the tasks run, and stops when the run is
    /// finished (nothing pending, ready or running) or closed. A worker that dies loses its
    /// leases; its tasks are run again by others (at least once).
    ///
    /// Ctrl-C or SIGTERM: nothing more is claimed, each running command gets SIGTERM, then
    /// SIGKILL after --grace, and the tasks that did not succeed are given back to the store
    /// (another worker or run claims them at once).
    ///
    /// Exit 0 when the run finished and every task this worker ran succeeded; 1 when a task it
    /// ran failed (its command exited non-zero, was killed or timed out, whether the store
    /// recorded the failure or the fence refused it), and after Ctrl-C or SIGTERM (a second one
    /// exits at once with 130 or 143); 2 when the store fails.
    Worker {
        /// The store (the one `run FILE --store URL` made): sqlite:PATH (an SQLite file,
        /// relative to the current directory), or postgres://USER:PASSWORD@HOST:PORT/DATABASE
        /// (also postgresql://), optionally followed by `?NAME=VALUE&...` (connection
        /// parameters such as connect_timeout or application_name) and, at the very end,
        /// `#SCHEMA` (the PostgreSQL schema: letters, digits and _; default `lockstep`; one
        /// database may hold several runs). Messages never show the password.
        #[arg(long, value_name = "URL", value_parser = StoreArg)]
        store: lockstep_cli::store::StoreSpec,
        /// The directory a task's relative `cwd` is resolved against. `run FILE --store` stores
        /// each `cwd` as FILE wrote it, relative to FILE's directory, so give each worker the
        /// directory that holds the same layout on its machine (a checkout of the same
        /// repository). An absolute `cwd` is used as it is; a task without `cwd` runs in the
        /// worker's current directory. A missing directory fails the attempt, naming it. DIR
        /// must exist (else exit 2) [default: the current directory].
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
        /// Run at most N tasks at once in this worker (one store connection each).
        #[arg(allow_negative_numbers = true, long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
        slots: u32,
        /// Lease duration in milliseconds; renewed every third of it while a task runs. From
        /// 10 ms to one day (86400000): a longer lease of a killed worker would hold its tasks
        /// (and refuse `run --fresh`) for that long.
        #[arg(allow_negative_numbers = true, long, value_name = "MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(10..=86_400_000))]
        lease_ms: u64,
        /// Run each task as a sleep of about MS milliseconds instead of its command
        /// [default: none: run the commands].
        #[arg(allow_negative_numbers = true, long, value_name = "MS")]
        simulate: Option<u64>,
        /// Wait at most this long before looking again when nothing can be claimed (on
        /// PostgreSQL an idle worker is woken as soon as work appears; on SQLite it waits all
        /// of it): from 10 ms (less would only spin) to one minute.
        #[arg(allow_negative_numbers = true, long, value_name = "MS", default_value_t = 200, value_parser = clap::value_parser!(u64).range(10..=60_000))]
        poll_ms: u64,
        /// Write this worker's claims, starts and ends to FILE as JSON lines (with each
        /// claim's `owner` and `epoch`), the tasks its failures blocked, the tasks cancelled
        /// (or blocked by a cancel) while it ran, then a `metrics` line (as `run --events`); the
        /// summary is then followed by a `metrics:` line, as with -v [default: none].
        #[arg(long, value_name = "FILE")]
        events: Option<PathBuf>,
        /// Write each attempt's output to DIR/NNNN-ID.gG.log instead of printing it (created if
        /// missing; else exit 2): NNNN is the task's 0-based position in its file, ID as for
        /// `run --log-dir`, G the generation, so that each retry and each resumed run has its
        /// own file. A later claim of the same generation (after a lost lease) appends to it.
        /// A failed task's line names its log.
        #[arg(long, value_name = "DIR")]
        log_dir: Option<PathBuf>,
        /// How long an outage of the store is waited out: a lost connection, a server that
        /// refuses connections, restarts or fails over, and a store not created yet (a worker
        /// started with its `run`). Each try is printed (`store unavailable (REASON): retrying
        /// in 2.0 s (attempt 3)`), with a backoff doubling from 0.5 s to 10 s; running commands
        /// go on meanwhile, and results that arrive are kept and reported once the store is
        /// back (the fence decides if they count). After DURATION without an answer: exit 2
        /// naming the last error. Ctrl-C or SIGTERM ends the wait: the worker stops as
        /// stopped (exit 1), naming the results it could not report. 0s: no waiting (e.g.
        /// "30s", "5m", "1h"). Not bounded: a PostgreSQL server that accepts the connection
        /// and never answers (docs/durable.md, "Known limit"); a second Ctrl-C exits at once.
        #[arg(allow_hyphen_values = true, long, value_name = "DURATION", default_value = "5m", value_parser = lockstep_cli::attempts::parse_duration)]
        store_wait: Duration,
        #[command(flatten)]
        grace: GraceArg,
    },
    /// Show what a store holds (failures, blocked, running, to run), changing nothing.
    ///
    /// Failed tasks with their errors, blocked and cancelled ones grouped by cause, running ones with their lease's owner and
    /// time left (or how long ago it expired), what is still ready or pending, and a
    /// `summary:` line counting each state. Reads one consistent snapshot and changes nothing.
    /// Each line lists at most 5 ids (all with -v). Exit 0 when every task of the store
    /// succeeded (an empty store too), 1 when some has not (failed, blocked, cancelled, or
    /// still to run), 2 when the store cannot be read (it is not waited for). The store's
    /// tasks are counted, not a file's: a task left out of the file on a resume stays in the
    /// store as it was (a failed one keeps this at 1; --fresh starts the store over).
    Status {
        /// The store: sqlite:PATH or postgres://...[#SCHEMA], as for `worker`. Messages never
        /// show the password.
        #[arg(long, value_name = "URL", value_parser = StoreArg)]
        store: lockstep_cli::store::StoreSpec,
        /// Print one JSON document instead of the lines, for scripts: `store`, `limit` (null:
        /// none), `started`, `closed`, `pools`, `counts` (every state), `all_succeeded`, and
        /// `tasks`, every task with `id`, `generation`, `state` and, when they apply, `error`,
        /// `blocked_by`, `cancelled_by`, `optional_misses` and `lease` (`owner`, `epoch`,
        /// `attempt`, `expiry_ms`, `remaining_ms`, negative once expired). Same exit status.
        #[arg(long)]
        json: bool,
    },
    /// Cancel tasks of a store from outside (queued at once, running at its next renewal).
    ///
    /// One line per ID: a pending or ready task is cancelled and every task that requires it becomes blocked (`cancelled: ID g1 (2
    /// dependent(s) blocked)`); a running one is asked to stop: its worker stops the command at
    /// its next lease renewal (every third of the lease) and reports it failed, `cancelled
    /// while it ran`, which `run --store` does not retry; a settled one is left as it is
    /// (`unchanged: ID g1 already succeeded`). Every ID is looked up first: an unknown one is
    /// exit 2 and nothing is cancelled. A later `run --store` of the file resubmits cancelled
    /// and blocked tasks as new generations, as any lost task. Exit 0 when every ID was
    /// handled, 2 when the store fails (the lines printed say which were cancelled).
    Cancel {
        /// The store: sqlite:PATH or postgres://...[#SCHEMA], as for `worker`.
        #[arg(long, value_name = "URL", value_parser = StoreArg)]
        store: lockstep_cli::store::StoreSpec,
        /// The tasks to cancel, by id.
        #[arg(value_name = "ID", required = true)]
        ids: Vec<String>,
    },
}

/// `run --trace` and `--graph-out`: a picture of the run (`lockstep_cli::picture`).
#[derive(Debug, Args)]
struct PictureArgs {
    /// Write a Chrome trace of the run to FILE (JSON; open it in Perfetto, ui.perfetto.dev, or
    /// chrome://tracing): one lane per -j slot, one span per attempt (id, generation,
    /// attempt, outcome, exit status), the critical path marked. Created before anything
    /// runs: a FILE that cannot be written is exit 2 and nothing runs [default: none].
    #[arg(long, value_name = "FILE", conflicts_with_all = ["dry_run", "store"])]
    trace: Option<PathBuf>,
    /// Write the graph that ran to FILE in DOT (`A -> B`: A depends on B), each task
    /// coloured by its final state (succeeded, failed, blocked, cancelled, interrupted,
    /// not run) and labelled with it and its cause; draw it with `dot -Tsvg`. Created
    /// before anything runs, as --trace [default: none].
    #[arg(long, value_name = "FILE", conflicts_with_all = ["dry_run", "store"])]
    graph_out: Option<PathBuf>,
}

/// `--grace`, of `run` and `worker`.
#[derive(Debug, Args)]
struct GraceArg {
    /// After Ctrl-C or SIGTERM (or a lost lease), each running command's process group gets
    /// SIGTERM, then SIGKILL if it has not exited after this long: seconds (5, 0.5) or a number
    /// with a unit (500ms, 10s), at most 3600 s. Also how long processes that a finished
    /// command left running (`cmd &`) get between SIGTERM and SIGKILL.
    #[arg(allow_negative_numbers = true, long, value_name = "SECONDS", default_value = "5", value_parser = lockstep_cli::command::parse_grace)]
    grace: Duration,
}

/// `run`: retries, timeouts and `--fail-fast` (a task file's own `retries`, `retry_delay` and
/// `timeout` win over these).
#[derive(Debug, Args)]
struct AttemptArgs {
    /// Run a failed task again, at most N more times (0 to 100), each attempt a new
    /// generation, after --retry-delay; for tasks without their own `retries`. An attempt
    /// stopped by Ctrl-C or SIGTERM is never retried.
    #[arg(allow_negative_numbers = true, long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=i64::from(lockstep_cli::attempts::MAX_RETRIES)))]
    retries: u32,
    /// Wait this long between a failed attempt and the next (30s, 500ms, 1m 30s); for tasks
    /// without their own `retry_delay`.
    #[arg(allow_hyphen_values = true, long, value_name = "DURATION", default_value = "0s", value_parser = lockstep_cli::attempts::parse_duration)]
    retry_delay: Duration,
    /// Stop each attempt of a task that runs longer than this (SIGTERM to its process group,
    /// then SIGKILL after --grace); the attempt fails with `timed out after ...` and counts as
    /// a failure for --retries. For tasks without their own `timeout` [default: none].
    #[arg(allow_hyphen_values = true, long, value_name = "DURATION", value_parser = lockstep_cli::attempts::parse_timeout)]
    timeout: Option<Duration>,
    /// After the first failure with no retries left, start (or claim) no more tasks: those
    /// that need the failed one are blocked by it, the other queued ones are cancelled,
    /// naming it; the running ones finish [default: off: independent branches go on].
    #[arg(long)]
    fail_fast: bool,
}

impl AttemptArgs {
    fn defaults(&self) -> lockstep_cli::attempts::Defaults {
        lockstep_cli::attempts::Defaults {
            retries: self.retries,
            retry_delay: self.retry_delay,
            timeout: self.timeout,
        }
    }
}

/// `run --store`: record the run in a durable store (resumable, shareable with workers).
#[derive(Debug, Args)]
struct DurableRunArgs {
    /// Record the run in a store and resume it if it is already there: sqlite:PATH (an SQLite
    /// file, relative to the current directory), or postgres://USER:PASSWORD@HOST:PORT/DATABASE
    /// (also postgresql://), optionally followed by `?NAME=VALUE&...` (connection parameters
    /// such as connect_timeout or application_name) and, at the very end, `#SCHEMA` (the
    /// PostgreSQL schema: letters, digits and _; default `lockstep`; one database may hold
    /// several runs). Succeeded tasks are kept; failed, blocked and cancelled ones run again as
    /// new generations, and so does a task whose command, cwd, env, deps or after changed in
    /// FILE, with every task that depends on it (a task gone from FILE is left out: cancelled
    /// if it had not run; a task new in FILE is submitted as new; a FILE that adds tasks and
    /// would leave out more of the store than it shares is refused: another graph); see
    /// --fresh to start
    /// over. FILE's [pools] are defined in the store and bound every process's claims (a pool
    /// whose depth differs from the store's is refused: pools cannot be resized, use --fresh).
    /// `lockstep worker --store` processes may join (docs/durable.md). A
    /// task's `cwd` is stored as FILE wrote it, relative to FILE's directory (an absolute one
    /// stays absolute): this process runs it under FILE's directory, as `run` does, and each
    /// worker under its `--root` (default: its current directory) [default: none: the run is
    /// kept in memory only].
    #[arg(long, value_name = "URL", conflicts_with = "dry_run", value_parser = StoreArg)]
    store: Option<lockstep_cli::store::StoreSpec>,
    /// With --store: the lease duration in milliseconds (renewed while a task runs), from
    /// 10 ms to one day (86400000): a longer lease of a killed run would hold its tasks (and
    /// refuse --fresh) for that long.
    #[arg(allow_negative_numbers = true, long, value_name = "MS", default_value_t = 30_000, requires = "store", value_parser = clap::value_parser!(u64).range(10..=86_400_000))]
    lease_ms: u64,
    /// With --store: the concurrency limit of a NEW store, shared by every worker of the run
    /// (this process's -j threads and `lockstep worker` processes together) [default: no
    /// store-wide limit: -j bounds this process and --slots each worker]. An existing store
    /// keeps the limit it was made with: another N is refused (exit 2, nothing changed), and
    /// --fresh starts the store over with N. At least 1: a store with limit 0 could never claim
    /// a task, and the run would wait forever.
    #[arg(allow_negative_numbers = true, long, value_name = "N", requires = "store", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    store_limit: Option<u32>,
    /// With --store: start the store over before this run: every task, result, lease and pool
    /// in it is deleted (the store itself stays, with --store-limit as its limit) and FILE is
    /// submitted as new, its pools defined again. Refused (exit 2, nothing deleted) while another process runs one of
    /// its tasks under a live lease [default: off: a store is resumed].
    #[arg(long, requires = "store")]
    fresh: bool,
    /// With --store: how long an outage of the store is waited out: a lost connection, a
    /// server that refuses connections, restarts or fails over. Each try is printed (`store
    /// unavailable (REASON): retrying in 2.0 s (attempt 3)`), with a backoff doubling from
    /// 0.5 s to 10 s; running commands go on meanwhile, and results that arrive are kept and
    /// reported once the store is back (the fence decides if they count). After DURATION
    /// without an answer: exit 2 naming the last error. Ctrl-C or SIGTERM ends the wait: the
    /// run stops as stopped (exit 1), naming the results it could not report. 0s: no waiting
    /// (e.g. "30s", "5m"). Not bounded: a PostgreSQL server that accepts the connection and
    /// never answers (docs/durable.md, "Known limit"); a second Ctrl-C exits at once.
    #[arg(allow_hyphen_values = true, long, value_name = "DURATION", default_value = "5m", requires = "store", value_parser = lockstep_cli::attempts::parse_duration)]
    store_wait: Duration,
}

/// Options shared by every command that reads a graph.
#[derive(Debug, Args)]
struct GraphArgs {
    /// The graph file: .toml (task file), .dot/.gv (Graphviz), .json (cargo metadata);
    /// `-` reads standard input (then --format is required).
    file: PathBuf,
    /// Targets: keep only these tasks and everything they depend on, directly or not (as
    /// `make TARGET`), and drop the rest [default: every task]. Applied last, after the
    /// other graph options (--reverse, --exclude-edges, --exclude-task); an id that is not a
    /// task is an error (exit 2) naming the closest ids.
    #[arg(value_name = "TASK")]
    targets: Vec<String>,
    /// Read FILE as this format instead of guessing from the extension:
    /// toml, dot (plain DOT, no apt-cache detection), apt-dotty, cargo-metadata [default:
    /// from the extension; DOT read as apt-dotty when it looks like `apt-cache dotty` output].
    #[arg(long, value_name = "FORMAT")]
    format: Option<Format>,
    /// Flip every edge (for DOT graphs drawn from a dependency to its dependents) [default:
    /// off].
    #[arg(long)]
    reverse: bool,
    /// DOT: leave out edges whose attribute KEY equals VALUE (repeatable), e.g.
    /// `--exclude-edges color=blue` [default: none].
    #[arg(long, value_name = "KEY=VALUE")]
    exclude_edges: Vec<EdgeMatch>,
    /// DOT: keep the edges the format leaves out by default (apt-cache dotty's
    /// color=springgreen Conflicts/Breaks/Obsoletes edges) [default: off].
    #[arg(long)]
    all_edges: bool,
    /// Remove this task and every edge to it after reading (repeatable), e.g. to treat a
    /// package as already installed; `check` suggests the ones that would break a cycle
    /// [default: none].
    #[arg(long, value_name = "ID")]
    exclude_task: Vec<String>,
    /// cargo metadata: also count dev-dependencies as edges [default: off].
    #[arg(long)]
    dev_deps: bool,
    /// Refuse input longer than BYTES bytes (exit 2), so that input that never ends
    /// (/dev/zero, a runaway pipe) cannot hang lockstep or fill memory.
    #[arg(long, value_name = "BYTES", default_value_t = graph::DEFAULT_MAX_INPUT_BYTES)]
    max_input_bytes: u64,
    /// Print the wall time of each phase (read, parse, build, validate, hints when there are
    /// cycles, and for run: freeze, run) to standard error when the command ends, one line each with the bytes,
    /// tasks and edges it handled, then the total [default: off].
    #[arg(long)]
    timings: bool,
}

impl GraphArgs {
    /// Runs a command's body with a fresh [`Timings`], then prints it if `--timings` was
    /// given (also when the command failed: the phases that ended are printed).
    fn timed(&self, body: impl FnOnce(&mut Timings) -> ExitCode) -> ExitCode {
        let mut timings = Timings::new();
        let code = body(&mut timings);
        timings.stop();
        if self.timings {
            for line in timings.lines() {
                errln!("{line}");
            }
        }
        code
    }

    fn read(&self, timings: &mut Timings) -> Result<TaskGraph, graph::ReadError> {
        let mut g = graph::read_input_timed(
            &self.file,
            &self.read_options(),
            self.max_input_bytes,
            timings,
        )?;
        if !self.targets.is_empty() {
            let selecting = timings.start("targets");
            let removed = g.keep_targets(&self.targets, self.name(), &self.exclude_task)?;
            timings.end(
                selecting,
                format!(
                    "{} kept, {} removed",
                    timings::tasks_edges(g.tasks.len(), g.edge_count()),
                    timings::count(removed)
                ),
            );
        }
        print_notes(&g.notes);
        print_warnings(&g.warnings);
        Ok(g)
    }

    /// [`GraphArgs::read`] for `check`: a DOT file of the fast path's subset, with no
    /// targets, comes back with its ids interned and no `TaskSpec`s
    /// ([`graph::read_for_check_timed`]); anything else as [`GraphArgs::read`] gives it.
    fn read_for_check(&self, timings: &mut Timings) -> Result<CheckInput, graph::ReadError> {
        if !self.targets.is_empty() {
            return self.read(timings).map(CheckInput::Graph);
        }
        let input = graph::read_for_check_timed(
            &self.file,
            &self.read_options(),
            self.max_input_bytes,
            timings,
        )?;
        print_notes(match &input {
            CheckInput::Indexed(g) => g.notes(),
            CheckInput::Graph(g) => &g.notes,
        });
        // The fast path reads no attributes, so it has no warnings.
        if let CheckInput::Graph(g) = &input {
            print_warnings(&g.warnings);
        }
        Ok(input)
    }

    fn read_options(&self) -> ReadOptions {
        ReadOptions {
            format: self.format,
            reverse: self.reverse,
            exclude_edges: self.exclude_edges.clone(),
            all_edges: self.all_edges,
            exclude_tasks: self.exclude_task.clone(),
            dev_deps: self.dev_deps,
        }
    }

    /// For a graph with no tasks, prints `warning: FILE has no tasks; nothing to do` (`...
    /// no tasks left after --exclude-task ...` when that option removed them) on standard
    /// error and returns true: the command then stops with exit status 0, printing nothing
    /// else, as `make` with nothing to do.
    fn nothing_to_do(&self, g: &TaskGraph) -> bool {
        self.nothing_to_do_with(g.tasks.len())
    }

    /// [`GraphArgs::nothing_to_do`] for a graph of `tasks` tasks.
    fn nothing_to_do_with(&self, tasks: usize) -> bool {
        if tasks != 0 {
            return false;
        }
        // `--exclude-task` refuses an id that is not a task: given at all, it removed some.
        let left = if self.exclude_task.is_empty() {
            ""
        } else {
            " left after --exclude-task"
        };
        errln!(
            "warning: {} has no tasks{left}; nothing to do",
            self.name().display()
        );
        true
    }

    /// The task file, `None` for standard input (`-`).
    fn input_file(&self) -> Option<&std::path::Path> {
        (self.file != std::path::Path::new(graph::STDIN_PATH)).then_some(self.file.as_path())
    }

    /// The input's name in messages: the file, or `<stdin>` for `-`.
    fn name(&self) -> &std::path::Path {
        if self.file == std::path::Path::new(graph::STDIN_PATH) {
            std::path::Path::new(graph::STDIN_NAME)
        } else {
            &self.file
        }
    }
}

/// Prints the reader's notes on standard error (`note: ...`), unless `--quiet`.
fn print_notes(notes: &[String]) {
    if !QUIET.load(std::sync::atomic::Ordering::Relaxed) {
        for n in notes {
            errln!("note: {n}");
        }
    }
}

/// Prints the reader's warnings on standard error (`warning: ...`), also with `--quiet`: like
/// `warning: FILE has no tasks`, each says that the graph is not what the file seems to ask
/// for (a likely typo changed it), which `-q` must not hide.
fn print_warnings(warnings: &[String]) {
    for w in warnings {
        errln!("warning: {w}");
    }
}

fn main() -> ExitCode {
    let code = main_command();
    // The last tasks' leftover processes got SIGTERM when their commands exited; their grace
    // period runs before lockstep exits (`command` rule 5), not cut short by the guard. A
    // signal during that wait (the first since the run ended) kills them at once.
    let seen = lockstep_cli::interrupt::signals_seen();
    let wait = lockstep_cli::command::wait_for_leftovers(
        || lockstep_cli::interrupt::signals_seen() > seen,
        |groups, left| {
            if !QUIET.load(std::sync::atomic::Ordering::Relaxed) {
                errln!(
                    "waiting up to {:.1} s for the leftover processes of {groups} task(s) to end (SIGTERM sent; SIGKILL after the grace period, or now on Ctrl-C)",
                    left.as_secs_f64()
                );
            }
        },
    );
    if wait == lockstep_cli::command::LeftoverWait::Killed {
        errln!("stopped waiting: the leftover processes were sent SIGKILL");
    }
    code
}

/// The command line's command, run.
fn main_command() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    let verbose = cli.verbose > 0;
    QUIET.store(cli.quiet, std::sync::atomic::Ordering::Relaxed);
    match cli.command {
        Cmd::Check { graph } => check(&graph),
        Cmd::Run {
            graph,
            jobs,
            dry_run,
            simulate,
            log_dir,
            no_progress,
            events,
            picture,
            grace,
            attempts,
            durable,
        } => {
            let jobs = jobs.map_or_else(default_jobs, |j| j as usize);
            let store_file = durable.store.as_ref().and_then(sqlite_file);
            let inputs = [graph.input_file(), store_file];
            let outputs = [
                ("--events", events.as_deref()),
                ("--trace", picture.trace.as_deref()),
                ("--graph-out", picture.graph_out.as_deref()),
            ];
            for (option, out) in outputs {
                if let Err(message) =
                    not_dash(option, out).and_then(|()| not_an_input(option, out, &inputs))
                {
                    errln!("error: {message}");
                    return ExitCode::from(2);
                }
            }
            if let Err(message) = distinct_outputs(&outputs) {
                errln!("error: {message}");
                return ExitCode::from(2);
            }
            let events = match open_events(events.as_deref()) {
                Ok(e) => e,
                Err(code) => return code,
            };
            let show = Show {
                max_ids: report_ids(verbose),
                metrics: verbose || events.is_some(),
            };
            if let Some(spec) = durable.store {
                let opts = lockstep_cli::store::StoreRunOptions {
                    jobs,
                    limit: durable.store_limit.map(|n| n as usize),
                    lease: Duration::from_millis(durable.lease_ms),
                    simulate: simulate.map(Duration::from_millis),
                    grace: grace.grace,
                    stop: stop_on_signals(grace.grace),
                    targets: graph.targets.clone(),
                    defaults: attempts.defaults(),
                    fail_fast: attempts.fail_fast,
                    root: file_root(&graph.file),
                    events,
                    log_dir,
                    progress: !no_progress && std::io::stderr().is_terminal(),
                    fresh: durable.fresh,
                    store_wait: durable.store_wait,
                };
                return store_run_cmd(&graph, &spec, &opts, show);
            }
            let opts = RunOptions {
                jobs,
                simulate: simulate.map(Duration::from_millis),
                log_dir,
                progress: !no_progress && !dry_run && std::io::stderr().is_terminal(),
                handle_interrupt: true,
                grace: grace.grace,
                defaults: attempts.defaults(),
                fail_fast: attempts.fail_fast,
                trace: picture.trace,
                graph_out: picture.graph_out,
                events,
            };
            run_cmd(&graph, &opts, dry_run, show)
        }
        Cmd::Status { store, json } => {
            use lockstep_cli::status;
            use lockstep_durable::Clock as _;
            let ids = if json {
                usize::MAX
            } else {
                report_ids(verbose)
            };
            let read = store
                .open(None)
                .and_then(|mut s| status::read(&mut *s, ids));
            let now = lockstep_durable::SystemClock.now();
            let shown = store.to_string();
            match read {
                Ok(view) if json => {
                    let doc = status::json(&view, &shown, now);
                    emit(&format!("{doc}\n"));
                    ExitCode::from(u8::from(doc["all_succeeded"] != true))
                }
                Ok(view) => {
                    let st = status::lines(&view, &shown, now, ids);
                    for line in &st.lines {
                        emit(&format!("{line}\n"));
                    }
                    ExitCode::from(u8::from(!st.all_succeeded))
                }
                Err(e) => {
                    errln!("error: store {store}: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Cancel { store, ids } => {
            use lockstep_durable::Clock as _;
            let mut opened = match store.open(None) {
                Ok(s) => s,
                Err(e) => {
                    errln!("error: store {store}: {e}");
                    return ExitCode::from(2);
                }
            };
            match lockstep_cli::status::cancel(
                &mut *opened,
                &ids,
                lockstep_durable::SystemClock.now(),
            ) {
                Ok(lines) => {
                    for line in &lines {
                        emit(&format!("{line}\n"));
                    }
                    ExitCode::SUCCESS
                }
                Err((e, lines)) => {
                    for line in &lines {
                        emit(&format!("{line}\n"));
                    }
                    let nothing = if lines.is_empty() {
                        "; nothing was cancelled"
                    } else {
                        ""
                    };
                    errln!("error: store {store}: {e}{nothing}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Worker {
            store,
            slots,
            lease_ms,
            simulate,
            poll_ms,
            grace,
            root,
            events,
            log_dir,
            store_wait,
        } => {
            if let Some(dir) = &log_dir
                && let Err(e) = std::fs::create_dir_all(dir)
            {
                errln!("error: cannot create log dir {}: {e}", dir.display());
                return ExitCode::from(2);
            }
            let root = match worker_root(root) {
                Ok(root) => root,
                Err(message) => {
                    errln!("error: {message}");
                    return ExitCode::from(2);
                }
            };
            if let Err(message) = not_dash("--events", events.as_deref())
                .and_then(|()| not_an_input("--events", events.as_deref(), &[sqlite_file(&store)]))
            {
                errln!("error: {message}");
                return ExitCode::from(2);
            }
            let events = match open_events(events.as_deref()) {
                Ok(e) => e,
                Err(code) => return code,
            };
            let opts = lockstep_cli::worker::WorkerOptions {
                owner: lockstep_cli::worker::default_owner(),
                slots: slots as usize,
                lease: Duration::from_millis(lease_ms),
                poll: Duration::from_millis(poll_ms),
                simulate: simulate.map(Duration::from_millis),
                grace: grace.grace,
                stop: stop_on_signals(grace.grace),
                retries: None,
                root,
                events,
                log_dir,
                out: std::sync::Arc::new(lockstep_cli::look::Out::plain()),
            };
            let metrics = verbose || opts.events.is_some();
            worker_cmd(&store, &opts, metrics, store_wait)
        }
    }
}

/// The root of `run FILE --store`'s own workers: FILE's directory, absolute (the current
/// directory for standard input), so that a relative `cwd` means what it means to `run`.
fn file_root(file: &std::path::Path) -> PathBuf {
    let dir = if file == std::path::Path::new(graph::STDIN_PATH) {
        std::path::Path::new("")
    } else {
        file.parent().unwrap_or(std::path::Path::new(""))
    };
    std::env::current_dir().map_or_else(|_| dir.to_path_buf(), |cwd| cwd.join(dir))
}

/// `worker --root DIR` (default: the current directory), absolute; a DIR that is not an
/// existing directory is refused with a message naming it.
fn worker_root(root: Option<PathBuf>) -> Result<PathBuf, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("the current directory: {e}"));
    let Some(root) = root else {
        return cwd;
    };
    match std::fs::metadata(&root) {
        Ok(m) if m.is_dir() => Ok(cwd.map_or_else(|_| root.clone(), |cwd| cwd.join(&root))),
        Ok(_) => Err(format!("--root {}: not a directory", root.display())),
        Err(e) => Err(format!("--root {}: {e}", root.display())),
    }
}

/// `-q`: no `note:` lines (`warning:` lines stay).
static QUIET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sends `tracing` diagnostics to standard error: RUST_LOG's filter when it is set, else
/// `warn` (`error` with -q; -v info, -vv debug, -vvv trace, for lockstep's own crates).
fn init_logging(verbose: u8, quiet: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(v) if !v.trim().is_empty() => EnvFilter::new(v),
        _ => {
            let level = match (quiet, verbose) {
                (true, _) => "error",
                (false, 0) => "warn",
                (false, 1) => "warn,lockstep_cli=info,lockstep=info",
                (false, 2) => "warn,lockstep_cli=debug,lockstep=debug",
                (false, _) => "warn,lockstep_cli=trace,lockstep=trace,lockstep_dag=trace",
            };
            EnvFilter::new(level)
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// `--store`'s value parser. A value refused through `FromStr` would be reported by clap as
/// `invalid value 'VALUE' for '--store <URL>': ...`, the value repeated as given, password
/// included (a PostgreSQL URL given to a build without PostgreSQL, a misspelt scheme); this
/// one reports [`lockstep_cli::store::BadStoreSpec`] alone, which hides it.
#[derive(Clone, Copy)]
struct StoreArg;

impl clap::builder::TypedValueParser for StoreArg {
    type Value = lockstep_cli::store::StoreSpec;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        let refuse = |message: String| {
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, message).with_cmd(cmd)
        };
        let Some(value) = value.to_str() else {
            return Err(refuse("--store: not valid UTF-8\n".to_string()));
        };
        value.parse().map_err(|e| refuse(format!("{e}\n")))
    }
}

/// The SQLite file of a `--store sqlite:PATH`.
fn sqlite_file(spec: &lockstep_cli::store::StoreSpec) -> Option<&std::path::Path> {
    match spec {
        lockstep_cli::store::StoreSpec::Sqlite(path) => Some(path),
        lockstep_cli::store::StoreSpec::Postgres(_) => None,
    }
}

/// Refuses `-` as an output file (`--events -`, `--trace -`, `--graph-out -`): it would be a
/// file named `-` in the current directory, where a user means standard output, which is
/// `/dev/stdout` here (found by a new user's walkthrough: `--events -` made a file `-`).
///
/// # Errors
/// `OPTION -: ...`, naming `/dev/stdout`.
fn not_dash(option: &str, out: Option<&std::path::Path>) -> Result<(), String> {
    if out == Some(std::path::Path::new("-")) {
        return Err(format!(
            "{option} -: `-` would be a file named -; for standard output give /dev/stdout, for a file named - give ./-"
        ));
    }
    Ok(())
}

/// Whether paths `a` and `b` name one file. Compared as files (device and inode, so another
/// spelling or a link is caught) when both exist; otherwise by location: the canonical
/// directory plus the file name, which needs only the directories to exist (an output not
/// created yet, a store a run is about to create). `false` when neither way can tell (a
/// directory that does not exist: nothing can be written there).
fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        return (x.dev(), x.ino()) == (y.dev(), y.ino());
    }
    let located = |p: &std::path::Path| Some(canonical_dir(p)?.join(p.file_name()?));
    matches!((located(a), located(b)), (Some(x), Some(y)) if x == y)
}

/// The canonical form of the directory `p` names its file in (`.` for a bare name); `None`
/// when that directory does not exist.
fn canonical_dir(p: &std::path::Path) -> Option<std::path::PathBuf> {
    let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
    std::fs::canonicalize(dir.unwrap_or(std::path::Path::new("."))).ok()
}

/// Whether `p` is a regular file or does not exist yet: what writing an output there would
/// truncate or create (a pipe, `/dev/stdout` or `/dev/null` has nothing to lose).
fn regular_or_new(p: &std::path::Path) -> bool {
    std::fs::metadata(p).map_or(true, |m| m.is_file())
}

/// Refuses an output file (`--events`, `--trace`, `--graph-out`) that is one of the run's
/// inputs (the task file, the SQLite store), compared with [`same_file`]: creating it would
/// truncate the input, before it is read (`--events` is created first: the run would then
/// find no tasks) or after. A store that does not exist yet counts too: the run would create
/// it, and the events file written over it would destroy it (`file is not a database`
/// midway through the run, found by a new user's walkthrough).
///
/// An output named like one of SQLite's companion files of an input store (`STORE-wal`,
/// `STORE-shm`, `STORE-journal`, in the same directory) is refused too, whether or not it
/// exists yet.
///
/// # Errors
/// `OPTION OUT is INPUT, ...` or `OPTION OUT: is a file SQLite keeps beside the store
/// INPUT, ...`, naming both.
fn not_an_input(
    option: &str,
    out: Option<&std::path::Path>,
    inputs: &[Option<&std::path::Path>],
) -> Result<(), String> {
    let Some(out) = out else {
        return Ok(());
    };
    // SQLite's companions of an input (`-wal`, `-shm`, `-journal`, which may not exist yet):
    // SQLite would truncate or delete the output, and the output would damage the store.
    for input in inputs.iter().flatten() {
        let (Some(name), Some(out_name)) = (input.file_name(), out.file_name()) else {
            continue;
        };
        let companion = ["-wal", "-shm", "-journal"].iter().any(|suffix| {
            let mut c = name.to_os_string();
            c.push(suffix);
            c == out_name
        });
        if companion && canonical_dir(input).is_some() && canonical_dir(input) == canonical_dir(out)
        {
            return Err(format!(
                "{option} {}: is a file SQLite keeps beside the store {}; writing it would damage the store (name another file)",
                out.display(),
                input.display()
            ));
        }
    }
    for input in inputs.iter().flatten() {
        // An input that exists but is not a regular file (a pipe, `/dev/stdin`) has nothing
        // an output could truncate.
        if regular_or_new(input) && same_file(input, out) {
            return Err(format!(
                "{option} {}: is {}, an input of this run; writing it would destroy it (name another file)",
                out.display(),
                input.display()
            ));
        }
    }
    Ok(())
}

/// Refuses two output options that name one file ([`same_file`]): each would overwrite or
/// interleave with the other (`--trace F --events F` left the trace followed by an events
/// line, valid as neither). Outputs that exist and are not regular files (`/dev/stdout`,
/// `/dev/null`, a pipe) may be shared: nothing is overwritten there.
///
/// # Errors
/// `OPTION1 OUT1 and OPTION2 OUT2 name the same file; ...`.
fn distinct_outputs(outputs: &[(&str, Option<&std::path::Path>)]) -> Result<(), String> {
    let named: Vec<(&str, &std::path::Path)> = outputs
        .iter()
        .filter_map(|&(option, out)| Some((option, out?)))
        .filter(|(_, out)| regular_or_new(out))
        .collect();
    for (i, &(first, a)) in named.iter().enumerate() {
        for &(second, b) in &named[i + 1..] {
            if same_file(a, b) {
                return Err(format!(
                    "{first} {} and {second} {} name the same file; each would overwrite the other (name two files)",
                    a.display(),
                    b.display()
                ));
            }
        }
    }
    Ok(())
}

/// Creates the `--events` file before anything runs; one that cannot be created is exit 2,
/// naming it.
fn open_events(
    path: Option<&std::path::Path>,
) -> Result<Option<std::sync::Arc<lockstep_cli::events::EventSink>>, ExitCode> {
    let Some(path) = path else {
        return Ok(None);
    };
    match lockstep_cli::events::EventSink::create(path) {
        Ok(sink) => Ok(Some(std::sync::Arc::new(sink))),
        Err(e) => {
            errln!("error: cannot write --events {}: {e}", path.display());
            Err(ExitCode::from(2))
        }
    }
}

/// What the end report of `run` shows.
#[derive(Debug, Clone, Copy)]
struct Show {
    /// Blocked ids listed per cause.
    max_ids: usize,
    /// Print the `metrics:` line (`-v` or `--events`).
    metrics: bool,
}

/// Prints to standard output, ignoring write errors (a closed pipe, as in `| head`, must
/// not turn into a panic).
fn emit(text: &str) {
    use std::io::Write;
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    let _ = lock.write_all(text.as_bytes());
    let _ = lock.flush();
}

macro_rules! emitln {
    ($($arg:tt)*) => {
        emit(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// Installs the process's SIGINT and SIGTERM handler for `run --store` and `worker`: the first
/// signal prints a line and requests the stop; a second one exits at once (130 or 143).
fn stop_on_signals(grace: Duration) -> lockstep_cli::interrupt::StopRequest {
    let stop = lockstep_cli::interrupt::StopRequest::new();
    let on_first = stop.clone();
    let installed = lockstep_cli::interrupt::install(move |signal| {
        emitln!(
            "{}: claiming no more tasks, stopping running ones (SIGTERM, then SIGKILL after {}); they will be given back to the store",
            signal.name(),
            lockstep_cli::command::grace_text(grace)
        );
        on_first.request(signal);
    });
    if let Err(e) = installed {
        errln!("warning: no Ctrl-C handling: {e}");
    }
    stop
}

/// How many blocked ids the end report lists per cause: all with `--verbose`.
fn report_ids(verbose: bool) -> usize {
    if verbose {
        usize::MAX
    } else {
        run::BLOCKED_IDS_SHOWN
    }
}

fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn store_run_cmd(
    args: &GraphArgs,
    spec: &lockstep_cli::store::StoreSpec,
    opts: &lockstep_cli::store::StoreRunOptions,
    show: Show,
) -> ExitCode {
    let code = args.timed(|timings| store_run_timed(args, spec, opts, show, timings));
    close_events(opts.events.as_deref(), code)
}

fn store_run_timed(
    args: &GraphArgs,
    spec: &lockstep_cli::store::StoreSpec,
    opts: &lockstep_cli::store::StoreRunOptions,
    show: Show,
    timings: &mut Timings,
) -> ExitCode {
    use lockstep_cli::store::{self, StoreRunError};
    let events = opts.events.as_deref();
    let g = match args.read(timings) {
        Ok(g) => g,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // Nothing to record: the store is not opened (nor created).
    if args.nothing_to_do(&g) {
        no_run_metrics(events, None);
        return ExitCode::SUCCESS;
    }
    // The store validates, submits and runs in one step: one phase.
    let running = timings.start("run");
    let result = store::run(&g, spec, opts);
    timings.end(
        running,
        format!(
            "{} in the store (validation, submission and the run)",
            timings::tasks_edges(g.tasks.len(), g.edge_count())
        ),
    );
    match result {
        Ok(report) => {
            for line in report.lines_with(show.max_ids) {
                emitln!("{line}");
            }
            if show.metrics {
                emitln!("{}", report.metrics.line());
            }
            if report.all_succeeded() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(StoreRunError::Invalid(report)) => {
            no_run_metrics(events, Some(&report));
            emit(&report.to_string());
            emitln!(
                "error: the graph cannot run ({} problem(s)); nothing was run",
                report.problem_lines().len()
            );
            ExitCode::from(2)
        }
        // A stop that ended a wait for the store before the run began (the server down at
        // the start): a stopped run (exit 1, as with the store up), not a store error.
        Err(StoreRunError::Store { store, source })
            if opts.stop.is_requested() && source.is_waited_for() =>
        {
            no_run_metrics(events, None);
            let how = opts.stop.get().map_or("a stop", |s| s.name());
            emitln!(
                "stopped by {how} while waiting for the store {store} ({source}): this process ran no task"
            );
            ExitCode::from(1)
        }
        Err(e) => {
            errln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// `lockstep worker`; `metrics`: print the `metrics:` line after the summary (`-v` or
/// `--events`, as `run`).
fn worker_cmd(
    spec: &lockstep_cli::store::StoreSpec,
    opts: &lockstep_cli::worker::WorkerOptions,
    metrics: bool,
    store_wait: Duration,
) -> ExitCode {
    let code = worker_run(spec, opts, metrics, store_wait);
    close_events(opts.events.as_deref(), code)
}

fn worker_run(
    spec: &lockstep_cli::store::StoreSpec,
    opts: &lockstep_cli::worker::WorkerOptions,
    show_metrics: bool,
    store_wait: Duration,
) -> ExitCode {
    // One outage state for every connection of this process (`lockstep_cli::patient`).
    let outage = lockstep_cli::patient::Outage::default();
    let open = || spec.open_patient(None, store_wait, Some(opts.stop.clone()), &outage);
    match lockstep_cli::worker::run(open, opts) {
        Ok(stats) => {
            let metrics = stats.metrics();
            if let Some(ev) = &opts.events {
                ev.metrics(&metrics);
            }
            let how = match stats.stopped_by {
                Some(signal) => format!("stopped by {}", signal.name()),
                None => "run finished".to_string(),
            };
            emitln!(
                "worker {}: {how}; {} succeeded, {} failed, {} result(s) refused by the fence, {} lease(s) lost, {} given back to the store",
                opts.owner,
                stats.succeeded,
                stats.failed,
                stats.fenced,
                stats.lost_leases,
                stats.given_back.len()
            );
            if let Some(reason) = &stats.store_unavailable {
                emitln!(
                    "worker {}: the store was unavailable when it stopped ({reason}); {} result(s) not reported, their claims expire with their leases and the tasks run again",
                    opts.owner,
                    stats.unreported.len()
                );
            }
            if show_metrics {
                emitln!("{}", metrics.line());
            }
            if stats.stopped_by.is_some() || stats.failed_attempts > 0 {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(failure) => {
            // The stream ends with `metrics` also here: what the worker did until the store
            // failed.
            let metrics = failure.stats.metrics();
            if let Some(ev) = &opts.events {
                ev.metrics(&metrics);
            }
            errln!("error: store {spec}: {}", failure.error);
            if show_metrics {
                emitln!("{}", metrics.line());
            }
            ExitCode::from(2)
        }
    }
}

fn check(args: &GraphArgs) -> ExitCode {
    args.timed(|timings| check_timed(args, timings))
}

fn check_timed(args: &GraphArgs, timings: &mut Timings) -> ExitCode {
    let input = match args.read_for_check(timings) {
        Ok(g) => g,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let tasks = match &input {
        CheckInput::Indexed(g) => g.len(),
        CheckInput::Graph(g) => g.tasks.len(),
    };
    if args.nothing_to_do_with(tasks) {
        return ExitCode::SUCCESS;
    }
    let (report, note) = match &input {
        CheckInput::Indexed(g) => (validate::validate_indexed_timed(g, timings), None),
        CheckInput::Graph(g) => (
            validate::validate_timed(g, timings),
            graph::priority_note(g),
        ),
    };
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            errln!("error: internal: the scheduler refused a valid submission: {e}");
            return ExitCode::from(2);
        }
    };
    // The process ends next: freeing a million-task graph string by string would cost
    // more than validating it (about 5% of `check` in perf); the OS takes it back at once.
    std::mem::forget(input);
    emit(&report.to_string());
    if report.is_runnable() {
        if let Some(n) = note
            && !QUIET.load(std::sync::atomic::Ordering::Relaxed)
        {
            errln!("note: {n}");
        }
        emitln!("ok: the graph can run");
        ExitCode::SUCCESS
    } else {
        emitln!(
            "error: the graph cannot run ({} problem(s))",
            report.problem_lines().len()
        );
        ExitCode::from(1)
    }
}

fn run_cmd(args: &GraphArgs, opts: &RunOptions, dry_run: bool, show: Show) -> ExitCode {
    let code = args.timed(|timings| run_cmd_timed(args, opts, dry_run, show, timings));
    close_events(opts.events.as_deref(), code)
}

/// The `graph_error` (for a graph that cannot run) and `metrics` events of a run that ran
/// nothing.
fn no_run_metrics(
    events: Option<&lockstep_cli::events::EventSink>,
    invalid: Option<&validate::Report>,
) {
    let Some(ev) = events else {
        return;
    };
    let mut m = lockstep_cli::events::Metrics::default();
    if let Some(report) = invalid {
        ev.graph_error(report);
        m.tasks = report.tasks;
        m.cycles_found = report.graph.cycles.len() + report.self_deps.len();
    }
    ev.metrics(&m);
}

/// Flushes the `--events` file; one that could not be written turns `code` into exit 2.
fn close_events(events: Option<&lockstep_cli::events::EventSink>, code: ExitCode) -> ExitCode {
    match events.map(lockstep_cli::events::EventSink::finish) {
        Some(Err(e)) => {
            errln!("error: {e}");
            ExitCode::from(2)
        }
        _ => code,
    }
}

fn run_cmd_timed(
    args: &GraphArgs,
    opts: &RunOptions,
    dry_run: bool,
    show: Show,
    timings: &mut Timings,
) -> ExitCode {
    let g = match args.read(timings) {
        Ok(g) => g,
        Err(e) => {
            errln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if args.nothing_to_do(&g) {
        no_run_metrics(opts.events.as_deref(), None);
        return ExitCode::SUCCESS;
    }
    if !dry_run && let Some(message) = graph::unsupported_priority(&g, "`lockstep run`") {
        errln!("error: {message}");
        return ExitCode::from(2);
    }
    let mut unwritten = false;
    let result = if dry_run {
        run::dry_run_timed(&g, opts.jobs, timings).map(|order| {
            emitln!(
                "dry run: {} task(s) in claim order with -j {} (completions simulated in claim order)",
                order.len(),
                opts.jobs
            );
            for (i, id) in order.iter().enumerate() {
                emitln!("{:>6}  {id}", i + 1);
            }
            true
        })
    } else {
        run::run_timed(&g, opts, timings).map(|report| {
            for line in report.lines_with(show.max_ids) {
                emitln!("{line}");
            }
            if show.metrics {
                emitln!("{}", report.metrics.line());
            }
            for e in &report.output_errors {
                errln!("error: {e}");
            }
            unwritten = !report.output_errors.is_empty();
            report.all_succeeded()
        })
    };
    match result {
        // A --trace or --graph-out that could not be written after the run.
        Ok(_) if unwritten => ExitCode::from(2),
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(RunError::Invalid(report)) => {
            // A graph configuration error, kept apart from task failures: exit 2, and a
            // `graph_error` event, not `finished` ones.
            no_run_metrics(opts.events.as_deref(), Some(&report));
            emit(&report.to_string());
            emitln!(
                "error: the graph cannot run ({} problem(s)); nothing was run",
                report.problem_lines().len()
            );
            ExitCode::from(2)
        }
        Err(e) => {
            errln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
