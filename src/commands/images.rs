//! `osbx images`: every image the platform as rendered will pull, and who pulls it.

use std::collections::BTreeMap;

use super::ExitStatus;
use anyhow::Context as _;

use super::settings::{ImagesSettings, Resolve, Source};
use crate::cli::ImagesOutput;
use crate::images::{Images, Mirrored};
use crate::printer::Printer;
use crate::progress::Progress as _;
use crate::registry::{Answer, Registries};
use crate::review::ChartMode;
use crate::review::charts::{Expanders, Helm};
use crate::{fleet, profile};

/// Run `osbx images`.
///
/// # Errors
/// The profile or fleet cannot be loaded or rendered, helm or a chart cannot be had (exit 2).
pub(super) fn run(settings: &ImagesSettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    let renderer = super::renderer(settings.templates.as_deref())?;
    let members = match &settings.source {
        Source::Fleet(path) => fleet::load(path, &printer.progress())?.members,
        Source::Profile(source) => vec![profile::load(source)?],
    };
    // The review's chart cache and helm.
    let mut charts = match &settings.charts {
        ChartMode::Off => None,
        ChartMode::Expand { cache, air_gapped } => Some(Expanders::open(cache, *air_gapped, Helm::find)?),
    };
    let mut images = Images::default();
    let mut mirrored = Mirrored::default();
    let progress = printer.progress();
    for member in &members {
        let rendered = renderer.render(member)?;
        let expander = charts.as_mut().map(|c| {
            progress.step(&format!(
                "cluster {}: expanding charts (helm {})",
                member.profile.cluster.name,
                c.helm().version
            ));
            c.for_version(&member.profile.cluster.kubernetes_version)
        });
        let mut own = Images::default();
        let named = own.add(member, &rendered, expander)?;
        mirrored.add(member, &own, &named);
        images.merge(own);
    }
    progress.finish();
    if settings.check {
        return check(&images, settings.output, printer);
    }
    if let Some(how) = &settings.resolve {
        let pins = members.iter().flat_map(|m| m.profile.images.digests.clone()).collect();
        return resolve(&images, pins, how, settings.output, printer);
    }
    match settings.output {
        ImagesOutput::Json => printer.json(&images),
        ImagesOutput::Crane => {
            if !members.iter().any(|m| m.profile.images.mirror.is_set()) {
                anyhow::bail!("-o crane writes the copies onto images.mirror, and the profile has none");
            }
            mirrored.crane().iter().for_each(|line| printer.data(line));
        }
        ImagesOutput::SkopeoSync => {
            let (yaml, refused) = images.skopeo_sync(&mirrored);
            for r in &refused {
                printer.warn(&format!("left out, not an image reference: {r}"));
            }
            printer.data(serde_saphyr::to_string(&yaml)?.trim_end());
        }
        ImagesOutput::Text => {
            for (image, by) in &images.0 {
                printer.data(image);
                for puller in by {
                    printer.data(&format!("  {puller}"));
                }
            }
        }
    }
    // With a mirror, an image still pulled from elsewhere is a chart's image no value osbx sets
    // names: the platform would not run from the mirror alone.
    for (image, (by, why)) in &mirrored.outside {
        let pullers: Vec<String> = by.iter().map(ToString::to_string).collect();
        printer.failure(&format!(
            "{image}: {why}; pulled by {}. osbx rewrites the images of the charts it knows through the values it knows for them",
            pullers.join("; ")
        ));
    }
    Ok(if mirrored.outside.is_empty() { ExitStatus::Success } else { ExitStatus::Failure })
}

/// `--check`: each image's manifest from its registry; the missing and refused ones named with
/// who pulls them.
fn check(images: &Images, output: ImagesOutput, printer: Printer) -> anyhow::Result<ExitStatus> {
    let names: Vec<&str> = images.0.keys().map(String::as_str).collect();
    let progress = printer.progress();
    progress.step(&format!("asking the registries for {} manifests", names.len()));
    let registries = Registries::new(names.iter().copied());
    let answers = super::session::runtime()?.block_on(registries.manifests(names.iter().copied()));
    progress.finish();
    let (mut missing, mut unreachable) = (0, 0);
    let mut report = serde_json::Map::new();
    for (image, answer) in &answers {
        let by: Vec<String> = images.0.get(image).into_iter().flatten().map(ToString::to_string).collect();
        let (state, detail) = match answer {
            Answer::Found(digest) => ("found", digest.as_str()),
            Answer::Missing(why) => ("missing", why.as_str()),
            Answer::Denied(why) => ("denied", why.as_str()),
            Answer::Unreachable(why) => ("unreachable", why.as_str()),
        };
        match answer {
            Answer::Found(_) => {}
            Answer::Missing(_) | Answer::Denied(_) => missing += 1,
            Answer::Unreachable(_) => unreachable += 1,
        }
        if output == ImagesOutput::Json {
            let key = if state == "found" { "digest" } else { "why" };
            report.insert(
                image.clone(),
                serde_json::json!({"state": state, key: detail, "pulledBy": images.0.get(image)}),
            );
        } else if matches!(answer, Answer::Found(_)) {
            printer.data(&format!("found       {image} {detail}"));
        } else {
            printer.data(&format!("{state:<11} {image}: {detail}"));
            for puller in by {
                printer.data(&format!("  {puller}"));
            }
        }
    }
    if output == ImagesOutput::Json {
        printer.json(&report);
    }
    if unreachable > 0 {
        anyhow::bail!(
            "{unreachable} of {} images could not be asked for: their registries did not answer",
            answers.len()
        );
    }
    if missing > 0 {
        printer.failure(&format!("{missing} of {} images are not in their registries", answers.len()));
        return Ok(ExitStatus::Failure);
    }
    printer.success(&format!("all {} images are in their registries", answers.len()));
    Ok(ExitStatus::Success)
}

