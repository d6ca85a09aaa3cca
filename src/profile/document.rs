//! The profile document: `apiVersion: osbx.dev/v1alpha1`, `kind: Profile`.
//!
//! Every struct denies unknown fields, so a typo is an error with a location, not a silently
//! ignored setting. Each default is stated once, in the `Default` of its struct; the sections of
//! the layer components are their modules' (see [`crate::components`]), flattened into the
//! document as [`Sections`].

use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use super::verify::{SpiffeSmoke, Verify};
use crate::components::{self, Component, Sections, Site};
use crate::spec::syntax::normalize_repo_path;
use crate::spec::{Images, Secrets, TargetCluster};

/// The only `apiVersion` this build understands.
pub(crate) const API_VERSION: &str = "osbx.dev/v1alpha1";
/// The only `kind` this build understands.
pub(crate) const KIND: &str = "Profile";

/// A whole profile document. Everything but the cluster's name and its pools has a default,
/// pinned for the chart osbx pins: the smallest useful profile is `cluster: {name: …}` and
/// `pools: {items: […]}`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("required" = ["cluster"]))]
pub struct Profile {
    /// `osbx.dev/v1alpha1`.
    pub api_version: String,
    /// `Profile`.
    pub kind: String,
    /// Name and description of the profile itself.
    pub metadata: Metadata,
    /// Where the platform goes: the cluster directory and the Flux objects that sync it.
    pub cluster: TargetCluster,
    /// The Flux Kustomization layers, rendered by osbx or only referenced.
    pub layers: Vec<LayerSpec>,
    /// The components' sections (`opensandbox`, `pools`, `kata`, `spire`).
    #[serde(flatten)]
    pub sections: Sections,
    /// The registry mirror every image is pulled from, the pull Secrets of every pod and the
    /// pinned digests (left out of the profile osbx writes while empty).
    #[serde(skip_serializing_if = "Images::is_empty")]
    pub images: Images,
    /// Where the Secrets osbx supplies are kept (`sops`: encrypted in git).
    pub secrets: Secrets,
    /// How `osbx verify` probes the platform.
    pub verify: Verify,
}

impl Default for Profile {
    fn default() -> Self {
        let layer = |name: &str, component: &'static Component| LayerSpec {
            name: name.into(),
            component: Some(component),
            ..LayerSpec::default()
        };
        Self {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            metadata: Metadata::default(),
            cluster: TargetCluster::default(),
            layers: vec![
                layer("opensandbox", &components::opensandbox::COMPONENT),
                LayerSpec {
                    depends_on: vec!["opensandbox".into()],
                    ..layer("opensandbox-pools", &components::pools::COMPONENT)
                },
            ],
            sections: Sections::default(),
            images: Images::default(),
            secrets: Secrets::default(),
            verify: Verify::default(),
        }
    }
}

/// Every top-level key, in schema order: the document's own and [`Sections::KEYS`].
static KEYS: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
    let own = ["apiVersion", "kind", "metadata", "cluster", "layers"];
    own.into_iter().chain(Sections::KEYS.iter().copied()).chain(["images", "secrets", "verify"]).collect()
});

/// Read key by key, so that a section's errors keep their location (serde's `flatten` would
/// buffer the sections and lose it) and an unknown top-level key is still an error.
impl<'de> Deserialize<'de> for Profile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Document;
        impl<'de> Visitor<'de> for Document {
            type Value = Profile;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a profile document (a mapping)")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Profile, A::Error> {
                let mut p = Profile::default();
                let mut seen: Vec<String> = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if seen.contains(&key) {
                        return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
                    }
                    match key.as_str() {
                        "apiVersion" => p.api_version = map.next_value()?,
                        "kind" => p.kind = map.next_value()?,
                        "metadata" => p.metadata = map.next_value()?,
                        "cluster" => p.cluster = map.next_value()?,
                        "layers" => p.layers = map.next_value()?,
                        "images" => p.images = map.next_value()?,
                        "secrets" => p.secrets = map.next_value()?,
                        "verify" => p.verify = map.next_value()?,
                        other => {
                            if !p.sections.read(other, &mut map)? {
                                return Err(de::Error::unknown_field(other, &KEYS));
                            }
                        }
                    }
                    seen.push(key);
                }
                Ok(p)
            }
        }
        d.deserialize_map(Document)
    }
}

/// Profile metadata.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    /// Profile name (shown by `osbx profiles`, and in the ownership marker of every file it
    /// renders); default: the cluster's name.
    pub name: String,
    /// One-line description.
    pub description: Option<String>,
}

