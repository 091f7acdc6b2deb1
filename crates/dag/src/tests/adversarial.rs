//! The adversarial model comparison of `tests/tests/adversarial_dag.rs`, here with the unit
//! test constants (compaction floor 4, 3-bit generation tags: compaction, renumbering and tag
//! wraps happen every few steps) and the representation invariants checked after every step.

#[path = "../../../../tests/tests/common/adversarial_runner.rs"]
mod runner;

mod dag {
    pub use crate::{BatchOutcome, CancelToken, Claim, TaskScheduler};
}

use lockstep_contract::TaskKey;
use runner::Config;

use crate::TaskScheduler;

fn invariants<K: TaskKey>(s: &TaskScheduler<K>) {
    s.core.lock().assert_invariants();
}

fn assert_campaign<K: TaskKey>(seeds: std::ops::Range<u64>, cfg: &Config<K>) {
    // `ADVERSARIAL_SEEDS=a..b` replaces the seed range (longer campaigns).
    let seeds = std::env::var("ADVERSARIAL_SEEDS")
        .ok()
        .and_then(|v| {
            let (a, b) = v.split_once("..")?;
            Some(a.parse().ok()?..b.parse().ok()?)
        })
        .unwrap_or(seeds);
    let failures = runner::campaign(seeds, cfg, &invariants);
    // The first line says it all (the zoo's table shows only it): how many seeds, the first
    // one, and what its minimal sequence's last step found; the whole report follows.
    assert!(
        failures.is_empty(),
        "{} divergent seeds; first: {} {}\n{}",
        failures.len(),
        failures[0].lines().next().unwrap_or_default(),
        failures[0]
            .lines()
            .find(|l| l.starts_with("=> "))
            .unwrap_or_default(),
        failures[0]
    );
}

#[test]
fn model_comparison_with_small_floors_and_tags_strings() {
    let cfg = Config {
        pool: ["a", "b", "c", "d", "e", "f"].map(String::from).to_vec(),
        ghost: "ghost".to_string(),
        steps: 300,
        max_concurrency: 2,
        close_per_mille: 3,
        cancel_before_start_pct: 60,
        max_deps: 4,
        check_each_step: true,
    };
    assert_campaign(0..100, &cfg);
}

#[test]
fn model_comparison_with_small_floors_and_tags_u16() {
    let cfg = Config {
        pool: (0..12u16).collect(),
        ghost: 999,
        steps: 500,
        max_concurrency: 3,
        close_per_mille: 2,
        cancel_before_start_pct: 60,
        max_deps: 5,
        check_each_step: true,
    };
    assert_campaign(0..75, &cfg);
}

#[test]
fn model_comparison_with_small_floors_and_tags_sparse_u64() {
    let cfg = Config {
        pool: vec![
            0,
            1,
            2,
            65_535,
            65_536,
            65_537,
            1 << 40,
            u64::MAX - 1,
            u64::MAX,
        ],
        ghost: 5,
        steps: 300,
        max_concurrency: 1,
        close_per_mille: 2,
        cancel_before_start_pct: 60,
        max_deps: 4,
        check_each_step: true,
    };
    assert_campaign(0..75, &cfg);
}

/// Every run cancels before start (overflow lists before start), with capacity 0 or 1 and
/// frequent closes.
#[test]
fn model_comparison_cancel_before_start_low_capacity() {
    for max_concurrency in [0, 1] {
        let cfg = Config {
            pool: (0..8u8).collect(),
            ghost: 200,
            steps: 200,
            max_concurrency,
            close_per_mille: 10,
            cancel_before_start_pct: 100,
            max_deps: 4,
            check_each_step: true,
        };
        assert_campaign(0..50, &cfg);
    }
}
