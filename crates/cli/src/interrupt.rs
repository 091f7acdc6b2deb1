//! SIGINT (Ctrl-C), SIGTERM and SIGHUP to lockstep itself: `run`, `run --store` and `worker`
//! handle all three the same way. (SIGHUP: the terminal lockstep runs in was closed, or an ssh
//! session dropped; without a handler it killed lockstep at once, and the claims of a store
//! run then waited out their leases.)
//!
//! The first of them asks the command to stop (stop claiming, stop the running commands, print
//! the summary, exit 1); a second one, of either kind, exits at once with 128 + its number
//! (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP). The handler is installed whatever the signal's inherited
//! disposition: a lockstep started in the background of a non-interactive shell (`lockstep run
//! ... &` in a script) inherits SIGINT as *ignored*, and still stops on it like a foreground
//! one.
//!
//! Handling is done on a thread of [`signal_hook`]'s iterator, not in the signal handler, so
//! the callback may lock, allocate and print.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// A signal that asks lockstep to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGINT: Ctrl-C at a terminal.
    Interrupt,
    /// SIGTERM: `kill PID`, a service manager, a CI timeout.
    Terminate,
    /// SIGHUP: the controlling terminal was closed (a closed window, a dropped ssh session).
    Hangup,
}

impl StopSignal {
    /// How lockstep names it in what it prints: `Ctrl-C`, `SIGTERM` or `SIGHUP`.
    pub fn name(self) -> &'static str {
        match self {
            StopSignal::Interrupt => "Ctrl-C",
            StopSignal::Terminate => "SIGTERM",
            StopSignal::Hangup => "SIGHUP",
        }
    }

    /// The exit status after a second signal of this kind: 128 + its number.
    pub fn exit_status(self) -> i32 {
        128 + match self {
            StopSignal::Interrupt => SIGINT,
            StopSignal::Terminate => SIGTERM,
            StopSignal::Hangup => SIGHUP,
        }
    }
}

/// A stop asked once, by a signal or by a test; shared by the threads that must see it.
#[derive(Debug, Clone, Default)]
pub struct StopRequest(Arc<OnceLock<StopSignal>>);

impl StopRequest {
    /// A request not (yet) made.
    pub fn new() -> Self {
        StopRequest::default()
    }

    /// Asks to stop; the first signal is kept.
    pub fn request(&self, signal: StopSignal) {
        let _ = self.0.set(signal);
    }

    /// The signal that asked to stop, if one did.
    pub fn get(&self) -> Option<StopSignal> {
        self.0.get().copied()
    }

    /// A stop was asked.
    pub fn is_requested(&self) -> bool {
        self.0.get().is_some()
    }
}

/// How many of SIGINT, SIGTERM and SIGHUP the handler has received so far (0 before
/// [`install`]).
static SEEN: AtomicU32 = AtomicU32::new(0);

/// How many stop signals (SIGINT, SIGTERM, SIGHUP) lockstep has received so far: a caller that
/// notes it can tell whether one came since (`command::wait_for_leftovers`'s `stop`). O(1).
pub fn signals_seen() -> u32 {
    SEEN.load(Ordering::SeqCst)
}

/// Installs the process's handler for SIGINT, SIGTERM and SIGHUP: the first one calls `on_first` (on
/// the handler's thread), a second one exits the process at once with
/// [`StopSignal::exit_status`] after a line on standard error. Call it once per process (the
/// binary does; a second call would add a second listener).
///
/// # Errors
/// The operating system refused the handler or the thread.
pub fn install(on_first: impl Fn(StopSignal) + Send + 'static) -> std::io::Result<()> {
    // INVARIANT (C.stop): SIGINT, SIGTERM and SIGHUP are handled alike, also when SIGINT was
    // inherited ignored; the first stops claims and commands, the second exits at once.
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new()
        .name("lockstep-signals".into())
        .spawn(move || {
            let mut seen = 0u32;
            for sig in signals.forever() {
                let signal = match sig {
                    SIGTERM => StopSignal::Terminate,
                    SIGHUP => StopSignal::Hangup,
                    _ => StopSignal::Interrupt,
                };
                seen += 1;
                SEEN.store(seen, Ordering::SeqCst);
                if seen > 1 {
                    let _ = std::io::Write::write_fmt(
                        &mut std::io::stderr().lock(),
                        format_args!("{}: a second signal: exiting at once\n", signal.name()),
                    );
                    std::process::exit(signal.exit_status());
                }
                on_first(signal);
            }
        })?;
    Ok(())
}
