//! `osbx rbac`: the least-privilege roles for running osbx against a profile, as YAML.

use super::ExitStatus;
use super::session::prepare;
use super::settings::RbacSettings;
use crate::printer::Printer;
use crate::rbac;

/// Run `osbx rbac`: render the profile (no cluster needed) and print the roles and bindings.
///
/// # Errors
/// Profile or render errors (exit 2).
pub(super) fn run(settings: &RbacSettings, printer: Printer) -> anyhow::Result<ExitStatus> {
    let prepared = prepare(&settings.profile)?;
    let (profile, opts) = (&prepared.loaded.profile, &settings.rbac);
    let needs = rbac::needs(profile, &prepared.layers, opts);
    let objects = rbac::roles(profile, &prepared.layers, &needs, opts);
    printer.data(rbac::yaml(profile, opts, &objects).trim_end());
    Ok(ExitStatus::Success)
}
