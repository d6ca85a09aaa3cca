//! The only place that writes to the terminal.
//!
//! Data (diffs, lists, ids) goes to stdout; progress, warnings and errors go to stderr with the
//! Flux glyphs (`►` action, `✚` created, `✔` success, `⚠` warning, `✗` failure). Colour follows
//! `--color` and whether each stream is a terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use console::{Style, Term};

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

    fn err_style(&self, style: Style) -> Style {
        if self.color_err { style.force_styling(true) } else { style.force_styling(false) }
    }

    fn out_style(&self, style: Style) -> Style {
        if self.color_out { style.force_styling(true) } else { style.force_styling(false) }
    }

    /// A line of data on stdout.
    pub fn data(&self, line: &str) {
        println!("{line}");
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
        for cause in err.chain().skip(1) {
            eprintln!("  caused by: {cause}");
        }
    }

    /// A unified diff of one file on stdout, coloured on a terminal.
    pub fn file_diff(&self, path: &str, old: Option<&str>, new: &str) {
        let old_name = if old.is_some() { format!("a/{path}") } else { "/dev/null".to_owned() };
        let diff = similar::TextDiff::from_lines(old.unwrap_or(""), new);
        let text = diff.unified_diff().context_radius(3).header(&old_name, &format!("b/{path}")).to_string();
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
