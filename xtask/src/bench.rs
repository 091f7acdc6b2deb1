//! `cargo xtask bench`: runs every criterion benchmark of the workspace in one run and writes
//! the results section of `docs/benchmarks.md` (between `<!-- benchmarks:begin -->` and
//! `<!-- benchmarks:end -->`).
//!
//! The convention the benches follow (see `docs/benchmarks.md`, "How to read this"):
//!
//! * one criterion `BenchmarkGroup` per comparison, with a group id such as `deque/push_pop`
//!   or `pool/fib30/2t`; in it, our implementations have function ids starting with
//!   `lockstep_` and the peers (crossbeam-deque, rayon, petgraph, ...) do not, so ours and
//!   theirs run in the same run, one after the other, on the same machine state;
//! * criterion writes `target/criterion/<dir>/new/benchmark.json` (ids and throughput) and
//!   `new/estimates.json` (the statistics, in nanoseconds) for each function;
//! * what criterion cannot measure (peak bytes per task, Python's graphlib) is written by the
//!   bench binaries as JSON lines to `target/lockstep-bench/*.jsonl`:
//!   `{"group", "impl", "value", "unit", "note"}`.
//!
//! The report quotes the median with criterion's 95% confidence interval, the median per
//! element when the group declares a throughput, and for every `lockstep_*` function its
//! ratio to every peer in the same group (median over median: below 1.0 we are faster).
//! The targets of issues 4, 9, 10 and 11 are then checked against those numbers ([`TARGETS`]).
//!
//! When `cargo bench` ran in this invocation, only the estimates written by it are read (file
//! times after the start), so a stale result of an earlier run is never mixed in; with
//! `--no-run` every result on disk is read, and the section says so.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::Value;

/// The marker lines the generated section goes between.
const BEGIN: &str = "<!-- benchmarks:begin -->";
/// See [`BEGIN`].
const END: &str = "<!-- benchmarks:end -->";

/// Options of `cargo xtask bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Do not run `cargo bench`: only read the results already under `target/`.
    #[arg(long)]
    no_run: bool,
    /// Packages to benchmark (default: every workspace crate that has a `benches/` directory).
    #[arg(short = 'p', long = "package")]
    packages: Vec<String>,
    /// The file whose results section is replaced (relative to the workspace root).
    #[arg(long, default_value = "docs/benchmarks.md")]
    output: PathBuf,
    /// Arguments for the bench binaries (after `--`), e.g. a criterion filter.
    #[arg(last = true)]
    bench_args: Vec<String>,
}

/// One criterion measurement.
#[derive(Debug, Clone, PartialEq)]
struct Measured {
    group: String,
    function: String,
    /// Median time per iteration, nanoseconds.
    median_ns: f64,
    /// criterion's 95% confidence interval of the median, nanoseconds.
    ci_ns: (f64, f64),
    /// Elements per iteration, when the group declares `Throughput::Elements`.
    elements: Option<u64>,
}

impl Measured {
    /// Median nanoseconds per element.
    fn per_element(&self) -> Option<f64> {
        self.elements
            .filter(|&n| n > 0)
            .map(|n| self.median_ns / n as f64)
    }

    fn is_ours(&self) -> bool {
        self.function.starts_with("lockstep_")
    }
}

/// A measurement written by a bench binary as a JSON line.
#[derive(Debug, Clone, PartialEq)]
struct Extra {
    group: String,
    implementation: String,
    value: f64,
    unit: String,
    note: String,
}

