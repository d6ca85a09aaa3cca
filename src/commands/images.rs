//! `osbx images`: every image the platform as rendered will pull, and who pulls it.

use super::ExitStatus;
use super::settings::{ImagesSettings, Source};
use crate::cli::ImagesOutput;
use crate::images::Images;
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
        images.add(member, &rendered, expander)?;
    }
    progress.finish();
    match settings.output {
        ImagesOutput::Json => printer.json(&images),
        ImagesOutput::SkopeoSync => {
            let (yaml, refused) = images.skopeo_sync();
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
    Ok(ExitStatus::Success)
}
