//! Compiles `src/graph.cpp` against Taskflow when `LOCKSTEP_TASKFLOW_DIR` names a checkout of
//! it (the directory that holds `taskflow/taskflow.hpp`), and then sets `cfg(taskflow)`.
//! Without the variable nothing is compiled and `TaskflowGraph::new` returns
//! `Error::NotBuilt`, so the workspace builds on machines without a C++20 compiler.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(taskflow)");
    println!("cargo::rerun-if-env-changed=LOCKSTEP_TASKFLOW_DIR");
    println!("cargo::rerun-if-changed=src/graph.cpp");
    let Some(dir) = env::var_os("LOCKSTEP_TASKFLOW_DIR").filter(|d| !d.is_empty()) else {
        return;
    };
    let dir = PathBuf::from(dir);
    // Cargo runs this script in crates/taskflow-peer, not where the user typed the path
    // (`cargo xtask bench` makes the variable absolute before it runs the benches).
    assert!(
        dir.is_absolute(),
        "LOCKSTEP_TASKFLOW_DIR={} is relative: give the absolute path of the Taskflow checkout",
        dir.display()
    );
    let header = dir.join("taskflow/taskflow.hpp");
    assert!(
        header.is_file(),
        "LOCKSTEP_TASKFLOW_DIR={} has no taskflow/taskflow.hpp: point it at a Taskflow \
         checkout (https://github.com/taskflow/taskflow), or unset it",
        dir.display()
    );
    println!("cargo::rerun-if-changed={}", header.display());
    cc::Build::new()
        .cpp(true)
        .std("c++20")
        // The peer is measured at full optimization whatever profile builds this crate.
        .opt_level(3)
        .define("NDEBUG", None)
        .flag("-pthread")
        .include(&dir)
        .file("src/graph.cpp")
        .compile("lockstep_taskflow_peer");
    println!("cargo::rustc-link-lib=pthread");
    println!("cargo::rustc-cfg=taskflow");
}
