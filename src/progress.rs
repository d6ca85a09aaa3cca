//! Progress events from long-running domain work (apply, wait, verify).
//!
//! Domain code reports what happens through this trait and never prints; the printer implements
//! it (spinners on a terminal, plain lines otherwise) and tests can record it.

use crate::changeset::Change;
use crate::cluster::status::StatusResult;
use crate::object::ObjectRef;

/// Receiver of progress events. Every method has an empty default.
pub trait Progress: Sync {
    /// A phase of a layer starts (`applying`, `waiting`) or ends (`ready`).
    fn layer(&self, _layer: &str, _phase: &str) {}
    /// An object was applied (or planned).
    fn change(&self, _change: &Change) {}
    /// An object's readiness changed while waiting.
    fn status(&self, _object: &ObjectRef, _status: &StatusResult) {}
    /// A warning worth showing.
    fn warn(&self, _message: &str) {}
}

/// Progress that goes nowhere.
pub struct Silent;

impl Progress for Silent {}
