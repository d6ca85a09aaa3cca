//! The violations of a profile's rules: each names the offending field path; the loader turns
//! paths into `file:line:column`.

use super::syntax::{FLUX_UNITS, check_dns_label, check_dns_subdomain, check_image_reference, is_duration};

/// One violated rule: the field path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Field path, e.g. `pools.items[1].capacity.bufferMin`.
    pub field: String,
    /// What is wrong, and the fix where it is not obvious.
    pub message: String,
}

/// The violations found so far, with the checks rules share.
#[derive(Debug, Default)]
pub struct Violations(Vec<Violation>);

impl Violations {
    /// Record a violation.
    pub fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(Violation { field: field.into(), message: message.into() });
    }

    /// A required field that is not set: `missing field `name``, like serde says it.
    pub fn missing(&mut self, field: &str) {
        let name = field.rsplit('.').next().unwrap_or(field);
        self.push(field, format!("missing field `{name}`"));
    }

    /// The value must be a DNS-1123 label (namespaces, most object names).
    pub fn dns_label(&mut self, field: &str, value: &str) {
        if let Err(why) = check_dns_label(value) {
            self.push(field, format!("{value:?} is not a valid name: {why}"));
        }
    }

    /// The value must be a DNS-1123 subdomain (ConfigMap and Secret names).
    pub fn dns_subdomain(&mut self, field: &str, value: &str) {
        if let Err(why) = check_dns_subdomain(value) {
            self.push(field, why);
        }
    }

    /// The value must be a container image reference (`[host[:port]/]path[:tag][@digest]`).
    pub(crate) fn image(&mut self, field: &str, value: &str) {
        if let Err(why) = check_image_reference(value) {
            self.push(
                field,
                format!("{value:?} is not an image reference ([registry[:port]/]path[:tag][@digest]): {why}"),
            );
        }
    }

    /// The value must be a Flux duration.
    pub fn duration(&mut self, field: &str, value: &str) {
        self.duration_in(field, value, FLUX_UNITS);
    }

    /// The value must be a duration made of these units only.
    pub fn duration_in(&mut self, field: &str, value: &str, units: &[&str]) {
        if !is_duration(value, units) {
            self.push(
                field,
                format!(
                    "{value:?} is not a valid duration: use a number followed by {} (e.g. 10m, 1h30m)",
                    units.join(", ")
                ),
            );
        }
    }

    /// The value must pass `check` (one of [`crate::refs`]'s rules for chart names, versions,
    /// URLs, references and paths).
    pub(crate) fn shape(&mut self, field: &str, value: &str, check: impl FnOnce(&str) -> Result<(), String>) {
        if let Err(why) = check(value) {
            self.push(field, format!("{value:?} is refused: {why}"));
        }
    }

    /// An optional Flux duration.
    pub fn opt_duration(&mut self, field: &str, value: Option<&str>) {
        if let Some(v) = value {
            self.duration(field, v);
        }
    }
}

impl Violations {
    /// The violations found, in the order found.
    #[must_use]
    pub fn into_vec(self) -> Vec<Violation> {
        self.0
    }
}
