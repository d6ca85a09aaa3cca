//! The change set: what apply, diff and prune did (or would do) to each object.
//!
//! One value flows through apply, diff, wait and the printer; each change prints as a
//! `Kind/namespace/name action` line.

use std::fmt;

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

use crate::object::ObjectRef;

/// What happened to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Action {
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
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Change {
    /// The object.
    pub id: ObjectRef,
    /// What happened.
    pub action: Action,
    /// Why it was skipped, or other detail.
    pub reason: Option<String>,
    /// Unified diff (live → merged) for `configured`, and the whole object for `created`; with
    /// Secret data masked.
    pub diff: Option<String>,
}

impl Change {
    /// A change without detail.
    #[must_use]
    pub(crate) fn new(id: ObjectRef, action: Action) -> Self {
        Self { id, action, reason: None, diff: None }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.id, self.action)
    }
}

/// `{"object": "Kind/ns/name", "ref": {...}, "action": …, "reason"?, "diff"?}`.
impl Serialize for Change {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let fields = 3 + usize::from(self.reason.is_some()) + usize::from(self.diff.is_some());
        let mut st = s.serialize_struct("Change", fields)?;
        st.serialize_field("object", &self.id.to_string())?;
        st.serialize_field("ref", &self.id)?;
        st.serialize_field("action", &self.action)?;
        if let Some(reason) = &self.reason {
            st.serialize_field("reason", reason)?;
        }
        if let Some(diff) = &self.diff {
            st.serialize_field("diff", diff)?;
        }
        st.end()
    }
}

/// Every change of one run, in apply order.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub(crate) struct ChangeSet(pub Vec<Change>);

impl ChangeSet {
    /// Add a change.
    pub(crate) fn push(&mut self, change: Change) {
        self.0.push(change);
    }

    /// How many changes have `action`.
    #[must_use]
    pub(crate) fn count(&self, action: Action) -> usize {
        self.0.iter().filter(|c| c.action == action).count()
    }

    /// Whether anything was (or would be) created, configured or deleted.
    #[must_use]
    pub(crate) fn has_changes(&self) -> bool {
        self.0.iter().any(|c| matches!(c.action, Action::Created | Action::Configured | Action::Deleted))
    }

    /// The objects, in order.
    pub(crate) fn ids(&self) -> impl Iterator<Item = &ObjectRef> {
        self.0.iter().map(|c| &c.id)
    }

    /// `N created, N configured, N unchanged, N deleted, N skipped`.
    #[must_use]
    pub(crate) fn summary(&self) -> String {
        [Action::Created, Action::Configured, Action::Unchanged, Action::Deleted, Action::Skipped]
            .map(|a| format!("{} {a}", self.count(a)))
            .join(", ")
    }
}
