//! The architecture, measured (CONTRIBUTING.md's "Layers" and "Architecture, measured"): the
//! import graph of `src/` has no cycle between the modules of one directory, no import runs back
//! up the layers CONTRIBUTING.md lists, and the counts recorded there are the tree's.

mod graph;

use std::collections::{BTreeMap, BTreeSet};

use graph::{Graph, Module, show};

use crate::support::root;

/// The cycles between the modules of one directory: for every module with children, the graph
/// among its children (each with its descendants folded in). Edges between a module and its
/// own parent are a module using its namespace, not a cycle.
fn sibling_cycles(g: &Graph) -> Vec<String> {
    let parents: BTreeSet<Module> =
        g.edges.keys().filter(|m| !m.is_empty()).map(|m| m[..m.len() - 1].to_vec()).collect();
    let mut out = Vec::new();
    for p in parents {
        let child_of =
            |m: &Module| -> Option<Module> { (m.len() > p.len() && m.starts_with(&p)).then(|| m[..=p.len()].to_vec()) };
        let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
        for (a, targets) in &g.edges {
            let Some(ca) = child_of(a) else { continue };
            let entry = edges.entry(ca.clone()).or_default();
            entry.extend(targets.iter().filter_map(child_of).filter(|ct| *ct != ca));
        }
        let folded = Graph { edges, files: BTreeMap::new() };
        for c in folded.cycles() {
            out.push(c.iter().map(|m| show(m)).collect::<Vec<_>>().join(" ⇄ "));
        }
    }
    out
}

/// The layers CONTRIBUTING.md lists, top first: each top-level module with its rank (higher
/// layers have higher ranks).
fn layers() -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(root().join("CONTRIBUTING.md")).unwrap();
    let block = text.split("<!-- layers -->").nth(1).expect("CONTRIBUTING.md has a <!-- layers --> block");
    let lines: Vec<&str> =
        block.lines().skip_while(|l| !l.starts_with("```")).skip(1).take_while(|l| !l.starts_with("```")).collect();
    let mut out = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        for m in line.split_whitespace() {
            assert!(out.insert(m.to_owned(), lines.len() - i).is_none(), "{m} is listed twice");
        }
    }
    out
}

/// The imports from one top-level module into another, folded.
fn top_level(g: &Graph) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (a, targets) in &g.edges {
        for t in targets {
            if let (Some(x), Some(y)) = (a.first(), t.first())
                && x != y
            {
                out.insert((x.clone(), y.clone()));
            }
        }
    }
    out
}

