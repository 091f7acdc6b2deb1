//! The pool as its clients see it: a lite sequential specification.
//!
//! `lockstep_models::pool::PoolModel` specifies the pool step by step (queues, workers, take,
//! steal, run, exit), steps a client cannot see. This specification keeps only what a client
//! observes, with the same rules (SPEC B3, B4): roots are accepted until `shutdown`; children
//! are accepted while their parent runs, also while draining; a task runs at most once, never
//! after a successful `cancel`; `cancel` succeeds only before a worker claimed the task; a
//! handle reports the task's own outcome; the pool terminates only when every accepted task
//! has run or was cancelled; `outstanding()` counts at least every queued, claimed or running
//! task, and at most every task ever accepted plus the credit the workers may hold
//! ([`PoolLite::with_credit_slack`]; `lockstep_pool` crate docs, "Credits").
//!
//! A task's run is recorded by the task itself as two operations, [`PoolOp::Start`] (first
//! thing in its function) and [`PoolOp::End`] (last thing, with its outcome), with
//! [`PoolOp::Spawn`]s in between. The claim that precedes `Start` is invisible; a `cancel`
//! that returns `false` while the specification still has the task queued is explained as
//! "a worker claimed it just before", so [`SequentialSpec::step`] is overridden: the result of
//! `cancel` on a queued task is the client's observation of that hidden step.

use std::collections::BTreeMap;

use lockstep_contract::{PoolError, PoolState, TaskError};

use crate::lin::SequentialSpec;

/// A task's label, chosen by the test (unique per task, roots and children alike).
pub type Label = u32;

/// One observable pool operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolOp {
    /// `pool.submit(task)`.
    Submit(Label),
    /// `ctx.spawn(child)` from the running task `parent`.
    Spawn {
        /// The running task.
        parent: Label,
        /// The new child.
        child: Label,
    },
    /// The task's function began.
    Start(Label),
    /// The task's function is about to end with this outcome (`Err(message)`: it will
    /// panic with that message).
    End(Label, Result<u64, String>),
    /// `handle.cancel()`.
    Cancel(Label),
    /// `handle.join()`.
    Join(Label),
    /// `pool.shutdown()`.
    Shutdown,
    /// `pool.state()`.
    State,
    /// `pool.outstanding()`.
    Outstanding,
    /// `pool.await_termination()`.
    AwaitTermination,
}

/// What an observable pool operation returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolRet {
    /// From `submit` or `spawn`.
    Accepted(Result<(), PoolError>),
    /// From `cancel`.
    Cancelled(bool),
    /// From `join`.
    Joined(Result<u64, TaskError>),
    /// From `state`.
    State(PoolState),
    /// From `outstanding`.
    Outstanding(usize),
    /// From `Start`, `End`, `shutdown`, `await_termination`.
    Done,
    /// Never returned by production: the model's answer when the operation cannot happen
    /// at this point at all (the text says why), shown in failure reports.
    Impossible(String),
}

/// Where one task is in its life, as far as clients can tell.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Life {
    /// Accepted, not known to be claimed.
    Queued,
    /// Claimed by a worker (a `cancel` returned false), not started yet.
    Claimed,
    /// Its function is running.
    Running,
    /// Its function ended: `Ok(value)` or `Err(panic message)`.
    Ran(Result<u64, String>),
    /// Cancelled before any claim; it never runs.
    Cancelled,
}

/// The specification's state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolLite {
    /// Until `shutdown`.
    pub accepting: bool,
    /// Termination was observed (then every later submit gets `Terminated`).
    pub terminated: bool,
    /// Every accepted task by label.
    pub tasks: BTreeMap<Label, Life>,
    /// The most credit the pool's threads may hold at once (`2 * credit_batch` per thread):
    /// how far `outstanding()` may read above the tasks ever accepted.
    pub credit_slack: usize,
}

impl PoolLite {
    /// An accepting pool with no tasks.
    pub fn new() -> Self {
        PoolLite {
            accepting: true,
            terminated: false,
            tasks: BTreeMap::new(),
            credit_slack: 0,
        }
    }

    /// The same specification for a pool whose threads may hold up to `slack` units of
    /// credit at once (B3.credits-returned).
    #[must_use]
    pub fn with_credit_slack(mut self, slack: usize) -> Self {
        self.credit_slack = slack;
        self
    }

    /// Every accepted task ran or was cancelled.
    pub fn all_done(&self) -> bool {
        self.tasks
            .values()
            .all(|l| matches!(l, Life::Ran(_) | Life::Cancelled))
    }

    /// Tasks that production must count as outstanding: queued, claimed or running.
    pub fn counted_for_sure(&self) -> usize {
        self.tasks
            .values()
            .filter(|l| matches!(l, Life::Queued | Life::Claimed | Life::Running))
            .count()
    }

    fn first_unfinished(&self) -> Option<(Label, &Life)> {
        self.tasks
            .iter()
            .find(|(_, l)| !matches!(l, Life::Ran(_) | Life::Cancelled))
            .map(|(k, l)| (*k, l))
    }
}

impl Default for PoolLite {
    fn default() -> Self {
        Self::new()
    }
}

/// The specification (no parameters).
#[derive(Debug, Default)]
pub struct PoolSpec;

fn impossible(why: impl Into<String>) -> PoolRet {
    PoolRet::Impossible(why.into())
}

impl SequentialSpec for PoolSpec {
    type State = PoolLite;
    type Op = PoolOp;
    type Ret = PoolRet;

