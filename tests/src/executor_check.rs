//! Checks a recorded run of the graph executor (`lockstep_dag::executor`) against the
//! sequential model of the scheduler (`lockstep_models::dag::SchedulerModel`).
//!
//! A [`Case`] is a small graph (task `t` is id `t`, its dependencies listed in an order of
//! the case's choosing), what each task's function does ([`Body`]), which tasks are
//! cancelled before the run starts, and whether and when the run is closed ([`Close`]).
//! [`check`] replays the executor's history into the model with unlimited capacity,
//! submitting the tasks in index order:
//!
//! * `Cancel(t, answer)` (the cancellations before the start, [`Case::cancelled`], and those
//!   the running tasks make, [`Case::cancels`]): the model's `cancel` of `t` at that point
//!   must answer the same (`Cancelled`, `Requested`, or `AlreadyTerminal` with the same
//!   state: a task whose required dependency is lost is blocked already, whether or not
//!   the executor has decided it);
//! * `Start(t)`: the model claims `t` (`run_ready`, only it: a task ready in the model but
//!   not started by the executor stays ready for a cancel replayed later); `t` must be ready,
//!   which holds exactly when every dependency of `t` already succeeded in the replay (the
//!   history's order extends happens-before, so "never before its dependencies succeeded");
//! * `Finish(t, state)`: `complete` or `fail` in the model must be `Applied`, and `state`
//!   must be what `t`'s body does;
//! * `Skip(t, state)`: the model must already hold `t` in `state` (blocked or cancelled),
//!   and a cancelled `t` with the executor's reason (`Closed` only after the `Close`);
//! * `Grow(g, parent)` (SPEC A8, a running task adds a successor): the model's
//!   `submit_successor_with_optional` from the same running parent, with the same list, must
//!   be accepted (never after the `Close`: the model refuses), the parent adds its successors
//!   in the case's order, and every task that ran must have added all its successors, or
//!   finished after the `Close` (which refuses the rest: the task goes on with its body);
//! * `Close` (EXECUTOR.close): the model's `close()` at that point: every task pending or
//!   ready in the model is cancelled (reason `Closed`), a blocked one stays blocked, so every
//!   later event is checked against the closed model: a `Start` after it is refused (the
//!   model runs nothing), a `Skip` must find its task blocked or cancelled there, a cancel's
//!   answer must be the closed model's. The close must be the case's ([`Case::close`]):
//!   none without one, once with one; one made by task `t` lies between `t`'s `Start` and
//!   its `Finish` (and only if `t` ran), one made before the start before every decision;
//! * every task starts or is skipped exactly once;
//! * at the end, every task's final state, cancel reason and error equal the model's;
//! * a blocked task's cause is the executor's documented rule (the root cause of its first
//!   dependency in list order lost before the close: failed before the `Close`, cancelled
//!   by the user, or blocked), computed here independently, and names a task the model
//!   holds as failed or cancelled.

use lockstep_contract::{
    CallbackOutcome, CancelOutcome, CancelReason, Generation, SubmitOptions, TaskState,
};
use lockstep_dag::executor::{ExecEvent, GraphRun, GrowError, RunCancel, RunOutcome, TaskContext};
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
    /// Tasks cancelled before the run starts, in this order.
    pub cancelled: Vec<u32>,
    /// `cancels[t]`: the tasks of the graph that task `t` of the graph cancels when it runs
    /// (before it adds its successors and does its body), in order; shorter than `deps`
    /// means none for the rest. Only in runs made by [`task_fn_cancelling`].
    pub cancels: Vec<Vec<u32>>,
    /// `grows[t]`: the successors task `t` of the graph adds when it runs (SPEC A8, graphs
    /// that grow), in order, before its body's outcome; shorter than `deps` means none for
    /// the rest. Successor `k` of `t` has id [`Case::grown_id`]`(t, k)`.
    pub grows: Vec<Vec<Grow>>,
    /// Whether and when the run is closed ([`GraphRun::close`], EXECUTOR.close).
    pub close: Close,
}

