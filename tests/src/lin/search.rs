//! The search (Wing & Gong with Lowe's memoisation) and its failure report.

use std::collections::HashSet;
use std::fmt;

use super::{History, SequentialSpec};

/// The default bound on search steps (one step = one entry visited or one backtrack).
pub const DEFAULT_MAX_STEPS: u64 = 50_000_000;

/// How many already-placed overlapping operations a report lists.
const CONTEXT_LINES: usize = 12;

/// A successful check: a witness order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Linearized {
    /// Indexes into [`History::events`], in the order the operations take effect.
    pub order: Vec<usize>,
    /// Search steps used (entries visited plus backtracks).
    pub steps: u64,
    /// Distinct configurations (placed set, model state) explored.
    pub configurations: usize,
}

/// Why a history was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// No order of the operations respects real time and is a run of the model.
    NotLinearizable(Box<Stuck>),
    /// The search used [`Checker::max_steps`] steps without deciding. The report shows the
    /// deepest point reached so far.
    Exhausted {
        /// Steps used.
        steps: u64,
        /// The deepest point reached.
        stuck: Box<Stuck>,
    },
    /// An event has `inv >= resp`: it was not recorded with one counter, before then after.
    Malformed {
        /// Its index in [`History::events`].
        index: usize,
        /// Its thread label.
        thread: usize,
        /// Its invocation index.
        inv: u64,
        /// Its response index.
        resp: u64,
    },
}

/// Where the search got stuck: the deepest point it reached, and the operations around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stuck {
    /// The invariants the history breaks ([`SequentialSpec::rules`]; empty if none named).
    pub rules: &'static str,
    /// Operations in the history.
    pub operations: usize,
    /// Distinct thread labels in the history.
    pub threads: usize,
    /// How many operations the longest accepted order placed.
    pub placed: usize,
    /// The model state after those ([`SequentialSpec::describe`]).
    pub state: String,
    /// The operations that could have taken effect next (every unplaced operation invoked
    /// before the first unplaced response), each with what the model expected instead.
    pub next: Vec<ReportLine>,
    /// Already-placed operations that overlap one of `next` in real time (the ones an
    /// alternative order could have moved), at most a dozen, in placement order.
    pub overlapping: Vec<ReportLine>,
    /// Overlapping placed operations not listed.
    pub more_overlapping: usize,
}

/// One operation in a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportLine {
    /// Index into [`History::events`].
    pub index: usize,
    /// Thread label.
    pub thread: usize,
    /// Invocation index.
    pub inv: u64,
    /// Response index.
    pub resp: u64,
    /// The operation (`Debug`).
    pub op: String,
    /// What the concurrent call returned (`Debug`).
    pub observed: String,
    /// For an operation that could not be placed: what the model returns there instead
    /// (`None` if the model allowed it there but nothing could follow).
    pub expected: Option<String>,
    /// For a placed operation: its position in the order (1-based).
    pub placed_at: Option<usize>,
}

/// A linearizability checker for one specification.
///
/// ```
/// use lockstep_tests::lin::{Checker, Event, Failure, History, SequentialSpec};
/// struct Counter;
/// impl SequentialSpec for Counter {
///     type State = u64;
///     type Op = ();
///     type Ret = u64;
///     fn apply(&self, n: &mut u64, _: &()) -> u64 { *n += 1; *n }
/// }
/// // Twenty overlapping increments returning 20, 19, ..., 1: one order works; memoisation
/// // finds it without trying 20! orders.
/// let h = History::new((0..20).map(|i| Event { thread: i, op: (), inv: i as u64, resp: 100 + i as u64, ret: 20 - i as u64 }).collect());
/// let ok = Checker::new(&Counter).check(&0, &h).unwrap();
/// assert_eq!(ok.order.len(), 20);
/// assert!(matches!(Checker::new(&Counter).max_steps(5).check(&0, &h), Err(Failure::Exhausted { .. })));
/// ```
#[derive(Debug)]
pub struct Checker<'a, S> {
    spec: &'a S,
    max_steps: u64,
}

/// Checks `history` against `spec` from `init` with the default step bound
/// ([`DEFAULT_MAX_STEPS`]); see [`Checker::check`].
///
/// # Errors
/// As [`Checker::check`].
pub fn check<S: SequentialSpec>(
    spec: &S,
    init: &S::State,
    history: &History<S::Op, S::Ret>,
) -> Result<Linearized, Failure> {
    Checker::new(spec).check(init, history)
}

const NIL: usize = usize::MAX;

impl<'a, S: SequentialSpec> Checker<'a, S> {
    /// A checker with the default step bound.
    pub fn new(spec: &'a S) -> Self {
        Checker {
            spec,
            max_steps: DEFAULT_MAX_STEPS,
        }
    }

