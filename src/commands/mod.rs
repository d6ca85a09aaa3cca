//! One module per command: turn arguments into options, call the domain, print the result.

pub mod apply;
pub mod cluster;
pub mod diff;
pub mod lint;
pub mod profiles;
pub mod render;
pub mod verify;

use std::process::ExitCode;

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Success, no difference, every check passed.
    Success,
    /// An expected negative outcome: differences found, a check failed, not ready in time.
    Failure,
    /// Something broke: bad input, unreachable cluster, refused.
    Error,
}

impl From<ExitStatus> for ExitCode {
    fn from(s: ExitStatus) -> Self {
        match s {
            ExitStatus::Success => ExitCode::SUCCESS,
            ExitStatus::Failure => ExitCode::from(1),
            ExitStatus::Error => ExitCode::from(2),
        }
    }
}
