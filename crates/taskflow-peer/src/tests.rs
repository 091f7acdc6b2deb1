use super::*;

/// A small random graph whose dependencies all have lower indices (splitmix64-driven, as
/// the benches' random shape).
fn random_csr(n: usize, seed: u64) -> (Vec<u32>, Vec<u32>) {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut offsets = vec![0u32];
    let mut deps = Vec::new();
    for t in 0..n {
        for _ in 0..t.min(3) {
            let d = (next() % t as u64) as u32;
            if !deps[*offsets.last().unwrap() as usize..].contains(&d) {
                deps.push(d);
            }
        }
        offsets.push(deps.len() as u32);
    }
    (offsets, deps)
}

#[test]
fn the_input_is_checked_before_anything_is_built() {
    assert_eq!(
        TaskflowGraph::new(&[0], &[], 0).unwrap_err(),
        Error::NoWorkers
    );
    assert_eq!(
        TaskflowGraph::new(&[], &[], 1).unwrap_err(),
        Error::BadOffsets { at: 0, deps: 0 }
    );
    assert_eq!(
        TaskflowGraph::new(&[1, 1], &[0], 1).unwrap_err(),
        Error::BadOffsets { at: 0, deps: 1 }
    );
    // Decreasing, and running past the end of `deps`.
    assert_eq!(
        TaskflowGraph::new(&[0, 0, 1, 0], &[0], 1).unwrap_err(),
        Error::BadOffsets { at: 3, deps: 1 }
    );
    assert_eq!(
        TaskflowGraph::new(&[0, 0, 2], &[0], 1).unwrap_err(),
        Error::BadOffsets { at: 2, deps: 1 }
    );
    // Not ending at `deps.len()`: a dependency nobody owns.
    assert_eq!(
        TaskflowGraph::new(&[0, 0, 1], &[0, 0], 1).unwrap_err(),
        Error::BadOffsets { at: 2, deps: 2 }
    );
    // A self-loop and a forward edge would make a run wait forever.
    assert_eq!(
        TaskflowGraph::new(&[0, 0, 1], &[1], 1).unwrap_err(),
        Error::NotTopological {
            task: 1,
            dependency: 1
        }
    );
    assert_eq!(
        TaskflowGraph::new(&[0, 1, 1], &[1], 1).unwrap_err(),
        Error::NotTopological {
            task: 0,
            dependency: 1
        }
    );
}

#[test]
fn repeated_and_too_many_dependencies_are_refused() {
    assert_eq!(
        TaskflowGraph::new(&[0, 0, 0, 3], &[0, 1, 0], 1).unwrap_err(),
        Error::DuplicateDependency {
            task: 2,
            dependency: 0
        }
    );
    // The same dependency in two tasks' lists is not a repeat.
    assert!(matches!(
        TaskflowGraph::new(&[0, 0, 1, 2], &[0, 0], 1),
        Ok(_) | Err(Error::NotBuilt)
    ));
    // Taskflow's limit, tried with a small one (the real one needs 2^28 entries).
    assert_eq!(
        check_csr(&[0, 0, 1, 2, 4], &[0, 0, 0, 2], 1).unwrap_err(),
        Error::TooManyDependencies { task: 3, count: 2 }
    );
    assert_eq!(check_csr(&[0, 0, 1, 2, 4], &[0, 0, 0, 2], 2), Ok(()));
}

/// Benches may keep a graph in a struct that crosses threads: the type is `Send` and `Sync`
/// in every build (without Taskflow it holds nothing).
#[test]
fn the_graph_type_is_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<TaskflowGraph>();
}

/// The empty graph builds and runs (nothing to run).
#[cfg(taskflow)]
#[test]
fn the_empty_graph_runs() {
    let mut g = TaskflowGraph::counting(&[0], &[], 2).expect("built");
    g.run().expect("ran");
    assert_eq!(g.order(), Some(vec![]));
}

#[test]
fn a_valid_graph_is_built_exactly_when_taskflow_is_compiled_in() {
    let (offsets, deps) = random_csr(50, 7);
    match (TaskflowGraph::new(&offsets, &deps, 2), AVAILABLE) {
        (Ok(g), true) => {
            assert_eq!(g.tasks(), 50);
            assert_eq!(g.order(), None, "a timing graph records nothing");
        }
        (Err(Error::NotBuilt), false) => {}
        (other, available) => panic!("{other:?} in a build with AVAILABLE = {available}"),
    }
}

/// Every task runs once per run, after each of its dependencies, on 1 and on 2 workers and
/// over repeated runs of one graph (the benches' use).
#[cfg(taskflow)]
#[test]
fn every_task_runs_once_after_its_dependencies() {
    for (n, seed) in [(1, 1), (2, 2), (500, 3), (20_000, 4)] {
        let (offsets, deps) = random_csr(n, seed);
        for workers in [1, 2] {
            let mut g = TaskflowGraph::counting(&offsets, &deps, workers).expect("built");
            for _ in 0..3 {
                g.run().expect("ran");
                let order = g.order().expect("counting");
                let mut seen = order.clone();
                seen.sort_unstable();
                assert_eq!(seen, (1..=n as u64).collect::<Vec<_>>(), "each ran once");
                for t in 0..n {
                    for &d in &deps[offsets[t] as usize..offsets[t + 1] as usize] {
                        assert!(order[d as usize] < order[t], "{d} ran after {t}");
                    }
                }
            }
        }
    }
}
