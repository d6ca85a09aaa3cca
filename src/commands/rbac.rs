//! `osbx rbac`: the least-privilege roles for running osbx against a profile (or a fleet's
//! cluster), as YAML.

use super::ExitStatus;
use super::session::{Prepared, prepare};
use super::settings::RbacSettings;
use crate::deploy;
use crate::fleet;
use crate::printer::Printer;
use crate::progress::Silent;
use crate::rbac;

/// Run `osbx rbac`: render the profile (no cluster needed) and print the roles and bindings.
///
/// # Errors
/// Profile or render errors, a cluster the fleet does not have (exit 2).
pub(super) fn run(settings: &RbacSettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    let prepared = match &settings.member {
        None => prepare(&settings.profile, None)?,
        Some((file, cluster)) => member(file, cluster, settings.profile.templates.as_deref())?,
    };
    let (profile, opts) = (&prepared.loaded.profile, &settings.rbac);
    let needs = rbac::needs(profile, &prepared.layers, opts);
    let objects = rbac::roles(profile, &prepared.layers, &needs, opts);
    printer.data(rbac::yaml(profile, opts, &objects).trim_end());
    Ok(ExitStatus::Success)
}

/// The fleet `file`'s cluster `cluster`, rendered as `osbx rollout` renders it.
fn member(file: &std::path::Path, cluster: &str, templates: Option<&std::path::Path>) -> anyhow::Result<Prepared> {
    let mut fleet = fleet::load(file, &Silent)?;
    let Some(at) = fleet.position(cluster) else {
        let names: Vec<&str> = fleet.members.iter().map(|m| m.profile.cluster.name.as_str()).collect();
        anyhow::bail!("--cluster: no cluster {cluster:?} in {} (its clusters: {})", file.display(), names.join(", "));
    };
    let loaded = fleet.members.swap_remove(at);
    let rendered = crate::commands::renderer(templates)?.render(&loaded)?;
    let layers = deploy::layers(&loaded.profile, &rendered);
    Ok(Prepared { loaded, layers, rendered })
}
