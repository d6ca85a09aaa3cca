//! The architecture, measured: the import graph of `src/` has no cycles and no import runs back
//! up the layers CONTRIBUTING.md draws; `pub` means reachable from outside the crate.

mod graph;

use std::collections::{BTreeMap, BTreeSet};

use graph::{Graph, Module, show};

use crate::support::root;

/// Sibling cycles: for every module with children, the graph among its children (each with its
/// descendants folded in) must have no cycle.
fn sibling_cycles(g: &Graph) -> Vec<(Module, Vec<Module>)> {
    let parents: BTreeSet<Module> =
        g.edges.keys().filter(|m| !m.is_empty()).map(|m| m[..m.len() - 1].to_vec()).collect();
    let mut out = Vec::new();
    for p in parents {
        let child_of =
            |m: &Module| -> Option<Module> { (m.len() > p.len() && m.starts_with(&p)).then(|| m[..=p.len()].to_vec()) };
        let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
        for (a, targets) in &g.edges {
            let Some(ca) = child_of(a) else { continue };
            edges.entry(ca.clone()).or_default();
            for t in targets {
                if let Some(ct) = child_of(t)
                    && ct != ca
                {
                    edges.entry(ca.clone()).or_default().insert(ct);
                }
            }
        }
        let folded = Graph { edges, files: BTreeMap::new() };
        for c in folded.cycles(|_, _| true) {
            out.push((p.clone(), c));
        }
    }
    out
}

#[test]
fn report() {
    let g = Graph::read(&root().join("src"));
    for (p, c) in sibling_cycles(&g) {
        println!("cycle under {}: {}", show(&p), c.iter().map(|m| show(m)).collect::<Vec<_>>().join(" ⇄ "));
    }
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, ts) in &g.edges {
        for t in ts {
            if let (Some(x), Some(y)) = (a.first(), t.first())
                && x != y
            {
                top.entry(x.clone()).or_default().insert(y.clone());
            }
        }
    }
    for (a, ts) in top {
        println!("{a} -> {}", ts.into_iter().collect::<Vec<_>>().join(", "));
    }
    let mut back = 0;
    for (a, ts) in &g.edges {
        for t in ts {
            if a.starts_with(t) {
                back += 1;
                println!("back to parent: {} -> {}", show(a), show(t));
            }
        }
    }
    println!("{back}");
}