#[test]
fn no_module_cycles() {
    let cycles = sibling_cycles(&Graph::read(&root().join("src")));
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn no_import_runs_back_up_the_layers() {
    let g = Graph::read(&root().join("src"));
    let ranks = layers();
    let modules: BTreeSet<String> = g.edges.keys().filter_map(|m| m.first().cloned()).collect();
    let unlisted: Vec<&String> = modules.iter().filter(|m| !ranks.contains_key(*m)).collect();
    assert!(unlisted.is_empty(), "top-level modules missing from CONTRIBUTING.md's layers: {unlisted:?}");
    let gone: Vec<&String> = ranks.keys().filter(|m| !modules.contains(*m)).collect();
    assert!(gone.is_empty(), "CONTRIBUTING.md's layers list modules that do not exist: {gone:?}");
    let up: Vec<String> =
        top_level(&g).into_iter().filter(|(a, b)| ranks[a] <= ranks[b]).map(|(a, b)| format!("{a} → {b}")).collect();
    assert!(up.is_empty(), "imports that do not run down the layers:\n{}", up.join("\n"));
}

/// The `pub` items and fields of the crate (`pub(crate)` and narrower left out).
fn pub_items(src: &std::path::Path) -> (usize, usize) {
    let g = Graph::read(src);
    let (mut items, mut fields) = (0, 0);
    for file in g.files.values() {
        let (i, f) = graph::count_pub(file);
        items += i;
        fields += f;
    }
    (items, fields)
}

#[test]
fn the_recorded_measures_are_the_tree_s() {
    let g = Graph::read(&root().join("src"));
    let (items, fields) = pub_items(&root().join("src"));
    let text = std::fs::read_to_string(root().join("CONTRIBUTING.md")).unwrap();
    let row = |name: &str| -> String {
        text.lines()
            .find(|l| l.starts_with(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("CONTRIBUTING.md has no `| {name} |` row"))
            .split('|')
            .nth(3)
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    assert_eq!(row("import cycles"), sibling_cycles(&g).len().to_string());
    assert_eq!(row("`pub` items (and fields)"), format!("{items} ({fields})"));
    let needs = g.files.values().map(graph::count_permission_fns).sum::<usize>();
    assert_eq!(row("places that derive a permission"), needs.to_string());
}

/// The longest a file of `src/` may be: one screenful of ideas, split along a seam beyond it.
const MAX_LINES: usize = 500;

#[test]
fn no_file_of_src_is_over_500_lines() {
    fn walk(dir: &std::path::Path, out: &mut Vec<(String, usize)>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let lines = std::fs::read_to_string(&path).unwrap().lines().count();
                let rel = path.strip_prefix(root()).unwrap().display().to_string();
                out.push((rel, lines));
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("src"), &mut files);
    let over: Vec<String> =
        files.iter().filter(|(_, n)| *n > MAX_LINES).map(|(f, n)| format!("{f}: {n} lines")).collect();
    assert!(over.is_empty(), "files over {MAX_LINES} lines: split them along a seam\n{}", over.join("\n"));
}

/// Doc comments that say only the item's name (`/// Namespace.` on `namespace`) either say
/// something or go.
#[test]
fn no_doc_comment_only_repeats_its_name() {
    let g = Graph::read(&root().join("src"));
    let mut bare = Vec::new();
    for (m, file) in &g.files {
        for (name, doc) in graph::name_only_docs(file) {
            bare.push(format!("{}: {name}: /// {doc}", show(m)));
        }
    }
    assert!(bare.is_empty(), "{} doc comments only repeat the name:\n{}", bare.len(), bare.join("\n"));
}

/// `src/flux/` is Flux's meaning and nothing else: it names only the object model below it
/// (`object`, `merge`, `hash`), and its code (tests aside) reaches no cluster, file, program or
/// repository.
#[test]
fn flux_is_a_pure_room() {
    let g = Graph::read(&root().join("src"));
    let allowed = ["flux", "object", "merge", "hash"];
    let mut wrong = Vec::new();
    for (m, targets) in g.edges.iter().filter(|(m, _)| m.first().is_some_and(|f| f == "flux")) {
        for t in targets.iter().filter(|t| t.first().is_some_and(|f| !allowed.contains(&f.as_str()))) {
            wrong.push(format!("{} → {}", show(m), show(t)));
        }
        let path = root().join("src").join(m.join("/"));
        let file = if path.is_dir() { path.join("mod.rs") } else { path.with_extension("rs") };
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for reach in ["std::process", "std::fs", "std::net", "kube::", "git2::", "tokio::", "Command::"] {
            if code.contains(reach) {
                wrong.push(format!("{}: {reach}", show(m)));
            }
        }
    }
    assert!(!g.edges.keys().all(|m| m.first().is_none_or(|f| f != "flux")), "there is a src/flux/");
    assert!(wrong.is_empty(), "flux/ reaches beyond Flux's meaning:\n{}", wrong.join("\n"));
}

/// `commands/` resolves settings, calls the domain and prints what it returns: it names no
/// client of a cluster, a repository or a cipher (kube, k8s-openapi, git2, `sops`), fans out no
/// streams of work, and reaches clusters only through `session`'s one connect.
#[test]
fn commands_resolve_settings_call_the_domain_and_print() {
    let g = Graph::read(&root().join("src"));
    let mut wrong = Vec::new();
    for m in g.files.keys().filter(|m| m.first().is_some_and(|f| f == "commands")) {
        for t in &g.edges[m] {
            if t.first().is_some_and(|f| f == "sops") || t.starts_with(&["cluster".to_owned(), "ssa".to_owned()]) {
                wrong.push(format!("{} → {}", show(m), show(t)));
            }
        }
        let path = root().join("src").join(m.join("/"));
        let file = if path.is_dir() { path.join("mod.rs") } else { path.with_extension("rs") };
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for reach in ["kube::", "k8s_openapi::", "git2::", "futures::stream", "StreamExt", "crate::sops"] {
            if code.contains(reach) {
                wrong.push(format!("{}: {reach}", show(m)));
            }
        }
        if m.last().is_some_and(|l| l != "session") && code.contains("Cluster::connect") {
            wrong.push(format!("{}: Cluster::connect (connect through session::start_connect)", show(m)));
        }
    }
    assert!(wrong.is_empty(), "commands/ does the domain's work:\n{}", wrong.join("\n"));
}
