//! The `lockstep` command as a library: graph readers, `check` and `run`.
//!
//! The binary (`src/main.rs`) only parses the command line and maps results to exit codes;
//! everything it does is here so that it can be tested without spawning processes.
//!
//! * [`graph`]: one in-memory [`graph::TaskGraph`] read from our TOML task file, Graphviz
//!   DOT (including `apt-cache dotty` output) or `cargo metadata` JSON;
//! * [`validate`]: `lockstep check`, which asks the scheduler's own `check()` for
//!   unknown dependencies and cycles so that the command and the library agree;
//! * [`run`]: `lockstep run`, which freezes the graph and runs it on the push-based graph
//!   executor (`lockstep_dag::executor`, `docs/executor.md`) over a `lockstep_pool::Pool`
//!   of `-j N` workers (`--dry-run` lists the claim order with `lockstep_dag::TaskScheduler`);
//! * [`store`]: `lockstep run --store`, a run recorded in a durable store and resumed;
//! * [`worker`]: `lockstep worker`, which shares a stored run with other processes;
//! * [`attempts`]: retries and timeouts of a task (`retries`, `retry_delay`, `timeout`);
//! * [`command`]: running one task's command (its own process group, environment, output
//!   capture, timeouts, stopping it with SIGTERM then SIGKILL, no orphans), for `run`,
//!   `run --store` and `worker` alike;
//! * [`look`]: the progress bar, per-task lines and end report shared by `run`, `run --store`
//!   and `worker`;
//! * [`interrupt`]: Ctrl-C and SIGTERM to lockstep itself, handled the same way everywhere;
//! * [`picture`]: `run --trace` (a Chrome trace of the attempts, one lane per `-j` slot, the
//!   critical path marked) and `run --graph-out` (the graph in DOT, coloured by final state);
//! * [`events`]: `--events FILE`, the JSON-lines event stream (claimed, started, finished,
//!   blocked, cancelled, graph_error, and a final `metrics` event);
//! * [`timings`]: `--timings`, the wall time of each phase (read, parse, build, validate,
//!   run).
//!
//! Exit codes of the command: 0 the graph can run / every task succeeded / the run finished
//! (`worker`); 1 the graph cannot run (`check`) / some task did not succeed (`run`) / stopped
//! by Ctrl-C or SIGTERM (`run`, `run --store`, `worker`; a second signal exits at once with
//! 130, or 143 for SIGTERM); 2 unreadable input (missing
//! file, parse error), bad options, a store that cannot be opened or fails (`run --store`,
//! `worker`) and, for `run`, an invalid graph (nothing was run).

pub mod attempts;
pub mod command;
pub mod events;
pub mod graph;
pub mod interrupt;
pub mod look;
pub mod patient;
pub mod picture;
pub mod run;
pub mod status;
pub mod store;
pub mod timings;
pub mod validate;
pub mod worker;
