//! What the zoo runs: the suites (test binaries, by checker flavour) and, for every bug of
//! `lockstep_sync::BUGS`, which part of Lockstep it lives in.

use std::fmt;

/// The part of Lockstep a bug is seeded in. A scheduler bug cannot change the pool's
/// behaviour (the pool does not use the scheduler) and the other way round, so each bug runs
/// only against the suites of its own part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    /// `crates/dag` (SPEC Part A).
    Scheduler,
    /// `crates/pool` and `crates/deque` (SPEC Part B).
    Pool,
    /// `crates/durable` (the durable scheduler, SPEC A6/A8, issue 5).
    Durable,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Scheduler => "scheduler",
            Part::Pool => "pool",
            Part::Durable => "durable",
        })
    }
}

/// A checker flavour: one `RUSTFLAGS` value, one target directory, one build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Flavour {
    /// Plain std primitives: unit tests, model comparisons, scenarios (debug, like `cargo test`).
    Normal,
    /// `--cfg shuttle` (release).
    Shuttle,
    /// `--cfg loom` with debug assertions (release).
    Loom,
}

impl Flavour {
    /// Every flavour, in build order.
    pub const ALL: [Flavour; 3] = [Flavour::Normal, Flavour::Shuttle, Flavour::Loom];

    /// The `RUSTFLAGS` of this flavour's seeded build.
    pub fn rustflags(self) -> &'static str {
        match self {
            Flavour::Normal => "--cfg lockstep_bug",
            Flavour::Shuttle => "--cfg shuttle --cfg lockstep_bug",
            Flavour::Loom => "--cfg loom --cfg lockstep_bug -C debug-assertions",
        }
    }

    /// The target directory of this flavour's seeded build (relative to the workspace root).
    pub fn target_dir(self) -> &'static str {
        match self {
            Flavour::Normal => "target-zoo",
            Flavour::Shuttle => "target-zoo-shuttle",
            Flavour::Loom => "target-zoo-loom",
        }
    }

    /// Whether this flavour is built with `--release`.
    pub fn release(self) -> bool {
        !matches!(self, Flavour::Normal)
    }
}

impl fmt::Display for Flavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Flavour::Normal => "normal",
            Flavour::Shuttle => "shuttle",
            Flavour::Loom => "loom",
        })
    }
}

/// Which test binary of a package a suite is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Binary {
    /// The package's unit tests (`--lib`); the target name is the crate name.
    Lib(&'static str),
    /// An integration test (`--test NAME`).
    Test(&'static str),
    /// An integration test (`--test NAME`) run with a libtest name filter: the tests of the
    /// binary whose names contain the filter.
    TestFiltered(&'static str, &'static str),
}

impl Binary {
    /// The integration test's name (`--test NAME`), or `None` for unit tests.
    pub fn test_name(&self) -> Option<&'static str> {
        match *self {
            Binary::Lib(_) => None,
            Binary::Test(t) | Binary::TestFiltered(t, _) => Some(t),
        }
    }

    /// The arguments the test binary runs with (a name filter, or none).
    pub fn libtest_args(&self) -> Vec<String> {
        match *self {
            Binary::TestFiltered(_, filter) => vec![filter.to_string()],
            Binary::Lib(_) | Binary::Test(_) => Vec::new(),
        }
    }
}

/// One suite: one test binary of one flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Suite {
    /// The name used on the command line and in the tables.
    pub name: &'static str,
    /// The flavour it is built in.
    pub flavour: Flavour,
    /// The Cargo package that holds it.
    pub package: &'static str,
    /// The test binary.
    pub binary: Binary,
    /// The part it tests.
    pub part: Part,
}

