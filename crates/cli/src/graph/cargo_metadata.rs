//! The JSON printed by `cargo metadata --format-version 1`.
//!
//! Each node of `resolve.nodes` (every package in the resolved dependency graph) is a task
//! that depends on the packages it uses, taken from the node's `deps` list (each entry's
//! `pkg`). An entry whose `dep_kinds` are all `"dev"` is left out unless `--dev-deps` is
//! given: dev-dependencies are built only for a workspace member's tests, and including
//! them can close cycles that cargo itself never has to order (a crate whose tests use a
//! crate that depends on it). Output from cargo older than 1.41 has no `deps`; then the
//! node's `dependencies` list is used as it is.
//!
//! **Task ids** are package names. When the resolution holds one name in several versions
//! (common: `syn` 1 and 2), every package of that name is named `NAME@VERSION` instead;
//! if even that collides (the same version from two sources), the full package id is used.
//! The reader notes how many names were qualified.
//!
//! Only the fields needed are read (typed structs, unknown fields ignored so that newer
//! cargo output still reads). No task has a command: run such a graph with `--simulate`.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde::Deserialize;

use super::{Location, ReadError, TaskGraph, TaskSpec};

#[derive(Debug, Deserialize)]
struct Metadata {
    packages: Vec<Package>,
    resolve: Option<Resolve>,
}

#[derive(Debug, Deserialize)]
struct Package {
    name: String,
    version: String,
    id: String,
}

#[derive(Debug, Deserialize)]
struct Resolve {
    nodes: Vec<ResolveNode>,
}

#[derive(Debug, Deserialize)]
struct ResolveNode {
    id: String,
    #[serde(default)]
    dependencies: Vec<String>,
    #[serde(default)]
    deps: Option<Vec<NodeDep>>,
}

#[derive(Debug, Deserialize)]
struct NodeDep {
    pkg: String,
    #[serde(default)]
    dep_kinds: Vec<DepKind>,
}

#[derive(Debug, Deserialize)]
struct DepKind {
    /// `null` for normal dependencies, `"dev"` or `"build"`.
    kind: Option<String>,
}