/// When a run of a [`Case`] is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Close {
    /// Never.
    #[default]
    Never,
    /// Before the start, after the cancels before the start ([`Case::prepare`]): every task
    /// not cancelled by them is cancelled (reason `Closed`) or blocked by them.
    BeforeStart,
    /// By task `t` of the graph when it runs ([`TaskContext::close_run`]), after its cancels
    /// ([`Case::cancels`]) and before it adds its successors (which the closed run then
    /// refuses: the task goes on with its body), racing the other workers' decisions and
    /// ends. Only in runs made by [`task_fn`] or [`task_fn_cancelling`].
    ByTask(u32),
    /// By the thread that started the run, right after the start ([`Case::started`]),
    /// racing the run (or by another thread: the outcome [`check`]ed must then be taken
    /// after the close, which may come after the run's end).
    AfterStart,
}

/// A successor that a running task adds ([`Case::grows`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grow {
    /// Its dependencies after the parent, in list order: ids of the graph or of earlier
    /// successors of the same parent.
    pub deps: Vec<u32>,
    /// How many of `deps` (its tail) are optional.
    pub optional: usize,
    /// What it does when it runs.
    pub body: Body,
    /// Its pool draw when the run has pools: 0 none, `p` pool `p - 1`.
    pub pool: u8,
}

/// The first id of the successors ([`Case::grown_id`]); graphs have fewer tasks.
pub const GROWN_BASE: u32 = 1000;
/// At most this many successors per task.
pub const GROWN_PER_TASK: u32 = 8;

impl Case {
    /// The `(id, required dependencies, optional dependencies)` triples of the graph, in
    /// index order (for `FrozenGraph::with_optional`).
    pub fn tasks(&self) -> impl Iterator<Item = (u32, Vec<u32>, Vec<u32>)> + '_ {
        self.deps.iter().enumerate().map(|(t, d)| {
            let split = d.len() - self.optional_count(t).min(d.len());
            (t as u32, d[..split].to_vec(), d[split..].to_vec())
        })
    }

    /// The id of successor `k` of task `t`.
    pub fn grown_id(t: u32, k: usize) -> u32 {
        GROWN_BASE + t * GROWN_PER_TASK + k as u32
    }

    /// The successor with id `id`, if it is one of the case's.
    pub fn grow(&self, id: u32) -> Option<&Grow> {
        let i = id.checked_sub(GROWN_BASE)?;
        let (t, k) = (i / GROWN_PER_TASK, i % GROWN_PER_TASK);
        self.grows.get(t as usize)?.get(k as usize)
    }

    /// What task `id` (of the graph or a successor) does.
    ///
    /// # Panics
    /// If `id` is neither.
    pub fn body(&self, id: u32) -> Body {
        match self.grow(id) {
            Some(g) => g.body,
            None => self.bodies[id as usize],
        }
    }

    /// The successors task `t` adds, with their ids.
    pub fn grows_of(&self, t: u32) -> impl Iterator<Item = (u32, &Grow)> + '_ {
        self.grows
            .get(t as usize)
            .into_iter()
            .flatten()
            .enumerate()
            .map(move |(k, g)| (Self::grown_id(t, k), g))
    }

    /// How many of task `t`'s dependencies are optional.
    fn optional_count(&self, t: usize) -> usize {
        self.optional.get(t).copied().unwrap_or(0)
    }

    /// What a run of the case does before its start: the cancels of [`Case::cancelled`], in
    /// order, then the close if it is [`Close::BeforeStart`].
    pub fn prepare(&self, run: &GraphRun<u32>) {
        for &c in &self.cancelled {
            run.cancel_index(c);
        }
        if self.close == Close::BeforeStart {
            run.close();
        }
    }

    /// What a run of the case does right after its start: the close if it is
    /// [`Close::AfterStart`].
    pub fn started(&self, run: &GraphRun<u32>) {
        if self.close == Close::AfterStart {
            run.close();
        }
    }
}

