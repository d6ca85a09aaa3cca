//! Value types several profile sections share: resources, quantities and image references.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Resource requests and limits; quantities are kept as strings (`"2"`, `500m`, `4Gi`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Resources {
    /// Requests by resource name (`cpu`, `memory`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
    /// Limits by resource name.
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
        let text = match Raw::deserialize(d)? {
            Raw::S(s) => s,
            Raw::I(i) => i.to_string(),
            Raw::F(f) => f.to_string(),
        };
        if !is_quantity(&text) {
            return Err(serde::de::Error::custom(format!(
                "{text:?} is not a Kubernetes quantity (a number with an optional suffix: 500m, 2, 1.5, 4Gi, 1e3); the API server would refuse it"
            )));
        }
        Ok(Quantity(text))
    }
}

/// Whether `s` parses as a Kubernetes quantity: a signed decimal number, then nothing, a binary
/// suffix (`Ki` … `Ei`), a decimal suffix (`n`, `u`, `m`, `k`, `M` … `E`) or an exponent
/// (`e3`, `E-2`).
#[must_use]
pub(crate) fn is_quantity(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let digits_end = body.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(body.len());
    let (number, suffix) = body.split_at(digits_end);
    let mut parts = number.splitn(2, '.');
    let (whole, fraction) = (parts.next().unwrap_or(""), parts.next());
    let number_ok = !(whole.is_empty() && fraction.is_none_or(str::is_empty))
        && fraction.is_none_or(|f| f.chars().all(|c| c.is_ascii_digit()));
    let exponent = |e: &str| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty() && e.chars().all(|c| c.is_ascii_digit())
    };
    let suffix_ok = matches!(
        suffix,
        "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E"
    ) || suffix.strip_prefix(['e', 'E']).is_some_and(exponent);
    number_ok && suffix_ok
}

#[cfg(test)]
mod tests {
    use super::is_quantity;

    #[test]
    fn kubernetes_quantities() {
        for ok in ["2", "500m", "4Gi", "1.5", ".5", "1.", "+1", "-1", "1e3", "1E-2", "100Mi", "0", "128974848", "129M"]
        {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["lots", "", "1Kx", "1KK", "Gi", "1.2.3", ".", "1e", "1 Gi", "1gi", "e3", "1m3"] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }
}

/// A container image reference split as the charts expect it.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageRef {
    /// Image repository (default: the chart's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Image tag (default: the chart's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}
