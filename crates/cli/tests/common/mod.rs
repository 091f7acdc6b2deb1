//! What the real-process tests of `lockstep` share (`signals.rs`, `crash_durable.rs`).

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

/// The hang guard of every wait: generous, because the machine may be loaded; never a
/// timing claim.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The `lockstep` binary under test, as a `Command` to configure.
pub fn lockstep() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lockstep"))
}

/// Waits until `cond` holds, polling every 20 ms; panics with `what` after [`DEADLINE`].
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for: {what}");
        thread::sleep(Duration::from_millis(20));
    }
}
