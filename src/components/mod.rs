//! Layer components: what osbx renders into a layer.
//!
//! Each component is one module that owns every fact about itself: its profile section (the
//! serde types, their defaults and the facts derived from them), its rules, its template view,
//! the profile field that pins each chart it installs, the chart values it lets a profile add,
//! the Secret it reads whose value the user supplies at apply time, and the kinds it renders that
//! osbx reads back. [`ALL`] is the table that drives the rest: the names `layers[].component`
//! accepts, the template directory a layer renders (`templates/<name>/`), the rules run when a
//! profile loads and the template context. [`Sections`] holds the sections, one field each.
//!
//! Components sit below the profile document: they see the sections and the [`Site`] (the
//! cluster, and which layer renders which component), never the document itself.

pub mod acceptance;
pub(crate) mod health;
pub mod kata;
pub mod opensandbox;
pub(crate) mod pools;
pub(crate) mod sandbox_quota;
pub(crate) mod spire;

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use tera::Context;

use crate::object::ObjectRef;
use crate::spec::{Images, TargetCluster, Violations};

/// One component: its name and what it contributes to loading, rendering, linting and applying
/// a profile.
pub struct Component {
    /// The value of `layers[].component`, and the template directory under `templates/`.
    pub name: &'static str,
    /// What a layer of this component contains (for messages and docs).
    pub about: &'static str,
    /// The top-level profile section it is configured by (both SPIRE components read `spire`).
    pub section: &'static str,
    /// Rules over the sections, run whenever the profile has the component's section, and with
    /// the checks that need a layer when one renders it ([`Site::layer_of`]).
    pub validate: fn(sections: &Sections, site: &Site<'_>, violations: &mut Violations),
    /// Adds the component's entries to the template context every template of the profile sees.
    pub view: fn(sections: &Sections, site: &Site<'_>, context: &mut Context),
    /// The profile field that pins the chart or chart source `object` (of this component's
    /// layer) installs, for `chart.unpinned`.
    pub pin: fn(object: &ObjectRef) -> Option<&'static str>,
    /// The chart values the profile adds to this component's releases (`<section>.values`),
    /// merged over what osbx sets; `lint --chart` checks the chart reads them.
    pub values: fn(sections: &Sections) -> Option<&Value>,
    /// The Secret the component's workloads read whose value the user supplies to `osbx apply`
    /// (never rendered, so never in git).
    pub supplied: fn(sections: &Sections) -> Option<Supplied>,
    /// Health rules for the kinds it renders that have no Ready condition: Flux evaluates them
    /// (the layer Kustomization's `healthCheckExprs`), and so do apply's wait and verify.
    pub(crate) health: &'static [&'static health::Health],
    /// The layer renders after every other one, and its view has their `revision` (a digest of
    /// what they render), the `roles` its ServiceAccount is bound to and the `profile` as YAML.
    pub(crate) after_others: bool,
    /// Images its workloads make others pull that no rendered pod names (an image in a
    /// configuration file, pulled by the pods the component's controllers create), each with who
    /// pulls it: what `osbx images` lists beside the rendered and expanded pods'.
    pub(crate) pulled: fn(sections: &Sections) -> Vec<(String, &'static str)>,
    /// With `images.mirror`, rewrite every image of its section onto the mirror: the images it
    /// renders, those in configuration it writes, and those its charts pull, through each
    /// chart's own image values ([`crate::spec::mirror::ChartImage`]); and give its charts' pods
    /// `images.pullSecrets`. Run once when a valid profile loads.
    pub(crate) images: fn(sections: &mut Sections, images: &Images, violations: &mut Violations),
}

impl Component {
    /// A component that installs no chart: nothing pins it, it adds no chart values, the user
    /// supplies nothing to it and it has no health rules of its own.
    pub(crate) const fn without_chart(
        name: &'static str,
        about: &'static str,
        section: &'static str,
        validate: fn(&Sections, &Site<'_>, &mut Violations),
        view: fn(&Sections, &Site<'_>, &mut Context),
    ) -> Self {
        Self {
            name,
            about,
            section,
            validate,
            view,
            pin: |_| None,
            values: |_| None,
            supplied: |_| None,
            health: &[],
            after_others: false,
            pulled: |_| Vec::new(),
            images: |_, _, _| {},
        }
    }
}

/// A Secret a component reads whose value the user supplies at apply time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supplied {
    /// The Secret, named by the profile.
    pub secret: ObjectRef,
    /// The key that holds the value.
    pub key: String,
}

/// Where the profile puts things, as components see it: the cluster, and which layer renders
/// which component.
#[derive(Debug, Clone)]
pub struct Site<'a> {
    /// The `cluster` section.
    pub cluster: &'a TargetCluster,
    /// Each rendered layer: its index in `layers`, its name and its component.
    pub layers: Vec<(usize, &'a str, &'static Component)>,
    /// Every layer, external ones included: its name, the layers it depends on, and whether Flux
    /// health-checks everything it applies (`wait`).
    pub all: Vec<(&'a str, &'a [String], bool)>,
}

impl Site<'_> {
    /// The index and name of the layer that renders `component`, if one does.
    #[must_use]
    pub fn layer_of(&self, component: &Component) -> Option<(usize, &str)> {
        self.layers.iter().find(|(_, _, c)| *c == component).map(|(i, name, _)| (*i, *name))
    }
}

/// Declares [`Sections`]: one field per top-level section a component owns, read by its key.
macro_rules! sections {
    ($($(#[$doc:meta])* $key:literal => $field:ident: $ty:ty,)*) => {
        /// The component sections of a profile, one top-level key each (the profile document
        /// flattens them beside its own fields).
        #[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
        #[serde(default)]
        pub struct Sections {
            $($(#[$doc])* #[serde(rename = $key)] pub $field: $ty,)*
        }

        impl Sections {
            /// The top-level keys of the sections.
            pub const KEYS: &[&str] = &[$($key),*];

            /// Read the value of `key` into its section; `false` when `key` names no section.
            ///
            /// # Errors
            /// The deserializer's error, located where the value is.
            pub fn read<'de, A: serde::de::MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<bool, A::Error> {
                match key {
                    $($key => self.$field = map.next_value()?,)*
                    _ => return Ok(false),
                }
                Ok(true)
            }
        }
    };
}

sections! {
    /// The OpenSandbox Helm release and its values (the `opensandbox` component).
    "opensandbox" => opensandbox: opensandbox::OpenSandbox,
    /// The OpenSandbox Pools (the `pools` component).
    "pools" => pools: pools::Pools,
    /// Kata Containers, for a `kata` layer.
    "kata" => kata: Option<kata::Kata>,
    /// SPIRE agents and the smoke identity, for `spire-agents` and `spire-smoke` layers.
    "spire" => spire: Option<spire::Spire>,
    /// What the sandboxes may take together, for a `sandbox-quota` layer.
    "sandboxQuota" => sandbox_quota: Option<sandbox_quota::SandboxQuota>,
    /// The acceptance checks in the cluster, for an `acceptance` layer.
    "acceptance" => acceptance: Option<acceptance::Acceptance>,
}

/// Every component, in the order their rules run and their views are built.
pub(crate) static ALL: &[&Component] = &[
    &opensandbox::COMPONENT,
    &pools::COMPONENT,
    &kata::COMPONENT,
    &spire::agents::COMPONENT,
    &spire::smoke::COMPONENT,
    &sandbox_quota::COMPONENT,
    &acceptance::COMPONENT,
];

/// The component with this name.
#[must_use]
pub fn named(name: &str) -> Option<&'static Component> {
    ALL.iter().copied().find(|c| c.name == name)
}

/// The component names, for messages: `opensandbox, pools, kata, …`.
#[must_use]
pub fn names() -> String {
    ALL.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
}

impl PartialEq for Component {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Component {}

impl fmt::Debug for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl schemars::JsonSchema for Component {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Component".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = ALL.iter().map(|c| c.name).collect();
        let described: Vec<String> = ALL.iter().map(|c| format!("`{}`: {}", c.name, c.about)).collect();
        schemars::json_schema!({
            "description": format!("What osbx renders into the layer: {}.", described.join("; ")),
            "type": "string",
            "enum": names,
        })
    }
}

impl Serialize for Component {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name)
    }
}

impl<'de> Deserialize<'de> for &'static Component {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        named(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown component `{name}`, expected one of {}", names())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_component_has_its_templates() {
        let dirs: std::collections::BTreeSet<&str> =
            crate::embedded::templates().iter().filter_map(|(path, _)| path.split_once('/').map(|(d, _)| d)).collect();
        for c in ALL {
            assert!(dirs.contains(c.name), "templates/{}/ is missing", c.name);
        }
    }

    #[test]
    fn every_component_reads_a_section() {
        for c in ALL {
            assert!(Sections::KEYS.contains(&c.section), "{} reads no section of Sections", c.name);
        }
    }
}
