//! Lockstep's development tasks, run as `cargo xtask <task>` (the alias is in
//! `.cargo/config.toml`).
//!
//! * `cargo xtask zoo` — the bug zoo (SPEC Part C, `docs/bug-zoo.md`): builds the seeded
//!   variants once per checker flavour, runs the suites against every seeded bug, and prints
//!   which suites catch which bug, how fast, and how to replay the failure.
//! * `cargo xtask bench` — runs every criterion benchmark (ours beside the peers, in one run)
//!   and writes the results section of `docs/benchmarks.md` (see `bench.rs`).
//! * `cargo xtask report` — measures the suites and fuzz targets and writes the measurements
//!   section of `docs/verification.md` (see `report.rs`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod report;
mod zoo;

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "Lockstep's development tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Run the suites against every seeded bug of the bug zoo (docs/bug-zoo.md).
    Zoo(zoo::ZooArgs),
    /// Measure the suites and write the measurements of docs/verification.md.
    Report(report::ReportArgs),
    /// Run every benchmark beside its peers and write docs/benchmarks.md.
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Zoo(args) => zoo::run(&args),
        Task::Report(args) => report::run(&args),
        Task::Bench(args) => bench::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