/// Every suite the zoo knows, in a nominal order of cost (the run orders them by the
/// baseline's measured time instead).
pub const SUITES: &[Suite] = &[
    Suite {
        name: "unit_deque",
        flavour: Flavour::Normal,
        package: "lockstep-deque",
        binary: Binary::Lib("lockstep_deque"),
        part: Part::Pool,
    },
    Suite {
        name: "unit_pool",
        flavour: Flavour::Normal,
        package: "lockstep-pool",
        binary: Binary::Lib("lockstep_pool"),
        part: Part::Pool,
    },
    Suite {
        name: "unit_dag",
        flavour: Flavour::Normal,
        package: "lockstep-dag",
        binary: Binary::Lib("lockstep_dag"),
        part: Part::Scheduler,
    },
    Suite {
        name: "unit_durable",
        flavour: Flavour::Normal,
        package: "lockstep-durable",
        binary: Binary::Lib("lockstep_durable"),
        part: Part::Durable,
    },
    Suite {
        name: "model_durable",
        flavour: Flavour::Normal,
        package: "lockstep-tests",
        binary: Binary::Test("model_durable"),
        part: Part::Durable,
    },
    Suite {
        name: "model_pool",
        flavour: Flavour::Normal,
        package: "lockstep-tests",
        binary: Binary::Test("model_pool"),
        part: Part::Pool,
    },
    Suite {
        name: "model_deque",
        flavour: Flavour::Normal,
        package: "lockstep-tests",
        binary: Binary::Test("model_deque"),
        part: Part::Pool,
    },
    Suite {
        name: "model_dag",
        flavour: Flavour::Normal,
        package: "lockstep-tests",
        binary: Binary::Test("model_dag"),
        part: Part::Scheduler,
    },
    Suite {
        name: "quickcheck_graph",
        flavour: Flavour::Normal,
        package: "lockstep-tests",
        binary: Binary::Test("quickcheck_graph"),
        part: Part::Scheduler,
    },
    Suite {
        name: "scenarios_pool",
        flavour: Flavour::Normal,
        package: "lockstep-tests",
        binary: Binary::Test("scenarios_pool"),
        part: Part::Pool,
    },
    Suite {
        name: "scenarios_dag",
        flavour: Flavour::Normal,
        package: "lockstep-tests",
        binary: Binary::Test("scenarios_dag"),
        part: Part::Scheduler,
    },
    Suite {
        name: "stress_dag",
        flavour: Flavour::Normal,
        package: "lockstep-tests",
        binary: Binary::Test("stress_dag"),
        part: Part::Scheduler,
    },
    // The committed fuzz corpora and minimised regressions (fuzz/regressions/*/zoo-*),
    // replayed on stable through the cargo-fuzz targets' harness.
    Suite {
        name: "fuzz_corpus_dag",
        flavour: Flavour::Normal,
        package: "lockstep-fuzzing",
        binary: Binary::TestFiltered("corpus", "dag_ops"),
        part: Part::Scheduler,
    },
    Suite {
        name: "fuzz_corpus_pool",
        flavour: Flavour::Normal,
        package: "lockstep-fuzzing",
        binary: Binary::TestFiltered("corpus", "pool_"),
        part: Part::Pool,
    },
    Suite {
        name: "shuttle_dag",
        flavour: Flavour::Shuttle,
        package: "lockstep-tests",
        binary: Binary::Test("shuttle_dag"),
        part: Part::Scheduler,
    },
    Suite {
        name: "model_executor",
        flavour: Flavour::Normal,
        package: "lockstep-tests",
        binary: Binary::Test("model_executor"),
        part: Part::Scheduler,
    },
    Suite {
        name: "shuttle_executor",
        flavour: Flavour::Shuttle,
        package: "lockstep-tests",
        binary: Binary::Test("shuttle_executor"),
        part: Part::Scheduler,
    },
    Suite {
        name: "shuttle_pool",
        flavour: Flavour::Shuttle,
        package: "lockstep-tests",
        binary: Binary::Test("shuttle_pool"),
        part: Part::Pool,
    },
    Suite {
        name: "loom_pool",
        flavour: Flavour::Loom,
        package: "lockstep-tests",
        binary: Binary::Test("loom_pool"),
        part: Part::Pool,
    },
    Suite {
        name: "loom_deque",
        flavour: Flavour::Loom,
        package: "lockstep-tests",
        binary: Binary::Test("loom_deque"),
        part: Part::Pool,
    },
    Suite {
        name: "loom_executor",
        flavour: Flavour::Loom,
        package: "lockstep-tests",
        binary: Binary::Test("loom_executor"),
        part: Part::Scheduler,
    },
];