/// `--resolve`: the digest of each image that names none (and, with `--refresh`, of each pinned
/// one) from its registry, printed with the pins kept as the `images.digests` of a profile, or
/// (`--write`) written into the profile file when every image resolved.
fn resolve(
    images: &Images,
    mut pins: BTreeMap<String, String>,
    how: &Resolve,
    output: ImagesOutput,
    printer: Printer,
) -> anyhow::Result<ExitStatus> {
    let refresh = how.refresh;
    // name:tag → its name; an image with a digest of its own (not a pin) is left as it is.
    let mut wanted: BTreeMap<String, String> = BTreeMap::new();
    for image in images.0.keys() {
        let (unpinned, digest) = image.split_once('@').map_or((image.as_str(), None), |(n, d)| (n, Some(d)));
        let name = crate::spec::mirror::name_of(image);
        let pinned = pins.get(name).is_some_and(|p| Some(p.as_str()) == digest);
        if digest.is_none() || (refresh && pinned) {
            wanted.insert(unpinned.to_owned(), name.to_owned());
        }
    }
    if refresh {
        pins.retain(|name, _| !wanted.values().any(|n| n == name));
    }
    let progress = printer.progress();
    progress.step(&format!("reading {} digests from the registries", wanted.len()));
    let registries = Registries::new(wanted.keys().map(String::as_str));
    let answers = super::session::runtime()?.block_on(registries.manifests(wanted.keys().map(String::as_str)));
    progress.finish();
    let mut failed = Vec::new();
    for (image, answer) in &answers {
        let name = &wanted[image];
        match answer {
            Answer::Found(digest) => {
                if let Some(other) = pins.insert(name.clone(), digest.clone()).filter(|o| o != digest) {
                    failed.push(format!(
                        "{name} is pulled at two tags with different digests ({other}, {digest}): pin it by a digest in the image itself"
                    ));
                }
            }
            Answer::Missing(why) | Answer::Denied(why) => failed.push(format!("{image}: {why}")),
            Answer::Unreachable(why) => anyhow::bail!("{image}: its registry could not be asked: {why}"),
        }
    }
    for f in &failed {
        printer.failure(f);
    }
    if let Some(path) = &how.write {
        if !failed.is_empty() {
            printer.failure(&format!("{} left as it was: not every image resolved", path.display()));
            return Ok(ExitStatus::Failure);
        }
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {origin}"))?;
        let edited = crate::profile::pins::with_digests(&origin, &text, &pins)?;
        if edited == text {
            printer.success(&format!("{origin}: its {} pins are the digests the registries hold", pins.len()));
        } else {
            replace(path, edited.as_bytes()).with_context(|| format!("writing {origin}"))?;
            printer.success(&format!("{origin}: images.digests written ({} pins)", pins.len()));
        }
        return Ok(ExitStatus::Success);
    }
    if output == ImagesOutput::Json {
        printer.json(&serde_json::json!({"images": {"digests": pins}}));
    } else {
        printer.data(serde_saphyr::to_string(&serde_json::json!({"images": {"digests": pins}}))?.trim_end());
    }
    Ok(if failed.is_empty() { ExitStatus::Success } else { ExitStatus::Failure })
}

/// Replace the content of the file `path` (a symbolic link's target) whole: a temporary file
/// beside it with its permissions, synced, renamed over it.
fn replace(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let path = std::fs::canonicalize(path)?;
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    let mut tmp = tempfile::Builder::new().prefix(".osbx-").suffix(".osbx-tmp").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().set_permissions(std::fs::metadata(&path)?.permissions())?;
    tmp.as_file().sync_all()?;
    tmp.persist(&path).map_err(|e| e.error)?;
    Ok(())
}