/// What a target bounds.
#[derive(Debug, Clone, Copy)]
enum Bound {
    /// Median of `ours` / median of `peer` in the same group is at most this.
    RatioTo { peer: &'static str, max: f64 },
    /// Median nanoseconds per element of `ours` is at most this.
    NsPerElement(f64),
    /// An extra measurement with this unit is at most this.
    Extra { unit: &'static str, max: f64 },
}

/// One target (issues 4, 9, 10): `group` may end in `*` (a prefix match), `ours` is a function id
/// (or, for [`Bound::Extra`], an implementation name) and may end in `*` too.
#[derive(Debug, Clone, Copy)]
struct Target {
    what: &'static str,
    group: &'static str,
    ours: &'static str,
    bound: Bound,
}

/// The targets of issues 4, 9, 10 and 11 (each issue's "Targets" section; issue 11 item 10).
const TARGETS: &[Target] = &[
    Target {
        what: "deque push+pop no slower than crossbeam-deque",
        group: "deque/push_pop*",
        ours: "lockstep_chase_lev",
        bound: Bound::RatioTo {
            peer: "crossbeam",
            max: 1.0,
        },
    },
    Target {
        what: "deque steal no slower than crossbeam-deque",
        group: "deque/steal*",
        ours: "lockstep_chase_lev",
        bound: Bound::RatioTo {
            peer: "crossbeam",
            max: 1.0,
        },
    },
    Target {
        what: "pool spawn tree no slower than rayon's scope (issue 10: one heap job per spawn on both sides)",
        group: "pool/spawn_tree*",
        ours: "lockstep_chase_lev",
        bound: Bound::RatioTo {
            peer: "rayon_scope",
            max: 1.0,
        },
    },
    Target {
        what: "pool spawn tree no slower than rayon::join (stricter: rayon's join allocates nothing)",
        group: "pool/spawn_tree*",
        ours: "lockstep_chase_lev",
        bound: Bound::RatioTo {
            peer: "rayon",
            max: 1.0,
        },
    },
    Target {
        what: "pool fib(30) no slower than rayon",
        group: "pool/fib30*",
        ours: "lockstep_chase_lev",
        bound: Bound::RatioTo {
            peer: "rayon",
            max: 1.0,
        },
    },
    Target {
        what: "pool: a million outside submissions no slower than rayon",
        group: "pool/submit*",
        ours: "lockstep_chase_lev",
        bound: Bound::RatioTo {
            peer: "rayon",
            max: 1.0,
        },
    },
    Target {
        what: "pull API under 150 ns per (V + E) on the random graph",
        group: "graph/random*",
        ours: "lockstep_pull*",
        bound: Bound::NsPerElement(150.0),
    },
    Target {
        what: "pull API within 2x of Kahn building its arrays from the edge list",
        group: "graph/random*",
        ours: "lockstep_pull*",
        bound: Bound::RatioTo {
            peer: "kahn_from_edges",
            max: 2.0,
        },
    },
    Target {
        what: "pull API under 40 ns per task on the chain",
        group: "graph/chain*",
        ours: "lockstep_pull*",
        bound: Bound::NsPerElement(40.0),
    },
    Target {
        what: "pull API under 60 ns per task on the wavefront",
        group: "graph/wavefront*",
        ours: "lockstep_pull*",
        bound: Bound::NsPerElement(60.0),
    },
    Target {
        what: "executor chain and wavefront at most half of rayon level-by-level",
        group: "graph/chain*",
        ours: "lockstep_executor*",
        bound: Bound::RatioTo {
            peer: "rayon_levels",
            max: 0.5,
        },
    },
    Target {
        what: "executor chain and wavefront at most half of rayon level-by-level",
        group: "graph/wavefront*",
        ours: "lockstep_executor*",
        bound: Bound::RatioTo {
            peer: "rayon_levels",
            max: 0.5,
        },
    },
    Target {
        what: "executor faster than rayon level-by-level",
        group: "graph/*",
        ours: "lockstep_executor*",
        bound: Bound::RatioTo {
            peer: "rayon_levels",
            max: 1.0,
        },
    },
    Target {
        what: "executor at most half of Taskflow, one worker each (issue 9)",
        group: "graph/*",
        ours: "lockstep_executor_1t",
        bound: Bound::RatioTo {
            peer: "taskflow_1t",
            max: 0.5,
        },
    },
    Target {
        what: "executor at most half of Taskflow, two workers each (issue 9)",
        group: "graph/*",
        ours: "lockstep_executor_2t",
        bound: Bound::RatioTo {
            peer: "taskflow_2t",
            max: 0.5,
        },
    },
    Target {
        what: "executor under 80 ns per task on the chain (2 workers)",
        group: "graph/chain*",
        ours: "lockstep_executor*2t",
        bound: Bound::NsPerElement(80.0),
    },
    Target {
        what: "executor under 80 ns per task on the wavefront (2 workers)",
        group: "graph/wavefront*",
        ours: "lockstep_executor*2t",
        bound: Bound::NsPerElement(80.0),
    },
    Target {
        what: "PostgreSQL claim + completion at most 1.5x the plain SKIP LOCKED queue (issue 11)",
        group: "durable/postgres_*",
        ours: "lockstep_postgres",
        bound: Bound::RatioTo {
            peer: "plain_skip_locked",
            max: 1.5,
        },
    },
    Target {
        what: "PostgreSQL fused report and claim at most 1.5x the plain SKIP LOCKED queue (issue 11)",
        group: "durable/postgres_*",
        ours: "lockstep_postgres_fused",
        bound: Bound::RatioTo {
            peer: "plain_skip_locked",
            max: 1.5,
        },
    },
    Target {
        what: "SQLite (synchronous NORMAL) claim + completion at most 2x the plain queue (issue 11)",
        group: "durable/sqlite_claim_complete_normal",
        ours: "lockstep_sqlite",
        bound: Bound::RatioTo {
            peer: "plain_queue",
            max: 2.0,
        },
    },
    Target {
        what: "SQLite (synchronous NORMAL) fused report and claim at most 2x the plain queue (issue 11)",
        group: "durable/sqlite_claim_complete_normal",
        ours: "lockstep_sqlite_fused",
        bound: Bound::RatioTo {
            peer: "plain_queue",
            max: 2.0,
        },
    },
    Target {
        what: "memory: pull API at most 64 bytes per task",
        group: "graph/*",
        ours: "lockstep_pull",
        bound: Bound::Extra {
            unit: "bytes/task",
            max: 64.0,
        },
    },
    Target {
        what: "memory: pull API at most 12 bytes per edge",
        group: "graph/*",
        ours: "lockstep_pull",
        bound: Bound::Extra {
            unit: "bytes/edge",
            max: 12.0,
        },
    },
    Target {
        what: "memory: executor at most 100 bytes per task",
        group: "graph/*",
        ours: "lockstep_executor",
        bound: Bound::Extra {
            unit: "bytes/task",
            max: 100.0,
        },
    },
    Target {
        what: "memory: executor at most 16 bytes per edge",
        group: "graph/*",
        ours: "lockstep_executor",
        bound: Bound::Extra {
            unit: "bytes/edge",
            max: 16.0,
        },
    },
];

/// Where criterion writes its results: `$CRITERION_HOME` if set, else `criterion` in the
/// target directory (`$CARGO_TARGET_DIR`, relative to the workspace root if relative, else
/// `target`), as criterion itself decides.
fn criterion_dir(root: &Path) -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return root.join(home);
    }
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), |t| root.join(t));
    target.join("criterion")
}

