//! The only place in Lockstep that chooses concurrency primitives.
//!
//! Production crates (`lockstep-deque`, `lockstep-pool`, `lockstep-dag`) never name
//! `std::sync` or `std::thread`; they name this crate. What it re-exports depends on a
//! `cfg` flag, never on a Cargo feature (features unify across a workspace and would
//! leak checker types into normal builds):
//!
//! | build                           | primitives                    | used by                 |
//! |---------------------------------|-------------------------------|-------------------------|
//! | plain                           | `std`                         | users, `cargo test`     |
//! | `RUSTFLAGS="--cfg loom"`        | `loom` (exhaustive, C11 model)| `tests/tests/loom_*.rs` |
//! | `RUSTFLAGS="--cfg shuttle"`     | `shuttle` (randomised, PCT)   | `tests/tests/shuttle_*.rs` |
//!
//! Build each flavour in its own target directory (`CARGO_TARGET_DIR=target-loom`, ...)
//! so that they do not rebuild each other.
//!
//! Two seams exist because the checkers lack them:
//! * [`Mutex`] hides lock poisoning: a panic while holding one of our locks is a bug in
//!   Lockstep (user code never runs under our locks), so a poisoned lock is recovered
//!   rather than propagated.
//! * Time: loom has no clock and shuttle's timeouts never fire. [`Condvar::wait_timeout`]
//!   therefore reports `timed_out == false` under the checkers, and code that waits with a
//!   deadline must also be correct when the deadline never passes.
//! * Randomness: [`rng_u64`] draws from `shuttle::rand` under shuttle (so schedules replay
//!   deterministically), a fixed sequence under loom, and `fastrand` otherwise.

#![cfg_attr(not(any(loom, shuttle)), forbid(unsafe_code))]

#[cfg(all(loom, shuttle))]
compile_error!("choose at most one of --cfg loom and --cfg shuttle");

#[cfg(loom)]
use loom as imp;
#[cfg(shuttle)]
use shuttle as imp;
#[cfg(not(any(loom, shuttle)))]
use std as imp;

/// Atomic types and fences from the selected implementation.
pub mod atomic {
    pub use super::imp::sync::atomic::{
        AtomicBool, AtomicIsize, AtomicU64, AtomicUsize, Ordering, fence,
    };
}

/// Threads from the selected implementation.
pub mod thread {
    pub use super::imp::thread::{JoinHandle, current, spawn, yield_now};

    /// Spawns a named thread; under the checkers the name is ignored.
    ///
    /// # Errors
    /// Returns the OS error if the thread cannot be created (std only).
    pub fn spawn_named<F, T>(name: String, f: F) -> std::io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        #[cfg(not(any(loom, shuttle)))]
        {
            std::thread::Builder::new().name(name).spawn(f)
        }
        #[cfg(shuttle)]
        {
            shuttle::thread::Builder::new().name(name).spawn(f)
        }
        #[cfg(loom)]
        {
            let _ = name;
            Ok(loom::thread::spawn(f))
        }
    }
}

pub use imp::sync::Arc;

use std::time::Duration;

/// A mutual-exclusion lock whose `lock` never returns a poison error.
///
/// Lockstep never runs user code while holding one of its own locks, so poisoning can only
/// come from a bug in Lockstep itself; recovering the guard keeps the rest of the process
/// usable and lets the checkers report the original panic.
#[derive(Debug, Default)]
pub struct Mutex<T>(imp::sync::Mutex<T>);

/// The guard returned by [`Mutex::lock`].
pub type MutexGuard<'a, T> = imp::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    /// Creates a new unlocked mutex holding `value`.
    pub fn new(value: T) -> Self {
        Self(imp::sync::Mutex::new(value))
    }

    /// Acquires the lock, blocking the current thread until it is free.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        match self.0.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Consumes the mutex and returns the value.
    pub fn into_inner(self) -> T {
        match self.0.into_inner() {
            Ok(v) => v,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

/// A condition variable paired with [`Mutex`].
#[derive(Debug, Default)]
pub struct Condvar(imp::sync::Condvar);

impl Condvar {
    /// Creates a condition variable with no waiters.
    pub fn new() -> Self {
        Self(imp::sync::Condvar::new())
    }

    /// Blocks until notified (spurious wake-ups are possible: always re-check the predicate).
    pub fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        match self.0.wait(guard) {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Blocks until notified or until `timeout` has passed.
    ///
    /// Returns the guard and whether the wait timed out. Under loom and shuttle the timeout
    /// never fires (`false` is always returned): callers must re-check their predicate and
    /// their own deadline, and must be correct if the deadline never passes.
    pub fn wait_timeout<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> (MutexGuard<'a, T>, bool) {
        #[cfg(not(any(loom, shuttle)))]
        {
            let (g, res) = match self.0.wait_timeout(guard, timeout) {
                Ok(pair) => pair,
                Err(poisoned) => poisoned.into_inner(),
            };
            (g, res.timed_out())
        }
        #[cfg(any(loom, shuttle))]
        {
            let _ = timeout;
            (self.wait(guard), false)
        }
    }

    /// Wakes one waiter.
    pub fn notify_one(&self) {
        self.0.notify_one();
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        self.0.notify_all();
    }
}

/// Monotonic time, behind a seam: under the checkers time never advances.
pub mod time {
    use std::time::Duration;

    /// An instant on the monotonic clock (std), or a frozen instant under loom and shuttle.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
    pub struct Instant(#[cfg(not(any(loom, shuttle)))] std::time::Instant);

    impl Instant {
        /// The current instant.
        pub fn now() -> Self {
            #[cfg(not(any(loom, shuttle)))]
            {
                Self(std::time::Instant::now())
            }
            #[cfg(any(loom, shuttle))]
            {
                Self()
            }
        }

        /// Time since `self`; always zero under the checkers.
        pub fn elapsed(&self) -> Duration {
            #[cfg(not(any(loom, shuttle)))]
            {
                self.0.elapsed()
            }
            #[cfg(any(loom, shuttle))]
            {
                Duration::ZERO
            }
        }
    }
}

/// A uniformly random `u64`, drawn from the source that the current checker controls.
///
/// Used for the pool's random starting victim. Under shuttle it comes from
/// `shuttle::rand` so that a failing schedule replays exactly; under loom it is a fixed
/// value (loom explores interleavings, not random choices); otherwise `fastrand`.
pub fn rng_u64() -> u64 {
    #[cfg(shuttle)]
    {
        use shuttle::rand::Rng;
        shuttle::rand::thread_rng().r#gen::<u64>()
    }
    #[cfg(loom)]
    {
        0
    }
    #[cfg(not(any(loom, shuttle)))]
    {
        fastrand::u64(..)
    }
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use super::*;

    #[test]
    fn poisoned_mutex_is_recovered() {
        let m = Arc::new(Mutex::new(5));
        let m2 = Arc::clone(&m);
        let r = thread::spawn(move || {
            let _g = m2.lock();
            panic!("poison it");
        })
        .join();
        assert!(r.is_err());
        assert_eq!(*m.lock(), 5);
    }

    #[test]
    fn wait_timeout_times_out_on_std() {
        let m = Mutex::new(());
        let c = Condvar::new();
        let (_g, timed_out) = c.wait_timeout(m.lock(), Duration::from_millis(5));
        assert!(timed_out);
    }
}
