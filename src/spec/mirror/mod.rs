//! The `images` section: the registry mirror every image of the platform is pulled from, and the
//! pull Secrets every pod that pulls is given.
//!
//! A mirror maps each source registry (`docker.io`, `ghcr.io`, `registry.example:5000`) to a
//! repository prefix on the user's registry (`registry.corp/dockerhub`): `ghcr.io/spiffe/spire-agent:1.15.2`
//! becomes `registry.corp/ghcr/spiffe/spire-agent:1.15.2`, tag and digest kept. The key `*`
//! maps every other registry, scoped by its host as `skopeo sync --scoped` lays a mirror out
//! (`quay.io/kata-containers/kata-deploy` → `registry.corp/all/quay.io/kata-containers/kata-deploy`).
//! An image already on a mirror's registry (under its prefix, or the user's own image beside it)
//! is left as it is, so a rewrite is idempotent (the acceptance layer's copy of the profile is
//! rewritten again in the cluster, to the same names).
//!
//! Every component rewrites the images it renders or passes to a chart through
//! [`Mirror::image`] and the chart's own image values ([`ChartImage`], [`Mirror::chart_values`]);
//! the profile rewrites verify's probe images. An image whose registry the mirror does not map is
//! an error naming where it is set.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod chart;

pub(crate) use chart::{ChartImage, Shape};

use super::Violations;
use super::syntax::ImageRef;

/// Docker Hub's other names: an image written with one of them is a Docker Hub image.
const DOCKER_HUB: [&str; 3] = ["docker.io", "index.docker.io", "registry-1.docker.io"];

/// The `images` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Images {
    /// Per source registry (`docker.io`, `ghcr.io`, `quay.io`, `registry.k8s.io`, a
    /// `host:port`), the repository prefix it is mirrored under (`registry.corp/dockerhub`);
    /// `*` for every other registry, under `<prefix>/<registry host>/…`. With a mirror, every
    /// image the platform pulls (rendered, passed to a chart through its image values, in the
    /// server's configuration, verify's probes, the acceptance layer) is pulled from it, and an
    /// image from a registry it does not map is an error.
    pub mirror: Mirror,
    /// Names of `kubernetes.io/dockerconfigjson` Secrets every pod osbx renders or configures
    /// pulls with (`imagePullSecrets`): the charts' pods, the Pools', the acceptance layer's and
    /// verify's probe pods. Each must exist in every namespace whose pods pull with it (osbx
    /// names them, never creates or copies them).
    pub pull_secrets: Vec<String>,
    /// Digests pinned by image name as pulled (on the mirror, when there is one), without tag:
    /// `registry.corp/dockerhub/library/busybox: sha256:…`. Every image of that name osbx
    /// renders or passes to a chart is pulled by its digest (`name:tag@sha256:…`), so a
    /// cluster pulls exactly what was reviewed. `osbx images --resolve` reads them from the
    /// registries and prints this map (`--write`: writes it here); pins stay until
    /// `--resolve --refresh`.
    pub digests: BTreeMap<String, String>,
}

impl Images {
    /// The section's rules.
    pub(crate) fn validate(&self, v: &mut Violations) {
        self.mirror.validate(v);
        for (i, name) in self.pull_secrets.iter().enumerate() {
            v.dns_subdomain(&format!("images.pullSecrets[{i}]"), name);
        }
        for (name, digest) in &self.digests {
            let at = format!("images.digests.{name:?}");
            match ImageRef::parse(&format!("{name}@{digest}")) {
                Ok(_) if name_len(name) == name.len() && !name.contains('@') => {}
                Ok(_) => v.push(&at, "name the image without its tag or digest"),
                Err(why) => v.push(&at, why),
            }
        }
    }

    /// Whether the section is empty (as it is unless written).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Whether settling changes images at all.
    #[must_use]
    pub fn rewrites(&self) -> bool {
        self.mirror.is_set() || !self.digests.is_empty()
    }

    /// `image` as pulled: onto the mirror, then by its pinned digest.
    ///
    /// # Errors
    /// [`Unmapped`], as [`Mirror::image`].
    pub fn image(&self, image: &str) -> Result<String, Unmapped> {
        let mirrored = self.mirror.image(image)?;
        Ok(self.pin(&mirrored).map_or(mirrored.clone(), |digest| format!("{mirrored}@{digest}")))
    }

    /// The digest pinned for `image`'s name, when it names none itself.
    fn pin(&self, image: &str) -> Option<&String> {
        if image.contains('@') {
            return None;
        }
        self.digests.get(&image[..name_len(image)])
    }

    /// Rewrite the image in `image` (the profile's field `at`), or say why it cannot be.
    pub fn rewrite(&self, image: &mut String, at: &str, v: &mut Violations) {
        match self.image(image) {
            Ok(pulled) => *image = pulled,
            Err(u) => v.push(at, format!("{}: {}", u.image, u.why)),
        }
    }

    /// Give a chart's pods the pull Secrets: each of `paths` (`.`-separated, where the chart
    /// reads a list of `{name}`) of `values` that the profile does not set is set.
    pub fn chart_pull_secrets(&self, values: &mut Option<Value>, paths: &[&str]) {
        if self.pull_secrets.is_empty() {
            return;
        }
        let values = values.get_or_insert_with(|| Value::Object(serde_json::Map::new()));
        for path in paths {
            let node = at_path(values, path);
            if node.is_null() {
                *node = self.pull_secret_refs();
            }
        }
    }
}