/// `cargo xtask bench`.
pub fn run(args: &BenchArgs) -> Result<ExitCode> {
    let root = crate::report::workspace_root();
    let packages = if args.packages.is_empty() {
        bench_packages(&root)?
    } else {
        args.packages.clone()
    };
    let started = SystemTime::now();
    let header = machine_header(&root);
    let extra_dir = root.join("target/lockstep-bench");
    if !args.no_run {
        if packages.is_empty() {
            bail!("no workspace crate has a benches/ directory");
        }
        // Extras of an earlier run would be mixed in otherwise.
        if extra_dir.exists() {
            fs::remove_dir_all(&extra_dir)
                .with_context(|| format!("removing {}", extra_dir.display()))?;
        }
        let mut c = Command::new("cargo");
        c.current_dir(&root).args(["bench", "--locked"]);
        // lockstep-taskflow-peer's build script runs in its own directory: a relative path
        // typed by the user is made absolute here, against the directory it was typed in.
        if let Some(dir) = std::env::var_os("LOCKSTEP_TASKFLOW_DIR").filter(|d| !d.is_empty()) {
            let abs = fs::canonicalize(&dir)
                .with_context(|| format!("LOCKSTEP_TASKFLOW_DIR={}", Path::new(&dir).display()))?;
            c.env("LOCKSTEP_TASKFLOW_DIR", abs);
        }
        for p in &packages {
            c.args(["-p", p]);
        }
        if !args.bench_args.is_empty() {
            c.arg("--").args(&args.bench_args);
        }
        eprintln!("bench: cargo bench -p {}", packages.join(" -p "));
        let status = c.status().context("starting cargo bench")?;
        if !status.success() {
            bail!("cargo bench failed ({status})");
        }
    }
    let since = (!args.no_run).then_some(started);
    let criterion = criterion_dir(&root);
    let measured = collect_criterion(&criterion, since)?;
    let extras = collect_extras(&extra_dir)?;
    if measured.is_empty() && extras.is_empty() {
        bail!(
            "no benchmark results found under {} or {}",
            criterion.display(),
            extra_dir.display()
        );
    }
    let load_after = load_average();
    let section = render(&header, &load_after, args.no_run, &measured, &extras);
    let path = root.join(&args.output);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            format!("# Benchmarks\n\n{BEGIN}\n{END}\n")
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let updated = crate::report::replace_section_between(&text, &section, BEGIN, END)?;
    fs::write(&path, updated).with_context(|| format!("writing {}", path.display()))?;
    println!("{section}");
    eprintln!("bench: wrote {}", path.display());
    Ok(ExitCode::SUCCESS)
}

