//! `osbx images`: every image the platform as rendered will pull, and who pulls it.

use super::ExitStatus;
use super::settings::{ImagesSettings, Source};
use crate::cli::ImagesOutput;
use crate::images::{Images, Mirrored};
use crate::printer::Printer;
use crate::progress::Progress as _;
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
        own.add(member, &rendered, expander)?;
        mirrored.add(member, &own);
        images.merge(own);
    }
    progress.finish();
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
            "{image}: {why}; pulled by {}. osbx rewrites the images of the charts it knows through their values: set the value of this chart that names it (in the section's `values`) to the image on your mirror",
            pullers.join("; ")
        ));
    }
    Ok(if mirrored.outside.is_empty() { ExitStatus::Success } else { ExitStatus::Failure })
}
