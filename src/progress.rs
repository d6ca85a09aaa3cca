//! Progress events from long-running domain work (render of a fleet, apply, wait, verify).
//!
//! Domain code reports what happens through this trait and never prints; the printer implements
//! it (spinners on a terminal, plain lines otherwise) and tests can record it.

use std::fmt;

use crate::object::ObjectRef;
use crate::readiness::StatusResult;

/// Where a layer of an apply is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the layers it depends on.
    WaitingForDependencies,
    /// Planning (a dry run).
    Planning,
    /// Writing.
    Applying,
    /// Waiting for readiness.
    Waiting,
    /// Finished.
    Ready,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::WaitingForDependencies => "waiting for dependencies",
            Phase::Planning => "planning",
            Phase::Applying => "applying",
            Phase::Waiting => "waiting",
            Phase::Ready => "ready",
        })
    }
}

/// Where a verify check is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckState {
    /// Started, no verdict yet.
    Running,
    /// Finished with this outcome (`PASS`, `FAIL`, …; the worst of a check's ids), `good` when
    /// it passed or was skipped.
    Finished {
        /// The outcome, as the report shows it.
        outcome: String,
        /// Whether it passed (or was skipped).
        good: bool,
    },
}

/// Where a cluster of a rollout's wave is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterState {
    /// Waiting for Flux to reconcile the wave's commit (what it waits on now).
    Reconciling(String),
    /// Running the acceptance checks (the check that just finished, when one did).
    Verifying(String),
    /// Reconciled and every check passed.
    Passed,
    /// Stopped here: why.
    Failed(String),
}

/// Receiver of progress events. Every method has an empty default.
pub trait Progress: Sync {
    /// A layer enters a phase.
    fn phase(&self, _layer: &str, _phase: Phase) {}
    /// A verify check (its ids, comma-separated) starts or ends.
    fn check(&self, _check: &str, _state: &CheckState) {}
    /// An object's readiness changed while waiting.
    fn status(&self, _object: &ObjectRef, _status: &StatusResult) {}
    /// A warning worth showing.
    fn warn(&self, _message: &str) {}
    /// A rollout's wave is being committed (`commit: None`) or was (with its commit, or
    /// `Some("")` when there was nothing to commit).
    fn wave(&self, _wave: &str, _clusters: &[String], _commit: Option<&str>) {}
    /// A cluster of a rollout's wave reached a state.
    fn cluster(&self, _wave: &str, _cluster: &str, _state: &ClusterState) {}
    /// A step of a longer task starts (a review: reading a side, expanding charts).
    fn step(&self, _what: &str) {}
    /// A counted task (rendering a fleet's clusters, writing files) reached `done` of `total`;
    /// `done == total` ends it.
    fn count(&self, _task: &str, _done: usize, _total: usize) {}
}

/// Progress nobody watches.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Progress for Silent {}