    /// Gives up (with [`Failure::Exhausted`]) after `steps` search steps.
    pub fn max_steps(mut self, steps: u64) -> Self {
        self.max_steps = steps;
        self
    }

    /// Searches for an order of `history`'s operations that respects real time and in which
    /// the model, starting from `init`, returns every recorded result.
    ///
    /// # Errors
    /// [`Failure::Malformed`] for an event with `inv >= resp`; [`Failure::NotLinearizable`]
    /// when no such order exists; [`Failure::Exhausted`] when the step bound ran out first.
    ///
    /// # Complexity
    /// O(n log n) to sort plus the search: O(n) steps when operations rarely overlap, at most
    /// O(2^w * n) configurations per model state for `w` mutually overlapping operations.
    pub fn check(
        &self,
        init: &S::State,
        history: &History<S::Op, S::Ret>,
    ) -> Result<Linearized, Failure> {
        let events = history.events();
        let n = events.len();
        for (index, e) in events.iter().enumerate() {
            if e.inv >= e.resp {
                return Err(Failure::Malformed {
                    index,
                    thread: e.thread,
                    inv: e.inv,
                    resp: e.resp,
                });
            }
        }

        // Entries 0..n are calls (entry i is the call of event i), n..2n returns (entry n + i
        // is the return of event i); entry 2n is the list head. Real-time order: by time,
        // calls before returns at equal times (equal times only occur in hand-made histories;
        // they are then treated as overlapping).
        let head = 2 * n;
        let time = |x: usize| {
            if x < n {
                (events[x].inv, 0u8)
            } else {
                (events[x - n].resp, 1u8)
            }
        };
        let mut sorted: Vec<usize> = (0..2 * n).collect();
        sorted.sort_by_key(|&x| (time(x), x));
        let mut next = vec![NIL; 2 * n + 1];
        let mut prev = vec![NIL; 2 * n + 1];
        let mut last = head;
        for &x in &sorted {
            next[last] = x;
            prev[x] = last;
            last = x;
        }

        let words = n.div_ceil(64);
        let mut placed = vec![0u64; words];
        let mut memo: HashSet<(Vec<u64>, S::State)> = HashSet::new();
        // The placed calls with the state before each (the explicit search stack).
        let mut stack: Vec<(usize, S::State)> = Vec::new();
        let mut best: Vec<usize> = Vec::new();
        let mut state = init.clone();
        let mut entry = next[head];
        let mut steps = 0u64;

        while next[head] != NIL {
            steps += 1;
            if steps > self.max_steps {
                return Err(Failure::Exhausted {
                    steps: steps - 1,
                    stuck: Box::new(self.stuck(init, history, &best)),
                });
            }
            debug_assert!(
                entry != NIL,
                "a call's return always follows it in the list"
            );
            if entry < n {
                let i = entry;
                if let Ok(after) = self.spec.step(&state, &events[i].op, &events[i].ret) {
                    placed[i / 64] |= 1 << (i % 64);
                    if memo.insert((placed.clone(), after.clone())) {
                        stack.push((i, std::mem::replace(&mut state, after)));
                        lift(&mut next, &mut prev, i, n + i);
                        if stack.len() > best.len() {
                            best.clear();
                            best.extend(stack.iter().map(|(c, _)| *c));
                        }
                        entry = next[head];
                        continue;
                    }
                    placed[i / 64] &= !(1 << (i % 64));
                }
                entry = next[i];
            } else {
                // A return whose call could not be placed before it: backtrack.
                let Some((i, before)) = stack.pop() else {
                    return Err(Failure::NotLinearizable(Box::new(
                        self.stuck(init, history, &best),
                    )));
                };
                placed[i / 64] &= !(1 << (i % 64));
                state = before;
                unlift(&mut next, &mut prev, i, n + i);
                entry = next[i];
            }
        }
        Ok(Linearized {
            order: stack.into_iter().map(|(i, _)| i).collect(),
            steps,
            configurations: memo.len(),
        })
    }

