//! A work-stealing deque with its owner, thieves, and one thief's own deque.
//!
//! The rules of `lockstep_models::pool::PoolModel`'s queues (SPEC B1, B2; invariants
//! `B1.owner-lifo-thief-fifo`, `B2.remove-once`): the owner pushes and pops at the bottom
//! (newest first); a thief steals from the top (oldest first); a batch steal removes
//! `k = min(limit, ceil(len / 2))` of the oldest tasks at once, returns the oldest and puts
//! the other `k - 1` at the bottom of the thief's own deque, oldest first. Each task leaves a
//! deque exactly once.
//!
//! A batch steal is two critical sections in production (remove from the victim, then push
//! onto the thief's deque); it is one operation here, which is sound as long as only the
//! thief touches its own deque (its pops are [`DequeOp::PopOwn`]).

use std::collections::VecDeque;
use std::num::NonZeroUsize;

use crate::lin::SequentialSpec;

/// One deque operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DequeOp {
    /// Owner: push at the bottom.
    Push(u32),
    /// Owner: pop from the bottom.
    Pop,
    /// Thief: steal from the top.
    Steal,
    /// The batch-stealing thief: `steal_batch_and_pop(own deque, limit)`.
    StealBatch(NonZeroUsize),
    /// The batch-stealing thief: pop from its own deque.
    PopOwn,
}

/// What a deque operation returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DequeRet {
    /// From `push`.
    Pushed,
    /// From a pop or a successful steal: the task, or `None` for empty.
    Took(Option<u32>),
    /// A steal gave up (`Steal::Retry`): allowed at any time, changes nothing.
    Retry,
}

/// The state: the victim deque (front = top = oldest) and the batch thief's own deque.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Deques {
    /// The shared deque.
    pub victim: VecDeque<u32>,
    /// The batch thief's own deque.
    pub own: VecDeque<u32>,
}

/// The specification (no parameters).
#[derive(Debug, Default)]
pub struct DequeSpec;

impl SequentialSpec for DequeSpec {
    type State = Deques;
    type Op = DequeOp;
    type Ret = DequeRet;

    fn rules(&self) -> &'static str {
        "B1.owner-lifo-thief-fifo, B2.remove-once"
    }

    fn apply(&self, s: &mut Deques, op: &DequeOp) -> DequeRet {
        match op {
            DequeOp::Push(x) => {
                s.victim.push_back(*x);
                DequeRet::Pushed
            }
            DequeOp::Pop => DequeRet::Took(s.victim.pop_back()),
            DequeOp::Steal => DequeRet::Took(s.victim.pop_front()),
            DequeOp::StealBatch(limit) => {
                let k = limit.get().min(s.victim.len().div_ceil(2));
                let mut batch: VecDeque<u32> = s.victim.drain(..k).collect();
                let first = batch.pop_front();
                s.own.extend(batch);
                DequeRet::Took(first)
            }
            DequeOp::PopOwn => DequeRet::Took(s.own.pop_back()),
        }
    }

    fn step(&self, s: &Deques, op: &DequeOp, observed: &DequeRet) -> Result<Deques, DequeRet> {
        if *observed == DequeRet::Retry && matches!(op, DequeOp::Steal | DequeOp::StealBatch(_)) {
            return Ok(s.clone());
        }
        let mut next = s.clone();
        let expected = self.apply(&mut next, op);
        if expected == *observed {
            Ok(next)
        } else {
            Err(expected)
        }
    }

    /// `victim [top .. bottom], own [top .. bottom]`
    fn describe(&self, s: &Deques) -> String {
        format!("victim {:?} (top first), own {:?}", s.victim, s.own)
    }
}
