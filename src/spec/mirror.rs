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
    /// registries and prints this map; pins stay until `--resolve --refresh`.
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

    /// Rewrite the image values of a chart in `values` (the values osbx passes to it, the
    /// profile's own merged in): each of `images` the profile sets is rewritten where it is, each
    /// it does not is set to the chart's default rewritten (onto the mirror, then by its pinned
    /// digest); a value nothing changes is not written. `at` names the values in messages
    /// (`spire.values`).
    pub fn chart_values(&self, values: &mut Option<Value>, images: &[ChartImage], at: &str, v: &mut Violations) {
        if !self.rewrites() {
            return;
        }
        let values = values.get_or_insert_with(|| Value::Object(serde_json::Map::new()));
        for image in images {
            let field = format!("{at}.{}", image.path);
            let Ok(default) = ImageRef::parse(image.default) else {
                v.push(field, format!("{} {:?} is not an image reference", image.about, image.default));
                continue;
            };
            let node = at_path(values, image.path);
            match image.shape {
                Shape::Reference => {
                    let current = node.as_str().filter(|s| !s.is_empty()).unwrap_or(image.default).to_owned();
                    match self.image(&current) {
                        Ok(pulled) if pulled == current && node.is_null() => {}
                        Ok(pulled) => *node = Value::String(pulled),
                        Err(u) => v.push(field, format!("{} {}: {}", image.about, u.image, u.why)),
                    }
                }
                Shape::Repository { tag } => {
                    // `repository` and `tag` beside it: the digest goes into the tag.
                    if !node.is_object() {
                        *node = Value::Object(serde_json::Map::new());
                    }
                    let repository =
                        node["repository"].as_str().filter(|s| !s.is_empty()).unwrap_or(image.default).to_owned();
                    let current_tag = node["tag"].as_str().filter(|s| !s.is_empty()).unwrap_or(tag).to_owned();
                    match self.mirror.image(&repository) {
                        Ok(mirrored) => {
                            if mirrored != repository || node.get("repository").is_some() {
                                node["repository"] = Value::String(mirrored.clone());
                            }
                            if let Some(digest) = self.pin(&mirrored).filter(|_| !current_tag.contains('@')) {
                                node["tag"] = Value::String(format!("{current_tag}@{digest}"));
                            }
                            if node.as_object().is_some_and(serde_json::Map::is_empty) {
                                *node = Value::Null;
                            }
                        }
                        Err(u) => v.push(field, format!("{} {}: {}", image.about, u.image, u.why)),
                    }
                }
                Shape::RegistryRepository => {
                    if !node.is_object() {
                        *node = Value::Object(serde_json::Map::new());
                    }
                    let registry = node["registry"].as_str().filter(|s| !s.is_empty()).unwrap_or(&default.registry);
                    let repository =
                        node["repository"].as_str().filter(|s| !s.is_empty()).unwrap_or(&default.repository);
                    let name = format!("{registry}/{repository}");
                    match self.mirror.image(&name) {
                        Ok(mirrored) => {
                            if mirrored != name {
                                // The repository kept as the chart names it, the mirror's path
                                // in the registry (the charts join them with a `/`).
                                let (registry, repository) =
                                    if let Some(registry) = mirrored.strip_suffix(&format!("/{repository}")) {
                                        (registry.to_owned(), repository.to_owned())
                                    } else {
                                        let (host, rest) = mirrored.split_once('/').unwrap_or((&mirrored, ""));
                                        (host.to_owned(), rest.to_owned())
                                    };
                                node["registry"] = Value::String(registry);
                                node["repository"] = Value::String(repository);
                            }
                            // The chart pulls `registry/repository@tag` for a `sha256:` tag.
                            if let Some(digest) = self.pin(&mirrored) {
                                node["tag"] = Value::String(digest.clone());
                            }
                            if node.as_object().is_some_and(serde_json::Map::is_empty) {
                                *node = Value::Null;
                            }
                        }
                        Err(u) => v.push(field, format!("{} {}: {}", image.about, u.image, u.why)),
                    }
                }
            }
        }
    }

    /// `imagePullSecrets` as a pod spec (and most charts' values) writes them.
    #[must_use]
    pub fn pull_secret_refs(&self) -> Value {
        Value::Array(self.pull_secrets.iter().map(|n| serde_json::json!({"name": n})).collect())
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
    /// The image.
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

/// One image a chart pulls and the chart value that names it.
#[derive(Debug, Clone, Copy)]
pub struct ChartImage {
    /// The value's path in the chart's values, `.`-separated (`spire-agent.image`).
    pub path: &'static str,
    /// How the value names the image.
    pub shape: Shape,
    /// The chart's default (registry and repository, no tag: the chart's tag is kept).
    pub default: &'static str,
    /// Who pulls it, for messages (`the SPIRE agent`).
    pub about: &'static str,
}

/// How a chart value names an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// One string with the registry (`quay.io/kata-containers/kata-deploy`), the tag in another
    /// value the chart ignores when the string has a digest, or in the string itself.
    Reference,
    /// A map with `repository` (registry included) and `tag`, joined by the chart as
    /// `repository:tag`; `tag` is the chart's default tag.
    Repository {
        /// The chart's default tag.
        tag: &'static str,
    },
    /// A map with `registry` and `repository` (the tag beside them).
    RegistryRepository,
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

/// The length of `image`'s name: everything before its tag and digest.
fn name_len(image: &str) -> usize {
    let rest = image.split_once('@').map_or(image, |(r, _)| r);
    match rest.rfind(':') {
        Some(i) if !rest[i + 1..].contains('/') => i,
        _ => rest.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mirror(entries: &[(&str, &str)]) -> Mirror {
        Mirror(entries.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
    }

    #[test]
    fn images_move_under_their_registry_s_prefix_with_tag_and_digest_kept() {
        let m = mirror(&[
            ("docker.io", "registry.corp/hub"),
            ("ghcr.io", "registry.corp:5000/ghcr"),
            ("*", "registry.corp/all"),
        ]);
        for (image, want) in [
            ("busybox:1.37", "registry.corp/hub/library/busybox:1.37"),
            ("busybox", "registry.corp/hub/library/busybox"),
            ("index.docker.io/library/docker:27-dind", "registry.corp/hub/library/docker:27-dind"),
            ("ghcr.io/spiffe/spire-agent:1.15.2", "registry.corp:5000/ghcr/spiffe/spire-agent:1.15.2"),
            (
                "cgr.dev/chainguard/bash:latest@sha256:90041f375e30f41aa7e0390075d8a69dc61900771d52fa98d63ee5d03d866a58",
                "registry.corp/all/cgr.dev/chainguard/bash:latest@sha256:90041f375e30f41aa7e0390075d8a69dc61900771d52fa98d63ee5d03d866a58",
            ),
            ("quay.io/kata-containers/kata-deploy", "registry.corp/all/quay.io/kata-containers/kata-deploy"),
            ("localhost:5000/a/b:v1", "registry.corp/all/localhost_5000/a/b:v1"),
        ] {
            let got = m.image(image).unwrap();
            assert_eq!(got, want, "{image}");
            // Idempotent, and the inverse finds the source (in its full form).
            assert_eq!(m.image(&got).unwrap(), got);
            let source = m.source(&got).unwrap();
            assert_eq!(
                ImageRef::parse(&source),
                ImageRef::parse(image).map(|mut r| {
                    if DOCKER_HUB.contains(&r.registry.as_str()) {
                        r.registry = "docker.io".into();
                    }
                    r
                }),
                "{got} ← {source}"
            );
        }
    }

    #[test]
    fn an_unmapped_registry_is_named_with_the_entry_to_add() {
        let m = mirror(&[("docker.io", "registry.corp/hub")]);
        let e = m.image("quay.io/kata-containers/kubectl:latest").unwrap_err();
        assert!(e.why.contains("maps no quay.io") && e.why.contains("\"*\""), "{e:?}");
        assert!(m.image("Not An Image").is_err());
        // The user's own image on the mirror's registry is pulled as named.
        assert_eq!(m.image("registry.corp/osbx:0.1.0").unwrap(), "registry.corp/osbx:0.1.0");
        // No mirror: nothing changes.
        assert_eq!(Mirror::default().image("quay.io/x:1").unwrap(), "quay.io/x:1");
    }

    #[test]
    fn entries_are_checked() {
        let check = |entries: &[(&str, &str)]| {
            let mut v = Violations::default();
            let digests = [("busybox:1.37".to_owned(), "sha256:0123456789abcdef0123456789abcdef".to_owned())].into();
            Images { mirror: mirror(entries), pull_secrets: vec!["Bad_Name".into()], digests }.validate(&mut v);
            v.into_vec().into_iter().map(|v| format!("{}: {}", v.field, v.message)).collect::<Vec<_>>()
        };
        let found = check(&[
            ("docker.io", "registry.corp/hub"),
            ("not a host", "registry.corp/x"),
            ("ghcr.io", "no-host-here"),
            ("quay.io", "registry.corp/quay:v1"),
            ("gcr.io", "docker.io/library"),
        ]);
        let text = found.join("\n");
        for needle in [
            "images.mirror.\"not a host\"",
            "images.mirror.\"ghcr.io\"",
            "images.mirror.\"quay.io\"",
            "images.mirror.\"gcr.io\": the mirror docker.io is itself",
            "images.pullSecrets[0]",
            "images.digests.\"busybox:1.37\": name the image without its tag",
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
        assert!(!text.contains("\"docker.io\""), "{text}");
    }

    #[test]
    fn chart_values_are_rewritten_where_the_chart_reads_them() {
        const IMAGES: &[ChartImage] = &[
            ChartImage {
                path: "image.reference",
                shape: Shape::Reference,
                default: "quay.io/kata-containers/kata-deploy",
                about: "the installer",
            },
            ChartImage {
                path: "a.b.image",
                shape: Shape::RegistryRepository,
                default: "ghcr.io/spiffe/spire-agent",
                about: "the agent",
            },
            ChartImage {
                path: "tools.busybox.image",
                shape: Shape::RegistryRepository,
                default: "busybox",
                about: "busybox",
            },
        ];
        let m = Images {
            mirror: mirror(&[("docker.io", "registry.corp/hub"), ("*", "registry.corp/all")]),
            ..Images::default()
        };
        let mut values = Some(
            serde_json::json!({"a": {"b": {"image": {"registry": "", "repository": "spiffe/other", "tag": "v1"}}}}),
        );
        let mut v = Violations::default();
        m.chart_values(&mut values, IMAGES, "x.values", &mut v);
        assert!(v.into_vec().is_empty());
        let values = values.unwrap();
        assert_eq!(values["image"]["reference"], "registry.corp/all/quay.io/kata-containers/kata-deploy");
        assert_eq!(
            values["a"]["b"]["image"],
            serde_json::json!({"registry": "registry.corp/all/ghcr.io", "repository": "spiffe/other", "tag": "v1"})
        );
        assert_eq!(
            values["tools"]["busybox"]["image"],
            serde_json::json!({"registry": "registry.corp/hub", "repository": "library/busybox"})
        );
        // An unmapped default is named by its value path.
        let mut v = Violations::default();
        let hub_only = Images { mirror: mirror(&[("docker.io", "registry.corp/hub")]), ..Images::default() };
        hub_only.chart_values(&mut None, IMAGES, "kata.values", &mut v);
        let found = v.into_vec();
        assert!(
            found.iter().any(|f| f.field == "kata.values.image.reference" && f.message.contains("the installer")),
            "{found:?}"
        );
    }

    /// A pinned digest follows the image wherever osbx names it: after the tag of a whole
    /// reference, as the reference of a chart that takes `reference@digest`, in the tag of a
    /// chart that joins `repository:tag`, as the `sha256:` tag of one that joins
    /// `registry/repository@tag`. An image that names a digest keeps its own.
    #[test]
    fn pinned_digests_go_where_each_chart_takes_them() {
        const TABLE: &[ChartImage] = &[
            ChartImage {
                path: "image.reference",
                shape: Shape::Reference,
                default: "quay.io/kata-containers/kata-deploy",
                about: "a",
            },
            ChartImage {
                path: "agent.image",
                shape: Shape::RegistryRepository,
                default: "ghcr.io/spiffe/spire-agent",
                about: "b",
            },
            ChartImage {
                path: "gateway.image",
                shape: Shape::Repository { tag: "v1.0.10" },
                default: "example.org/ingress",
                about: "c",
            },
        ];
        const D: &str = "sha256:90041f375e30f41aa7e0390075d8a69dc61900771d52fa98d63ee5d03d866a58";
        let images = Images {
            mirror: mirror(&[("*", "registry.corp/all"), ("docker.io", "registry.corp/hub")]),
            digests: [
                "registry.corp/hub/library/busybox",
                "registry.corp/all/quay.io/kata-containers/kata-deploy",
                "registry.corp/all/ghcr.io/spiffe/spire-agent",
                "registry.corp/all/example.org/ingress",
            ]
            .into_iter()
            .map(|n| (n.to_owned(), D.to_owned()))
            .collect(),
            ..Images::default()
        };
        assert_eq!(images.image("busybox:1.37").unwrap(), format!("registry.corp/hub/library/busybox:1.37@{D}"));
        let own = "busybox:1.37@sha256:0123456789abcdef0123456789abcdef";
        assert_eq!(
            images.image(own).unwrap(),
            "registry.corp/hub/library/busybox:1.37@sha256:0123456789abcdef0123456789abcdef"
        );
        let mut values = None;
        let mut v = Violations::default();
        images.chart_values(&mut values, TABLE, "x", &mut v);
        assert!(v.into_vec().is_empty());
        assert_eq!(
            values.unwrap(),
            serde_json::json!({
                "image": {"reference": format!("registry.corp/all/quay.io/kata-containers/kata-deploy@{D}")},
                "agent": {"image": {"registry": "registry.corp/all/ghcr.io", "repository": "spiffe/spire-agent", "tag": D}},
                "gateway": {"image": {"repository": "registry.corp/all/example.org/ingress", "tag": format!("v1.0.10@{D}")}},
            })
        );
        // Without a mirror or pins, no chart value is written.
        let mut values = None;
        Images::default().chart_values(&mut values, TABLE, "x", &mut Violations::default());
        assert_eq!(values, None);
    }
}
