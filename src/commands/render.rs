//! `osbx render`: profile → files in a Flux repository (`--check`, `--commit`, `--force`).

use anyhow::Context as _;

use super::ExitStatus;
use super::settings::{RenderSettings, Source};
use crate::printer::Printer;
use crate::render::Renderer;
use crate::repo::FileChange;
use crate::secrets;
use crate::{fleet, lint, profile, repo};

/// Run `osbx render`.
///
/// # Errors
/// Any failure to load, render, write or commit; nothing is written when the profile or the
/// templates are invalid.
pub(super) fn run(opts: &RenderSettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    let renderer = crate::commands::renderer(opts.templates.as_deref())?;
    let mut sealed = Sealed::default();
    let (rendered, name) = match &opts.source {
        Source::Profile(source) => {
            let (rendered, name, s) = render_profile(source, opts, &renderer, printer)?;
            sealed = s;
            (rendered, name)
        }
        Source::Fleet(path) => {
            let progress = printer.progress();
            let mut fleet = fleet::load(path, &progress)?;
            // Each cluster's sealed Secrets (secrets.sops) stay listed where the repository has them.
            for member in &mut fleet.members {
                secrets::attach(member, &opts.out)?;
            }
            // Layers stay where the repository has them when their files do not change.
            let source = crate::render::Source { kind: "fleet", name: fleet.name.clone() };
            let current = fleet::Current::new(repo::rendered_before(&opts.out, &source)?);
            let (rendered, found) = fleet::render_checked(&fleet, &renderer, &current, &progress, |m, r| {
                Ok::<_, anyhow::Error>(lint::gate(m, r, None)?)
            })?;
            let warnings: Vec<_> = found.into_iter().flatten().collect();
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
    let mut staged = repo::stage(&opts.out, &rendered, &renderer, opts.force || opts.check)?;
    let sealed_paths: Vec<String> = sealed.files.iter().map(|f| f.path.clone()).collect();
    staged.files.extend(sealed.files);
    let changed: Vec<_> = staged.changed().collect();

    if opts.check {
        for f in &changed {
            printer.file_diff(&f.path, f.old.as_deref(), f.new.as_deref());
        }
        for m in &sealed.mismatched {
            printer.failure(&m.to_string());
        }
        if changed.is_empty() && sealed.mismatched.is_empty() {
            printer.success(&format!("{} is up to date with {name}", opts.out.display()));
            return Ok(ExitStatus::Success);
        }
        printer.failure(&format!(
            "{} file(s) differ from {name}; run `osbx render` to update",
            changed.len() + sealed.mismatched.len()
        ));
        return Ok(ExitStatus::Failure);
    }

    let mut ours = repo::commit_paths(&staged, &rendered);
    // A sealed file is committed with the render that lists it, whoever wrote it last.
    ours.extend(sealed_paths);
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

/// The profile's sealed Secret files (`secrets.sops`) as a render writes them: carried byte for
/// byte, re-keyed when the recipients changed, or holding the value `osbx secret set` gives; and
/// with --check, those whose recipients differ (a difference, as a file's would be).
#[derive(Default)]
struct Sealed {
    files: Vec<FileChange>,
    mismatched: Vec<secrets::Mismatch>,
}

/// Load, seal and render one profile, through the lint gate.
fn render_profile(
    source: &profile::ProfileSource,
    opts: &RenderSettings,
    renderer: &Renderer,
    printer: Printer,
) -> anyhow::Result<(crate::render::Rendered, String, Sealed)> {
    let mut loaded = profile::load(source)?;
    if opts.verbose {
        for (field, value) in loaded.filled_in() {
            printer.action(&format!("default {field}: {value}"));
        }
    }
    secrets::attach(&mut loaded, &opts.out)?;
    let on_disk = loaded.sealed.clone();
    let mismatched = seal(&mut loaded, opts, printer)?;
    let rendered = renderer.render(&loaded)?;
    printer.lint_warnings(&lint::group(&lint::gate(&loaded, &rendered, Some(&opts.out))?));
    let files = loaded
        .sealed
        .0
        .iter()
        .map(|(path, text)| FileChange {
            path: path.clone(),
            old: on_disk.0.get(path).cloned(),
            new: Some(text.clone()),
        })
        .collect();
    Ok((rendered, format!("profile {}", loaded.profile.name()), Sealed { files, mismatched }))
}

/// Set the value `osbx secret set` gives, then re-key the sealed files the profile's recipients
/// changed for (with --check: only say which differ, as a render difference would).
fn seal(
    loaded: &mut profile::LoadedProfile,
    opts: &RenderSettings,
    printer: Printer,
) -> anyhow::Result<Vec<secrets::Mismatch>> {
    let set = opts.set.as_ref().map(|s| (s.name.as_str(), s.value.as_slice()));
    let done = secrets::update(loaded, set, opts.age_key_file.as_deref(), opts.check)?;
    if let Some(s) = &done.set {
        if s.written {
            printer.action(&format!("{}: sealed into {} for {} recipient(s)", s.name, s.path, s.recipients));
        } else {
            printer.success(&format!(
                "{}: {} already holds this value for these recipients (kept as it is)",
                s.name, s.path
            ));
        }
    }
    for m in &done.rekeyed {
        printer.action(&format!("{m}: its data key is re-encrypted for them; the values are unchanged"));
    }
    Ok(done.mismatched)
}