/// Workspace crates with a `benches/` directory (package names from their Cargo.toml).
fn bench_packages(root: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for base in ["crates", "."] {
        let dir = root.join(base);
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        dirs.sort();
        for d in dirs {
            if !d.join("benches").is_dir() {
                continue;
            }
            let manifest = d.join("Cargo.toml");
            let Ok(text) = fs::read_to_string(&manifest) else {
                continue;
            };
            if let Some(name) = package_name(&text) {
                out.push(name);
            }
        }
    }
    Ok(out)
}

/// The `name = "..."` of a manifest's `[package]` table.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if in_package
            && let Some(rest) = line.strip_prefix("name")
            && let Some(value) = rest.trim_start().strip_prefix('=')
        {
            return Some(value.trim().trim_matches('"').to_string());
        }
    }
    None
}

/// Every `new/benchmark.json` + `new/estimates.json` pair under `dir` (written after `since`,
/// if given), sorted by group then function.
fn collect_criterion(dir: &Path, since: Option<SystemTime>) -> Result<Vec<Measured>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if !p.is_dir() {
                continue;
            }
            if p.file_name().is_some_and(|n| n == "new") {
                let bench = p.join("benchmark.json");
                let est = p.join("estimates.json");
                if !(bench.is_file() && est.is_file()) {
                    continue;
                }
                if let Some(since) = since {
                    let modified = fs::metadata(&est).and_then(|m| m.modified());
                    if modified.map(|m| m < since).unwrap_or(true) {
                        continue;
                    }
                }
                let b: Value = read_json(&bench)?;
                let s: Value = read_json(&est)?;
                out.push(parse_measured(&b, &s).with_context(|| {
                    format!("reading {} and {}", bench.display(), est.display())
                })?);
            } else {
                stack.push(p);
            }
        }
    }
    out.sort_by(|a, b| (&a.group, &a.function).cmp(&(&b.group, &b.function)));
    Ok(out)
}

fn read_json(path: &Path) -> Result<Value> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// One measurement from criterion's `benchmark.json` and `estimates.json`.
fn parse_measured(bench: &Value, est: &Value) -> Result<Measured> {
    let group = bench["group_id"]
        .as_str()
        .context("benchmark.json has no group_id")?
        .to_string();
    let mut function = bench["function_id"].as_str().unwrap_or("").to_string();
    if let Some(v) = bench["value_str"].as_str() {
        if function.is_empty() {
            function = v.to_string();
        } else {
            function = format!("{function}/{v}");
        }
    }
    let median = &est["median"];
    let median_ns = median["point_estimate"]
        .as_f64()
        .context("estimates.json has no median.point_estimate")?;
    let ci = &median["confidence_interval"];
    let ci_ns = (
        ci["lower_bound"].as_f64().unwrap_or(median_ns),
        ci["upper_bound"].as_f64().unwrap_or(median_ns),
    );
    let elements = bench["throughput"]["Elements"].as_u64();
    Ok(Measured {
        group,
        function,
        median_ns,
        ci_ns,
        elements,
    })
}

