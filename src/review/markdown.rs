//! A review as a pull-request comment (GitHub-flavoured Markdown): what was compared, a summary
//! table per cluster and layer, the notes about sandboxes, then one collapsible section per
//! changed object with its diff (Secret values masked, as everywhere). The text stays under
//! `limit` characters (a GitHub comment holds 65,536): what does not fit is cut, and the comment
//! says how much and how to see it all.

use std::fmt::Write as _;

use super::{Review, changed_counts};

/// The review as Markdown of at most `limit` characters.
#[must_use]
pub(crate) fn markdown(review: &Review, limit: usize) -> String {
    let mut head = String::new();
    let n = review.changes.len();
    let clusters = review.clusters.join(", ");
    if n == 0 {
        let _ = writeln!(head, "### osbx diff: no change on {clusters}\n");
    } else {
        let _ = writeln!(head, "### osbx diff: {n} change{} on {clusters}\n", if n == 1 { "" } else { "s" });
    }
    let _ = writeln!(head, "Compared {} with **{}**.", review.head.label, review.base.label);
    for (cluster, how) in &review.base.how {
        let _ = writeln!(head, "- base of `{cluster}`: {how}");
    }
    if let Some(why) = &review.base.unrenderable {
        let _ = writeln!(
            head,
            "\n> [!WARNING]\n> The base could not be rendered, so everything the head holds is shown as new:\n> {}",
            why.replace('\n', "\n> ")
        );
    }
    match &review.helm {
        Some(helm) => {
            let _ = writeln!(head, "\nCharts expanded with {helm}; objects a chart renders name their HelmRelease.");
        }
        None => {
            let _ = writeln!(head, "\nCharts not expanded (`--no-charts`): the Flux objects only.");
        }
    }
    let counts = changed_counts(review);
    if !counts.is_empty() {
        head.push_str("\n| Cluster | Layer | Created | Changed | Deleted | Unchanged |\n|---|---|--:|--:|--:|--:|\n");
        for c in counts {
            let _ = writeln!(
                head,
                "| {} | {} | {} | {} | {} | {} |",
                c.cluster, c.layer, c.created, c.configured, c.deleted, c.unchanged
            );
        }
    }
    let noted: Vec<_> = review.changes.iter().filter(|e| !e.notes.is_empty()).collect();
    if !noted.is_empty() {
        head.push_str("\n#### What it means for sandboxes\n\n");
        for e in noted {
            for note in &e.notes {
                let _ = writeln!(head, "- **{}** ({}): {note}", e.object, e.clusters.join(", "));
            }
        }
    }
    let mut out = head;
    if n > 0 {
        out.push_str("\n#### Objects\n\n");
    }
    let mut shown = 0;
    for e in &review.changes {
        let from = e.release.as_ref().map_or_else(String::new, |r| format!(", rendered by the chart of {r}"));
        let mut section = format!(
            "<details><summary><code>{}</code> <b>{}</b> (layer {}{from}; {})</summary>\n\n```diff\n",
            e.action,
            e.object,
            e.layer,
            e.clusters.join(", ")
        );
        let closing = "```\n\n</details>\n\n";
        let room = limit.saturating_sub(out.len() + section.len() + closing.len() + footer_room(n - shown));
        if room < 200 {
            break;
        }
        let diff = if e.diff.len() > room {
            let mut cut = room.saturating_sub(80);
            while !e.diff.is_char_boundary(cut) {
                cut -= 1;
            }
            let mut d = e.diff[..cut].to_owned();
            let _ = writeln!(d, "\n… ({} more characters of this diff cut)", e.diff.len() - cut);
            d
        } else {
            e.diff.clone()
        };
        section.push_str(&diff);
        if !section.ends_with('\n') {
            section.push('\n');
        }
        section.push_str(closing);
        out.push_str(&section);
        shown += 1;
    }
    if shown < n {
        let _ = writeln!(
            out,
            "_Cut to fit: {} of {n} objects shown; the {} others are counted in the table above. Run `osbx diff --base` locally (or `-o json`) for everything._",
            shown,
            n - shown
        );
    }
    out
}

/// Room kept for the line that says what was cut.
fn footer_room(left: usize) -> usize {
    if left == 0 { 0 } else { 200 }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::{Count, Entry, Review, SideInfo};
    use super::*;
    use crate::changeset::Action;
    use crate::object::KnownKind;

    fn review(n: usize, diff: &str) -> Review {
        let side = |label: &str| SideInfo { label: label.into(), how: BTreeMap::new(), unrenderable: None };
        Review {
            base: side("origin/main (1234567)"),
            head: side("the work tree"),
            clusters: vec!["c".into()],
            helm: Some("helm v3.22.0".into()),
            summary: vec![Count { cluster: "c".into(), layer: "l".into(), configured: n, ..Count::default() }],
            changes: (0..n)
                .map(|i| Entry {
                    clusters: vec!["c".into()],
                    layer: "l".into(),
                    object: format!("ConfigMap/ns/cm-{i}"),
                    id: KnownKind::CONFIG_MAP.object(Some("ns"), &format!("cm-{i}")),
                    action: Action::Configured,
                    release: None,
                    notes: if i == 0 { vec!["a note".into()] } else { Vec::new() },
                    diff: diff.into(),
                })
                .collect(),
        }
    }

    #[test]
    fn everything_fits_or_the_comment_says_what_was_cut() {
        let text = markdown(&review(3, "-a\n+b\n"), 65_536);
        assert!(text.contains("### osbx diff: 3 changes on c"), "{text}");
        assert!(text.contains("| c | l | 0 | 3 | 0 | 0 |"), "{text}");
        assert!(text.contains("- **ConfigMap/ns/cm-0** (c): a note"), "{text}");
        assert_eq!(text.matches("<details>").count(), 3);
        assert!(!text.contains("Cut to fit"));

        let big = "+x\n".repeat(2_000);
        let text = markdown(&review(40, &big), 20_000);
        assert!(text.len() <= 20_000, "{}", text.len());
        assert!(text.contains("Cut to fit:"), "{text}");
        assert!(text.contains("| c | l | 0 | 40 | 0 | 0 |"));
    }
}