/// How the zoo treats one seeded bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BugPlan {
    /// The name, as listed in `lockstep_sync::BUGS`.
    pub name: &'static str,
    /// The part it is seeded in.
    pub part: Part,
    /// In `--first` mode, the suite to try before the others (which follow cheapest first):
    /// the cheapest suite that caught it in the last full run (`docs/bug-zoo.md`), or for a
    /// race, the checker that catches the race itself deterministically, or for a lost task,
    /// the checker that reports the deadlock at once where the cheapest suite waits out a
    /// deadline (`executor_breadth_drops_task`, `executor_batch_share_lost`). It only saves
    /// time; the full matrix (`cargo xtask zoo`) ignores it and runs every suite.
    pub first_try: &'static str,
    /// In `--first` mode, the test of `first_try` that caught the bug in the last CI run,
    /// run alone (`--exact`) before the whole suite, for a bug whose catch waited for other
    /// tests: libtest starts a binary's tests in name order on two threads, so a loom test
    /// that catches its bug in half a second can start only after minutes of the others
    /// (`executor_pool_handoff_lost`: 228 s in the whole suite, 0.39 s alone). If it does
    /// not catch the bug (renamed, or the bug now escapes it), the whole of `first_try`
    /// runs as before, then the others. The test `every_first_test_is_a_test_of_its_suite` keeps
    /// the names real, and a run warns when one matches no test.
    pub first_test: Option<&'static str>,
}

