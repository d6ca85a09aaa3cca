//! `osbx render`: profile → files in a Flux repository (`--check`, `--commit`, `--force`).

use std::path::PathBuf;

use anyhow::Context as _;

use crate::commands::ExitStatus;
use crate::fleet;
use crate::printer::Printer;
use crate::profile::{self, ProfileSource};
use crate::render::Renderer;
use crate::repo;

/// What to render.
#[derive(Debug, Clone)]
pub enum Source {
    /// One profile.
    Profile(ProfileSource),
    /// Every cluster of a fleet file.
    Fleet(PathBuf),
}

/// Resolved `render` options.
#[derive(Debug, Clone)]
pub struct RenderOptions {
    /// Which profile or fleet.
    pub source: Source,
    /// Repository root.
    pub out: PathBuf,
    /// Template overrides.
    pub templates: Option<PathBuf>,
    /// Compare only.
    pub check: bool,
    /// Commit with this message.
    pub commit: Option<String>,
    /// Adopt foreign files.
    pub force: bool,
}

/// Run `osbx render`.
///
/// # Errors
/// Any failure to load, render, write or commit; nothing is written when the profile or the
/// templates are invalid.
pub fn run(opts: &RenderOptions, printer: &Printer) -> anyhow::Result<ExitStatus> {
    let renderer = Renderer::new(opts.templates.as_deref())?;
    let (rendered, name) = match &opts.source {
        Source::Profile(source) => {
            let loaded = profile::load(source)?;
            let rendered = renderer.render(&loaded)?;
            super::lint::print_warnings(&super::lint::gate(&loaded, &rendered)?, printer);
            (rendered, format!("profile {}", loaded.profile.metadata.name))
        }
        Source::Fleet(path) => {
            let fleet = fleet::load(path)?;
            let mut warnings = Vec::new();
            let rendered = fleet::render_checked(&fleet, &renderer, |m, r| {
                warnings.extend(super::lint::gate(m, r)?);
                Ok::<_, anyhow::Error>(())
            })?;
            super::lint::print_warnings(&warnings, printer);
            (rendered, format!("fleet {} ({} clusters)", fleet.name, fleet.members.len()))
        }
    };
    let name = &name;
    // --check compares everything, owned or not.
    let plan = repo::plan(&opts.out, &rendered, &renderer, opts.force || opts.check)?;
    let changed: Vec<_> = plan.changed().collect();

    if opts.check {
        for f in &changed {
            printer.file_diff(&f.path, f.old.as_deref(), &f.new);
        }
        if changed.is_empty() {
            printer.success(&format!("{} is up to date with {name}", opts.out.display()));
            return Ok(ExitStatus::Success);
        }
        printer.failure(&format!("{} file(s) differ from {name}; run `osbx render` to update", changed.len()));
        return Ok(ExitStatus::Failure);
    }

    let ours: Vec<String> = changed.iter().map(|f| f.path.clone()).collect();
    if opts.commit.is_some() {
        let unrelated = repo::staged_conflicts(&opts.out, &ours)?;
        if !unrelated.is_empty() {
            return Err(repo::GitError::UnrelatedStaged(unrelated).into());
        }
    }
    for f in &changed {
        if f.old.is_some() {
            printer.action(&format!("{} updated", f.path));
        } else {
            printer.created(&format!("{} created", f.path));
        }
    }
    let written = repo::write(&plan).with_context(|| format!("writing into {}", opts.out.display()))?;
    printer.success(&format!(
        "rendered {name}: {} file(s) written, {} unchanged",
        written.len(),
        plan.files.len() - written.len()
    ));

    if let Some(message) = &opts.commit {
        match repo::commit(&opts.out, &written, message)? {
            Some(id) => {
                printer.success(&format!("committed {} file(s)", written.len()));
                printer.data(&id.to_string());
            }
            None => printer.success("nothing to commit"),
        }
    }
    Ok(ExitStatus::Success)
}
