//! The single-threaded whole runs shared by the graph bench (`graph.rs`) and the profiling
//! example (`examples/pull_profile.rs`): the pull API with single calls, with the batch
//! forms and with the fused `complete_and_claim`, and the `kahn_from_edges` floor.

#![allow(dead_code, reason = "each includer uses a part of this module")]

use std::hint::black_box;

use lockstep_dag::TaskScheduler;

use crate::shapes::Shape;

/// `lockstep_pull`: one `submit` per task, then `ready_at_most(1024)` and one `complete` per
/// claim until nothing is left. Returns how many tasks completed.
pub fn pull(shape: &Shape) -> usize {
    let s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
    for (id, deps) in shape.tasks_iter() {
        s.submit(id, deps, ()).expect("valid graph");
    }
    let mut done = 0;
    loop {
        let claims = s.ready_at_most(1024).expect("acyclic");
        if claims.is_empty() {
            break;
        }
        for c in claims {
            black_box(c.id);
            s.complete(&c.id, c.generation).expect("running");
            done += 1;
        }
    }
    done
}

/// `lockstep_pull_batch`: one `submit_batch`, then `ready_into(1024, buffer)` and
/// `complete_batch` until nothing is left (both buffers reused). Returns how many completed.
pub fn pull_batch(shape: &Shape) -> usize {
    let s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
    let mut generations = Vec::with_capacity(shape.tasks());
    s.submit_batch(
        shape.tasks_iter().map(|(id, deps)| (id, deps, ())),
        &mut generations,
    )
    .expect("valid graph");
    let mut claims = Vec::with_capacity(1024);
    let mut done: Vec<(u32, lockstep_dag::Generation)> = Vec::with_capacity(1024);
    let mut total = 0;
    loop {
        claims.clear();
        if s.ready_into(1024, &mut claims).expect("acyclic") == 0 {
            break;
        }
        done.clear();
        done.extend(claims.drain(..).map(|c| (black_box(c.id), c.generation)));
        let mut outcome = lockstep_dag::BatchOutcome::default();
        s.complete_batch(&done, &mut outcome).expect("running");
        total += outcome.applied;
    }
    total
}

/// `lockstep_pull_fused`: one `submit_batch`, then `complete_and_claim(done, .., 1024,
/// buffer)` until it claims nothing: each round reports the previous round's claims and takes
/// the next ones in one critical section (both buffers reused). Returns how many completed.
pub fn pull_fused(shape: &Shape) -> usize {
    let s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
    let mut generations = Vec::with_capacity(shape.tasks());
    s.submit_batch(
        shape.tasks_iter().map(|(id, deps)| (id, deps, ())),
        &mut generations,
    )
    .expect("valid graph");
    let mut claims: Vec<lockstep_dag::Claim<u32, ()>> = Vec::with_capacity(1024);
    let mut done: Vec<(u32, lockstep_dag::Generation)> = Vec::with_capacity(1024);
    let mut outcome = lockstep_dag::BatchOutcome::default();
    loop {
        done.clear();
        done.extend(claims.drain(..).map(|c| (black_box(c.id), c.generation)));
        if s.complete_and_claim(&done, &mut outcome, 1024, &mut claims)
            .expect("running, acyclic")
            == 0
        {
            break;
        }
    }
    outcome.applied
}

/// `lockstep_pull_exclusive`: the scheduler borrowed exclusively (no lock): one
/// `submit_batch`, then `finish_and_claim(claims, .., 1024)` until it claims nothing: each
/// round completes the previous round's claims, taking them back, and claims the next ones
/// into the same buffer. Returns how many completed.
pub fn pull_exclusive(shape: &Shape) -> usize {
    let mut s: TaskScheduler<u32> = TaskScheduler::new(usize::MAX);
    let mut x = s.exclusive();
    let mut generations = Vec::with_capacity(shape.tasks());
    x.submit_batch(
        shape.tasks_iter().map(|(id, deps)| (id, deps, ())),
        &mut generations,
    )
    .expect("valid graph");
    let mut claims: Vec<lockstep_dag::Claim<u32, ()>> = Vec::with_capacity(1024);
    let mut outcome = lockstep_dag::BatchOutcome::default();
    while x
        .finish_and_claim(&mut claims, &mut outcome, 1024)
        .expect("running, acyclic")
        > 0
    {
        for c in &claims {
            black_box(c.id);
        }
    }
    outcome.applied
}

/// Kahn's algorithm from the `(id, deps)` list: indegrees and the reverse CSR built in two
/// passes over the input, then one decrement per edge.
pub fn kahn_from_edges(shape: &Shape) -> usize {
    let n = shape.tasks();
    let mut indegree = vec![0u32; n];
    let mut off = vec![0u32; n + 1];
    let mut edges = 0usize;
    for (t, deps) in shape.tasks_iter() {
        for d in deps {
            indegree[t as usize] += 1;
            off[d as usize] += 1;
            edges += 1;
        }
    }
    let mut sum = 0u32;
    for o in off.iter_mut() {
        sum += *o;
        *o = sum;
    }
    let mut rev = vec![0u32; edges];
    for (t, deps) in shape.tasks_iter() {
        for d in deps {
            let o = &mut off[d as usize];
            *o -= 1;
            rev[*o as usize] = t;
        }
    }
    let mut stack: Vec<u32> = (0..n as u32)
        .filter(|&t| indegree[t as usize] == 0)
        .collect();
    let mut done = 0;
    while let Some(t) = stack.pop() {
        black_box(t);
        done += 1;
        for &w in &rev[off[t as usize] as usize..off[t as usize + 1] as usize] {
            let c = &mut indegree[w as usize];
            *c -= 1;
            if *c == 0 {
                stack.push(w);
            }
        }
    }
    done
}
