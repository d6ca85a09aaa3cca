//! A review as a pull-request comment (GitHub-flavoured Markdown): what was compared, a summary
//! table per cluster and layer, the notes about sandboxes, then one collapsible section per
//! changed object with its diff (Secret values masked, as everywhere). The text stays under
//! `limit` characters (a GitHub comment holds 65,536): what does not fit is cut, and the comment
//! says how much and how to see it all.
//!
//! GitHub does more with a comment's text than Markdown does: outside code it links bare URLs
//! (`http://`, `https://`), `www.` names and email addresses (the GFM spec's autolinks extension),
//! and turns `@user` and `@org/team` into mentions that notify them and `#1`, `GH-1` and
//! `owner/repo#1` into references that link (and announce themselves on) that issue
//! (docs.github.com, "Autolinked references and URLs", "Basic writing and formatting syntax").
//! Those filters read the text after Markdown is parsed, so a backslash or an HTML entity does
//! not stop them (`\@user` and `&#64;user` are still the text `@user`), and they run on the text
//! of HTML elements too (the `<summary>` of an object). So every text from the change gets an
//! invisible [`UNLINK`] (U+2060 WORD JOINER) where it would start one: after each `@` and `#`,
//! between a scheme's `:` and `//`, between `www` and its `.`, after `GH-`. GitHub shows the text
//! as the change wrote it (the joiner has no width) and links or notifies no one.
//!
//! The diffs are in fenced code blocks, and the cluster names of the base's lines in code spans:
//! there GitHub formats and links nothing ("Basic writing and formatting syntax": text within
//! backticks "will not be formatted"; a code block's content is literal text in CommonMark, and
//! the GFM autolinks extension applies to inline text only). GitHub's docs say so of formatting
//! and do not spell it out for mentions and references; that these are not made in code is how
//! github.com behaves, not a documented promise, which is why only code is left as it is.

use std::fmt::Write as _;

use super::{Review, changed_counts};

/// The invisible character that keeps GitHub from linking or mentioning (U+2060 WORD JOINER):
/// it has no width, and no mention, reference or autolink runs through it.
const UNLINK: char = '\u{2060}';

/// Whether [`UNLINK`] goes before `c`, the character after `before` (what GitHub would start a
/// mention, a reference or a link at: `@x`, `#x`, `GH-x`, `scheme://`, `www.`).
fn unlink_before(before: &[char], c: char) -> bool {
    let ends = |tail: &str| {
        let n = tail.chars().count();
        before.len() >= n && before[before.len() - n..].iter().copied().map(|c| c.to_ascii_lowercase()).eq(tail.chars())
    };
    match c {
        '/' => ends(":"),
        '.' => ends("www"),
        _ => ends("@") || ends("#") || ends("gh-"),
    }
}

/// `s` with [`UNLINK`] wherever GitHub would start a mention, a reference or a link.
fn unlinked(s: &str) -> Vec<char> {
    let mut out: Vec<char> = Vec::with_capacity(s.len());
    for c in s.chars() {
        if unlink_before(&out, c) {
            out.push(UNLINK);
        }
        out.push(c);
    }
    out
}