    /// The report for the deepest point: replays `best` (a legal order) to get the state,
    /// then lists the operations that could come next and the placed ones overlapping them.
    fn stuck(&self, init: &S::State, history: &History<S::Op, S::Ret>, best: &[usize]) -> Stuck {
        let events = history.events();
        let mut state = init.clone();
        for &i in best {
            state = self
                .spec
                .step(&state, &events[i].op, &events[i].ret)
                .unwrap_or_else(|_| {
                    panic!("SequentialSpec::step is not a function of (state, op, result)")
                });
        }
        let mut is_placed = vec![false; events.len()];
        for &i in best {
            is_placed[i] = true;
        }
        let first_resp = (0..events.len())
            .filter(|&i| !is_placed[i])
            .map(|i| events[i].resp)
            .min()
            .unwrap_or(u64::MAX);
        let mut candidates: Vec<usize> = (0..events.len())
            .filter(|&i| !is_placed[i] && events[i].inv <= first_resp)
            .collect();
        candidates.sort_by_key(|&i| (events[i].inv, i));
        let line = |i: usize| ReportLine {
            index: i,
            thread: events[i].thread,
            inv: events[i].inv,
            resp: events[i].resp,
            op: format!("{:?}", events[i].op),
            observed: format!("{:?}", events[i].ret),
            expected: None,
            placed_at: None,
        };
        let next: Vec<ReportLine> = candidates
            .iter()
            .map(|&i| ReportLine {
                expected: self
                    .spec
                    .step(&state, &events[i].op, &events[i].ret)
                    .err()
                    .map(|e| format!("{e:?}")),
                ..line(i)
            })
            .collect();
        let mut overlapping: Vec<ReportLine> = best
            .iter()
            .enumerate()
            .filter(|&(_, &j)| {
                candidates
                    .iter()
                    .any(|&c| events[j].resp > events[c].inv && events[c].resp > events[j].inv)
            })
            .map(|(k, &j)| ReportLine {
                placed_at: Some(k + 1),
                ..line(j)
            })
            .collect();
        let more_overlapping = overlapping.len().saturating_sub(CONTEXT_LINES);
        // Keep the latest placed ones: nearest to the stuck point.
        overlapping.drain(..more_overlapping);
        let mut threads: Vec<usize> = events.iter().map(|e| e.thread).collect();
        threads.sort_unstable();
        threads.dedup();
        Stuck {
            rules: self.spec.rules(),
            operations: events.len(),
            threads: threads.len(),
            placed: best.len(),
            state: self.spec.describe(&state),
            next,
            overlapping,
            more_overlapping,
        }
    }
}

/// Removes call entry `c` and its return entry `r` from the list.
fn lift(next: &mut [usize], prev: &mut [usize], c: usize, r: usize) {
    for x in [c, r] {
        next[prev[x]] = next[x];
        if next[x] != NIL {
            prev[next[x]] = prev[x];
        }
    }
}

/// Puts back what [`lift`] removed (in reverse order; the removed entries kept their links).
fn unlift(next: &mut [usize], prev: &mut [usize], c: usize, r: usize) {
    for x in [r, c] {
        next[prev[x]] = x;
        if next[x] != NIL {
            prev[next[x]] = x;
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Failure::NotLinearizable(stuck) | Failure::Exhausted { stuck, .. } = self
            && !stuck.rules.is_empty()
        {
            writeln!(f, "{}", crate::report::header(stuck.rules))?;
        }
        match self {
            Failure::NotLinearizable(stuck) => {
                writeln!(
                    f,
                    "not linearizable: {} operations from {} threads; the longest order the \
                     model accepts places {} of them",
                    stuck.operations, stuck.threads, stuck.placed
                )?;
                stuck.fmt(f)
            }
            Failure::Exhausted { steps, stuck } => {
                writeln!(
                    f,
                    "undecided: the linearizability search stopped after {steps} steps \
                     (Checker::max_steps); {} operations from {} threads, at most {} placed",
                    stuck.operations, stuck.threads, stuck.placed
                )?;
                stuck.fmt(f)
            }
            Failure::Malformed {
                index,
                thread,
                inv,
                resp,
            } => write!(
                f,
                "malformed history: event {index} (t{thread}) has invocation {inv} and \
                 response {resp}; the invocation must come first"
            ),
        }
    }
}

impl fmt::Display for Stuck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "model state after them: {}", self.state)?;
        writeln!(
            f,
            "operations that could take effect next, each refused by the model:"
        )?;
        write_lines(f, &self.next)?;
        if !self.overlapping.is_empty() {
            writeln!(f, "overlapping them, already placed (in placement order):")?;
            if self.more_overlapping > 0 {
                writeln!(f, "  ({} earlier ones not shown)", self.more_overlapping)?;
            }
            write_lines(f, &self.overlapping)?;
        }
        Ok(())
    }
}

fn write_lines(f: &mut fmt::Formatter<'_>, lines: &[ReportLine]) -> fmt::Result {
    let head = |l: &ReportLine| {
        format!(
            "t{} [{}, {}] {} -> {}",
            l.thread, l.inv, l.resp, l.op, l.observed
        )
    };
    let width = lines
        .iter()
        .map(|l| head(l).chars().count())
        .max()
        .unwrap_or(0);
    for l in lines {
        let tail = match (&l.expected, l.placed_at) {
            (Some(e), _) => format!("model: {e}"),
            (None, Some(k)) => format!("placed #{k}"),
            (None, None) => "model: allowed here, but nothing can follow".to_string(),
        };
        writeln!(f, "  {:<width$}   {tail}", head(l))?;
    }
    Ok(())
}
