//! Checks a recorded run of the graph executor (`lockstep_dag::executor`) against the
//! sequential model of the scheduler (`lockstep_models::dag::SchedulerModel`).
//!
//! A [`Case`] is a small graph (task `t` is id `t`, its dependencies listed in an order of
//! the case's choosing), what each task's function does ([`Body`]) and which tasks are
//! cancelled before the run starts. [`check`] replays the executor's history into the model
//! with unlimited capacity, submitting the tasks in index order and applying the same
//! cancellations first (highest index first, so that each finds its task pending):
//!
//! * `Start(t)`: the model claims everything ready; `t` must now be running in the model,
//!   which holds exactly when every dependency of `t` already succeeded in the replay (the
//!   history's order extends happens-before, so "never before its dependencies succeeded");
//! * `Finish(t, state)`: `complete` or `fail` in the model must be `Applied`, and `state`
//!   must be what `t`'s body does;
//! * `Skip(t, state)`: the model must already hold `t` in `state` (blocked or cancelled);
//! * every task starts or is skipped exactly once;
//! * at the end, every task's final state, cancel reason and error equal the model's;
//! * a blocked task's cause is the executor's documented rule (the root cause of its first
//!   lost dependency in list order), computed here independently, and names a task the
//!   model holds as failed or cancelled.

use lockstep_contract::{CallbackOutcome, Generation, SubmitOptions, TaskState};
use lockstep_dag::executor::{ExecEvent, RunOutcome};
use lockstep_models::dag::SchedulerModel;

/// What a task's function does when it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Body {
    /// Returns `Ok(())`.
    Succeed,
    /// Returns `Err("t<index> failed")`.
    Fail,
    /// Panics with `"t<index> panicked"`.
    Panic,
}

impl Body {
    /// The error the executor records for task `t` with this body, if it fails.
    pub fn error(self, t: u32) -> Option<String> {
        match self {
            Body::Succeed => None,
            Body::Fail => Some(format!("t{t} failed")),
            Body::Panic => Some(format!("panicked: t{t} panicked")),
        }
    }

    /// Runs the body of task `t`.
    ///
    /// # Errors
    /// `t<index> failed` for [`Body::Fail`].
    ///
    /// # Panics
    /// For [`Body::Panic`], on purpose.
    pub fn run(self, t: u32) -> Result<(), String> {
        match self {
            Body::Succeed => Ok(()),
            Body::Fail => Err(format!("t{t} failed")),
            Body::Panic => panic!("t{t} panicked"),
        }
    }
}

/// One generated case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// `deps[t]`: the dependencies of task `t`, in list order, each of lower index.
    pub deps: Vec<Vec<u32>>,
    /// `optional[t]`: how many of `deps[t]` (its tail) are optional (SPEC A8); 0 for none.
    /// Shorter than `deps` means 0 for the rest.
    pub optional: Vec<usize>,
    /// `bodies[t]`: what task `t` does.
    pub bodies: Vec<Body>,
    /// Tasks cancelled before the run starts.
    pub cancelled: Vec<u32>,
}

impl Case {
    /// The `(id, required dependencies, optional dependencies)` triples of the graph, in
    /// index order (for `FrozenGraph::with_optional`).
    pub fn tasks(&self) -> impl Iterator<Item = (u32, Vec<u32>, Vec<u32>)> + '_ {
        self.deps.iter().enumerate().map(|(t, d)| {
            let split = d.len() - self.optional_count(t).min(d.len());
            (t as u32, d[..split].to_vec(), d[split..].to_vec())
        })
    }

    /// How many of task `t`'s dependencies are optional.
    fn optional_count(&self, t: usize) -> usize {
        self.optional.get(t).copied().unwrap_or(0)
    }

    /// Task `t`'s required dependencies (the head of its list).
    fn required(&self, t: usize) -> &[u32] {
        let d = &self.deps[t];
        &d[..d.len() - self.optional_count(t).min(d.len())]
    }
}

/// The expected root cause of each task under the executor's rule, given final states.
fn expected_causes(case: &Case, out: &RunOutcome<u32>) -> Vec<Option<u32>> {
    let n = case.deps.len();
    let mut cause: Vec<Option<u32>> = vec![None; n];
    // Dependencies have lower indices, so index order is a topological order.
    for t in 0..n {
        if out.state(t as u32) != TaskState::Blocked {
            continue;
        }
        // A8: only required dependencies block.
        cause[t] = case.required(t).iter().find_map(|&d| match out.state(d) {
            TaskState::Failed | TaskState::Cancelled => Some(d),
            TaskState::Blocked => cause[d as usize],
            _ => None,
        });
    }
    cause
}