/// The JSON lines of every `*.jsonl` file in `dir`.
fn collect_extras(dir: &Path) -> Result<Vec<Extra>> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(out);
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    for f in files {
        let text = fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(line)
                .with_context(|| format!("{}:{}: not a JSON object", f.display(), i + 1))?;
            let field = |k: &str| v[k].as_str().unwrap_or("").to_string();
            let value = v["value"]
                .as_f64()
                .with_context(|| format!("{}:{}: no numeric \"value\"", f.display(), i + 1))?;
            out.push(Extra {
                group: field("group"),
                implementation: field("impl"),
                value,
                unit: field("unit"),
                note: field("note"),
            });
        }
    }
    Ok(out)
}

/// `pattern` with an optional `*` (any run of characters) matches `s`.
fn glob(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((head, tail)) => {
            let Some(rest) = s.strip_prefix(head) else {
                return false;
            };
            if tail.is_empty() {
                return true;
            }
            // Try every split point: patterns here are tiny.
            (0..=rest.len())
                .filter(|&i| rest.is_char_boundary(i))
                .any(|i| glob(tail, &rest[i..]))
        }
    }
}

/// A duration in nanoseconds, in a readable unit.
fn human_ns(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.3} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.1} ns")
    }
}

/// The machine and toolchain lines of the section.
fn machine_header(root: &Path) -> String {
    let out = |prog: &str, args: &[&str]| {
        Command::new(prog)
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_else(|| "unknown".to_string())
    };
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|r| r.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown CPU".to_string());
    format!(
        "Run started {} at commit `{}`; {} ({} CPUs); `{}`; {}; load average at the start: {}.",
        out("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        out("git", &["rev-parse", "--short", "HEAD"]),
        model,
        cpus,
        out("rustc", &["-V"]),
        taskflow_version(std::env::var_os("LOCKSTEP_TASKFLOW_DIR").map(PathBuf::from)),
        load_average(),
    )
}

/// Which Taskflow the `graph/*` groups' `taskflow_*` peers were built from: the version in
/// `taskflow/taskflow.hpp` (`#define TF_VERSION 400100` is 4.1.0) under `dir`
/// (`LOCKSTEP_TASKFLOW_DIR`, which `lockstep-taskflow-peer`'s build script reads too).
fn taskflow_version(dir: Option<PathBuf>) -> String {
    let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty()) else {
        return "Taskflow not compiled in (LOCKSTEP_TASKFLOW_DIR unset)".to_string();
    };
    let dir = fs::canonicalize(&dir).unwrap_or(dir);
    let header = fs::read_to_string(dir.join("taskflow/taskflow.hpp")).unwrap_or_default();
    let version = header.lines().find_map(|l| {
        let v: u32 = l.strip_prefix("#define TF_VERSION ")?.trim().parse().ok()?;
        Some(format!("{}.{}.{}", v / 100_000, v / 100 % 1000, v % 100))
    });
    match version {
        Some(v) => format!("Taskflow {v} from `{}`", dir.display()),
        None => format!("no Taskflow version found under `{}`", dir.display()),
    }
}

/// `/proc/loadavg`'s first three fields.
fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_string())
}

/// The generated section (markdown).
fn render(
    header: &str,
    load_after: &str,
    stale_ok: bool,
    m: &[Measured],
    extras: &[Extra],
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "_Generated by `cargo xtask bench`; do not edit by hand._\n"
    );
    let _ = writeln!(s, "{header} Load average at the end: {load_after}.");
    if stale_ok {
        let _ = writeln!(
            s,
            "\n**Note:** written with `--no-run`: the results may come from different runs."
        );
    }
    let _ = writeln!(s, "\n### Targets (issues 4, 9, 10, 11)\n");
    let _ = writeln!(s, "| target | group | ours | measured | bound | met |");
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for t in TARGETS {
        for row in check_target(t, m, extras) {
            let _ = writeln!(s, "{row}");
        }
    }
    let mut groups: BTreeMap<&str, Vec<&Measured>> = BTreeMap::new();
    for x in m {
        groups.entry(&x.group).or_default().push(x);
    }
    let _ = writeln!(s, "\n### Medians and ratios\n");
    let _ = writeln!(
        s,
        "Ratio = our median / the peer's median in the same group and run (below 1.0: we are faster)."
    );
    for (group, rows) in &groups {
        let _ = writeln!(s, "\n#### `{group}`\n");
        let _ = writeln!(
            s,
            "| implementation | median | 95% CI of the median | per element |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|");
        for r in rows {
            let per = r.per_element().map_or_else(
                || "".to_string(),
                |p| format!("{} ({} elements)", human_ns(p), r.elements.unwrap_or(0)),
            );
            let _ = writeln!(
                s,
                "| `{}` | {} | {} – {} | {} |",
                r.function,
                human_ns(r.median_ns),
                human_ns(r.ci_ns.0),
                human_ns(r.ci_ns.1),
                per
            );
        }
        let ours: Vec<&&Measured> = rows.iter().filter(|r| r.is_ours()).collect();
        let peers: Vec<&&Measured> = rows.iter().filter(|r| !r.is_ours()).collect();
        if !ours.is_empty() && !peers.is_empty() {
            let _ = writeln!(s);
            for o in &ours {
                let ratios: Vec<String> = peers
                    .iter()
                    .map(|p| format!("{:.2} vs `{}`", o.median_ns / p.median_ns, p.function))
                    .collect();
                let _ = writeln!(s, "- `{}`: {}", o.function, ratios.join(", "));
            }
        }
    }
    if !extras.is_empty() {
        let _ = writeln!(s, "\n### Other measurements\n");
        let _ = writeln!(s, "| group | implementation | value | unit | note |");
        let _ = writeln!(s, "|---|---|---:|---|---|");
        for e in extras {
            let _ = writeln!(
                s,
                "| `{}` | `{}` | {:.1} | {} | {} |",
                e.group, e.implementation, e.value, e.unit, e.note
            );
        }
    }
    s
}