/// The node at `path` (`.`-separated) of `value`, made (as maps) where missing.
fn at_path<'a>(value: &'a mut Value, path: &str) -> &'a mut Value {
    path.split('.').fold(value, |node, key| {
        if !node.is_object() {
            *node = Value::Object(serde_json::Map::new());
        }
        match node {
            Value::Object(map) => map.entry(key).or_insert(Value::Null),
            _ => unreachable!("made a map above"),
        }
    })
}

/// Source registry → repository prefix on the mirror (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(transparent)]
pub struct Mirror(pub BTreeMap<String, String>);

/// An image the mirror cannot rewrite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmapped {
    /// The image as written.
    pub image: String,
    /// Why: its registry has no entry, or it is not an image reference.
    pub why: String,
}

impl Mirror {
    /// Whether the profile has a mirror at all.
    #[must_use]
    pub fn is_set(&self) -> bool {
        !self.0.is_empty()
    }

    fn validate(&self, v: &mut Violations) {
        for (registry, prefix) in &self.0 {
            let at = format!("images.mirror.{registry:?}");
            if registry != "*"
                && ImageRef::parse(&format!("{registry}/x")).map(|r| r.registry).as_deref() != Ok(registry)
            {
                v.push(&at, format!("{registry:?} is not a registry host (`host[:port]`, e.g. `ghcr.io`) or `*`"));
            }
            match prefix_host(prefix) {
                None => v.push(
                    &at,
                    format!(
                        "{prefix:?} is not a repository prefix on a registry (`host[:port]/path`, e.g. `registry.corp/dockerhub`)"
                    ),
                ),
                Some(host) if self.0.contains_key(&host) || (is_docker_hub(&host) && self.maps_docker_hub()) => v.push(
                    &at,
                    format!("the mirror {host} is itself a registry the mirror rewrites: name another host"),
                ),
                Some(_) => {}
            }
        }
    }

    fn maps_docker_hub(&self) -> bool {
        DOCKER_HUB.iter().any(|h| self.0.contains_key(*h))
    }

    /// `image` as pulled from the mirror: unchanged when already on a mirror's registry or when
    /// there is no mirror.
    ///
    /// # Errors
    /// [`Unmapped`]: the image's registry has no entry (and there is no `*`), or it is not an
    /// image reference.
    pub fn image(&self, image: &str) -> Result<String, Unmapped> {
        if !self.is_set() {
            return Ok(image.to_owned());
        }
        let unmapped = |why: String| Unmapped { image: image.to_owned(), why };
        let parsed = ImageRef::parse(image).map_err(|why| unmapped(format!("not an image reference: {why}")))?;
        // Already on the user's registry (under a prefix, or beside them: the user's own images).
        if self.0.values().any(|prefix| prefix_host(prefix).as_deref() == Some(parsed.registry.as_str())) {
            return Ok(image.to_owned());
        }
        let name = &image[..name_len(image)];
        let hub = is_docker_hub(&parsed.registry);
        let entry = if hub { DOCKER_HUB.iter().find_map(|h| self.0.get(*h)) } else { self.0.get(&parsed.registry) };
        let rewritten = match (entry, self.0.get("*")) {
            (Some(prefix), _) => format!("{prefix}/{}", parsed.repository),
            (None, Some(prefix)) => {
                // The host as a path component: `host:port` as `host_port` (a host has no `_`,
                // so the source is still known).
                let host = if hub { "docker.io".to_owned() } else { parsed.registry.replace(':', "_") };
                format!("{prefix}/{host}/{}", parsed.repository)
            }
            (None, None) => {
                return Err(unmapped(format!(
                    "images.mirror maps no {registry}: add `{registry}: <your registry>/<path>`, or `\"*\": <your registry>/<path>` for every registry",
                    registry = if hub { "docker.io" } else { parsed.registry.as_str() }
                )));
            }
        };
        Ok(format!("{rewritten}{}", &image[name.len()..]))
    }

    /// Where the mirrored `image` is copied from: the inverse of [`Mirror::image`] (`None` for
    /// an image under no prefix of the mirror).
    #[must_use]
    pub fn source(&self, image: &str) -> Option<String> {
        self.0.iter().find_map(|(registry, prefix)| {
            let rest = image.strip_prefix(prefix.as_str())?.strip_prefix('/')?;
            Some(if registry == "*" {
                let (host, path) = rest.split_once('/')?;
                format!("{}/{path}", host.replace('_', ":"))
            } else {
                format!("{registry}/{rest}")
            })
        })
    }
}

/// Docker Hub under any of its names.
fn is_docker_hub(host: &str) -> bool {
    DOCKER_HUB.contains(&host)
}

/// The host of a repository prefix `host[:port]/path…` (a host explicitly named, never the
/// implicit Docker Hub), or `None` when it is not one.
fn prefix_host(prefix: &str) -> Option<String> {
    let (host, _) = prefix.split_once('/')?;
    let parsed = ImageRef::parse(prefix).ok()?;
    (parsed.registry == host
        && parsed.tag.as_deref() == Some("latest")
        && !prefix.contains(['@'])
        && name_len(prefix) == prefix.len())
    .then(|| host.to_owned())
}

/// `image`'s name: everything before its tag and digest (what `images.digests` is keyed by).
#[must_use]
pub(crate) fn name_of(image: &str) -> &str {
    &image[..name_len(image)]
}

/// The length of `image`'s name: everything before its tag and digest.
fn name_len(image: &str) -> usize {
    let rest = image.split_once('@').map_or(image, |(r, _)| r);
    match rest.rfind(':') {
        Some(i) if !rest[i + 1..].contains('/') => i,
        _ => rest.len(),
    }
}

#[cfg(test)]
mod tests;