/// Text from the change (a name, a note, an error) as literal Markdown on one line: the
/// characters Markdown or HTML give a meaning to inline escaped, line breaks made spaces, so it
/// can neither start a block nor open a link, an emphasis, a code span or a tag; and [`unlinked`],
/// so that GitHub makes no mention, reference or link of it.
fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in unlinked(s) {
        match c {
            '\n' | '\r' => out.push(' '),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '~' | '|' | '!' | '#' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Text from the change inside an HTML element (the `<summary>` of an object): escaped for HTML,
/// on one line (a blank line would end the HTML block), and [`unlinked`] (GitHub's mentions and
/// references are made in HTML elements' text too).
fn html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in unlinked(s) {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// Text from the change as an inline code span on one line, delimited by more backticks than
/// any run of them in it (and padded when it starts or ends with one), so it cannot close early.
fn code(s: &str) -> String {
    let s: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let ticks = "`".repeat(longest_run(&s) + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') { " " } else { "" };
    format!("{ticks}{pad}{s}{pad}{ticks}")
}

/// A code fence that `body` cannot close: one backtick more than its longest run (at least three).
fn fence(body: &str) -> String {
    "`".repeat((longest_run(body) + 1).max(3))
}

/// The longest run of backticks in `s`.
fn longest_run(s: &str) -> usize {
    let (mut longest, mut run) = (0, 0);
    for c in s.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    longest
}

/// The clusters, named when their list is short, else counted (a fleet's header stays small).
fn clusters_of(names: &[String]) -> String {
    let joined = names.join(", ");
    if joined.len() <= 200 { text(&joined) } else { format!("{} clusters", names.len()) }
}

/// The line that says the summary was cut, and room kept for it.
const HEAD_CUT: &str = "\n_Cut to fit: the summary is longer than the comment may be; run `osbx diff --base` locally (or `-o json`) for everything._\n";

/// The review as Markdown of at most `limit` characters (bytes), header included. Every text
/// that comes from the change is escaped ([`text`], [`html`]) or fenced so that it cannot close
/// its fence ([`fence`]): the change cannot write the comment's Markdown.
#[must_use]
pub(crate) fn markdown(review: &Review, limit: usize) -> String {
    let mut head = header(review);
    let n = review.changes.len();
    // The header alone may not fit (a fleet's table, many notes): cut at a line, say so.
    if head.len() > limit {
        let room = limit.saturating_sub(HEAD_CUT.len());
        let mut cut = room.min(head.len());
        while !head.is_char_boundary(cut) {
            cut -= 1;
        }
        let cut = head[..cut].rfind('\n').map_or(0, |i| i + 1);
        head.truncate(cut);
        if head.len() + HEAD_CUT.len() <= limit {
            head.push_str(HEAD_CUT);
        }
        return head;
    }
    objects(review, head, n, limit)
}

/// What was compared, the summary table and the notes.
fn header(review: &Review) -> String {
    let mut head = String::new();
    let n = review.changes.len();
    let clusters = clusters_of(&review.clusters);
    if n == 0 {
        let _ = writeln!(head, "### osbx diff: no change on {clusters}\n");
    } else {
        let _ = writeln!(head, "### osbx diff: {n} change{} on {clusters}\n", if n == 1 { "" } else { "s" });
    }
    let _ = writeln!(head, "Compared {} with **{}**.", text(&review.head.label), text(&review.base.label));
    for (cluster, how) in &review.base.how {
        let _ = writeln!(head, "- base of {}: {}", code(cluster), text(how));
    }
    if let Some(why) = &review.base.unrenderable {
        let _ = writeln!(
            head,
            "\n> [!WARNING]\n> The base could not be rendered, so everything the head holds is shown as new:\n> {}",
            text(why)
        );
    }
    match &review.helm {
        Some(helm) => {
            let _ = writeln!(
                head,
                "\nCharts expanded with {}; objects a chart renders name their HelmRelease.",
                text(helm)
            );
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
                text(&c.cluster),
                text(&c.layer),
                c.created,
                c.configured,
                c.deleted,
                c.unchanged
            );
        }
    }
    let noted: Vec<_> = review.changes.iter().filter(|e| !e.notes.is_empty()).collect();
    if !noted.is_empty() {
        head.push_str("\n#### What it means for sandboxes\n\n");
        for e in noted {
            for note in &e.notes {
                let _ = writeln!(head, "- **{}** ({}): {}", text(&e.object), text(&e.clusters.join(", ")), text(note));
            }
        }
    }
    head
}

/// `head`, then one collapsible section per change, as many as fit in `limit`.
fn objects(review: &Review, head: String, n: usize, limit: usize) -> String {
    let mut out = head;
    if n > 0 {
        out.push_str("\n#### Objects\n\n");
    }
    let mut shown = 0;
    for e in &review.changes {
        let from = e.release.as_ref().map_or_else(String::new, |r| format!(", rendered by the chart of {}", html(r)));
        let fence = fence(&e.diff);
        let mut section = format!(
            "<details><summary><code>{}</code> <b>{}</b> (layer {}{from}; {})</summary>\n\n{fence}diff\n",
            e.action,
            html(&e.object),
            html(&e.layer),
            html(&e.clusters.join(", "))
        );
        let closing = format!("{fence}\n\n</details>\n\n");
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
        section.push_str(&closing);
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

    /// What a CommonMark + GFM-tables parser makes of `md`: the text of every HTML node, heading,
    /// link, image and emphasis, and the code blocks.
    fn parsed(md: &str) -> (Vec<String>, Vec<String>) {
        use pulldown_cmark::{Event, Options, Parser, Tag};
        let (mut structure, mut code) = (Vec::new(), Vec::new());
        let mut in_code = false;
        for event in Parser::new_ext(md, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH) {
            match event {
                Event::Html(h) | Event::InlineHtml(h) => structure.push(format!("html {h}")),
                Event::Start(Tag::CodeBlock(_)) => {
                    in_code = true;
                    code.push(String::new());
                }
                Event::End(pulldown_cmark::TagEnd::CodeBlock) => in_code = false,
                Event::Text(t) if in_code => code.last_mut().unwrap().push_str(&t),
                Event::Start(
                    t @ (Tag::Heading { .. }
                    | Tag::Link { .. }
                    | Tag::Image { .. }
                    | Tag::Emphasis
                    | Tag::Strikethrough
                    | Tag::BlockQuote(_)),
                ) => structure.push(format!("{t:?}")),
                _ => {}
            }
        }
        (structure, code)
    }

    /// A one-change review whose diff and every name, label and note the change gives hold
    /// `hostile`.
    fn hostile_everywhere(hostile: &str) -> Review {
        let mut r = review(1, &format!("-a: 1\n+a: {hostile}\n"));
        r.changes[0].object = format!("ConfigMap/ns/{hostile}");
        r.changes[0].layer = hostile.into();
        r.changes[0].release = Some(hostile.into());
        r.changes[0].notes = vec![hostile.into()];
        r.changes[0].clusters = vec![hostile.into()];
        r.summary[0].cluster = hostile.into();
        r.summary[0].layer = hostile.into();
        r.clusters = vec![hostile.into()];
        r
    }

    #[test]
    fn text_from_the_change_cannot_write_the_comments_markdown() {
        let hostile = "x\n```\n</details>\n\n# forged heading\n<img src=x onerror=alert(1)> **bold** [link](https://e.x) ![i](https://e.x/i.png) | cell | ~~s~~ `code` &amp;\n````";
        let mut r = hostile_everywhere(hostile);
        r.base.unrenderable = Some(hostile.into());
        r.base.how.insert(hostile.into(), hostile.into());
        let md = markdown(&r, 65_536);
        let (structure, code) = parsed(&md);
        // Only osbx's own structure: its heading, the warning quote, its emphasis and its
        // <details>/<summary>/<code>/<b> tags; the hostile text is never a tag, heading, link or
        // image, and the diff is one code block holding it whole.
        for s in &structure {
            if let Some(h) = s.strip_prefix("html ") {
                // Every tag in the HTML is one of osbx's (the change's text is escaped in it).
                for tag in h.split('<').skip(1).map(|t| t.split('>').next().unwrap_or_default()) {
                    assert!(
                        ["details", "summary", "/summary", "code", "/code", "b", "/b", "/details"].contains(&tag),
                        "a tag that is not osbx's: <{tag}> in {h:?}\n{md}"
                    );
                }
            } else {
                assert!(!s.contains("Link") && !s.contains("Image") && !s.contains("Strikethrough"), "{s}\n{md}");
            }
        }
        let emphasis = structure.iter().filter(|s| *s == "Emphasis").count();
        assert_eq!(emphasis, 0, "nothing was cut, so no emphasis of osbx's, and none of the change's: {structure:?}");
        let headings = structure.iter().filter(|s| s.starts_with("Heading")).count();
        assert_eq!(headings, 3, "osbx diff, what it means, objects: {structure:?}\n{md}");
        assert_eq!(code.len(), 1, "{code:?}\n{md}");
        assert!(code[0].contains(hostile), "{:?}\n{md}", code[0]);
        let closing = structure.iter().filter(|s| s.trim_end() == "html </details>").count();
        assert_eq!(closing, 1, "only osbx's own </details> is HTML: {structure:?}");
    }

    /// What GitHub would link or notify in `md` outside code (its autolinks extension and its
    /// reference filters, which read the text of every node but code): `@name` and `@org/team`
    /// (and so an email address), a URL scheme's `://`, `www.`, `#1` and `GH-1`.
    fn linkable(md: &str) -> Vec<String> {
        use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
        let mut out = Vec::new();
        let mut in_code = false;
        for event in Parser::new_ext(md, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH) {
            let text = match event {
                Event::Start(Tag::CodeBlock(_)) => {
                    in_code = true;
                    continue;
                }
                Event::End(TagEnd::CodeBlock) => {
                    in_code = false;
                    continue;
                }
                Event::Text(t) | Event::Html(t) | Event::InlineHtml(t) if !in_code => t.into_string(),
                _ => continue,
            };
            let lower = text.to_ascii_lowercase();
            let bytes = lower.as_bytes();
            for (i, window) in bytes.windows(2).enumerate() {
                let linked = match window {
                    [b'@', next] => next.is_ascii_alphanumeric(),
                    // (`&#39;` is an entity, not a reference.)
                    [b'#', next] => next.is_ascii_alphanumeric() && (i == 0 || bytes[i - 1] != b'&'),
                    [b':', b'/'] => bytes.get(i + 2) == Some(&b'/'),
                    _ => false,
                } || bytes[i..].starts_with(b"www.")
                    || (bytes[i..].starts_with(b"gh-") && bytes.get(i + 3).is_some_and(u8::is_ascii_digit));
                if linked {
                    out.push(text.clone());
                }
            }
        }
        out
    }

    #[test]
    fn text_from_the_change_notifies_no_one_and_links_nowhere() {
        let hostile = "cc @octocat @github/security see https://evil.example/x, http://e.x www.evil.example mail admin@evil.example #1 GH-2 org/repo#3";
        let mut r = hostile_everywhere(hostile);
        r.base.label = hostile.into();
        r.head.label = hostile.into();
        r.helm = Some(hostile.into());
        r.base.unrenderable = Some(hostile.into());
        r.base.how.insert("c".into(), hostile.into());
        let md = markdown(&r, 65_536);
        let found = linkable(&md);
        assert!(found.is_empty(), "GitHub would link or notify in: {found:#?}\n{md}");
        // It still reads as the change wrote it, in every place (the neutraliser is invisible),
        // and the diff, in its fence, is whole.
        let shown: String = md.chars().filter(|c| !matches!(c, '\u{200B}'..='\u{200D}' | '\u{2060}' | '\\')).collect();
        assert!(shown.matches(hostile).count() >= 10, "{shown}");
        assert!(md.contains(&format!("+a: {hostile}\n")), "{md}");
    }

    #[test]
    fn the_whole_comment_fits_even_when_its_header_alone_does_not() {
        // A fleet: 2,000 clusters, one changed layer each.
        let mut r = review(3, "-a\n+b\n");
        r.clusters = (0..2_000).map(|i| format!("cluster-{i:04}")).collect();
        r.summary = r
            .clusters
            .iter()
            .map(|c| Count { cluster: c.clone(), layer: "opensandbox-pools".into(), configured: 1, ..Count::default() })
            .collect();
        let full = markdown(&r, usize::MAX);
        assert!(full.len() > 65_536, "the header alone is over GitHub's limit: {}", full.len());
        for limit in [65_536, 20_000, 1_000, 150, 10, 0] {
            let md = markdown(&r, limit);
            assert!(md.len() <= limit, "{} > {limit}", md.len());
            if limit >= 1_000 {
                assert!(md.starts_with("### osbx diff: 3 changes on 2000 clusters"), "{}", &md[..80]);
                assert!(md.contains("_Cut to fit: the summary is longer"), "{limit}");
                assert!(md.ends_with("|\n\n_Cut to fit: the summary is longer than the comment may be; run `osbx diff --base` locally (or `-o json`) for everything._\n") , "cut at a row: {}", &md[md.len() - 300..]);
            }
        }
    }
}
