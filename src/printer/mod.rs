//! The only place that writes to the terminal.
//!
//! Data (diffs, lists, ids) goes to stdout; progress, warnings and errors go to stderr with the
//! Flux glyphs (`►` action, `✚` created, `−` deleted, `✔` success, `⚠` warning, `✗` failure). Colour follows
//! `--color` and whether each stream is a terminal.
//!
//! What reaches the terminal may hold text read from a cluster, a repository or a pull request
//! (a report's evidence, a condition's message, a name): every text is passed through
//! [`visible`] first, so that a control character or a bidirectional override in it is shown
//! escaped and never acts on the terminal; the printer's own colours are added after.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::borrow::Cow;

use console::{Style, Term};

mod progress;

pub use progress::ProgressView;

/// `text` as the terminal may be given it: each control character but a line feed and a tab,
/// and each bidirectional embedding, override or isolate (which reorder what a line shows), as
/// its escape (`\u{1b}`); anything else as it is.
#[must_use]
pub fn visible(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\n' && c != '\t') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars().map(|c| if unsafe_char(c) { c.escape_unicode().to_string() } else { c.to_string() }).collect(),
    )
}

/// A JSON text with each character [`visible`] escapes written as a JSON escape (`\u009b`).
fn json_visible(text: &str) -> Cow<'_, str> {
    if visible(text).len() == text.len() {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| {
                if visible(c.encode_utf8(&mut [0; 4])).len() > c.len_utf8() {
                    format!("\\u{:04x}", u32::from(c))
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// The terminal rows `lines` take at `width` columns: a line wider than the terminal wraps onto
/// as many rows as it needs (an empty line takes one).
fn rows(lines: &[String], width: usize) -> usize {
    lines.iter().map(|l| console::measure_text_width(l).div_ceil(width.max(1)).max(1)).sum()
}

/// What changed from `shown` to `lines`, in order: `- ` before each line gone, `+ ` before each
/// line new or changed (a changed line is one gone and one new).
fn changes(shown: &[String], lines: &[String]) -> Vec<String> {
    similar::capture_diff_slices(similar::Algorithm::Myers, shown, lines)
        .iter()
        .flat_map(|op| op.iter_changes(shown, lines))
        .filter_map(|c| match c.tag() {
            similar::ChangeTag::Equal => None,
            similar::ChangeTag::Delete => Some(format!("- {}", c.value())),
            similar::ChangeTag::Insert => Some(format!("+ {}", c.value())),
        })
        .collect()
}

/// When to colour output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// Colour when the stream is a terminal (and `NO_COLOR` is unset).
    #[default]
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

/// Writers for one run.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    color_out: bool,
    color_err: bool,
    quiet: bool,
}

impl Printer {
    /// A printer for the given colour choice; `quiet` hides progress lines (not data, warnings
    /// or errors).
    #[must_use]
    pub fn new(choice: ColorChoice, quiet: bool) -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        let (color_out, color_err) = match choice {
            ColorChoice::Always => (true, true),
            ColorChoice::Never => (false, false),
            ColorChoice::Auto => (
                !no_color && Term::stdout().features().is_attended(),
                !no_color && Term::stderr().features().is_attended(),
            ),
        };
        Self { color_out, color_err, quiet }
    }

    fn err_style(self, style: Style) -> Style {
        if self.color_err { style.force_styling(true) } else { style.force_styling(false) }
    }

    fn out_style(self, style: Style) -> Style {
        if self.color_out { style.force_styling(true) } else { style.force_styling(false) }
    }

    /// A line of data on stdout.
    pub fn data(&self, line: &str) {
        println!("{}", visible(line));
    }

    /// Show `lines` in place of `shown` (what the last call showed): on a terminal, the old
    /// lines are cleared (as many rows as they took at the terminal's width: a line wider than
    /// it wrapped) and the new ones drawn in one write (no flicker); otherwise what changed is
    /// printed under a time stamp: `- ` each line gone, `+ ` each line new or changed.
    pub fn redraw(&self, shown: &[String], lines: &[String]) {
        use std::fmt::Write as _;
        use std::io::Write as _;
        let term = Term::stdout();
        if term.features().is_attended() {
            let mut frame = String::new();
            let up = rows(shown, usize::from(term.size().1));
            if up > 0 {
                // Up to the first row drawn, and clear from there down.
                let _ = write!(frame, "\x1b[{up}A\r\x1b[J");
            }
            for l in lines {
                frame.push_str(&visible(l));
                frame.push('\n');
            }
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(frame.as_bytes());
            let _ = out.flush();
            return;
        }
        if shown.is_empty() {
            for l in lines {
                println!("{}", visible(l));
            }
            return;
        }
        let changed = changes(shown, lines);
        if changed.is_empty() {
            return;
        }
        let now = k8s_openapi::jiff::Timestamp::now();
        println!("--- {}", now.strftime("%H:%M:%S"));
        for l in changed {
            println!("{}", visible(&l));
        }
    }

    /// Whether [`Printer::redraw`] draws in place (stdout is a terminal): then anything else
    /// written to the terminal between two frames moves the frame, and the next one must be
    /// drawn below it (with nothing shown).
    #[must_use]
    pub(crate) fn redraws_in_place() -> bool {
        Term::stdout().features().is_attended()
    }

    /// `► message` on stderr (hidden by `--quiet`).
    pub fn action(&self, message: &str) {
        if !self.quiet {
            eprintln!("{} {}", self.err_style(Style::new().cyan()).apply_to("►"), visible(message));
        }
    }

    /// `✚ message` on stderr (hidden by `--quiet`).
    pub fn created(&self, message: &str) {
        if !self.quiet {
            eprintln!("{} {}", self.err_style(Style::new().green()).apply_to("✚"), visible(message));
        }
    }

    /// `− message` on stderr, in red (hidden by `--quiet`).
    pub fn deleted(&self, message: &str) {
        if !self.quiet {
            eprintln!("{} {}", self.err_style(Style::new().red()).apply_to("−"), visible(message));
        }
    }

    /// `✔ message` on stderr (hidden by `--quiet`).
    pub fn success(&self, message: &str) {
        if !self.quiet {
            eprintln!("{} {}", self.err_style(Style::new().green()).apply_to("✔"), visible(message));
        }
    }

    /// `⚠ message` on stderr.
    pub fn warn(&self, message: &str) {
        eprintln!("{} {}", self.err_style(Style::new().yellow()).apply_to("⚠"), visible(message));
    }

    /// `✗ message` on stderr.
    pub fn failure(&self, message: &str) {
        eprintln!("{} {}", self.err_style(Style::new().red()).apply_to("✗"), visible(message));
    }

    /// `error: top` then `  caused by: link` for each cause, on stderr.
    pub fn error(&self, err: &anyhow::Error) {
        let red = self.err_style(Style::new().red().bold());
        eprintln!("{} {}", red.apply_to("error:"), visible(&err.to_string()));
        // A cause already said by what was printed (errors that quote their source) is left out.
        let mut said = err.to_string();
        for cause in err.chain().skip(1) {
            let text = cause.to_string();
            if !said.contains(&text) {
                eprintln!("  caused by: {}", visible(&text));
                said.push_str(&text);
            }
        }
    }

    /// A unified diff of one file on stdout, coloured on a terminal.
    pub fn file_diff(&self, path: &str, old: Option<&str>, new: Option<&str>) {
        let old_name = if old.is_some() { format!("a/{path}") } else { "/dev/null".to_owned() };
        let new_name = if new.is_some() { format!("b/{path}") } else { "/dev/null".to_owned() };
        let diff = similar::TextDiff::from_lines(old.unwrap_or(""), new.unwrap_or(""));
        let text = diff.unified_diff().context_radius(3).header(&old_name, &new_name).to_string();
        self.diff_text(&text);
    }

    /// One object's diff under a bold `Kind/ns/name action` header, on stdout.
    pub fn object_diff(&self, subject: &str, action: &str, diff: &str) {
        println!("{}", self.out_style(Style::new().bold()).apply_to(visible(&format!("► {subject} {action}"))));
        self.diff_text(diff);
    }

    /// A review (`osbx diff --base`) as text: what was compared on stderr, then each changed
    /// object's diff and notes on stdout, and a summary line per cluster and layer.
    pub(crate) fn review(self, review: &crate::review::Review) {
        self.action(&format!("comparing {} with {}", review.head.label, review.base.label));
        for (cluster, how) in &review.base.how {
            self.action(&format!("base of {cluster}: {how}"));
        }
        if let Some(why) = &review.base.unrenderable {
            self.warn(&format!("the base cannot be rendered ({why}): everything in the head is shown as created"));
        }
        match &review.helm {
            Some(helm) => self.action(&format!("charts expanded with {helm}")),
            None => self.action("charts not expanded (--no-charts): Flux objects only"),
        }
        let note = self.out_style(Style::new().yellow());
        for e in &review.changes {
            let from = e.release.as_ref().map_or_else(String::new, |r| format!(", chart of {r}"));
            let subject = format!("{} {} [{}; layer {}{from}]", e.object, e.action, e.clusters.join(", "), e.layer);
            println!("{}", self.out_style(Style::new().bold()).apply_to(visible(&format!("► {subject}"))));
            for n in &e.notes {
                println!("  {} {}", note.apply_to("◆"), visible(n));
            }
            self.diff_text(&e.diff);
        }
        for c in crate::review::changed_counts(review) {
            self.data(&format!(
                "{} / {}: {} to create, {} to change, {} to delete, {} unchanged",
                c.cluster, c.layer, c.created, c.configured, c.deleted, c.unchanged
            ));
        }
        if review.changes.is_empty() {
            self.success(&format!("no change on {}", review.clusters.join(", ")));
        }
    }

    /// Lint warnings on stderr; one shared by several clusters of a fleet is printed once, with
    /// the number of other clusters (see [`crate::lint::group`]).
    pub fn lint_warnings(&self, groups: &[(&crate::lint::Finding, usize)]) {
        for (w, more) in groups {
            if *more == 0 {
                self.warn(&w.to_string());
            } else {
                self.warn(&format!("{w} [and {more} more cluster(s) with the same warning]"));
            }
        }
    }

    /// A JSON document on stdout.
    pub fn json(&self, value: &impl serde::Serialize) {
        match serde_json::to_string_pretty(value) {
            // serde_json escapes C0 controls; the others that act on a terminal are escaped
            // here, as JSON escapes (they occur only inside strings).
            Ok(text) => println!("{}", json_visible(&text)),
            Err(e) => eprintln!("error: cannot encode JSON: {e}"),
        }
    }

    /// Progress reporting for long-running work (spinners on a terminal, plain lines otherwise).
    #[must_use]
    pub fn progress(&self) -> ProgressView {
        ProgressView::new(self.quiet, self.color_err)
    }

    fn diff_text(self, text: &str) {
        let (add, del, hunk, head) = (
            self.out_style(Style::new().green()),
            self.out_style(Style::new().red()),
            self.out_style(Style::new().cyan()),
            self.out_style(Style::new().bold()),
        );
        for line in text.lines() {
            let line = &*visible(line);
            let styled = if line.starts_with("+++") || line.starts_with("---") {
                head.apply_to(line)
            } else if line.starts_with('+') {
                add.apply_to(line)
            } else if line.starts_with('-') {
                del.apply_to(line)
            } else if line.starts_with("@@") {
                hunk.apply_to(line)
            } else {
                Style::new().apply_to(line)
            };
            println!("{styled}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text read from a cluster or a pull request never acts on the terminal: control characters
    /// (an escape sequence, a carriage return that rewrites a line) and bidirectional overrides
    /// are shown escaped, in text and in JSON (as JSON escapes, so it stays JSON).
    #[test]
    fn text_from_elsewhere_is_shown_escaped() {
        assert!(matches!(visible("nodes.ready PASS: 1 node\n\tReady ✔"), Cow::Borrowed(_)));
        assert_eq!(visible("evil\u{1b}[2J\rgood"), "evil\\u{1b}[2J\\u{d}good");
        assert_eq!(visible("a\u{9b}31mb\u{202e}c"), "a\\u{9b}31mb\\u{202e}c");
        let json = serde_json::to_string(&serde_json::json!({"e": "x\u{1b}y\u{9b}z\u{2066}"})).unwrap();
        let shown = json_visible(&json);
        assert_eq!(shown, r#"{"e":"x\u001by\u009bz\u2066"}"#);
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back["e"], "x\u{1b}y\u{9b}z\u{2066}", "the same JSON");
    }

    fn strings(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|l| (*l).to_owned()).collect()
    }

    #[test]
    fn a_wrapped_line_takes_the_rows_it_wraps_onto() {
        let lines = strings(&["", "1234", "12345", "123456789", "\x1b[32m✔\x1b[0m 123"]);
        // At 4 columns: 1 (empty), 1 (exactly the width), 2, 3, and 2 (colour is not width).
        assert_eq!(rows(&lines, 4), 9);
        assert_eq!(rows(&lines, 80), 5);
    }

    #[test]
    fn what_changed_names_the_lines_gone_and_the_lines_new() {
        let shown = strings(&["pools:", "  ✔ pod", "  ✔ vm", "runtime classes:"]);
        let lines = strings(&["pools:", "  ✘ pod", "runtime classes:"]);
        assert_eq!(changes(&shown, &lines), ["-   ✔ pod", "-   ✔ vm", "+   ✘ pod"]);
        assert!(changes(&lines, &lines).is_empty());
    }
}