    fn rules(&self) -> &'static str {
        "B3.root-accept, B3.drain-children, B3.exit-when-drained, B4.cancel-unclaimed"
    }

    /// The deterministic reading: `cancel` of a queued task succeeds, `state` reports
    /// `Draining` until termination was observed. [`PoolSpec::step`] accepts the other
    /// allowed answers.
    fn apply(&self, s: &mut PoolLite, op: &PoolOp) -> PoolRet {
        match op {
            PoolOp::Submit(t) => {
                if s.tasks.contains_key(t) {
                    return impossible(format!("task {t} was already submitted (test bug)"));
                }
                if s.terminated {
                    PoolRet::Accepted(Err(PoolError::Terminated))
                } else if !s.accepting {
                    PoolRet::Accepted(Err(PoolError::ShutDown))
                } else {
                    s.tasks.insert(*t, Life::Queued);
                    PoolRet::Accepted(Ok(()))
                }
            }
            PoolOp::Spawn { parent, child } => {
                if s.tasks.get(parent) != Some(&Life::Running) {
                    return impossible(format!("parent {parent} is not running"));
                }
                if s.tasks.contains_key(child) {
                    return impossible(format!("task {child} already exists (test bug)"));
                }
                // B3.drain-children: accepted while draining too.
                s.tasks.insert(*child, Life::Queued);
                PoolRet::Accepted(Ok(()))
            }
            PoolOp::Start(t) => match s.tasks.get_mut(t) {
                Some(l @ (Life::Queued | Life::Claimed)) => {
                    *l = Life::Running;
                    PoolRet::Done
                }
                Some(Life::Cancelled) => impossible(format!("task {t} was cancelled")),
                Some(_) => impossible(format!("task {t} already started")),
                None => impossible(format!("task {t} was never accepted")),
            },
            PoolOp::End(t, outcome) => match s.tasks.get_mut(t) {
                Some(l @ Life::Running) => {
                    *l = Life::Ran(outcome.clone());
                    PoolRet::Done
                }
                _ => impossible(format!("task {t} is not running")),
            },
            PoolOp::Cancel(t) => match s.tasks.get_mut(t) {
                Some(l @ Life::Queued) => {
                    *l = Life::Cancelled;
                    PoolRet::Cancelled(true)
                }
                Some(_) => PoolRet::Cancelled(false),
                None => impossible(format!("task {t} was never accepted")),
            },
            PoolOp::Join(t) => match s.tasks.get(t) {
                Some(Life::Ran(Ok(v))) => PoolRet::Joined(Ok(*v)),
                Some(Life::Ran(Err(message))) => PoolRet::Joined(Err(TaskError::Panicked {
                    message: message.clone(),
                })),
                Some(Life::Cancelled) => PoolRet::Joined(Err(TaskError::Cancelled)),
                Some(_) => impossible(format!("task {t} has not finished")),
                None => impossible(format!("task {t} was never accepted")),
            },
            PoolOp::Shutdown => {
                s.accepting = false;
                PoolRet::Done
            }
            PoolOp::State => PoolRet::State(if s.accepting {
                PoolState::Accepting
            } else if s.terminated {
                PoolState::Terminated
            } else {
                PoolState::Draining
            }),
            PoolOp::Outstanding => PoolRet::Outstanding(s.counted_for_sure()),
            PoolOp::AwaitTermination => {
                if s.accepting {
                    return impossible("no shutdown yet");
                }
                if let Some((t, l)) = s.first_unfinished() {
                    return impossible(format!("task {t} is still {l:?}"));
                }
                s.terminated = true;
                PoolRet::Done
            }
        }
    }

    fn step(&self, s: &PoolLite, op: &PoolOp, observed: &PoolRet) -> Result<PoolLite, PoolRet> {
        let mut next = s.clone();
        match (op, observed) {
            // B4.cancel-unclaimed: false on a task the spec still has queued means a worker
            // claimed it just before.
            (PoolOp::Cancel(t), PoolRet::Cancelled(false))
                if s.tasks.get(t) == Some(&Life::Queued) =>
            {
                next.tasks.insert(*t, Life::Claimed);
                return Ok(next);
            }
            // After shutdown, once everything ran, the workers may have exited: `Terminated`
            // from `submit` or `state` is then allowed, and from then on it stays.
            (PoolOp::Submit(_), PoolRet::Accepted(Err(PoolError::Terminated)))
            | (PoolOp::State, PoolRet::State(PoolState::Terminated))
                if !s.accepting && s.all_done() =>
            {
                next.terminated = true;
                return Ok(next);
            }
            // B3.register-before-decrement: every queued, claimed or running task is still
            // counted. A task is uncounted only after its function returned (after `End`) or
            // when its cancelled husk is removed from a queue (unseen), and the threads'
            // credit is counted too (B3.credits-returned), so more may be counted, but never
            // more than were ever accepted plus the most credit the threads can hold.
            (PoolOp::Outstanding, PoolRet::Outstanding(o))
                if (s.counted_for_sure()..=s.tasks.len() + s.credit_slack).contains(o) =>
            {
                return Ok(next);
            }
            _ => {}
        }
        let expected = self.apply(&mut next, op);
        if expected == *observed {
            Ok(next)
        } else {
            Err(expected)
        }
    }

    /// `accepting | draining | terminated; 0 Ran(Ok(0)), 1 Running, ...`
    fn describe(&self, s: &PoolLite) -> String {
        let phase = if s.accepting {
            "accepting"
        } else if s.terminated {
            "terminated"
        } else {
            "draining"
        };
        let tasks: Vec<String> = s.tasks.iter().map(|(k, l)| format!("{k} {l:?}")).collect();
        format!("{phase}; {}", tasks.join(", "))
    }
}