/// The task function of a run of `case`: task `id` first closes the run if the case says so
/// ([`Close::ByTask`]), then adds its successors ([`Case::grows`]; `pool_draws` when the run
/// has pools), then does its [`Body`]. A successor refused because the run is closed ends
/// the additions (the task goes on with its body, and [`check`] finds the `Close` before
/// its `Finish`); one refused for another reason fails the task with the refusal, which
/// [`check`] then reports.
pub fn task_fn(
    case: &Case,
    with_pools: bool,
) -> impl Fn(&TaskContext<'_, u32>) -> Result<(), String> + Send + Sync + 'static + use<> {
    task_fn_cancelling(case, with_pools, &Cancels::default())
}

/// The run a task function cancels in (set once the run is made), and the answers of those
/// cancels: `(canceller, target, answer)`, in the order they were made.
#[derive(Clone, Default)]
pub struct Cancels {
    /// The run, set after it is made (the task function holds it: the run's function then
    /// holds the run, a cycle that [`Cancels::clear`] breaks).
    pub run: std::sync::Arc<std::sync::Mutex<Option<GraphRun<u32>>>>,
    /// Every cancel made by a running task, with its answer.
    pub answers: std::sync::Arc<std::sync::Mutex<Vec<(u32, u32, RunCancel)>>>,
}

impl Cancels {
    /// Sets the run the tasks cancel in.
    ///
    /// # Panics
    /// If the lock is poisoned.
    pub fn set(&self, run: &GraphRun<u32>) {
        *self.run.lock().expect("lock") = Some(run.clone());
    }

    /// Drops the run (after its end), and returns the answers.
    ///
    /// # Panics
    /// If the lock is poisoned.
    pub fn clear(&self) -> Vec<(u32, u32, RunCancel)> {
        self.run.lock().expect("lock").take();
        self.answers.lock().expect("lock").clone()
    }
}

/// [`task_fn`] where task `t` of the graph first cancels the tasks of [`Case::cancels`] in
/// the run set in `cancels`, recording the answers there (before it closes the run, if
/// it is the case's [`Close::ByTask`]).
pub fn task_fn_cancelling(
    case: &Case,
    with_pools: bool,
    cancels: &Cancels,
) -> impl Fn(&TaskContext<'_, u32>) -> Result<(), String> + Send + Sync + 'static + use<> {
    let case = case.clone();
    let cancels = cancels.clone();
    move |ctx| {
        let id = *ctx.id();
        let targets = case.cancels.get(id as usize).filter(|_| id < GROWN_BASE);
        if let Some(targets) = targets.filter(|t| !t.is_empty()) {
            let run = cancels.run.lock().expect("lock").clone();
            let run = run.ok_or("the run was not set")?;
            for &x in targets {
                let answer = run.cancel_index(x);
                cancels.answers.lock().expect("lock").push((id, x, answer));
            }
        }
        if case.close == Close::ByTask(id) && id < GROWN_BASE {
            ctx.close_run();
        }
        for (g, spec) in case.grows_of(id) {
            let split = spec.deps.len() - spec.optional.min(spec.deps.len());
            let pool = (with_pools && spec.pool > 0).then(|| u32::from(spec.pool) - 1);
            match ctx.add_successor_with(
                g,
                spec.deps[..split].iter().copied(),
                spec.deps[split..].iter().copied(),
                pool,
            ) {
                Ok(_) => {}
                // Closed meanwhile (by this task or another): no more successors.
                Err(GrowError::Closed) => break,
                Err(e) => return Err(format!("successor {g} of {id} refused: {e}")),
            }
        }
        case.body(id).run(id)
    }
}

/// How many tasks the run of `case` may add: room for every successor of the case.
pub fn growth_room(case: &Case) -> u32 {
    case.grows.iter().map(Vec::len).sum::<usize>() as u32
}

/// The expected root cause of each task (by index) under the executor's rule, given final
/// states and the dependency lists the outcome reports (checked against the case), and
/// which failures came before the close (`failed_open`): only a loss before the close
/// blocks (EXECUTOR.cancel-blocked): a failure before it, a cancel by the user (none after
/// it), a blocked task; never a task cancelled by the close, nor a failure after it.
fn expected_causes(out: &RunOutcome<u32>, failed_open: &dyn Fn(u32) -> bool) -> Vec<Option<u32>> {
    let n = out.len();
    let mut cause: Vec<Option<u32>> = vec![None; n];
    // Dependencies have lower indices (the graph's by construction, an added task's were
    // known when it was added), so index order is a topological order.
    for t in 0..n {
        if out.state(t as u32) != TaskState::Blocked {
            continue;
        }
        let deps = out.dependencies(t as u32);
        let required = &deps[..deps.len() - out.optional_dependencies(t as u32).len()];
        // A8: only required dependencies block.
        cause[t] = required.iter().find_map(|&d| match out.state(d) {
            TaskState::Failed if failed_open(d) => Some(d),
            TaskState::Cancelled if out.cancelled_by(d) == Some(CancelReason::User) => Some(d),
            TaskState::Blocked => cause[d as usize],
            _ => None,
        });
    }
    cause
}

/// The close in the history is the case's (EXECUTOR.close): none without one, one with
/// one; the close of a task between its `Start` and its `Finish` (none if it did not run),
/// the close before the start before every decision and addition.
fn check_close(
    case: &Case,
    history: &[ExecEvent],
    closed_at: Option<usize>,
    started_at: &[Option<usize>],
    finished_at: &[Option<usize>],
) -> Result<(), String> {
    match (case.close, closed_at) {
        (Close::Never, None) | (Close::AfterStart, Some(_)) => Ok(()),
        (Close::Never, Some(c)) => Err(format!("event {c}: a close in a case that never closes")),
        (Close::BeforeStart | Close::AfterStart, None) => Err(format!(
            "the case closes the run ({:?}), the history has no close",
            case.close
        )),
        (Close::BeforeStart, Some(c)) => match history[..c]
            .iter()
            .position(|e| !matches!(e, ExecEvent::Cancel { .. }))
        {
            Some(i) => Err(format!(
                "event {i} ({:?}) came before the close made before the start (event {c})",
                history[i]
            )),
            None => Ok(()),
        },
        (Close::ByTask(t), closed) => {
            let t = t as usize;
            let (start, finish) = (
                started_at.get(t).copied().flatten(),
                finished_at.get(t).copied().flatten(),
            );
            match (start, closed) {
                (None, None) => Ok(()),
                (None, Some(c)) => Err(format!(
                    "event {c}: closed, but task {t}, the closer, never started"
                )),
                (Some(s), None) => Err(format!(
                    "event {s}: task {t} started and closes the run, the history has no close"
                )),
                (Some(s), Some(c)) if s < c && finish.is_some_and(|f| c < f) => Ok(()),
                (Some(s), Some(c)) => Err(format!(
                    "event {c}: the close of task {t}, which started at event {s} and finished at {finish:?}"
                )),
            }
        }
    }
}

/// Checks `out` (a run of `case` made with a recorded history) as the module docs say.
///
/// # Errors
/// A description of the first rule broken.
pub fn check(case: &Case, out: &RunOutcome<u32>) -> Result<(), String> {
    let n = case.deps.len();
    if out.graph().len() != n {
        return Err(format!(
            "the outcome's graph has {} tasks, the case {n}",
            out.graph().len()
        ));
    }
    let history = out.history().ok_or("the run recorded no history")?;
    let mut m: SchedulerModel<u32> = SchedulerModel::new(usize::MAX);
    for (t, deps, optional) in case.tasks() {
        m.submit_with_optional(t, deps, optional, SubmitOptions::default())
            .map_err(|e| format!("model submit {t}: {e}"))?;
    }
    m.start().map_err(|e| format!("model start: {e}"))?;
    // The cancellations before the start are in the history, as every other.
    for &c in &case.cancelled {
        if !history
            .iter()
            .any(|e| matches!(*e, ExecEvent::Cancel { task, .. } if task == c))
        {
            return Err(format!(
                "the cancel of {c} before the start is not in the history"
            ));
        }
    }
    let g1 = Generation::FIRST;
    let total = out.len();
    let mut decided = vec![0u32; total];
    let mut added = 0usize;
    // EXECUTOR.close: where the close is in the history, and where each task started and
    // finished, and how many successors each task of the graph added.
    let mut closed_at: Option<usize> = None;
    let mut started_at: Vec<Option<usize>> = vec![None; total];
    let mut finished_at: Vec<Option<usize>> = vec![None; total];
    let mut grown_by = vec![0usize; n];
    for (i, e) in history.iter().enumerate() {
        match *e {
            ExecEvent::Close => {
                if closed_at.is_some() {
                    return Err(format!("event {i}: the run closed a second time"));
                }
                closed_at = Some(i);
                // The model's close: what is pending or ready is cancelled (reason
                // `Closed`), what it holds blocked stays blocked (EXECUTOR.cancel-blocked).
                m.close();
            }
            ExecEvent::Grow { task, parent, .. } => {
                // SPEC A8 graphs that grow: the model accepts the same successor, from the
                // same running parent, with the same list.
                let (id, parent_id) = (*out.id(task), *out.id(parent));
                if task as usize != n + added {
                    return Err(format!("event {i}: added task {id} got index {task}"));
                }
                added += 1;
                let k = case
                    .grows_of(parent_id)
                    .position(|(g, _)| g == id)
                    .ok_or_else(|| {
                        format!("event {i}: task {parent_id} added {id}, not one of its successors")
                    })?;
                // In the case's order (the first refusal by the close ends the additions).
                let before = grown_by.get(parent as usize).copied();
                if before != Some(k) {
                    return Err(format!(
                        "event {i}: task {parent_id} added its successor {k} ({id}) after {before:?} others"
                    ));
                }
                grown_by[parent as usize] += 1;
                if m.is_closed() {
                    return Err(format!(
                        "event {i}: task {parent_id} added {id} after the close (the model refuses it)"
                    ));
                }
                let spec = &case.grows[parent_id as usize][k];
                let split = spec.deps.len() - spec.optional.min(spec.deps.len());
                let listed: Vec<u32> = out.dependencies(task).iter().map(|&d| *out.id(d)).collect();
                let mut want = vec![parent_id];
                want.extend(&spec.deps);
                if listed != want
                    || out.optional_dependencies(task).len() != spec.deps.len() - split
                {
                    return Err(format!(
                        "event {i}: {id} lists {listed:?}, the case {want:?}"
                    ));
                }
                m.submit_successor_with_optional(
                    &parent_id,
                    g1,
                    id,
                    spec.deps[..split].to_vec(),
                    spec.deps[split..].to_vec(),
                    SubmitOptions::default(),
                )
                .map_err(|e| {
                    format!("event {i}: the model refused successor {id} of {parent_id}: {e}")
                })?;
            }
            ExecEvent::Start { task, .. } => {
                decided[task as usize] += 1;
                started_at[task as usize] = Some(i);
                let id = *out.id(task);
                if m.is_closed() {
                    return Err(format!(
                        "event {i}: task {id} started after the close (the model holds it {:?} and runs nothing)",
                        m.state(&id)
                    ));
                }
                // Exactly this task is claimed (not every ready one, as `ready` would: a
                // cancel replayed later must find a ready task not yet started ready).
                let claimed = m.run_ready(&[id]);
                let s = m.state(&id);
                if claimed.is_err() || s != Some(TaskState::Running) {
                    return Err(format!(
                        "event {i}: task {id} started while the model holds it {s:?} (a dependency had not succeeded)"
                    ));
                }
            }
            ExecEvent::Finish { task, state, .. } => {
                finished_at[task as usize] = Some(i);
                let id = *out.id(task);
                let body = case.body(id);
                let want = if body == Body::Succeed {
                    TaskState::Succeeded
                } else {
                    TaskState::Failed
                };
                if state != want {
                    return Err(format!(
                        "event {i}: task {id} finished {state}, its body gives {want}"
                    ));
                }
                let r = if state == TaskState::Succeeded {
                    m.complete(&id, g1)
                } else {
                    m.fail(&id, g1, body.error(id).unwrap_or_default())
                };
                if !matches!(r, Ok(CallbackOutcome::Applied(_))) {
                    return Err(format!(
                        "event {i}: the model refused the finish of {id}: {r:?}"
                    ));
                }
            }
            ExecEvent::Cancel { task, answer } => {
                let id = *out.id(task);
                let model = m
                    .cancel(&id)
                    .map_err(|e| format!("event {i}: model cancel {id}: {e}"))?;
                let same = match (model, answer) {
                    (CancelOutcome::Cancelled(_), RunCancel::Cancelled)
                    | (CancelOutcome::Requested, RunCancel::Requested) => true,
                    (CancelOutcome::AlreadyTerminal(a), RunCancel::AlreadyTerminal(b)) => a == b,
                    _ => false,
                };
                if !same {
                    return Err(format!(
                        "event {i}: cancel of {id} answered {answer:?}, the model {model:?}"
                    ));
                }
            }
            ExecEvent::Skip { task, state, .. } => {
                decided[task as usize] += 1;
                let id = *out.id(task);
                let s = m.state(&id);
                if s != Some(state) {
                    return Err(format!(
                        "event {i}: task {id} skipped as {state}, the model holds {s:?}{}",
                        if m.is_closed() {
                            " (after the close)"
                        } else {
                            ""
                        }
                    ));
                }
                // A cancelled task with the executor's reason: `Closed` only once the model
                // is closed, `User` only if a cancel came first.
                let reason = m.status(&id).and_then(|st| st.cancelled_by);
                if state == TaskState::Cancelled && reason != out.cancelled_by(task) {
                    return Err(format!(
                        "event {i}: task {id} skipped as cancelled ({:?}), the model cancelled it ({reason:?})",
                        out.cancelled_by(task)
                    ));
                }
            }
        }
    }
    if added != out.added() {
        return Err(format!(
            "{added} tasks added in the history, {} in the outcome",
            out.added()
        ));
    }
    // Every task of the graph that ran added all its successors (before its outcome), or
    // fewer if the close came before its finish (the first refusal ends the additions).
    for t in 0..n as u32 {
        let ran = matches!(out.state(t), TaskState::Succeeded | TaskState::Failed);
        let (want, got) = (case.grows_of(t).count(), grown_by[t as usize]);
        let closed_first = matches!(
            (closed_at, finished_at[t as usize]),
            (Some(c), Some(f)) if c < f
        );
        if ran && got != want && !(got < want && closed_first) {
            return Err(format!(
                "task {t} added {got} of its {want} successors, and the run was not closed before its finish"
            ));
        }
        if !ran && got != 0 {
            return Err(format!("task {t} added {got} successors without running"));
        }
    }
    check_close(case, history, closed_at, &started_at, &finished_at)?;
    if let Some(t) = decided.iter().position(|&c| c != 1) {
        return Err(format!(
            "task {} was started or skipped {} times, not once",
            out.id(t as u32),
            decided[t]
        ));
    }
    // A failure is before the close if its `Finish` is (both are recorded under the stop
    // lock, so the history orders them as the executor's `BEFORE_CLOSE` flag does).
    let failed_open = |d: u32| match (closed_at, finished_at.get(d as usize).copied().flatten()) {
        (Some(c), Some(f)) => f < c,
        _ => true,
    };
    let causes = expected_causes(out, &failed_open);
    for t in 0..total as u32 {
        let id = *out.id(t);
        let model = m
            .status(&id)
            .ok_or_else(|| format!("model lost task {id}"))?;
        let ours = out.status(t);
        if (ours.state, &ours.cancelled_by, &ours.error)
            != (model.state, &model.cancelled_by, &model.error)
        {
            return Err(format!("task {id}: executor {ours:?}, model {model:?}"));
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
                "task {id}: executor misses {:?}, model {:?}",
                ours.optional_misses, want
            ));
        }
        if out.cause_index(t) != causes[t as usize] {
            return Err(format!(
                "task {id}: cause {:?}, the first lost dependency in list order gives {:?}",
                out.cause_index(t),
                causes[t as usize]
            ));
        }
        if let Some(c) = causes[t as usize]
            && !matches!(
                m.state(out.id(c)),
                Some(TaskState::Failed | TaskState::Cancelled)
            )
        {
            return Err(format!(
                "task {id}: cause {} is not failed or cancelled in the model",
                out.id(c)
            ));
        }
    }
    Ok(())
}