/// Every seeded bug, in the order of `lockstep_sync::BUGS` (checked by a test and at start).
pub const PLANS: &[BugPlan] = &[
    plan_test(
        "static_order",
        Part::Scheduler,
        "unit_dag",
        "tests::a_batch_release_queues_each_version_by_its_priority_and_pool",
    ),
    plan("rescan_all", Part::Scheduler, "scenarios_dag"),
    plan("cycle_without_path", Part::Scheduler, "unit_dag"),
    plan_test(
        "stale_generation",
        Part::Scheduler,
        "unit_dag",
        "tests::adversarial::model_comparison_cancel_before_start_low_capacity",
    ),
    plan_test(
        "failed_dep_as_success",
        Part::Scheduler,
        "unit_dag",
        "tests::adversarial::model_comparison_cancel_before_start_low_capacity",
    ),
    plan_test(
        "forced_cancel",
        Part::Scheduler,
        "unit_dag",
        "tests::a_panicking_id_clone_in_a_claim_leaves_the_version_ready_and_cancels_aim_right",
    ),
    plan_test(
        "exceed_limit",
        Part::Scheduler,
        "unit_dag",
        "tests::a_stale_reverse_edge_never_matches_after_its_tag_wraps",
    ),
    plan("retry_flips_failed", Part::Scheduler, "model_dag"),
    plan_test(
        "stale_edges",
        Part::Scheduler,
        "unit_dag",
        "tests::adversarial::model_comparison_cancel_before_start_low_capacity",
    ),
    plan_test(
        "tag_wrap_unpurged",
        Part::Scheduler,
        "unit_dag",
        "tests::a_stale_reverse_edge_never_matches_after_its_tag_wraps",
    ),
    plan_test(
        "double_release",
        Part::Scheduler,
        "unit_dag",
        "tests::a_batch_that_unwinds_midway_still_queues_what_it_released",
    ),
    plan_test(
        "unflushed_release",
        Part::Scheduler,
        "unit_dag",
        "tests::adversarial::model_comparison_with_small_floors_and_tags_strings",
    ),
    plan_test(
        "handoff_jumps_queue",
        Part::Scheduler,
        "unit_dag",
        "tests::a_round_of_one_claim_takes_the_queue_first",
    ),
    plan("identity_prefix_unchecked", Part::Scheduler, "unit_dag"),
    plan("claim_two_sections", Part::Scheduler, "shuttle_dag"),
    plan("priority_ties_lifo", Part::Scheduler, "model_dag"),
    plan("optional_blocks", Part::Scheduler, "model_dag"),
    plan("dynamic_edge_on_claimed", Part::Scheduler, "model_dag"),
    plan("grown_self_loop_accepted", Part::Scheduler, "model_dag"),
    plan("pool_room_two_sections", Part::Scheduler, "shuttle_dag"),
    plan_test(
        "executor_pool_handoff_lost",
        Part::Scheduler,
        "loom_executor",
        "loom_pool_slot_is_handed_on_and_never_shared",
    ),
    plan_test(
        "executor_relaxed_count",
        Part::Scheduler,
        "loom_executor",
        "loom_a_driver_alone_again_sees_the_ended_drivers_decrements",
    ),
    plan_test(
        "executor_relaxed_skip",
        Part::Scheduler,
        "loom_executor",
        "loom_diamond_join_sees_both_dependencies_compare_and_swap",
    ),
    plan("executor_decide_unfenced", Part::Scheduler, "loom_executor"),
    plan("executor_cancel_unfenced", Part::Scheduler, "loom_executor"),
    plan(
        "executor_solo_unswitched",
        Part::Scheduler,
        "shuttle_executor",
    ),
    plan(
        "executor_share_uncounted",
        Part::Scheduler,
        "shuttle_executor",
    ),
    plan_test(
        "executor_solo_relaxed",
        Part::Scheduler,
        "loom_executor",
        "loom_a_driver_alone_again_sees_the_ended_drivers_decrements",
    ),
    plan("executor_double_push", Part::Scheduler, "unit_dag"),
    plan_test(
        "executor_grow_lost_unseen",
        Part::Scheduler,
        "loom_executor",
        "loom_a_successor_of_a_failed_dependency_is_blocked",
    ),
    plan(
        "executor_breadth_drops_task",
        Part::Scheduler,
        "shuttle_executor",
    ),
    plan(
        "executor_batch_share_lost",
        Part::Scheduler,
        "shuttle_executor",
    ),
    plan("global_queue", Part::Pool, "unit_pool"),
    plan("check_then_pop", Part::Pool, "loom_pool"),
    plan("chase_lev_pop_without_fence", Part::Pool, "loom_deque"),
    plan("chase_lev_relaxed_publish", Part::Pool, "loom_deque"),
    plan("chase_lev_unguarded_slot_reuse", Part::Pool, "loom_deque"),
    plan(
        "chase_lev_pop_stamps_reused_index",
        Part::Pool,
        "loom_deque",
    ),
    plan("exit_when_empty", Part::Pool, "model_pool"),
    plan("panic_escapes", Part::Pool, "model_pool"),
    plan("parent_decrement_first", Part::Pool, "model_pool"),
    plan("single_victim", Part::Pool, "unit_pool"),
    plan("sleep_polling", Part::Pool, "shuttle_pool"),
    plan("stale_wakeup_left_set", Part::Pool, "unit_pool"),
    plan("compensation_slot_leaked", Part::Pool, "model_pool"),
    plan("spare_counts_in_workers_slot", Part::Pool, "scenarios_pool"),
    plan("retired_spare_swallows_wakeup", Part::Pool, "unit_pool"),
    plan("stack_job_latch_early", Part::Pool, "loom_pool"),
    plan("join_half_counted", Part::Pool, "model_pool"),
    plan("idle_worker_keeps_credits", Part::Pool, "model_pool"),
    plan("id_block_overlaps", Part::Pool, "model_pool"),
    plan("inbox_push_without_fence", Part::Pool, "loom_pool"),
    plan("inbox_unwritten_slot_read", Part::Pool, "loom_pool"),
    plan("park_checks_home_only", Part::Pool, "unit_pool"),
    plan("blocked_spawn_unannounced", Part::Pool, "unit_pool"),
    plan("block_without_announcing", Part::Pool, "unit_pool"),
    plan("durable_unfenced_complete", Part::Durable, "unit_durable"),
    plan("durable_unfenced_abandon", Part::Durable, "unit_durable"),
    plan("durable_submit_if_exists", Part::Durable, "model_durable"),
    plan("durable_redefine_unchecked", Part::Durable, "model_durable"),
    plan("durable_priority_ignored", Part::Durable, "model_durable"),
    plan("durable_optional_blocks", Part::Durable, "model_durable"),
    plan(
        "durable_pool_counts_expired",
        Part::Durable,
        "model_durable",
    ),
    plan("durable_fused_claim_first", Part::Durable, "model_durable"),
    plan("durable_edge_on_claimed", Part::Durable, "model_durable"),
];