/// Checks `out` (a run of `case` made with a recorded history) as the module docs say.
///
/// # Errors
/// A description of the first rule broken.
pub fn check(case: &Case, out: &RunOutcome<u32>) -> Result<(), String> {
    let n = case.deps.len();
    let history = out.history().ok_or("the run recorded no history")?;
    let mut m: SchedulerModel<u32> = SchedulerModel::new(usize::MAX);
    for (t, deps, optional) in case.tasks() {
        m.submit_with_optional(t, deps, optional, SubmitOptions::default())
            .map_err(|e| format!("model submit {t}: {e}"))?;
    }
    m.start().map_err(|e| format!("model start: {e}"))?;
    // Descendants first: each is cancelled while still pending, as `GraphRun::cancel` before
    // the start finds every task pending (an ancestor cancelled first would block it).
    let mut cancels = case.cancelled.clone();
    cancels.sort_unstable_by(|a, b| b.cmp(a));
    for c in cancels {
        m.cancel(&c).map_err(|e| format!("model cancel {c}: {e}"))?;
    }
    let g1 = Generation::FIRST;
    let mut decided = vec![0u32; n];
    for (i, e) in history.iter().enumerate() {
        match *e {
            ExecEvent::Start { task, .. } => {
                decided[task as usize] += 1;
                m.ready().map_err(|e| format!("model ready: {e}"))?;
                let s = m.state(&task);
                if s != Some(TaskState::Running) {
                    return Err(format!(
                        "event {i}: task {task} started while the model holds it {s:?} (a dependency had not succeeded)"
                    ));
                }
            }
            ExecEvent::Finish { task, state, .. } => {
                let body = case.bodies[task as usize];
                let want = if body == Body::Succeed {
                    TaskState::Succeeded
                } else {
                    TaskState::Failed
                };
                if state != want {
                    return Err(format!(
                        "event {i}: task {task} finished {state}, its body gives {want}"
                    ));
                }
                let r = if state == TaskState::Succeeded {
                    m.complete(&task, g1)
                } else {
                    m.fail(&task, g1, body.error(task).unwrap_or_default())
                };
                if !matches!(r, Ok(CallbackOutcome::Applied(_))) {
                    return Err(format!(
                        "event {i}: the model refused the finish of {task}: {r:?}"
                    ));
                }
            }
            ExecEvent::Skip { task, state, .. } => {
                decided[task as usize] += 1;
                let s = m.state(&task);
                if s != Some(state) {
                    return Err(format!(
                        "event {i}: task {task} skipped as {state}, the model holds {s:?}"
                    ));
                }
            }
        }
    }
    if let Some(t) = decided.iter().position(|&c| c != 1) {
        return Err(format!(
            "task {t} was started or skipped {} times, not once",
            decided[t]
        ));
    }
    let causes = expected_causes(case, out);
    for t in 0..n as u32 {
        let model = m.status(&t).ok_or_else(|| format!("model lost task {t}"))?;
        let ours = out.status(t);
        if (ours.state, &ours.cancelled_by, &ours.error)
            != (model.state, &model.cancelled_by, &model.error)
        {
            return Err(format!("task {t}: executor {ours:?}, model {model:?}"));
        }
        // A8: a task that ran lists exactly the model's misses; the executor lists none for a
        // cancelled one (docs/semantics.md, "The graph executor"), and neither does a blocked.
        let ran = matches!(ours.state, TaskState::Succeeded | TaskState::Failed);
        let want = if ran {
            model.optional_misses.clone()
        } else {
            Vec::new()
        };
        if ours.optional_misses != want {
            return Err(format!(
                "task {t}: executor misses {:?}, model {:?}",
                ours.optional_misses, want
            ));
        }
        if out.cause_index(t) != causes[t as usize] {
            return Err(format!(
                "task {t}: cause {:?}, the first lost dependency in list order gives {:?}",
                out.cause_index(t),
                causes[t as usize]
            ));
        }
        if let Some(c) = causes[t as usize]
            && !matches!(m.state(&c), Some(TaskState::Failed | TaskState::Cancelled))
        {
            return Err(format!(
                "task {t}: cause {c} is not failed or cancelled in the model"
            ));
        }
    }
    Ok(())
}