/// The table rows of one target: one per matching (group, function), or one "not measured".
fn check_target(t: &Target, m: &[Measured], extras: &[Extra]) -> Vec<String> {
    let mut rows = Vec::new();
    let yes_no = |ok: bool| if ok { "yes" } else { "**no**" };
    match t.bound {
        Bound::RatioTo { peer, max } => {
            for o in m
                .iter()
                .filter(|x| glob(t.group, &x.group) && glob(t.ours, &x.function))
            {
                let Some(p) = m.iter().find(|x| x.group == o.group && x.function == peer) else {
                    continue;
                };
                let ratio = o.median_ns / p.median_ns;
                rows.push(format!(
                    "| {} | `{}` | `{}` | {ratio:.2} x `{peer}` | ≤ {max:.2} | {} |",
                    t.what,
                    o.group,
                    o.function,
                    yes_no(ratio <= max)
                ));
            }
        }
        Bound::NsPerElement(max) => {
            for o in m
                .iter()
                .filter(|x| glob(t.group, &x.group) && glob(t.ours, &x.function))
            {
                let Some(per) = o.per_element() else {
                    continue;
                };
                rows.push(format!(
                    "| {} | `{}` | `{}` | {per:.1} ns/element | ≤ {max:.0} ns | {} |",
                    t.what,
                    o.group,
                    o.function,
                    yes_no(per <= max)
                ));
            }
        }
        Bound::Extra { unit, max } => {
            for e in extras.iter().filter(|e| {
                glob(t.group, &e.group) && glob(t.ours, &e.implementation) && e.unit == unit
            }) {
                rows.push(format!(
                    "| {} | `{}` | `{}` | {:.1} {unit} | ≤ {max:.0} {unit} | {} |",
                    t.what,
                    e.group,
                    e.implementation,
                    e.value,
                    yes_no(e.value <= max)
                ));
            }
        }
    }
    if rows.is_empty() {
        rows.push(format!(
            "| {} | `{}` | `{}` | not measured | | |",
            t.what, t.group, t.ours
        ));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(group: &str, function: &str, median_ns: f64, elements: Option<u64>) -> Measured {
        Measured {
            group: group.into(),
            function: function.into(),
            median_ns,
            ci_ns: (median_ns * 0.9, median_ns * 1.1),
            elements,
        }
    }

    #[test]
    fn the_header_names_the_taskflow_version_or_its_absence() {
        assert!(taskflow_version(None).contains("not compiled in"));
        let dir = std::env::temp_dir().join(format!("xtask-taskflow-{}", std::process::id()));
        fs::create_dir_all(dir.join("taskflow")).unwrap();
        fs::write(
            dir.join("taskflow/taskflow.hpp"),
            "// x\n#define TF_VERSION 400100\n#define TF_MAJOR_VERSION TF_VERSION/100000\n",
        )
        .unwrap();
        assert!(taskflow_version(Some(dir.clone())).starts_with("Taskflow 4.1.0 from"));
        fs::write(dir.join("taskflow/taskflow.hpp"), "nothing here").unwrap();
        assert!(taskflow_version(Some(dir.clone())).starts_with("no Taskflow version"));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn glob_matches_prefixes_and_inner_stars() {
        assert!(glob("graph/*", "graph/chain_1M"));
        assert!(glob("lockstep_executor*2t", "lockstep_executor_2t"));
        assert!(!glob("lockstep_executor*2t", "lockstep_executor_1t"));
        assert!(glob("deque/steal", "deque/steal"));
        assert!(!glob("deque/steal", "deque/steal_batch"));
        assert!(!glob("pool/*", "graph/x"));
    }

    #[test]
    fn criterion_files_parse_into_a_measurement() {
        let bench: Value = serde_json::from_str(
            r#"{"group_id":"deque/push_pop","function_id":"crossbeam","value_str":null,
                "throughput":{"Elements":1000},"full_id":"deque/push_pop/crossbeam"}"#,
        )
        .unwrap();
        let est: Value = serde_json::from_str(
            r#"{"median":{"confidence_interval":{"confidence_level":0.95,"lower_bound":90.0,
                "upper_bound":110.0},"point_estimate":100.0,"standard_error":1.0}}"#,
        )
        .unwrap();
        let got = parse_measured(&bench, &est).unwrap();
        let want = Measured {
            ci_ns: (90.0, 110.0),
            ..m("deque/push_pop", "crossbeam", 100.0, Some(1000))
        };
        assert_eq!(got, want);
        assert_eq!(got.per_element(), Some(0.1));
        assert!(!got.is_ours());
    }

    #[test]
    fn ratio_targets_compare_within_one_group_only() {
        let ms = vec![
            m("deque/push_pop", "lockstep_chase_lev", 80.0, None),
            m("deque/push_pop", "crossbeam", 100.0, None),
            m("deque/steal", "lockstep_chase_lev", 300.0, None),
            m("deque/steal", "crossbeam", 200.0, None),
        ];
        let rows = check_target(&TARGETS[0], &ms, &[]);
        assert_eq!(rows.len(), 1);
        assert!(
            rows[0].contains("0.80 x `crossbeam`") && rows[0].ends_with("| yes |"),
            "{rows:?}"
        );
        let rows = check_target(&TARGETS[1], &ms, &[]);
        assert!(
            rows[0].contains("1.50 x") && rows[0].ends_with("| **no** |"),
            "{rows:?}"
        );
    }

    #[test]
    fn a_target_without_results_says_not_measured() {
        let rows = check_target(&TARGETS[4], &[], &[]);
        assert_eq!(rows.len(), 1);
        assert!(rows[0].contains("not measured"));
    }

    #[test]
    fn per_element_targets_use_the_declared_throughput() {
        let ms = vec![m(
            "graph/chain_1M",
            "lockstep_executor_2t",
            50_000_000.0,
            Some(1_000_000),
        )];
        let target = TARGETS
            .iter()
            .find(|t| t.what == "executor under 80 ns per task on the chain (2 workers)")
            .expect("the chain target is listed");
        let rows = check_target(target, &ms, &[]);
        assert!(
            rows[0].contains("50.0 ns/element") && rows[0].ends_with("| yes |"),
            "{rows:?}"
        );
    }

    #[test]
    fn package_names_come_from_the_package_table() {
        let manifest = "[package]\nname = \"lockstep-deque\"\n[dependencies]\nname = \"x\"\n";
        assert_eq!(package_name(manifest).as_deref(), Some("lockstep-deque"));
        assert_eq!(package_name("[dependencies]\nname = \"x\"\n"), None);
    }

    #[test]
    fn extras_render_in_their_own_table() {
        let e = Extra {
            group: "graph/random_1M".into(),
            implementation: "lockstep_pull".into(),
            value: 88.0,
            unit: "bytes/task".into(),
            note: "peak".into(),
        };
        let s = render("h.", "0 0 0", false, &[], std::slice::from_ref(&e));
        assert!(
            s.contains("| `graph/random_1M` | `lockstep_pull` | 88.0 | bytes/task | peak |"),
            "{s}"
        );
    }
}