const fn plan(name: &'static str, part: Part, first_try: &'static str) -> BugPlan {
    BugPlan {
        name,
        part,
        first_try,
        first_test: None,
    }
}

/// [`plan`] with a [`BugPlan::first_test`]: `test` of suite `first_try`, run alone first.
const fn plan_test(
    name: &'static str,
    part: Part,
    first_try: &'static str,
    test: &'static str,
) -> BugPlan {
    BugPlan {
        name,
        part,
        first_try,
        first_test: Some(test),
    }
}

/// The suite called `name`.
pub fn suite(name: &str) -> Option<&'static Suite> {
    SUITES.iter().find(|s| s.name == name)
}

/// Checks that [`PLANS`] covers exactly `lockstep_sync::BUGS`, in order, and names only
/// suites of the bug's own part.
pub fn check_plans() -> Result<(), String> {
    let listed: Vec<&str> = lockstep_sync::BUGS.iter().map(|(n, _)| *n).collect();
    let planned: Vec<&str> = PLANS.iter().map(|p| p.name).collect();
    if listed != planned {
        return Err(format!(
            "xtask's bug plans {planned:?} do not match lockstep_sync::BUGS {listed:?}"
        ));
    }
    for p in PLANS {
        match suite(p.first_try) {
            Some(s) if s.part == p.part => {}
            _ => {
                return Err(format!(
                    "bug {}: first_try {:?} is not a {} suite",
                    p.name, p.first_try, p.part
                ));
            }
        }
    }
    Ok(())
}