/// One Flux Kustomization layer of the profile.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("required" = ["name"]))]
pub struct LayerSpec {
    /// Kustomization name (also `clusters/<cluster>/apps/<name>.yaml`).
    pub name: String,
    /// The layer exists in the repository already; osbx only refers to it in `dependsOn`.
    pub external: bool,
    /// What osbx renders into the layer (required unless `external`).
    pub component: Option<&'static Component>,
    /// Repository path of the layer; default `platform/<name>`.
    pub path: Option<String>,
    /// Flux reconcile interval.
    pub interval: String,
    /// Flux timeout (defaults to the interval in Flux).
    pub timeout: Option<String>,
    /// Flux retry interval after a failure.
    pub retry_interval: Option<String>,
    /// Garbage-collect objects removed from the layer.
    pub prune: bool,
    /// Health-check everything the layer applies; with `false`, Flux still health-checks the
    /// objects without a Ready condition (a pools layer's Pools, listed in `healthChecks`).
    pub wait: bool,
    /// Layers (rendered or external) that must be Ready first.
    pub depends_on: Vec<String>,
}

impl Default for LayerSpec {
    fn default() -> Self {
        Self {
            name: String::new(),
            external: false,
            component: None,
            path: None,
            interval: "10m".into(),
            timeout: None,
            retry_interval: None,
            prune: true,
            wait: true,
            depends_on: Vec::new(),
        }
    }
}

impl LayerSpec {
    /// The path as written, or `platform/<name>`.
    #[must_use]
    pub fn raw_path(&self) -> String {
        self.path.clone().unwrap_or_else(|| format!("platform/{}", self.name))
    }

    /// The repository path of a rendered layer, normalised (`./platform/x/` → `platform/x`).
    #[must_use]
    pub fn repo_path(&self) -> String {
        let raw = self.raw_path();
        normalize_repo_path(&raw).unwrap_or(raw)
    }

    /// The component this layer renders (`None` for an external layer).
    #[must_use]
    pub fn renders(&self) -> Option<&'static Component> {
        if self.external { None } else { self.component }
    }
}

/// The JSON Schema of the profile document (draft 2020-12), from these types: descriptions from
/// their doc comments, defaults from their `Default`s.
#[must_use]
pub fn schema() -> serde_json::Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(Profile)).unwrap_or_default();
    schema["title"] = "osbx profile".into();
    schema
}

impl Profile {
    /// The profile's name: `metadata.name`, else the cluster's.
    #[must_use]
    pub fn name(&self) -> &str {
        if self.metadata.name.is_empty() { &self.cluster.name } else { &self.metadata.name }
    }

    /// The layers osbx renders, in profile order.
    pub fn rendered_layers(&self) -> impl Iterator<Item = &LayerSpec> {
        self.layers.iter().filter(|l| l.renders().is_some())
    }

    /// Where the profile puts things, as components see it.
    #[must_use]
    pub fn site(&self) -> Site<'_> {
        let layers =
            self.layers.iter().enumerate().filter_map(|(i, l)| l.renders().map(|c| (i, l.name.as_str(), c))).collect();
        let all = self.layers.iter().map(|l| (l.name.as_str(), l.depends_on.as_slice(), l.wait)).collect();
        Site { cluster: &self.cluster, layers, all }
    }

    /// The layer that renders `component`, with its index.
    #[must_use]
    pub fn rendering(&self, component: &Component) -> Option<(usize, &LayerSpec)> {
        self.layers.iter().enumerate().find(|(_, l)| l.renders() == Some(component))
    }

    /// The component the layer named `layer` renders.
    #[must_use]
    pub fn component_of(&self, layer: &str) -> Option<&'static Component> {
        self.layers.iter().find(|l| l.name == layer).and_then(LayerSpec::renders)
    }

    /// The profile's acceptance layer and its section: the one answer to whether its cluster
    /// checks itself (render, rbac, rollout, status, review and verify ask it); `None` without
    /// a layer of the `acceptance` component.
    #[must_use]
    pub fn acceptance(&self) -> Option<(&components::acceptance::Acceptance, &LayerSpec)> {
        let (_, layer) = self.rendering(&components::acceptance::COMPONENT)?;
        Some((self.sections.acceptance.as_ref()?, layer))
    }

    /// The digest of the criteria the acceptance checks of this profile run by: its `acceptance`
    /// section (the default one without) and its `verify` section
    /// ([`crate::components::acceptance::Acceptance::criteria`]). The render mixes it into the
    /// revision, each run publishes it, the gate compares it.
    #[must_use]
    pub(crate) fn criteria(&self) -> String {
        self.sections.acceptance.clone().unwrap_or_default().criteria(&self.verify)
    }

    /// The SPIFFE smoke identity `osbx verify` checks: `verify.spiffe`, else the one the `spire`
    /// section defines.
    #[must_use]
    pub fn spiffe_smoke(&self) -> Option<SpiffeSmoke> {
        self.verify.spiffe.clone().or_else(|| {
            let s = self.sections.spire.as_ref()?;
            Some(SpiffeSmoke {
                namespace: s.smoke.namespace.clone(),
                service_account: s.smoke.service_account.clone(),
                id: s.smoke.spiffe_id(&s.trust_domain),
                cluster_spiffe_id: Some(s.smoke.name.clone()),
                ..SpiffeSmoke::default()
            })
        })
    }
}
