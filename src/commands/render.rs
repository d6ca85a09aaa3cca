//! `osbx render`: profile → files in a Flux repository (`--check`, `--commit`, `--force`).

use anyhow::Context as _;

use super::ExitStatus;
use super::settings::{RenderSettings, Source};
use crate::printer::Printer;
use crate::render::Renderer;
use crate::{fleet, lint, profile, repo};

/// Run `osbx render`.
///
/// # Errors
/// Any failure to load, render, write or commit; nothing is written when the profile or the
/// templates are invalid.
pub(super) fn run(opts: &RenderSettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    let renderer = Renderer::new(opts.templates.as_deref())?;
    let (rendered, name) = match &opts.source {
        Source::Profile(source) => {
            let loaded = profile::load(source)?;
            if opts.verbose {
                for (field, value) in loaded.filled_in() {
                    printer.action(&format!("default {field}: {value}"));
                }
            }
            let rendered = renderer.render(&loaded)?;
            printer.lint_warnings(&lint::group(&lint::gate(&loaded, &rendered)?));
            (rendered, format!("profile {}", loaded.profile.name()))
        }
        Source::Fleet(path) => {
            let progress = printer.progress();
            let fleet = fleet::load(path, &progress)?;
            // Layers stay where the repository has them when their files do not change.
            let source = crate::render::Source { kind: "fleet", name: fleet.name.clone() };
            let current = fleet::Current::new(repo::rendered_before(&opts.out, &source)?);
            let mut warnings = Vec::new();
            let rendered = fleet::render_checked(&fleet, &renderer, &current, &progress, |m, r| {
                warnings.extend(lint::gate(m, r)?);
                Ok::<_, anyhow::Error>(())
            })?;
            printer.lint_warnings(&lint::group(&warnings));
            (rendered, format!("fleet {} ({} clusters)", fleet.name, fleet.members.len()))
        }
    };
    let name = &name;
    // Held until the render is written (and committed): renders into one repository take turns.
    let _lock = if opts.check { None } else { Some(repo::lock(&opts.out)?) };
    if !opts.check
        && let Some(done) = repo::recover(&opts.out).with_context(|| format!("recovering {}", opts.out.display()))?
    {
        printer.warn(&done);
    }
    // --check compares everything, owned or not.
    let staged = repo::stage(&opts.out, &rendered, &renderer, opts.force || opts.check)?;
    let changed: Vec<_> = staged.changed().collect();

    if opts.check {
        for f in &changed {
            printer.file_diff(&f.path, f.old.as_deref(), f.new.as_deref());
        }
        if changed.is_empty() {
            printer.success(&format!("{} is up to date with {name}", opts.out.display()));
            return Ok(ExitStatus::Success);
        }
        printer.failure(&format!("{} file(s) differ from {name}; run `osbx render` to update", changed.len()));
        return Ok(ExitStatus::Failure);
    }

    let ours = repo::commit_paths(&staged, &rendered);
    if opts.commit.is_some() {
        let unrelated = repo::staged_conflicts(&opts.out, &ours)?;
        if !unrelated.is_empty() {
            return Err(repo::GitError::UnrelatedStaged(unrelated).into());
        }
    }
    for f in &changed {
        match (&f.old, &f.new) {
            (_, None) => printer
                .deleted(&format!("{} deleted (osbx rendered it before; the profile no longer produces it)", f.path)),
            (Some(_), Some(_)) => printer.action(&format!("{} updated", f.path)),
            (None, Some(_)) => printer.created(&format!("{} created", f.path)),
        }
    }
    // Counting files is worth it for a fleet; a profile's few files are written at once.
    let progress: Box<dyn crate::progress::Progress> = if matches!(opts.source, Source::Fleet(_)) {
        Box::new(printer.progress())
    } else {
        Box::new(crate::progress::Silent)
    };
    let written =
        repo::write(&staged, progress.as_ref()).with_context(|| format!("writing into {}", opts.out.display()))?;
    let deleted = changed.iter().filter(|f| f.new.is_none()).count();
    let unchanged = staged.files.len() - written.len();
    if deleted == 0 {
        printer.success(&format!("rendered {name}: {} file(s) written, {unchanged} unchanged", written.len()));
    } else {
        printer.success(&format!(
            "rendered {name}: {} file(s) written, {deleted} deleted, {unchanged} unchanged",
            written.len() - deleted
        ));
    }

    if let Some(message) = &opts.commit {
        match repo::commit(&opts.out, &ours, message)? {
            Some((id, files)) => {
                printer.success(&format!("committed {files} file(s)"));
                printer.data(&id.to_string());
            }
            None => printer.success("nothing to commit"),
        }
    }
    Ok(ExitStatus::Success)
}
