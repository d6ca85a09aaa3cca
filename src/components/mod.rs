//! Layer components: what osbx renders into a layer.
//!
//! Each component is one module that owns its profile section (the serde types and the facts
//! derived from them), its validation rules and its template view. [`ALL`] is the table that
//! drives the rest: the names `layers[].component` accepts (and lists in messages), the template
//! directory a layer renders (`templates/<name>/`), the rules run when a profile loads and the
//! template context. Which Flux kinds a component renders is read from its rendered objects.

pub mod kata;
pub mod opensandbox;
pub mod pools;
pub mod spire_agents;
pub mod spire_smoke;

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tera::Context;

use crate::profile::{Profile, Violations};

/// One component: its name and what it contributes to loading and rendering a profile.
pub struct Component {
    /// The value of `layers[].component`, and the template directory under `templates/`.
    pub name: &'static str,
    /// What a layer of this component contains (for messages and docs).
    pub about: &'static str,
    /// Rules over the profile. `layer` is the index of the layer that renders the component, if
    /// any; a component checks its section whenever the profile has it.
    pub validate: fn(profile: &Profile, layer: Option<usize>, violations: &mut Violations),
    /// Adds the component's entries to the template context every template of the profile sees.
    pub view: fn(profile: &Profile, context: &mut Context),
}

/// Every component, in the order their rules run and their views are built.
pub static ALL: &[&Component] =
    &[&opensandbox::COMPONENT, &pools::COMPONENT, &kata::COMPONENT, &spire_agents::COMPONENT, &spire_smoke::COMPONENT];

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
}
