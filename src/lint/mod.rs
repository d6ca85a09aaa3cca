//! `osbx lint`: domain rules no general tool knows, each with an id, a severity, the profile
//! location and the fix. `osbx render` runs them too: errors stop it, warnings are printed.
//! One file per area; each rule reports through [`Linter::add`].

mod charts;
mod images;
mod kata;
mod layers;
mod pools;
mod secrets;
mod spire;

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::chart::Chart;
use crate::profile::{Diagnostic, LoadedProfile, Pos};
use crate::render::Rendered;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Will not work, or leaks a secret: `render` refuses.
    Error,
    /// Works, but probably not as intended.
    Warning,
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Stable rule id.
    pub id: &'static str,
    /// Whether it fails `lint` (and `render`) or only warns.
    pub severity: Severity,
    /// Profile file.
    pub file: String,
    /// Line of the field in the profile file (1-based).
    pub line: usize,
    /// Column of the field (1-based).
    pub column: usize,
    /// Field path.
    pub field: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub fix: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{}:{}:{}: {sev}[{}]: {}: {} (fix: {})",
            self.file, self.line, self.column, self.id, self.field, self.message, self.fix
        )
    }
}

struct Linter<'a> {
    loaded: &'a LoadedProfile,
    out: Vec<Finding>,
}

impl Linter<'_> {
    /// A finding located in a file of the repository rather than in the profile.
    #[allow(clippy::too_many_arguments)]
    fn add_at(
        &mut self,
        id: &'static str,
        severity: Severity,
        file: String,
        pos: Pos,
        field: &str,
        message: String,
        fix: &str,
    ) {
        self.out.push(Finding {
            id,
            severity,
            file,
            line: pos.line,
            column: pos.column,
            field: field.to_owned(),
            message,
            fix: fix.to_owned(),
        });
    }

    fn add(&mut self, id: &'static str, severity: Severity, field: &str, message: String, fix: &str) {
        let Pos { line, column } = self.loaded.locations.find(field);
        self.out.push(Finding {
            id,
            severity,
            file: self.loaded.origin.clone(),
            line,
            column,
            field: field.to_owned(),
            message,
            fix: fix.to_owned(),
        });
    }
}

/// What the rules may check the render against, beyond the profile.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Inputs<'a> {
    /// The Pool CRD the pinned chart installs (else known stale chart versions are checked from
    /// a table).
    pub pool_crd: Option<&'a Value>,
    /// The pinned chart of a HelmRelease, to find values it does not read.
    pub chart: Option<&'a Chart>,
    /// The Flux repository the profile renders into (its sealed Secrets attached to the
    /// profile): its layers are checked for plaintext Secrets and its sealed files for form,
    /// recipients and (with `identities`) their MAC.
    pub repo: Option<&'a std::path::Path>,
    /// age identities that open the sealed files.
    pub identities: Option<&'a crate::sops::Identities>,
}

/// Run every rule over a valid profile and its render.
#[must_use]
pub(crate) fn lint(loaded: &LoadedProfile, rendered: &Rendered, inputs: Inputs<'_>) -> Vec<Finding> {
    let mut l = Linter { loaded, out: Vec::new() };
    let objects = rendered.objects();
    secrets::api_key(&mut l);
    if let Some(repo) = inputs.repo {
        secrets::in_git(&mut l, repo, inputs.identities);
    }
    pools::pools(&mut l, &objects, inputs.pool_crd);
    kata::kata(&mut l);
    images::images(&mut l);
    spire::spire(&mut l);
    layers::duplicates(&mut l, &objects);
    layers::flux_health(&mut l);
    charts::unpinned(&mut l, &objects);
    if let Some(chart) = inputs.chart {
        charts::unread_values(&mut l, &objects, chart);
    }
    l.out.sort_by(|a, b| (a.severity, a.line, a.column, a.id).cmp(&(b.severity, b.line, b.column, b.id)));
    l.out
}

/// Lint errors: `render` refuses to write.
#[derive(Debug, thiserror::Error)]
#[error("lint found errors; nothing written (run `osbx lint` for details):\n{}", .0.iter().map(|f| format!("  {f}")).collect::<Vec<_>>().join("\n"))]
pub(crate) struct LintErrors(pub Vec<Finding>);

/// The gate `render` passes through: errors refuse the render, warnings are returned.
///
/// # Errors
/// [`LintErrors`] with every error found.
pub(crate) fn gate(
    loaded: &LoadedProfile,
    rendered: &Rendered,
    repo: Option<&std::path::Path>,
) -> Result<Vec<Finding>, LintErrors> {
    let inputs = Inputs { repo, ..Inputs::default() };
    let (errors, warnings): (Vec<Finding>, Vec<Finding>) =
        lint(loaded, rendered, inputs).into_iter().partition(|f| f.severity == Severity::Error);
    if errors.is_empty() { Ok(warnings) } else { Err(LintErrors(errors)) }
}

/// The same finding for many clusters of a fleet (one from the base profile) once, with the
/// number of other clusters it applies to; in first-seen order.
#[must_use]
pub(crate) fn group(findings: &[Finding]) -> Vec<(&Finding, usize)> {
    let mut groups: Vec<(&Finding, usize)> = Vec::new();
    for f in findings {
        match groups.iter_mut().find(|(g, _)| (g.id, &g.field, &g.message) == (f.id, &f.field, &f.message)) {
            Some((_, n)) => *n += 1,
            None => groups.push((f, 0)),
        }
    }
    groups
}

impl From<Diagnostic> for Finding {
    /// An invalid profile as a lint result.
    fn from(d: Diagnostic) -> Self {
        Finding {
            id: "profile.invalid",
            severity: Severity::Error,
            file: d.file,
            line: d.pos.line,
            column: d.pos.column,
            field: d.field.unwrap_or_default(),
            message: d.message,
            fix: "see the message".into(),
        }
    }
}
