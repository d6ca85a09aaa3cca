//! Live progress on stderr: spinners and bars on a terminal, plain lines otherwise.

#![allow(clippy::print_stderr)]

use console::{Style, Term};

use crate::progress::Phase;

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
    pub(super) fn new(quiet: bool, color: bool) -> Self {
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
            let unit = super::visible(unit);
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
                    None => self.line(&format!("{glyph} check {}: {outcome}", super::visible(check))),
                }
            }
        }
    }

    fn status(&self, object: &crate::object::ObjectRef, status: &crate::readiness::StatusResult) {
        let text = super::visible(&format!("{object} {}: {}", status.status, status.message)).into_owned();
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
        let clusters = super::visible(&clusters.join(", ")).into_owned();
        self.line(&format!("{glyph} wave {} ({clusters}): {what}", super::visible(wave)));
    }

    fn cluster(&self, wave: &str, cluster: &str, state: &crate::progress::ClusterState) {
        use crate::progress::ClusterState;
        let unit = super::visible(&format!("{cluster} ({wave})")).into_owned();
        let (kind, text) = match state {
            ClusterState::Reconciling(what) => ("reconciling", format!("reconciling: {what}")),
            ClusterState::Verifying(what) if what.is_empty() => ("verifying", "verifying".to_owned()),
            ClusterState::Verifying(what) => ("verifying", format!("verifying: {what}")),
            ClusterState::Passed => ("passed", "passed".to_owned()),
            ClusterState::Failed(why) => ("failed", format!("failed: {why}")),
        };
        let text = super::visible(&text).into_owned();
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
        self.line(&format!("{} {}", self.style(Style::new().cyan()).apply_to("►"), super::visible(what)));
    }

    fn warn(&self, message: &str) {
        let text = format!("{} {}", self.style(Style::new().yellow()).apply_to("⚠"), super::visible(message));
        match &self.bars {
            Some(mp) => {
                let _ = mp.println(text);
            }
            None => eprintln!("{text}"),
        }
    }
}
