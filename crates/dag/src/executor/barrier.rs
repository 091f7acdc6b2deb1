//! An asymmetric pair of fences for the executor's decision (`EXECUTOR.decide-once`): a
//! *light* fence that every decider of a plain run passes, nearly free, and a *heavy* one that
//! only `cancel` pays, once per cancel of a task not yet decided.
//!
//! # Why
//! A decider and a `cancel` of the same task race: exactly one of them may move the task out
//! of pending. A compare-and-swap on one word settles that race, but it is a locked
//! read-modify-write per task, about 6 ns on the Xeon that runs the benchmarks (section 4 of
//! `docs/executor.md`), paid by every task although a cancel is rare. The alternative is
//! Dekker's: each side writes its own word, passes a full fence, then reads the other's
//! word. Two sequentially consistent fences forbid the outcome where both reads miss both
//! writes (C++ [atomics.fences], the fence-fence rule), so at least one side sees the other.
//! A full fence costs what a locked operation costs, so the fast side uses the asymmetric
//! form instead: a compiler fence on the deciders' side, and on the cancel's side the
//! `membarrier(2)` system call (`MEMBARRIER_CMD_PRIVATE_EXPEDITED`, Linux 4.14), which
//! makes every running thread of the process execute a full memory barrier before it
//! returns (a thread not running passes one when it is switched back in). Together they act
//! as a pair of sequentially consistent fences: a decider's store before its light fence is
//! visible to the cancel's load after the heavy one, or the cancel's store before the heavy
//! fence is visible to the decider's load after the light one. This is the pairing of
//! `membarrier(2)`'s manual page, of liburcu, and of folly's `asymmetricLightBarrier` /
//! `asymmetricHeavyBarrier`.
//!
//! # Protocol
//! * [`Barrier::new`] (a plain run's build) registers the process for the expedited command
//!   once (a `OnceLock`; [`register_membarrier`] does it on demand, cheaply before the
//!   process has threads); if the kernel refuses (an old kernel, a seccomp filter, another system),
//!   the barrier is *symmetric*: both sides use `fence(SeqCst)`, correct everywhere, and the
//!   decider pays a full fence instead of the compare-and-swap it replaces.
//! * [`Barrier::light`] goes between a decider's store and its load, [`Barrier::heavy`]
//!   between a cancel's store and its load. Nothing else may be assumed of either.
//! * Under loom, shuttle and Miri, and off Linux, the barrier is always symmetric: loom
//!   models `fence(SeqCst)` exactly (so `tests/tests/loom_executor.rs` checks the protocol as
//!   the fence-fence rule states it), and the system call exists in none of them. The
//!   asymmetric form's soundness is the kernel's documented guarantee, not something a model
//!   checker here can explore.

use lockstep_sync::atomic::{Ordering, fence};

/// Which fence pair a run uses, chosen once per run ([`Barrier::new`]). Copy; one byte.
#[derive(Clone, Copy, Debug)]
pub(super) struct Barrier {
    /// The heavy side is `membarrier(2)`, the light side a compiler fence.
    asymmetric: bool,
}

impl Barrier {
    /// The process's barrier: asymmetric if `membarrier(2)`'s expedited command could be
    /// registered (first call only: one system call per process, later calls read a
    /// `OnceLock`), symmetric otherwise.
    pub(super) fn new() -> Self {
        Barrier {
            asymmetric: registered(),
        }
    }

    /// Two full fences, without asking the kernel: for a run that never uses the pair (one
    /// that is not plain decides with a compare-and-swap), so that building it costs no
    /// system call.
    pub(super) fn symmetric() -> Self {
        Barrier { asymmetric: false }
    }

    /// The deciders' side: a compiler fence if asymmetric (no instruction), else a full
    /// fence. Orders the decider's earlier store before its later load against a
    /// [`Barrier::heavy`].
    #[inline(always)]
    pub(super) fn light(self) {
        if self.asymmetric {
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// The cancel's side: a full fence, then, if asymmetric, `membarrier(2)` (about 0.2 µs
    /// with no other thread running; an inter-processor interrupt per running thread of
    /// the process otherwise). The registration is inherited by a forked child (checked on
    /// Linux 6.18) and undone by `exec`, which also resets the `OnceLock`. Should the
    /// expedited command fail anyway, `MEMBARRIER_CMD_GLOBAL` stands in: the same guarantee
    /// for every thread of the system, without registration, slower (it waits for every
    /// processor to pass a barrier).
    ///
    /// # Panics
    /// If both commands fail, which `membarrier(2)` rules out once the registration
    /// succeeded.
    pub(super) fn heavy(self) {
        fence(Ordering::SeqCst);
        if self.asymmetric {
            expedited();
        }
    }
}

/// Registers the process for the expedited `membarrier(2)` command now, if it is not
/// registered yet, and answers whether the executor's plain runs will decide with the
/// asymmetric fence pair (`true`) or with two full fences (`false`: another system, a
/// kernel or filter that refuses, loom, shuttle, Miri).
///
/// Optional: the first plain run of a process registers otherwise. Call it early, before
/// the process starts threads, to make that registration cheap: in a process that already
/// has threads the kernel waits for a grace period (RCU) before it answers, about 12 ms
/// measured on Linux 6.18 with a two-worker pool alive, against a few microseconds in a
/// process with one thread. `lockstep run` calls it before it builds its pool.
/// Idempotent and thread-safe (a `OnceLock`); one system call per process at most.
pub fn register_membarrier() -> bool {
    registered()
}

#[cfg(all(target_os = "linux", not(loom), not(shuttle), not(miri)))]
fn registered() -> bool {
    use rustix::thread::{MembarrierCommand, membarrier};
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *REGISTERED.get_or_init(|| membarrier(MembarrierCommand::RegisterPrivateExpedited).is_ok())
}

#[cfg(not(all(target_os = "linux", not(loom), not(shuttle), not(miri))))]
fn registered() -> bool {
    false
}

#[cfg(all(target_os = "linux", not(loom), not(shuttle), not(miri)))]
fn expedited() {
    use rustix::thread::{MembarrierCommand, membarrier};
    if membarrier(MembarrierCommand::PrivateExpedited).is_err()
        && let Err(e) = membarrier(MembarrierCommand::Global)
    {
        panic!("membarrier(2) failed after its registration, expedited and global: {e}");
    }
}

#[cfg(not(all(target_os = "linux", not(loom), not(shuttle), not(miri))))]
fn expedited() {
    unreachable!("a symmetric barrier never calls membarrier(2)");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the Linux machines this workspace is tested on, the expedited command registers
    /// (kernel 4.14 and later); elsewhere the barrier is symmetric. Either way both sides
    /// run.
    #[test]
    fn both_sides_run_and_linux_registers_the_expedited_command() {
        let b = Barrier::new();
        b.light();
        b.heavy();
        if cfg!(all(target_os = "linux", not(loom), not(shuttle), not(miri))) {
            assert!(b.asymmetric, "membarrier(2) refused its registration here");
        } else {
            assert!(!b.asymmetric);
        }
        // Registration is once per process: a second barrier agrees.
        assert_eq!(Barrier::new().asymmetric, b.asymmetric);
    }
}
