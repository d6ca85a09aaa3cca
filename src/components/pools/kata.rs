//! What the Kata pools ask of their VMs, stated by the pools and asked for by the kata layer
//! ([`Pools::kata_demands`]): the build classes they run on, and the hypervisor annotations each
//! pool is allowed (`pools.items[].kata.allowedAnnotations`).

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{EffectivePool, Pools, Runtime};
use crate::components::kata::PoolDemands;
use crate::components::kata::annotations::HYPERVISOR_PREFIX;
use crate::spec::Violations;

/// What a Kata pool's pods may ask of their VM.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolKata {
    /// Hypervisor annotations (`io.katacontainers.config.hypervisor.<name>`) this pool's pods
    /// may carry; every other `io.katacontainers.*` annotation is rejected by the kata layer's
    /// admission policy. The class the pool runs on enables these names in its Kata
    /// configuration, for every pod on that class: the policy keeps them to this pool.
    pub allowed_annotations: Vec<String>,
}

impl EffectivePool<'_> {
    /// The annotations (full keys) this pool is allowed.
    #[must_use]
    pub(crate) fn allowed_annotations(&self) -> Vec<String> {
        self.pool.kata.as_ref().map(|k| k.allowed_annotations.clone()).unwrap_or_default()
    }
}

impl Pools {
    /// What these pools ask of the Kata installation.
    #[must_use]
    pub fn kata_demands(&self) -> PoolDemands {
        let mut demands = PoolDemands { build_classes: self.build_classes(), ..PoolDemands::default() };
        for p in self.effective() {
            let allowed = p.allowed_annotations();
            if let Some(class) = &p.runtime_class_name {
                let names = allowed.iter().filter_map(|a| a.strip_prefix(HYPERVISOR_PREFIX).map(str::to_owned));
                demands.allowed_on_class.entry(class.clone()).or_default().extend(names);
            }
            if !allowed.is_empty() {
                demands.allowed_by_pool.insert(p.pool.name.clone(), allowed);
            }
        }
        demands.allowed_on_class.retain(|_, names| !names.is_empty());
        demands
    }
}

/// `pools.items[].kata.allowedAnnotations`: a Kata pool's, each a hypervisor annotation named
/// once.
pub(super) fn validate(at: &str, runtime: Runtime, k: &PoolKata, v: &mut Violations) {
    if runtime == Runtime::Runc {
        v.push(format!("{at}.kata"), "only kata pools take `kata`; remove it or set `runtime: kata`");
        return;
    }
    let mut seen = BTreeSet::new();
    for (j, a) in k.allowed_annotations.iter().enumerate() {
        let field = format!("{at}.kata.allowedAnnotations[{j}]");
        let name = a.strip_prefix(HYPERVISOR_PREFIX).unwrap_or_default();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
            v.push(
                field,
                format!(
                    "{a:?} is not a hypervisor annotation: {HYPERVISOR_PREFIX}<name>, the name in lower case, digits and _ (only hypervisor annotations have a Kata gate, enable_annotations)"
                ),
            );
        } else if !seen.insert(a.as_str()) {
            v.push(field, format!("{a} is listed twice"));
        }
    }
}
