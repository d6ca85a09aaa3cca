//! The change set: what apply, diff and prune did (or would do) to each object.
//!
//! One value flows through apply, diff, wait and the printer; it prints as one
//! `Kind/namespace/name action` line per object.

use std::fmt;

use serde::Serialize;

use crate::object::ObjectRef;

/// What happened to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// It did not exist and was (or would be) created.
    Created,
    /// It existed and differed; it was (or would be) changed.
    Configured,
    /// It existed and equals the render; nothing was written.
    Unchanged,
    /// osbx applied it before, no longer renders it, and deleted (or would delete) it.
    Deleted,
    /// Not applied (its kind is not served yet, or it is excluded).
    Skipped,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Created => "created",
            Action::Configured => "configured",
            Action::Unchanged => "unchanged",
            Action::Deleted => "deleted",
            Action::Skipped => "skipped",
        })
    }
}

/// One object and its action.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// The object.
    #[serde(rename = "object")]
    pub subject: String,
    /// Its identity.
    #[serde(rename = "ref")]
    pub object: ObjectRef,
    /// What happened.
    pub action: Action,
    /// Why it was skipped, or other detail.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Unified diff (live → merged) for `configured`, and the whole object for `created`; with
    /// Secret data masked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

impl Change {
    /// A change without detail.
    #[must_use]
    pub fn new(object: ObjectRef, action: Action) -> Self {
        Self { subject: object.to_string(), object, action, reason: None, diff: None }
    }
}

/// Every change of one run, in apply order.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct ChangeSet(pub Vec<Change>);

impl ChangeSet {
    /// Add a change.
    pub fn push(&mut self, change: Change) {
        self.0.push(change);
    }

    /// Append another change set.
    pub fn extend(&mut self, other: ChangeSet) {
        self.0.extend(other.0);
    }

    /// How many changes have `action`.
    #[must_use]
    pub fn count(&self, action: Action) -> usize {
        self.0.iter().filter(|c| c.action == action).count()
    }

    /// Whether anything was (or would be) created, configured or deleted.
    #[must_use]
    pub fn has_changes(&self) -> bool {
        self.0.iter().any(|c| matches!(c.action, Action::Created | Action::Configured | Action::Deleted))
    }

    /// The objects, in order.
    pub fn refs(&self) -> impl Iterator<Item = &ObjectRef> {
        self.0.iter().map(|c| &c.object)
    }
}

impl fmt::Display for ChangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.0 {
            writeln!(f, "{} {}", c.subject, c.action)?;
        }
        Ok(())
    }
}