/// Parses `cargo metadata --format-version 1` output; `path` names it in errors.
///
/// O(packages + dependency entries).
///
/// # Errors
/// * [`ReadError::Json`] when the text is not JSON or lacks the fields used (`packages`
///   with `name`/`version`/`id`, `resolve.nodes` with `id`), with line and column;
/// * [`ReadError::NoResolve`] when `resolve` is `null` (made with `--no-deps`);
/// * [`ReadError::UnknownPackageId`] when a resolve node names an id that `packages` does not
///   list, or a dependency names one that has no node in `resolve.nodes`.
pub fn parse(text: &str, path: &Path, dev_deps: bool) -> Result<TaskGraph, ReadError> {
    let meta: Metadata = serde_json::from_str(text).map_err(|e| ReadError::Json {
        path: path.to_path_buf(),
        at: Location {
            line: e.line().max(1),
            column: e.column().max(1),
        },
        message: e.to_string(),
    })?;
    let resolve = meta.resolve.ok_or_else(|| ReadError::NoResolve {
        path: path.to_path_buf(),
    })?;
    let by_id: HashMap<&str, &Package> = meta.packages.iter().map(|p| (p.id.as_str(), p)).collect();
    let unknown = |id: &str| ReadError::UnknownPackageId {
        path: path.to_path_buf(),
        id: id.to_string(),
    };

    // Name every resolved package: NAME, or NAME@VERSION when the name repeats, or the
    // package id when that repeats too.
    let mut nodes_pkgs = Vec::with_capacity(resolve.nodes.len());
    for node in &resolve.nodes {
        nodes_pkgs.push(
            *by_id
                .get(node.id.as_str())
                .ok_or_else(|| unknown(&node.id))?,
        );
    }
    let mut name_count: HashMap<&str, usize> = HashMap::new();
    let mut name_version_count: HashMap<(&str, &str), usize> = HashMap::new();
    for p in &nodes_pkgs {
        *name_count.entry(&p.name).or_default() += 1;
        *name_version_count.entry((&p.name, &p.version)).or_default() += 1;
    }
    let task_id = |p: &Package| -> String {
        if name_count[p.name.as_str()] == 1 {
            p.name.clone()
        } else if name_version_count[&(p.name.as_str(), p.version.as_str())] == 1 {
            format!("{}@{}", p.name, p.version)
        } else {
            p.id.clone()
        }
    };
    let names: HashMap<&str, String> = nodes_pkgs
        .iter()
        .map(|p| (p.id.as_str(), task_id(p)))
        .collect();
    let name_of = |id: &str| names.get(id).cloned().ok_or_else(|| unknown(id));

    let mut tasks = Vec::with_capacity(resolve.nodes.len());
    let mut dev_left_out = 0usize;
    for node in &resolve.nodes {
        let mut deps = Vec::new();
        let mut seen = HashSet::new();
        match &node.deps {
            Some(list) => {
                for d in list {
                    let dev_only = !d.dep_kinds.is_empty()
                        && d.dep_kinds.iter().all(|k| k.kind.as_deref() == Some("dev"));
                    if dev_only && !dev_deps {
                        dev_left_out += 1;
                        continue;
                    }
                    if seen.insert(d.pkg.as_str()) {
                        deps.push(name_of(&d.pkg)?);
                    }
                }
            }
            None => {
                for d in &node.dependencies {
                    if seen.insert(d.as_str()) {
                        deps.push(name_of(d)?);
                    }
                }
            }
        }
        tasks.push(TaskSpec {
            id: name_of(&node.id)?,
            deps,
            ..TaskSpec::default()
        });
    }

    let mut notes = Vec::new();
    let repeated = name_count.values().filter(|&&c| c > 1).count();
    if repeated > 0 {
        notes.push(format!(
            "{repeated} package name(s) resolve to more than one version; those tasks are \
             named NAME@VERSION"
        ));
    }
    if dev_left_out > 0 {
        notes.push(format!(
            "left out {dev_left_out} dev-only dependency edge(s); --dev-deps keeps them"
        ));
    }
    Ok(TaskGraph {
        tasks,
        notes,
        warnings: Vec::new(),
        pools: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("meta.json")
    }

    /// A trimmed-down but structurally real `cargo metadata` document.
    const META: &str = r#"{
  "packages": [
    {"name": "app", "version": "0.1.0", "id": "path+file:///w/app#0.1.0", "extra": 1},
    {"name": "syn", "version": "1.0.109", "id": "registry+https://github.com/rust-lang/crates.io-index#syn@1.0.109"},
    {"name": "syn", "version": "2.0.50", "id": "registry+https://github.com/rust-lang/crates.io-index#syn@2.0.50"},
    {"name": "quote", "version": "1.0.35", "id": "registry+https://github.com/rust-lang/crates.io-index#quote@1.0.35"},
    {"name": "tester", "version": "0.2.0", "id": "registry+https://github.com/rust-lang/crates.io-index#tester@0.2.0"}
  ],
  "workspace_members": ["path+file:///w/app#0.1.0"],
  "resolve": {
    "nodes": [
      {"id": "path+file:///w/app#0.1.0",
       "dependencies": ["registry+https://github.com/rust-lang/crates.io-index#syn@1.0.109",
                        "registry+https://github.com/rust-lang/crates.io-index#syn@2.0.50",
                        "registry+https://github.com/rust-lang/crates.io-index#tester@0.2.0"],
       "deps": [
         {"name": "syn", "pkg": "registry+https://github.com/rust-lang/crates.io-index#syn@1.0.109",
          "dep_kinds": [{"kind": null, "target": null}]},
         {"name": "syn2", "pkg": "registry+https://github.com/rust-lang/crates.io-index#syn@2.0.50",
          "dep_kinds": [{"kind": "build", "target": null}]},
         {"name": "tester", "pkg": "registry+https://github.com/rust-lang/crates.io-index#tester@0.2.0",
          "dep_kinds": [{"kind": "dev", "target": null}]}
       ],
       "features": []},
      {"id": "registry+https://github.com/rust-lang/crates.io-index#quote@1.0.35", "dependencies": [], "deps": [], "features": []},
      {"id": "registry+https://github.com/rust-lang/crates.io-index#syn@1.0.109",
       "dependencies": ["registry+https://github.com/rust-lang/crates.io-index#quote@1.0.35"],
       "deps": [{"name": "quote", "pkg": "registry+https://github.com/rust-lang/crates.io-index#quote@1.0.35", "dep_kinds": [{"kind": null, "target": null}]}],
       "features": []},
      {"id": "registry+https://github.com/rust-lang/crates.io-index#syn@2.0.50", "dependencies": [], "deps": [], "features": []},
      {"id": "registry+https://github.com/rust-lang/crates.io-index#tester@0.2.0",
       "dependencies": ["path+file:///w/app#0.1.0"],
       "deps": [{"name": "app", "pkg": "path+file:///w/app#0.1.0", "dep_kinds": [{"kind": null, "target": null}]}],
       "features": []}
    ],
    "root": "path+file:///w/app#0.1.0"
  },
  "version": 1
}"#;

    fn shape(g: &TaskGraph) -> Vec<(&str, Vec<&str>)> {
        g.tasks
            .iter()
            .map(|t| (t.id.as_str(), t.deps.iter().map(String::as_str).collect()))
            .collect()
    }

    #[test]
    fn nodes_become_tasks_with_qualified_names_on_collision() {
        let g = parse(META, p(), false).unwrap();
        assert_eq!(
            shape(&g),
            vec![
                ("app", vec!["syn@1.0.109", "syn@2.0.50"]),
                ("quote", vec![]),
                ("syn@1.0.109", vec!["quote"]),
                ("syn@2.0.50", vec![]),
                ("tester", vec!["app"]),
            ]
        );
        assert!(g.tasks.iter().all(|t| t.command.is_none()));
        assert_eq!(g.notes.len(), 2, "{:?}", g.notes);
        assert!(g.notes[1].contains("left out 1 dev-only"));
    }

    #[test]
    fn dev_deps_are_kept_on_request() {
        let g = parse(META, p(), true).unwrap();
        assert_eq!(g.tasks[0].deps, vec!["syn@1.0.109", "syn@2.0.50", "tester"]);
    }

    #[test]
    fn old_cargo_without_deps_uses_dependencies() {
        let text = META.replace("\"deps\"", "\"old_deps\"");
        let g = parse(&text, p(), false).unwrap();
        assert_eq!(g.tasks[0].deps, vec!["syn@1.0.109", "syn@2.0.50", "tester"]);
    }

    #[test]
    fn same_name_and_version_falls_back_to_the_id() {
        let text = r#"{"packages": [
            {"name": "a", "version": "1.0.0", "id": "reg#a@1.0.0"},
            {"name": "a", "version": "1.0.0", "id": "git#a@1.0.0"}],
          "resolve": {"nodes": [{"id": "reg#a@1.0.0", "dependencies": ["git#a@1.0.0"]},
                                {"id": "git#a@1.0.0"}]}}"#;
        let g = parse(text, p(), false).unwrap();
        assert_eq!(
            shape(&g),
            vec![
                ("reg#a@1.0.0", vec!["git#a@1.0.0"]),
                ("git#a@1.0.0", vec![])
            ]
        );
    }

    #[test]
    fn no_deps_output_is_refused() {
        let err = parse(r#"{"packages": [], "resolve": null}"#, p(), false).unwrap_err();
        assert!(matches!(err, ReadError::NoResolve { .. }), "{err:?}");
    }

    #[test]
    fn unknown_ids_are_refused() {
        let err = parse(
            r#"{"packages": [{"name": "a", "version": "1", "id": "a1"}],
                "resolve": {"nodes": [{"id": "a1", "dependencies": ["zz"]}]}}"#,
            p(),
            false,
        )
        .unwrap_err();
        assert!(
            matches!(err, ReadError::UnknownPackageId { ref id, .. } if id == "zz"),
            "{err:?}"
        );
        let err = parse(
            r#"{"packages": [], "resolve": {"nodes": [{"id": "ghost"}]}}"#,
            p(),
            false,
        )
        .unwrap_err();
        assert!(matches!(err, ReadError::UnknownPackageId { ref id, .. } if id == "ghost"));
        // Listed in `packages` but not resolved: the message must not claim it is unlisted.
        let err = parse(
            r#"{"packages": [{"name": "a", "version": "1", "id": "a1"},
                             {"name": "b", "version": "1", "id": "b1"}],
                "resolve": {"nodes": [{"id": "a1", "dependencies": ["b1"]}]}}"#,
            p(),
            false,
        )
        .unwrap_err();
        assert!(
            matches!(err, ReadError::UnknownPackageId { ref id, .. } if id == "b1"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "meta.json: resolve names package id \"b1\", which is not in \"packages\" or \
             has no node in \"resolve.nodes\""
        );
    }

    #[test]
    fn malformed_json_has_line_and_column() {
        let err = parse("{\n  \"packages\": [,]\n}", p(), false).unwrap_err();
        match err {
            ReadError::Json { at, .. } => assert_eq!((at.line, at.column), (2, 16)),
            other => panic!("{other:?}"),
        }
        let err = parse(r#"{"packages": [{"name": 1}]}"#, p(), false).unwrap_err();
        assert!(matches!(err, ReadError::Json { .. }), "{err:?}");
        let err = parse(r#"{"resolve": null}"#, p(), false).unwrap_err();
        assert!(
            err.to_string().contains("missing field `packages`"),
            "{err}"
        );
        let err = parse("", p(), false).unwrap_err();
        assert!(matches!(
            err,
            ReadError::Json {
                at: Location { line: 1, .. },
                ..
            }
        ));
    }

    #[test]
    fn deep_nesting_in_ignored_fields_is_an_error_not_a_stack_overflow() {
        // Unclosed: an EOF error at the end.
        let text = format!("{{\"x\": {}", "[".repeat(200_000));
        let err = parse(&text, p(), false).unwrap_err();
        assert!(
            matches!(
                err,
                ReadError::Json {
                    at: Location {
                        line: 1,
                        column: 200_006
                    },
                    ..
                }
            ),
            "{err}"
        );
        // Closed: skipped without recursion, then the missing fields are reported.
        let text = format!("{{\"x\": {}{}}}", "[".repeat(200_000), "]".repeat(200_000));
        let err = parse(&text, p(), false).unwrap_err();
        assert!(
            err.to_string().contains("missing field `packages`"),
            "{err}"
        );
        // Nested where a typed struct is expected: serde_json's recursion limit.
        let text = format!("{{\"packages\": [{}", "{\"a\": ".repeat(200_000));
        assert!(matches!(
            parse(&text, p(), false),
            Err(ReadError::Json { .. })
        ));
    }

    #[test]
    fn truncations_never_panic() {
        for end in (0..META.len()).step_by(7) {
            let r = parse(&META[..end], p(), false);
            assert!(
                matches!(r, Err(ReadError::Json { .. })),
                "prefix {end}: {r:?}"
            );
        }
    }
}
