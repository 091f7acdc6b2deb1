//! The deques against their sequential specification, operation by operation (SPEC B1, B2).
//!
//! proptest generates a sequence of owner and thief operations (`DequeOp`: push, pop, steal,
//! batch steal into a second deque, pop from that deque); each is applied on one thread to the
//! specification (`lockstep_tests::specs::deque::DequeSpec`, two `VecDeque`s) and to a real
//! deque of each family (`Locked`, `ChaseLev`), and every answer and both lengths are compared
//! after every operation. On one thread no steal may answer `Retry`.
//!
//! The Chase–Lev deques start with one slot (`chase_lev::Worker::with_capacity(1)`), so the
//! sequences grow their buffers and wrap around them; the locked deques are plain.
//!
//! `PROPTEST_CASES=n` changes the number of cases (default 512).

#![cfg(not(any(loom, shuttle)))]

use lockstep_deque::{ChaseLev, DequeFamily, Locked, Owner, Steal, Thief, chase_lev};
use lockstep_tests::lin::SequentialSpec;
use lockstep_tests::specs::deque::{DequeOp, DequeRet, DequeSpec, Deques};
use proptest::prelude::*;
use std::num::NonZeroUsize;

fn op_strategy() -> impl Strategy<Value = DequeOp> {
    prop_oneof![
        4 => any::<u32>().prop_map(DequeOp::Push),
        2 => Just(DequeOp::Pop),
        2 => Just(DequeOp::Steal),
        1 => (1usize..6).prop_map(|k| DequeOp::StealBatch(NonZeroUsize::new(k).expect("k >= 1"))),
        1 => Just(DequeOp::PopOwn),
    ]
}

/// The victim (owner and one thief's handle) and the batch thief's own deque.
struct Real<D: DequeFamily> {
    victim: D::Owner<u32>,
    thief: <D::Owner<u32> as Owner<u32>>::Thief,
    own: D::Owner<u32>,
}

impl<D: DequeFamily> Real<D> {
    fn from(victim: D::Owner<u32>, own: D::Owner<u32>) -> Self {
        let thief = victim.stealer();
        Real { victim, thief, own }
    }

    fn apply(&self, op: &DequeOp) -> DequeRet {
        let took = |s: Steal<u32>| match s {
            Steal::Success(x) => DequeRet::Took(Some(x)),
            Steal::Empty => DequeRet::Took(None),
            Steal::Retry => DequeRet::Retry,
        };
        match op {
            DequeOp::Push(x) => {
                self.victim.push(*x);
                DequeRet::Pushed
            }
            DequeOp::Pop => DequeRet::Took(self.victim.pop()),
            DequeOp::Steal => took(self.thief.steal()),
            DequeOp::StealBatch(limit) => took(self.thief.steal_batch_and_pop(&self.own, *limit)),
            DequeOp::PopOwn => DequeRet::Took(self.own.pop()),
        }
    }
}

/// Applies `ops` to the specification and to `real`, comparing every answer and both lengths.
fn compare<D: DequeFamily>(real: &Real<D>, ops: &[DequeOp]) -> Result<(), TestCaseError> {
    let mut spec = Deques::default();
    for (i, op) in ops.iter().enumerate() {
        let want = DequeSpec.apply(&mut spec, op);
        let got = real.apply(op);
        prop_assert_eq!(&got, &want, "operation {} {:?}", i, op);
        prop_assert_eq!(
            real.victim.len(),
            spec.victim.len(),
            "victim length after {}",
            i
        );
        prop_assert_eq!(Thief::len(&real.thief), spec.victim.len());
        prop_assert_eq!(real.own.len(), spec.own.len(), "own length after {}", i);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// The locked baseline matches the specification.
    #[test]
    fn locked_deque_matches_spec(ops in prop::collection::vec(op_strategy(), 1..120)) {
        compare::<Locked>(&Real::from(Owner::new(), Owner::new()), &ops)?;
    }

    /// The Chase–Lev deque (starting at one slot, so it grows and wraps) matches the
    /// specification.
    #[test]
    fn chase_lev_deque_matches_spec(ops in prop::collection::vec(op_strategy(), 1..120)) {
        let real = Real::<ChaseLev>::from(
            chase_lev::Worker::with_capacity(1),
            chase_lev::Worker::with_capacity(1),
        );
        compare::<ChaseLev>(&real, &ops)?;
    }
}

/// A fixed sequence through growth and wrap-around for both families, so that these corners
/// run whatever the generator draws.
#[test]
fn both_deques_match_spec_on_a_scripted_sequence() {
    let mut ops = Vec::new();
    for round in 0..4u32 {
        ops.extend((0..9).map(|i| DequeOp::Push(round * 100 + i)));
        ops.extend([DequeOp::Steal, DequeOp::Pop, DequeOp::Steal]);
        ops.push(DequeOp::StealBatch(NonZeroUsize::new(3).expect("3")));
        ops.extend([DequeOp::PopOwn, DequeOp::PopOwn, DequeOp::PopOwn]);
    }
    ops.extend(std::iter::repeat_n(DequeOp::Pop, 30));
    compare::<Locked>(&Real::from(Owner::new(), Owner::new()), &ops).expect("locked");
    let real = Real::<ChaseLev>::from(
        chase_lev::Worker::with_capacity(1),
        chase_lev::Worker::with_capacity(1),
    );
    compare::<ChaseLev>(&real, &ops).expect("chase-lev");
    assert!(real.victim.capacity() >= 16, "the victim grew");
}
