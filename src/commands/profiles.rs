//! `osbx profiles`: the profiles compiled into the binary.

use crate::commands::ExitStatus;
use crate::printer::Printer;
use crate::profile::{DEFAULT_PROFILE, embedded_profiles};

/// List embedded profiles, one per line: name, a `*` for the default, and the description.
#[must_use]
pub(super) fn run(printer: Printer) -> ExitStatus {
    let profiles = embedded_profiles();
    let width = profiles.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, description) in profiles {
        let mark = if name == DEFAULT_PROFILE { "*" } else { " " };
        printer.data(&format!("{name:width$} {mark} {}", description.unwrap_or_default()));
    }
    ExitStatus::Success
}