/// The one-line description of a bug, from `lockstep_sync::BUGS`.
pub fn description(name: &str) -> &'static str {
    lockstep_sync::BUGS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, d)| d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_match_the_bug_list() {
        assert_eq!(check_plans(), Ok(()));
    }

    /// The text of the source file that holds test `test` of `suite`, narrowed to the inline
    /// module the test's path names, if any: the module path is followed file by file
    /// (`tests::adversarial::x` of `lockstep_dag` is in `crates/dag/src/tests/adversarial.rs`)
    /// and, where no file exists, into an inline `mod NAME {` of the file reached
    /// (`ready::tests::x` is in `mod tests {` of `crates/dag/src/ready.rs`).
    fn test_source(root: &std::path::Path, suite: &Suite, test: &str) -> Result<String, String> {
        let mut modules: Vec<&str> = test.split("::").collect();
        modules.pop();
        let (mut dir, mut file) = match suite.binary {
            Binary::Lib(krate) => {
                let name = krate.strip_prefix("lockstep_").unwrap_or(krate);
                let dir = root.join(format!("crates/{name}/src"));
                let file = dir.join("lib.rs");
                (dir, file)
            }
            Binary::Test(t) | Binary::TestFiltered(t, _) => {
                assert_eq!(suite.package, "lockstep-tests", "{}", suite.name);
                let dir = root.join("tests/tests");
                let file = dir.join(format!("{t}.rs"));
                (dir, file)
            }
        };
        let read = |f: &std::path::Path| {
            std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))
        };
        let mut text = read(&file)?;
        let mut inline = false;
        for m in modules {
            let own = [dir.join(format!("{m}.rs")), dir.join(m).join("mod.rs")];
            match own.iter().find(|f| f.exists()) {
                Some(f) if !inline && text.contains(&format!("mod {m};")) => {
                    dir = dir.join(m);
                    file = f.clone();
                    text = read(&file)?;
                }
                _ => {
                    text = inline_module(&text, m)
                        .ok_or_else(|| format!("no module `{m}` in {}", file.display()))?;
                    inline = true;
                }
            }
        }
        // The module's own items: what its inline submodules hold is not at this path.
        Ok(without_inline_modules(&text))
    }

    /// The lines of rustfmt-formatted `text` inside its inline `mod name {` (up to the `}`
    /// at the same indentation), or `None`.
    fn inline_module(text: &str, name: &str) -> Option<String> {
        let mut lines = text.lines();
        let indent = lines.by_ref().find_map(|l| {
            let t = l.trim_start();
            let decl = t.strip_prefix("pub(crate) ").unwrap_or(t);
            (decl == format!("mod {name} {{")).then_some(l.len() - t.len())
        })?;
        let body: Vec<&str> = lines
            .take_while(|l| !(l.trim_start() == "}" && l.len() - 1 == indent))
            .collect();
        Some(body.join("\n"))
    }

    /// `text` without the lines of its inline `mod name { .. }` blocks (rustfmt-formatted: a
    /// block ends at the `}` at its `mod` line's indentation).
    fn without_inline_modules(text: &str) -> String {
        let mut inside: Option<usize> = None;
        let mut kept = Vec::new();
        for l in text.lines() {
            let t = l.trim_start();
            let indent = l.len() - t.len();
            match inside {
                Some(i) => {
                    if t == "}" && indent == i {
                        inside = None;
                    }
                }
                None => {
                    let decl = t.strip_prefix("pub(crate) ").unwrap_or(t);
                    if decl.starts_with("mod ") && decl.ends_with(" {") {
                        inside = Some(indent);
                    } else {
                        kept.push(l);
                    }
                }
            }
        }
        kept.join("\n")
    }

    /// Every `first_test` is a test function of its `first_try` suite at the path it names
    /// (module by module, inline modules included), marked `#[test]` and not `#[ignore]` or
    /// `#[cfg(...)]`, and, for a filtered suite, one its filter selects: a wrong name would
    /// only cost time (the whole suite runs after the miss, with a warning), but it would
    /// hide the saving this list is for.
    #[test]
    fn every_first_test_is_a_test_of_its_suite() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the workspace root");
        let mut named = 0;
        for p in PLANS {
            let Some(test) = p.first_test else { continue };
            named += 1;
            let s = suite(p.first_try).expect("check_plans");
            if let Binary::TestFiltered(_, filter) = s.binary {
                assert!(
                    test.contains(filter),
                    "{}: {test} is not in {filter}",
                    p.name
                );
            }
            let text = test_source(root, s, test).unwrap_or_else(|e| panic!("{}: {e}", p.name));
            let name = test.rsplit("::").next().expect("a name");
            let at = text
                .find(&format!("fn {name}()"))
                .unwrap_or_else(|| panic!("{}: no `fn {name}()` at {test}", p.name));
            // The attributes and comments right above the function.
            let above: Vec<&str> = text[..at]
                .trim_end()
                .lines()
                .rev()
                .map(str::trim)
                .take_while(|l| l.starts_with("#[") || l.starts_with("//"))
                .collect();
            assert!(
                above.contains(&"#[test]"),
                "{}: `{test}` is not marked #[test]",
                p.name
            );
            assert!(
                !above
                    .iter()
                    .any(|l| l.starts_with("#[ignore") || l.starts_with("#[cfg")),
                "{}: `{test}` is ignored or compiled conditionally",
                p.name
            );
        }
        assert!(named >= 5, "only {named} bugs name a first test");
    }

    #[test]
    fn suite_names_are_unique_and_every_part_has_suites() {
        let mut names: Vec<&str> = SUITES.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SUITES.len());
        for part in [Part::Scheduler, Part::Pool, Part::Durable] {
            assert!(SUITES.iter().any(|s| s.part == part));
        }
    }
}
