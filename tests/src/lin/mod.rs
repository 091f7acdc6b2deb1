//! Linearizability checking of recorded concurrent histories against a sequential model.
//!
//! A concurrent object is **linearizable** (Herlihy & Wing, 1990) when every history of
//! calls on it can be explained by some total order of its operations that (1) respects real
//! time: an operation that returned before another was invoked comes first, and (2) is a legal
//! run of the sequential specification: applied one by one to the model, each operation
//! returns exactly what the concurrent call returned. Each operation then appears to take
//! effect at one instant between its invocation and its response (its linearization point).
//!
//! # Use
//! 1. Implement [`SequentialSpec`] for the model (state, operation, result, `apply`). The
//!    specs of Lockstep's objects are in [`crate::specs`].
//! 2. Record the concurrent run with a [`Recorder`]: every call gets an invocation and a
//!    response index from one shared counter (the `lockstep_sync` facade's atomics, so this
//!    works on std threads, under shuttle and under loom).
//! 3. [`check`] the [`History`]; on failure, print the [`Failure`]: a few lines naming only
//!    the operations around the point where every explanation broke down.
//!
//! ```
//! use lockstep_tests::lin::{self, Event, History, SequentialSpec};
//!
//! /// A register: `Some(v)` writes, `None` reads.
//! struct Register;
//! impl SequentialSpec for Register {
//!     type State = u32;
//!     type Op = Option<u32>;
//!     type Ret = u32;
//!     fn apply(&self, state: &mut u32, op: &Option<u32>) -> u32 {
//!         if let Some(v) = op { *state = *v; }
//!         *state
//!     }
//! }
//! let ev = |thread, op, inv, resp, ret| Event { thread, op, inv, resp, ret };
//! // t1's read overlaps t0's write, so it may see the old value...
//! let ok = History::new(vec![ev(0, Some(1), 0, 3, 1), ev(1, None, 1, 2, 0)]);
//! assert_eq!(lin::check(&Register, &0, &ok).unwrap().order, vec![1, 0]);
//! // ...but not once the write has returned.
//! let bad = History::new(vec![ev(0, Some(1), 0, 1, 1), ev(1, None, 2, 3, 0)]);
//! let failure = lin::check(&Register, &0, &bad).unwrap_err();
//! assert!(failure.to_string().contains("t1 [2, 3] None -> 0   model: 1"));
//! ```
//!
//! # The algorithm
//! Wing & Gong's search (J. Parallel Distrib. Comput. 17, 1993) with Lowe's improvements
//! ("Testing for linearizability", Concurrency and Computation 29(4), 2017), the algorithm
//! behind the Go checker porcupine: the history becomes a doubly linked list of call and return
//! entries in real-time order; the search repeatedly picks a call entry that precedes the first
//! remaining return entry (an operation that may take effect next), applies it to the model,
//! and **lifts** it (and its return) out of the list; reaching a return entry whose call could
//! not be placed means backtracking (the list is restored in O(1), "dancing links"). Lowe's
//! memoisation: each configuration (set of placed operations, model state) is explored at most
//! once, which turns n! orders of n concurrent operations into at most 2^n configurations per
//! model state. The search is an explicit stack (no recursion), bounded by
//! [`Checker::max_steps`].
//!
//! # Cost
//! Linear in the history length when little overlaps (each operation is placed once); in the
//! worst case exponential in the number of mutually overlapping operations (the problem is
//! NP-complete, Gibbons & Korach 1997). Memory: one (bitset, state) pair per configuration.

mod history;
mod search;

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests;

pub use history::{Event, History, Recorder, ThreadLog};
pub use search::{Checker, DEFAULT_MAX_STEPS, Failure, Linearized, ReportLine, Stuck, check};

use std::fmt;
use std::hash::Hash;

/// A sequential specification: the model a concurrent object must be equivalent to.
///
/// `State` is the model's whole state; it must be `Clone + Eq + Hash` because the checker
/// memoises the configurations it has explored (Lowe). `Op` is an operation with its arguments,
/// `Ret` what the operation returns.
pub trait SequentialSpec {
    /// The model's state.
    type State: Clone + Eq + Hash + fmt::Debug;
    /// One operation with its arguments.
    type Op: fmt::Debug;
    /// What an operation returns.
    type Ret: fmt::Debug + PartialEq;

    /// Applies `op` to `state` and returns what the sequential object returns.
    fn apply(&self, state: &mut Self::State, op: &Self::Op) -> Self::Ret;

    /// Whether `op` may return `observed` when applied in `state`: `Ok(next state)` if so,
    /// `Err(expected)` (what the model would return) if not.
    ///
    /// The default runs [`SequentialSpec::apply`] on a copy and compares. A specification
    /// that leaves a choice open (an operation whose result depends on a step the client
    /// cannot see, such as a pool worker's claim) overrides this to accept every allowed
    /// result; it must then be a function of `(state, op, observed)`.
    fn step(
        &self,
        state: &Self::State,
        op: &Self::Op,
        observed: &Self::Ret,
    ) -> Result<Self::State, Self::Ret> {
        let mut next = state.clone();
        let expected = self.apply(&mut next, op);
        if expected == *observed {
            Ok(next)
        } else {
            Err(expected)
        }
    }

    /// A short description of a state for failure reports (default: its `Debug` form).
    fn describe(&self, state: &Self::State) -> String {
        format!("{state:?}")
    }

    /// The invariants a history this specification refuses breaks, as named in
    /// `docs/invariants.md` (`"B1.owner-lifo-thief-fifo, B2.remove-once"`): a failure report
    /// starts with them ([`crate::report::header`]). Default: none named.
    fn rules(&self) -> &'static str {
        ""
    }
}
