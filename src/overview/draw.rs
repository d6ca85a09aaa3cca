//! Drawing an [`Overview`]: text lines (the layer tree, the Pools as bars), and the `dependsOn`
//! graph as Mermaid or Graphviz DOT. Plain strings: the printer decides on colour.

use std::fmt::Write as _;

use super::{Against, ClusterLine, LayerState, Overview};

/// A mark for a good or bad state.
fn mark(ok: bool) -> &'static str {
    if ok { "✔" } else { "✘" }
}

fn age(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// How an applied revision relates to HEAD, as a suffix (` = HEAD`, ` behind HEAD`, …).
fn against(a: Against) -> &'static str {
    match a {
        Against::Same => " = HEAD",
        Against::Behind => " behind HEAD",
        Against::Ahead => " ahead of HEAD",
        Against::Diverged => " diverged from HEAD",
        Against::Unknown => "",
    }
}

fn short_revision(revision: &str) -> String {
    match revision.rsplit_once(':') {
        Some((r#ref, sha)) => format!("{}{}", r#ref.trim_end_matches("sha1"), &sha[..sha.len().min(7)]),
        None => revision.to_owned(),
    }
}

fn layer_line(l: &LayerState, prefix: &str) -> String {
    let mut line = format!("{prefix}{} {}", mark(l.ready), l.name);
    if l.external {
        line.push_str(" (external)");
    }
    if l.suspended {
        line.push_str(" suspended");
    }
    if let Some(r) = &l.revision {
        let _ = write!(line, "  {}{}", short_revision(r), against(l.against_head));
    }
    if let Some(s) = l.age_seconds {
        let _ = write!(line, "  {}", age(s));
    }
    if let Some(m) = &l.message {
        let _ = write!(line, "  {m}");
    }
    line
}

/// The layers as a `dependsOn` tree: each layer under the last layer it depends on that the
/// profile names, roots first, in the order given.
fn tree(layers: &[LayerState]) -> Vec<String> {
    fn walk(layers: &[LayerState], parent: Option<&str>, indent: &str, out: &mut Vec<String>) {
        let children: Vec<&LayerState> = layers
            .iter()
            .filter(|l| {
                let known: Vec<&String> =
                    l.depends_on.iter().filter(|d| layers.iter().any(|x| &x.name == *d)).collect();
                match parent {
                    None => known.is_empty(),
                    Some(p) => known.last().is_some_and(|d| d.as_str() == p),
                }
            })
            .collect();
        for (i, l) in children.iter().enumerate() {
            let last = i + 1 == children.len();
            let (branch, next) = match parent {
                None => ("", String::new()),
                Some(_) if last => ("└─ ", format!("{indent}   ")),
                Some(_) => ("├─ ", format!("{indent}│  ")),
            };
            out.push(layer_line(l, &format!("  {indent}{branch}")));
            walk(layers, Some(&l.name), &next, out);
        }
    }
    let mut out = Vec::new();
    walk(layers, None, "", &mut out);
    out
}

/// A bar of `width` cells for a Pool: allocated `█`, available `▒`, the rest of `total` `·`, up
/// to `poolMax` `░`; `|` after the `poolMin`th cell when it falls inside.
fn bar(total: i64, allocated: i64, available: i64, pool_min: i64, pool_max: i64) -> String {
    let cells = usize::try_from(pool_max.clamp(1, 20)).unwrap_or(1);
    let scale = |n: i64| -> usize {
        let n = u64::try_from(n.clamp(0, pool_max.max(1))).unwrap_or(0);
        let max = u64::try_from(pool_max.max(1)).unwrap_or(1);
        usize::try_from((n * cells as u64).div_ceil(max)).unwrap_or(0).min(cells)
    };
    let (a, v, t) = (scale(allocated), scale(allocated + available), scale(total.max(allocated + available)));
    let mut s: Vec<char> = (0..cells)
        .map(|i| {
            if i < a {
                '█'
            } else if i < v {
                '▒'
            } else if i < t {
                '·'
            } else {
                '░'
            }
        })
        .collect();
    let min = scale(pool_min);
    if min > 0 && min < cells {
        s.insert(min, '|');
    }
    format!("[{}]", s.into_iter().collect::<String>())
}

/// The overview as text lines.
#[must_use]
pub(crate) fn text(o: &Overview) -> Vec<String> {
    let mut out = vec![format!("cluster {}: {}", o.cluster, if o.ready { "Ready" } else { "not Ready" })];
    out.push("layers (dependsOn):".into());
    out.extend(tree(&o.layers));
    if !o.releases.is_empty() {
        out.push("HelmReleases:".into());
        for r in &o.releases {
            let mut line = format!("  {} {}/{}", mark(r.ready), r.namespace, r.name);
            if let Some(c) = &r.chart {
                let _ = write!(line, "  chart {c}");
            }
            if let Some(v) = &r.version {
                let _ = write!(line, " {v}");
            }
            if let Some(a) = &r.app_version {
                let _ = write!(line, " (app {a})");
            }
            if let Some(l) = r.last_attempt.as_ref().filter(|l| r.version.as_ref() != Some(*l)) {
                let _ = write!(line, "  last attempt {l}");
            }
            if let Some(m) = &r.message {
                let _ = write!(line, "  {m}");
            }
            out.push(line);
        }
    }
    let s = &o.server;
    out.push(format!(
        "server: {} {}  {}{}",
        mark(s.healthy),
        s.service,
        if s.reachable { "" } else { "unreachable: " },
        s.detail
    ));
    if !o.pools.is_empty() {
        out.push("pools (allocated █, available ▒, starting ·, free ░, poolMin |):".into());
        let width = o.pools.iter().map(|p| p.name.len()).max().unwrap_or(0);
        for p in &o.pools {
            out.push(format!(
                "  {} {:width$} {:4} {}  total {}/{} (poolMin {}), allocated {}, available {}{}",
                mark(p.healthy),
                p.name,
                p.runtime,
                bar(p.total, p.allocated, p.available, p.pool_min, p.pool_max),
                p.total,
                p.pool_max,
                p.pool_min,
                p.allocated,
                p.available,
                if p.healthy { String::new() } else { format!("  {}", p.message) },
            ));
        }
    }
    if !o.runtimes.is_empty() {
        out.push("runtime classes:".into());
        for r in &o.runtimes {
            let glyph = match r.runnable {
                Some(runnable) => mark(runnable),
                None => "?",
            };
            let on = match (&r.message, r.nodes.is_empty()) {
                (Some(why), _) => why.clone(),
                (None, true) => "no node".to_owned(),
                (None, false) => r.nodes.join(", "),
            };
            out.push(match &r.handler {
                Some(h) => format!("  {glyph} {} (handler {h}): {on}", r.class),
                None => format!("  {glyph} {}: {on}", r.class),
            });
        }
    }
    if let Some(a) = &o.acceptance {
        out.push(acceptance_line(a));
    }
    out
}

/// `acceptance: ✔ Ready, revision 1a2b… (current), 4m ago  (osbx-acceptance/osbx-acceptance-report)`.
fn acceptance_line(a: &super::AcceptanceState) -> String {
    if !a.published {
        return format!("acceptance: {} no report yet ({})", mark(false), a.report);
    }
    let mut age = a.age_seconds.map_or_else(|| "at an unknown time".to_owned(), |s| format!("{} ago", age(s.max(0))));
    if a.stale {
        age = format!("stale: {age}, older than {}", self::age(a.stale_after_seconds));
    }
    format!(
        "acceptance: {} {}, revision {} ({}), {age}  ({})",
        mark(a.green()),
        a.summary.as_deref().unwrap_or_default(),
        a.revision.as_deref().unwrap_or_default(),
        if a.current { "current" } else { "not the rendered one" },
        a.report
    )
}

/// One cluster of a fleet: `✔ lab-a  layers 2/2  pools 2/2  main@4f1c2e9 = HEAD`.
#[must_use]
pub(crate) fn fleet_line(c: &ClusterLine, width: usize) -> String {
    if let Some(e) = &c.error {
        return format!("{} {:width$}  unreadable: {e}", mark(false), c.cluster);
    }
    let mut line = format!(
        "{} {:width$}  layers {}/{} Ready  pools {}/{} healthy",
        mark(c.ready),
        c.cluster,
        c.layers_ready,
        c.layers,
        c.pools_healthy,
        c.pools
    );
    if let Some(r) = &c.revision {
        let _ = write!(line, "  {}{}", short_revision(r), against(c.against_head));
    }
    line
}

fn id(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}

/// The `dependsOn` graph as a Mermaid flowchart, each layer marked Ready or not.
#[must_use]
pub(crate) fn mermaid(o: &Overview) -> String {
    let mut s = String::from("graph TD\n");
    for l in &o.layers {
        let class = if l.ready { "ready" } else { "notready" };
        let _ = writeln!(s, "  {}[\"{} {}\"]:::{class}", id(&l.name), mark(l.ready), l.name);
    }
    for l in &o.layers {
        for d in &l.depends_on {
            let _ = writeln!(s, "  {} --> {}", id(d), id(&l.name));
        }
    }
    s.push_str("  classDef ready fill:#d4f7d4,stroke:#2b8a3e\n  classDef notready fill:#ffe3e3,stroke:#c92a2a\n");
    s
}

/// The `dependsOn` graph in Graphviz DOT, each layer coloured by Ready.
#[must_use]
pub(crate) fn dot(o: &Overview) -> String {
    let mut s = format!("digraph \"{}\" {{\n  rankdir=TB;\n  node [shape=box, style=filled];\n", o.cluster);
    for l in &o.layers {
        let colour = if l.ready { "palegreen" } else { "mistyrose" };
        let _ = writeln!(s, "  \"{}\" [label=\"{} {}\", fillcolor={colour}];", l.name, mark(l.ready), l.name);
    }
    for l in &o.layers {
        for d in &l.depends_on {
            let _ = writeln!(s, "  \"{d}\" -> \"{}\";", l.name);
        }
    }
    s.push_str("}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::overview::{PoolState, ServerState};
    use crate::profile::{self, ProfileSource};

    /// The fresh-cluster profile's layers, all Ready but the pools layer.
    fn fixed() -> Overview {
        let loaded = profile::load(&ProfileSource::Embedded("fresh-cluster".into())).unwrap();
        let layers = loaded
            .profile
            .layers
            .iter()
            .map(|l| LayerState {
                name: l.name.clone(),
                depends_on: l.depends_on.clone(),
                external: false,
                exists: true,
                ready: l.name != "opensandbox-pools",
                suspended: false,
                message: (l.name == "opensandbox-pools").then(|| "health check failed".to_owned()),
                revision: Some("main@sha1:4f1c2e9a".into()),
                against_head: Against::Same,
                age_seconds: Some(720),
            })
            .collect();
        Overview {
            cluster: "lab".into(),
            layers,
            releases: vec![crate::overview::ReleaseState {
                namespace: "opensandbox-system".into(),
                name: "opensandbox".into(),
                exists: true,
                ready: true,
                chart: Some("opensandbox".into()),
                version: Some("0.2.2".into()),
                app_version: Some("0.2.2".into()),
                last_attempt: Some("0.2.2".into()),
                message: None,
            }],
            server: ServerState {
                service: "opensandbox-system/opensandbox-server".into(),
                reachable: true,
                healthy: true,
                detail: "/health 200".into(),
            },
            pools: vec![PoolState {
                name: "pod".into(),
                runtime: "runc".into(),
                exists: true,
                total: 3,
                allocated: 1,
                available: 1,
                pool_min: 2,
                pool_max: 8,
                healthy: true,
                message: String::new(),
            }],
            runtimes: vec![crate::overview::RuntimeState {
                class: "kata-qemu".into(),
                handler: Some("kata-qemu".into()),
                nodes: vec!["node-1".into(), "node-2".into()],
                runnable: Some(true),
                message: None,
            }],
            acceptance: Some(crate::overview::AcceptanceState {
                report: "osbx-acceptance/osbx-acceptance-report".into(),
                published: true,
                ready: true,
                summary: Some("Ready".into()),
                revision: Some("cb0bad26a09d39e5".into()),
                current: true,
                time: Some("2026-12-05T12:00:00Z".into()),
                age_seconds: Some(300),
                stale: false,
                stale_after_seconds: 2700,
            }),
            ready: false,
        }
    }

    #[test]
    fn the_tree_nests_layers_under_what_they_depend_on_and_pools_draw_as_bars() {
        let lines = text(&fixed());
        assert!(lines.iter().any(|l| l.starts_with("  ✔ kata  main@4f1c2e9 = HEAD  12m")), "{lines:#?}");
        assert!(
            lines.iter().any(|l| l.contains("└─ ✘ opensandbox-pools") && l.ends_with("health check failed")),
            "{lines:#?}"
        );
        assert!(
            lines.iter().any(|l| l.contains("[█▒|·░░░░░]  total 3/8 (poolMin 2), allocated 1, available 1")),
            "{lines:#?}"
        );
        assert_eq!(
            lines.last().unwrap(),
            "acceptance: ✔ Ready, revision cb0bad26a09d39e5 (current), 5m ago  (osbx-acceptance/osbx-acceptance-report)"
        );
    }

    /// `tests/golden/status.txt` and `status.json` hold the text and JSON of [`fixed`] (refreshed
    /// with `OSBX_UPDATE_EXAMPLES=1`, like the integration tests' golden files).
    #[test]
    fn the_text_and_json_match_the_golden_files() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
        let o = fixed();
        let text = text(&o).join("\n") + "\n";
        let json = serde_json::to_string_pretty(&o).unwrap() + "\n";
        for (name, actual) in [("status.txt", text), ("status.json", json)] {
            let path = dir.join(name);
            if std::env::var_os("OSBX_UPDATE_EXAMPLES").is_some() {
                std::fs::write(&path, &actual).unwrap();
            }
            let expected = std::fs::read_to_string(&path).unwrap_or_default();
            assert_eq!(expected, actual, "tests/golden/{name} is stale: run OSBX_UPDATE_EXAMPLES=1 cargo test --lib");
        }
    }

    /// docs/status.md shows the Mermaid graph of [`fixed`], as this build draws it.
    #[test]
    fn the_mermaid_graph_in_docs_status_md_is_what_osbx_draws() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/status.md");
        let doc = std::fs::read_to_string(&path).unwrap();
        let (open, close) = ("```mermaid\n", "```\n<!-- /status-mermaid -->");
        let start = doc.find(open).expect("the mermaid block") + open.len();
        let end = doc[start..].find(close).expect("its end") + start;
        let drawn = mermaid(&fixed());
        if std::env::var_os("OSBX_UPDATE_EXAMPLES").is_some() {
            std::fs::write(&path, format!("{}{drawn}{}", &doc[..start], &doc[end..])).unwrap();
            return;
        }
        assert_eq!(&doc[start..end], drawn, "docs/status.md is stale: run OSBX_UPDATE_EXAMPLES=1 cargo test --lib");
    }
}
