//! What a profile or fleet rendered into a repository: the files it wrote and the entries it
//! added to cluster kustomizations, kept in `.osbx/<kind>-<name>.yaml` (a file osbx owns, with its
//! marker, committed with the render), so that the next render removes what it no longer
//! produces, and nothing else.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::render::{self, Source};

/// The state of one source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(super) struct State {
    /// Every file the render wrote (not the cluster kustomizations, which are shared).
    pub files: BTreeSet<String>,
    /// Per cluster kustomization, the entries osbx added to it (never one a person added).
    pub entries: BTreeMap<String, BTreeSet<String>>,
    /// The cluster kustomizations osbx created (deleted again once they list nothing).
    #[serde(skip_serializing_if = "BTreeSet::is_empty")]
    pub created: BTreeSet<String>,
}

/// Where the state of `source` is kept, relative to the repository root.
pub(super) fn path(source: &Source) -> String {
    format!(".osbx/{}-{}.yaml", source.kind, source.name)
}

impl State {
    /// The state in `text` (an owned state file).
    pub(super) fn parse(text: &str) -> Result<Self, String> {
        serde_saphyr::from_str(render::strip_marker(text)).map_err(|e| e.to_string())
    }

    /// The file's text, marked as osbx's.
    pub(super) fn text(&self, source: &Source, path: &str) -> String {
        let body = serde_saphyr::to_string(self).unwrap_or_default();
        let note =
            format!("# What osbx rendered for {source} here: the next render removes what it no longer produces.\n");
        render::with_marker(path, &format!("{note}{body}"), &source.name)
    }
}
