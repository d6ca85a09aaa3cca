//! The only place that writes to the terminal.
//!
//! Data (diffs, lists, ids) goes to stdout; progress, warnings and errors go to stderr with the
//! Flux glyphs (`►` action, `✚` created, `−` deleted, `✔` success, `⚠` warning, `✗` failure). Colour follows
//! `--color` and whether each stream is a terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use console::{Style, Term};

use crate::progress::Phase;

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
        println!("{line}");
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
                frame.push_str(l);
                frame.push('\n');
            }
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(frame.as_bytes());
            let _ = out.flush();
            return;
        }
        if shown.is_empty() {
            for l in lines {
                println!("{l}");
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
            println!("{l}");
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
            eprintln!("{} {message}", self.err_style(Style::new().cyan()).apply_to("►"));
        }
    }

    /// `✚ message` on stderr (hidden by `--quiet`).
    pub fn created(&self, message: &str) {
        if !self.quiet {
            eprintln!("{} {message}", self.err_style(Style::new().green()).apply_to("✚"));
        }
    }

    /// `− message` on stderr, in red (hidden by `--quiet`).
    pub fn deleted(&self, message: &str) {
        if !self.quiet {
            eprintln!("{} {message}", self.err_style(Style::new().red()).apply_to("−"));
        }
    }

    /// `✔ message` on stderr (hidden by `--quiet`).
    pub fn success(&self, message: &str) {
        if !self.quiet {
            eprintln!("{} {message}", self.err_style(Style::new().green()).apply_to("✔"));
        }
    }

    /// `⚠ message` on stderr.
    pub fn warn(&self, message: &str) {
        eprintln!("{} {message}", self.err_style(Style::new().yellow()).apply_to("⚠"));
    }

    /// `✗ message` on stderr.
    pub fn failure(&self, message: &str) {
        eprintln!("{} {message}", self.err_style(Style::new().red()).apply_to("✗"));
    }

    /// `error: top` then `  caused by: link` for each cause, on stderr.
    pub fn error(&self, err: &anyhow::Error) {
        let red = self.err_style(Style::new().red().bold());
        eprintln!("{} {err}", red.apply_to("error:"));
        // A cause already said by what was printed (errors that quote their source) is left out.
        let mut said = err.to_string();
        for cause in err.chain().skip(1) {
            let text = cause.to_string();
            if !said.contains(&text) {
                eprintln!("  caused by: {text}");
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
        println!("{}", self.out_style(Style::new().bold()).apply_to(format!("► {subject} {action}")));
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
            println!("{}", self.out_style(Style::new().bold()).apply_to(format!("► {subject}")));
            for n in &e.notes {
                println!("  {} {n}", note.apply_to("◆"));
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
            Ok(text) => println!("{text}"),
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

/// [`Progress`](crate::progress::Progress) on stderr: one spinner per layer with its phase and
/// elapsed time, and a bar per counted task, on a terminal; plain `►`/`◎`/`✔` lines otherwise
/// (a counted task: when it starts and when it ends); nothing with `--quiet`.
pub struct ProgressView {
    quiet: bool,
    color: bool,
    bars: Option<indicatif::MultiProgress>,
    layers: std::sync::Mutex<Vec<(String, indicatif::ProgressBar)>>,
    /// Counted tasks: their bar on a terminal (`None` otherwise), once started.
    counters: std::sync::Mutex<Vec<(String, Option<indicatif::ProgressBar>)>>,
    /// A rollout's clusters, by line, and the kind of state each was last shown in.
    clusters: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl ProgressView {
    fn new(quiet: bool, color: bool) -> Self {
        let tty = Term::stderr().features().is_attended();
        let bars = (tty && !quiet).then(indicatif::MultiProgress::new);
        Self {
            quiet,
            color,
            bars,
            layers: std::sync::Mutex::new(Vec::new()),
            counters: std::sync::Mutex::new(Vec::new()),
            clusters: std::sync::Mutex::default(),
        }
    }

    fn style(&self, s: Style) -> Style {
        s.force_styling(self.color)
    }

    fn bar(&self, layer: &str) -> Option<indicatif::ProgressBar> {
        let mp = self.bars.as_ref()?;
        let mut layers = self.layers.lock().ok()?;
        if let Some((_, bar)) = layers.iter().find(|(n, _)| n == layer) {
            return Some(bar.clone());
        }
        let bar = mp.add(indicatif::ProgressBar::new_spinner());
        let style = indicatif::ProgressStyle::with_template("{spinner:.cyan} {prefix:.bold} {wide_msg} [{elapsed}]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner());
        bar.set_style(style);
        bar.set_prefix(layer.to_owned());
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        layers.push((layer.to_owned(), bar.clone()));
        Some(bar)
    }

    fn line(&self, text: &str) {
        if self.quiet {
            return;
        }
        match &self.bars {
            Some(mp) => {
                let _ = mp.println(text);
            }
            None => eprintln!("{text}"),
        }
    }

    /// The bar of a counted task, started on first use (`Some(None)` without a terminal, `None`
    /// when it had started already and has no bar).
    fn counter(&self, task: &str, total: usize) -> (bool, Option<indicatif::ProgressBar>) {
        let Ok(mut counters) = self.counters.lock() else { return (false, None) };
        if let Some((_, bar)) = counters.iter().find(|(t, _)| t == task) {
            return (false, bar.clone());
        }
        let bar = self.bars.as_ref().map(|mp| {
            let bar = mp.add(indicatif::ProgressBar::new(total as u64));
            let style = indicatif::ProgressStyle::with_template(
                "{spinner:.cyan} {prefix:.bold} [{bar:30.cyan/blue}] {pos}/{len} [{elapsed}]",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style.progress_chars("=> "));
            bar.set_prefix(task.to_owned());
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            bar
        });
        counters.push((task.to_owned(), bar.clone()));
        (true, bar)
    }

    /// Stop every spinner (leaving its last line on screen).
    pub fn finish(&self) {
        if let Ok(layers) = self.layers.lock() {
            for (_, bar) in layers.iter() {
                if !bar.is_finished() {
                    bar.finish();
                }
            }
        }
        if let Ok(counters) = self.counters.lock() {
            for bar in counters.iter().filter_map(|(_, b)| b.as_ref()) {
                if !bar.is_finished() {
                    bar.abandon();
                }
            }
        }
    }
}

impl Drop for ProgressView {
    fn drop(&mut self) {
        self.finish();
    }
}

impl crate::progress::Progress for ProgressView {
    fn phase(&self, unit: &str, phase: Phase) {
        if let Some(bar) = self.bar(unit) {
            if phase == Phase::Ready {
                bar.finish_with_message(format!("{} ready", self.style(Style::new().green()).apply_to("✔")));
            } else {
                bar.set_message(phase.to_string());
            }
        } else {
            let glyph = if phase == Phase::Ready { "✔" } else { "►" };
            self.line(&format!("{} layer {unit}: {phase}", self.style(Style::new().cyan()).apply_to(glyph)));
        }
    }

    fn check(&self, check: &str, state: &crate::progress::CheckState) {
        use crate::progress::CheckState;
        let bar = self.bar(check);
        match (state, bar) {
            (CheckState::Running, Some(bar)) => bar.set_message("running"),
            (CheckState::Running, None) => {
                self.line(&format!("{} check {check}: running", self.style(Style::new().cyan()).apply_to("►")));
            }
            (CheckState::Finished { outcome, good }, bar) => {
                let (glyph, color) = if *good { ("✔", Style::new().green()) } else { ("✗", Style::new().red()) };
                let glyph = self.style(color).apply_to(glyph);
                match bar {
                    Some(bar) => bar.finish_with_message(format!("{glyph} {outcome}")),
                    None => self.line(&format!("{glyph} check {check}: {outcome}")),
                }
            }
        }
    }

    fn status(&self, object: &crate::object::ObjectRef, status: &crate::readiness::StatusResult) {
        let text = format!("{object} {}: {}", status.status, status.message);
        let active = self
            .layers
            .lock()
            .ok()
            .and_then(|l| l.iter().rev().find(|(_, b)| !b.is_finished()).map(|(_, b)| b.clone()));
        match active {
            Some(bar) => bar.set_message(format!("waiting: {text}")),
            None => self.line(&format!("{} {text}", self.style(Style::new().yellow()).apply_to("◎"))),
        }
    }

    fn count(&self, task: &str, done: usize, total: usize) {
        if self.quiet || total == 0 {
            return;
        }
        let (started, bar) = self.counter(task, total);
        match bar {
            Some(bar) => {
                if done as u64 > bar.position() {
                    bar.set_position(done as u64);
                }
                if done >= total {
                    bar.finish();
                }
            }
            None if done >= total => {
                self.line(&format!("{} {task}: {done}/{total}", self.style(Style::new().green()).apply_to("✔")));
            }
            None if started => {
                self.line(&format!("{} {task}: {done}/{total}", self.style(Style::new().cyan()).apply_to("►")));
            }
            None => {}
        }
    }

    fn wave(&self, wave: &str, clusters: &[String], commit: Option<&str>) {
        let glyph = self.style(Style::new().cyan()).apply_to("►");
        let what = match commit {
            None => "committing".to_owned(),
            Some("") => "committed already".to_owned(),
            Some(c) => format!("committed {}", &c[..c.len().min(12)]),
        };
        self.line(&format!("{glyph} wave {wave} ({}): {what}", clusters.join(", ")));
    }

    fn cluster(&self, wave: &str, cluster: &str, state: &crate::progress::ClusterState) {
        use crate::progress::ClusterState;
        let unit = format!("{cluster} ({wave})");
        let (kind, text) = match state {
            ClusterState::Reconciling(what) => ("reconciling", format!("reconciling: {what}")),
            ClusterState::Verifying(what) if what.is_empty() => ("verifying", "verifying".to_owned()),
            ClusterState::Verifying(what) => ("verifying", format!("verifying: {what}")),
            ClusterState::Passed => ("passed", "passed".to_owned()),
            ClusterState::Failed(why) => ("failed", format!("failed: {why}")),
        };
        let done = matches!(state, ClusterState::Passed | ClusterState::Failed(_));
        let good = matches!(state, ClusterState::Passed);
        let glyph = match (done, good) {
            (true, true) => self.style(Style::new().green()).apply_to("✔"),
            (true, false) => self.style(Style::new().red()).apply_to("✗"),
            _ => self.style(Style::new().cyan()).apply_to("►"),
        };
        if let Some(bar) = self.bar(&unit) {
            if done {
                bar.finish_with_message(format!("{glyph} {text}"));
            } else {
                bar.set_message(text);
            }
            return;
        }
        // Without a terminal: one line when the cluster's state changes kind.
        let Ok(mut seen) = self.clusters.lock() else { return };
        if seen.get(&unit).map(String::as_str) != Some(kind) || done {
            seen.insert(unit.clone(), kind.to_owned());
            drop(seen);
            self.line(&format!("{glyph} {unit}: {text}"));
        }
    }

    fn step(&self, what: &str) {
        self.line(&format!("{} {what}", self.style(Style::new().cyan()).apply_to("►")));
    }

    fn warn(&self, message: &str) {
        let text = format!("{} {message}", self.style(Style::new().yellow()).apply_to("⚠"));
        match &self.bars {
            Some(mp) => {
                let _ = mp.println(text);
            }
            None => eprintln!("{text}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
