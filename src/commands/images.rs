//! `osbx images`: every image the platform as rendered will pull, and who pulls it.

use super::ExitStatus;
use super::settings::{ImagesSettings, Source};
use crate::cli::ImagesOutput;
use crate::images::Images;
use crate::printer::Printer;
use crate::progress::Progress as _;
use crate::review::ChartMode;
use crate::review::charts::{Charts, Helm};
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
    // The review's chart cache and helm; one expander per Kubernetes version.
    let (helm, cache) = match &settings.charts {
        ChartMode::Off => (None, None),
        ChartMode::Expand { cache, air_gapped } => {
            let (dir, scratch) = cache.open()?;
            (Some((Helm::find()?, *air_gapped)), Some((dir, scratch)))
        }
    };
    let mut expanders: std::collections::BTreeMap<String, Charts> = std::collections::BTreeMap::new();
    let mut images = Images::default();
    let progress = printer.progress();
    for member in &members {
        let rendered = renderer.render(member)?;
        let kube_version = member.profile.cluster.kubernetes_version.clone();
        let expander = match (&helm, &cache) {
            (Some((helm, air_gapped)), Some((dir, _))) => {
                progress.step(&format!(
                    "cluster {}: expanding charts (helm {})",
                    member.profile.cluster.name, helm.version
                ));
                Some(
                    &*expanders
                        .entry(kube_version.clone())
                        .or_insert_with(|| Charts::new(helm.clone(), dir.clone(), *air_gapped, kube_version)),
                )
            }
            _ => None,
        };
        let expand = |release: &crate::object::Object, side: &[&crate::object::Object]| {
            let expander = expander.expect("given only with an expander");
            let e = expander.expand(release, side)?;
            Ok((format!("{} {}", e.chart.name, e.chart.version), e.objects.into_iter().map(|(o, _)| o).collect()))
        };
        images.add(member, &rendered, expander.map(|_| &expand as &crate::images::Expand<'_>))?;
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
