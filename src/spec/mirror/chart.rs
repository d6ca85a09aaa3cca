//! A chart's images, rewritten through the chart's own values: where each chart names an image
//! (one reference, a repository and a tag, a registry and a repository) and how the mirror and a
//! pinned digest are written there.

use serde_json::Value;

use super::{Images, at_path};
use crate::spec::Violations;
use crate::spec::syntax::ImageRef;

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

impl Images {
    /// Rewrite the image values of a chart in `values` (the values osbx passes to it, the
    /// profile's own merged in): each of `images` the profile sets is rewritten where it is, each
    /// it does not is set to the chart's default rewritten (onto the mirror, then by its pinned
    /// digest); a value nothing changes is not written. `at` names the values in messages
    /// (`spire.values`).
    pub fn chart_values(&self, values: &mut Option<Value>, images: &[ChartImage], at: &str, v: &mut Violations) {
        if !self.rewrites() {
            return;
        }
        for image in images {
            let field = format!("{at}.{}", image.path);
            let Ok(default) = ImageRef::parse(image.default) else {
                v.push(field, format!("{} {:?} is not an image reference", image.about, image.default));
                continue;
            };
            // Read where the value is, written back only when it changes: a value nothing
            // changes is not created (a `null` in values removes the chart's own default, helm's
            // rule).
            let given = values.as_ref().and_then(|root| root.pointer(&format!("/{}", image.path.replace('.', "/"))));
            let mut value = given.cloned().unwrap_or(Value::Null);
            let node = &mut value;
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
            if given != Some(&value) && !(given.is_none() && value.is_null()) {
                *at_path(values.get_or_insert_with(|| Value::Object(serde_json::Map::new())), image.path) = value;
            }
        }
    }

    /// `imagePullSecrets` as a pod spec (and most charts' values) writes them.
    #[must_use]
    pub fn pull_secret_refs(&self) -> Value {
        Value::Array(self.pull_secrets.iter().map(|n| serde_json::json!({"name": n})).collect())
    }
}
