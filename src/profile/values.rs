//! Value types several profile sections share: resources, quantities and image references.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Resource requests and limits; quantities are kept as strings (`"2"`, `500m`, `4Gi`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resources {
    /// Requests.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
    /// Limits.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, Quantity>,
}

/// A Kubernetes quantity; YAML numbers are accepted and kept as their text.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Quantity(pub String);

impl JsonSchema for Quantity {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Quantity".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A Kubernetes quantity (`\"2\"`, `500m`, `4Gi`); numbers are kept as their text.",
            "type": ["string", "number"],
        })
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize, JsonSchema)]
        #[serde(untagged)]
        enum Raw {
            S(String),
            I(i64),
            F(f64),
        }
        Ok(Quantity(match Raw::deserialize(d)? {
            Raw::S(s) => s,
            Raw::I(i) => i.to_string(),
            Raw::F(f) => f.to_string(),
        }))
    }
}

/// A container image reference split as the charts expect it.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageRef {
    /// Repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}
