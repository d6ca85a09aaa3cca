//! The `pools` component: the OpenSandbox `Pool`s of the `pools` section, each a runc or Kata
//! pool inheriting the pod-template fields it does not set from `pools.defaults`.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tera::Context;

use super::health::{Health, Op, Operand, Term};
use super::{Component, Sections, Site, kata as kata_component, opensandbox};

mod images;
mod kata;
pub(crate) use self::kata::PoolKata;
use crate::object::{KnownKind, ObjectRef};
use crate::spec::Violations;
use crate::spec::values::Resources;

/// The table entry of this component.
pub(crate) static COMPONENT: Component = Component {
    health: &[&HEALTH],
    images: images::images,
    ..Component::without_chart("pools", "the OpenSandbox Pools", "pools", validate, view)
};

/// When a Pool is healthy, stated once for Flux, apply and verify: the controller has seen its
/// generation and holds the capacity asked for, `poolMin ≤ total ≤ poolMax` and
/// `available ≥ 1` when `bufferMin > 0`. The controller reports no failure of its own (the Pool
/// has no conditions), so there is no `failed` rule: a Pool that cannot be filled stays in
/// progress, and Flux's health check times out on it, naming it.
pub(crate) static HEALTH: Health = Health {
    kind: POOL,
    current: &[
        Term { left: "status.observedGeneration", op: Op::Eq, right: Operand::Field("metadata.generation") },
        Term { left: "status.total", op: Op::Ge, right: Operand::Field("spec.capacitySpec.poolMin") },
        Term { left: "status.total", op: Op::Le, right: Operand::Field("spec.capacitySpec.poolMax") },
        Term { left: "status.available", op: Op::Ge, right: Operand::OneIfPositive("spec.capacitySpec.bufferMin") },
    ],
};

/// The OpenSandbox Pool, the kind this component renders (status, verify and lint read it).
pub(crate) const POOL: KnownKind = KnownKind::new("sandbox.opensandbox.io", "v1alpha1", "Pool");

/// The Pool named `name`: Pools live in the OpenSandbox sandbox namespace.
#[must_use]
pub(crate) fn object(s: &Sections, name: &str) -> ObjectRef {
    POOL.object(Some(&s.opensandbox.namespaces.sandbox), name)
}

/// The pools and the pod-template parts they share.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Pools {
    /// Fields every pool inherits unless it sets them itself (lists and maps are replaced whole).
    /// Default (when `defaults` is not written at all): OpenSandbox's code-interpreter image
    /// running the task executor, with the execd and task-executor installers of the pinned
    /// release.
    pub defaults: PoolTemplate,
    /// The pools.
    pub items: Vec<Pool>,
}

impl Default for Pools {
    fn default() -> Self {
        let registry = opensandbox::REGISTRY;
        let bin = json!({"name": "opensandbox-bin", "mountPath": "/opt/opensandbox"});
        let installer = |name: &str, image: String, script: &str| json!({"name": name, "image": image, "command": ["/bin/sh", "-c"], "args": [script], "volumeMounts": [bin]});
        let defaults = PoolTemplate {
            image: Some(format!("{registry}/code-interpreter:v1.1.0")),
            command: Some(vec!["/opt/opensandbox/task-executor".into()]),
            args: Some(vec!["-listen-addr=0.0.0.0:5758".into(), "-log-dir=/tmp".into()]),
            env: Some(vec![
                json!({"name": "SANDBOX_MAIN_CONTAINER", "value": PoolTemplate::CONTAINER_NAME}),
                json!({"name": "EXECD_ENVS", "value": "/opt/opensandbox/.env"}),
                json!({"name": "EXECD", "value": "/opt/opensandbox/execd"}),
            ]),
            resources: serde_json::from_value(
                json!({"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "4Gi"}}),
            )
            .ok(),
            volume_mounts: Some(vec![bin.clone()]),
            init_containers: Some(vec![
                installer(
                    "task-executor-installer",
                    format!("{registry}/task-executor:v0.1.0"),
                    "cp /workspace/server /opt/opensandbox/task-executor && chmod 0755 /opt/opensandbox/task-executor",
                ),
                installer(
                    "execd-installer",
                    opensandbox::execd_image(),
                    "cp ./execd /opt/opensandbox/execd && cp ./bootstrap.sh /opt/opensandbox/bootstrap.sh && chmod 0755 /opt/opensandbox/execd /opt/opensandbox/bootstrap.sh",
                ),
            ]),
            volumes: Some(vec![json!({"name": "opensandbox-bin", "emptyDir": {}})]),
            ..PoolTemplate::default()
        };
        Self { defaults, items: Vec::new() }
    }
}

/// Container runtime of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// The node's default runtime.
    Runc,
    /// A Kata Containers VM per pod (needs a RuntimeClass).
    Kata,
}

impl Runtime {
    /// Lower-case name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Runc => "runc",
            Runtime::Kata => "kata",
        }
    }
}

/// Pod-template fields a pool may set or inherit from `pools.defaults`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolTemplate {
    /// Pod labels.
    pub labels: Option<BTreeMap<String, String>>,
    /// Pod annotations.
    pub annotations: Option<BTreeMap<String, String>>,
    /// Main container name (default `sandbox`).
    pub container_name: Option<String>,
    /// Main container image.
    pub image: Option<String>,
    /// Main container image pull policy.
    pub image_pull_policy: Option<String>,
    /// Main container command.
    pub command: Option<Vec<String>>,
    /// Main container args.
    pub args: Option<Vec<String>>,
    /// Main container env (Kubernetes `EnvVar` objects).
    pub env: Option<Vec<Value>>,
    /// Main container resources.
    pub resources: Option<Resources>,
    /// Main container volume mounts.
    pub volume_mounts: Option<Vec<Value>>,
    /// Init containers (Kubernetes `Container` objects).
    pub init_containers: Option<Vec<Value>>,
    /// Pod volumes.
    pub volumes: Option<Vec<Value>>,
    /// Pod node selector.
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Pod tolerations.
    pub tolerations: Option<Vec<Value>>,
    /// Pod service account.
    pub service_account_name: Option<String>,
}

impl PoolTemplate {
    /// The main container's name when neither the pool nor the defaults name it.
    pub const CONTAINER_NAME: &'static str = "sandbox";
}

/// One OpenSandbox Pool.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pool {
    /// Pool name (DNS-1123 label).
    pub name: String,
    /// `runc` or `kata`.
    pub runtime: Runtime,
    /// RuntimeClass for `kata` (default `kata-clh-runtime-rs`, that of the default shim; for a
    /// build pool `kata-clh-runtime-rs-build`).
    #[serde(default)]
    pub runtime_class_name: Option<String>,
    /// A Kata pool whose sandboxes run container builds (dockerd, BuildKit, kind): its
    /// emptyDirs must be block devices in the guest, not virtio-fs, for overlay2. A rendered
    /// kata layer gives its class `emptydir_mode = "block-plain"` (class `kata-<shim>-build`).
    #[serde(default)]
    pub builds: Option<bool>,
    /// Kata settings of a Kata pool.
    #[serde(default)]
    pub kata: Option<PoolKata>,
    /// Warm-pool capacity.
    pub capacity: Capacity,
    /// Cap on not-ready pods while scaling.
    #[serde(default)]
    pub scale_strategy: Option<MaxUnavailable>,
    /// Rolling replacement of idle pods on template change.
    #[serde(default)]
    pub update_strategy: Option<MaxUnavailable>,
    /// What happens to a pod when its sandbox is released.
    #[serde(default)]
    pub recycle_strategy: Option<RecycleStrategy>,
    /// Pod labels.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    /// Pod annotations.
    #[serde(default)]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Main container name (default `sandbox`).
    #[serde(default)]
    pub container_name: Option<String>,
    /// Main container image.
    #[serde(default)]
    pub image: Option<String>,
    /// Main container image pull policy.
    #[serde(default)]
    pub image_pull_policy: Option<String>,
    /// Main container command.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Main container args.
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// Main container env.
    #[serde(default)]
    pub env: Option<Vec<Value>>,
    /// Main container resources.
    #[serde(default)]
    pub resources: Option<Resources>,
    /// Main container volume mounts.
    #[serde(default)]
    pub volume_mounts: Option<Vec<Value>>,
    /// Init containers (Kubernetes `Container` objects).
    #[serde(default)]
    pub init_containers: Option<Vec<Value>>,
    /// Pod volumes.
    #[serde(default)]
    pub volumes: Option<Vec<Value>>,
    /// Pod node selector.
    #[serde(default)]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Pod tolerations.
    #[serde(default)]
    pub tolerations: Option<Vec<Value>>,
    /// Pod service account.
    #[serde(default)]
    pub service_account_name: Option<String>,
}

/// Pool capacity. Signed so that a negative number gets a clear validation error.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Capacity {
    /// Minimum idle pods.
    pub buffer_min: i64,
    /// Maximum idle pods.
    pub buffer_max: i64,
    /// Minimum total pods.
    pub pool_min: i64,
    /// Maximum total pods.
    pub pool_max: i64,
}

/// `maxUnavailable` (an int or a percentage).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MaxUnavailable {
    /// Count or percentage.
    pub max_unavailable: Value,
}

/// Pool recycle strategy.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecycleStrategy {
    /// `Delete`, `Restart` or `Noop`.
    #[serde(rename = "type")]
    pub kind: RecycleType,
}

/// Pool recycle strategy type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum RecycleType {
    /// Delete the pod.
    Delete,
    /// Restart its containers.
    Restart,
    /// Return it as is.
    Noop,
}

/// A pool with `pools.defaults` applied.
#[derive(Debug, Clone)]
pub struct EffectivePool<'a> {
    /// The pool as written.
    pub pool: &'a Pool,
    /// The merged pod-template fields.
    pub template: PoolTemplate,
    /// The runtime class (`Some` only for Kata pools).
    pub runtime_class_name: Option<String>,
}

impl EffectivePool<'_> {
    /// The main container's name.
    #[must_use]
    pub fn container_name(&self) -> &str {
        self.template.container_name.as_deref().unwrap_or(PoolTemplate::CONTAINER_NAME)
    }

    /// Whether it is a Kata pool running container builds (`builds: true`).
    #[must_use]
    pub fn builds(&self) -> bool {
        self.pool.builds == Some(true) && self.pool.runtime == Runtime::Kata
    }

    /// Whether released pods are deleted (the default recycle strategy).
    #[must_use]
    pub fn deletes_released_pods(&self) -> bool {
        self.pool.recycle_strategy.as_ref().is_none_or(|r| r.kind == RecycleType::Delete)
    }
}

impl Pool {
    /// Its pod template: every field it does not set comes from `d` (lists and maps whole).
    #[must_use]
    pub fn with_defaults(&self, d: &PoolTemplate) -> PoolTemplate {
        fn pick<T: Clone>(own: Option<&T>, fallback: Option<&T>) -> Option<T> {
            own.or(fallback).cloned()
        }
        PoolTemplate {
            labels: pick(self.labels.as_ref(), d.labels.as_ref()),
            annotations: pick(self.annotations.as_ref(), d.annotations.as_ref()),
            container_name: pick(self.container_name.as_ref(), d.container_name.as_ref()),
            image: pick(self.image.as_ref(), d.image.as_ref()),
            image_pull_policy: pick(self.image_pull_policy.as_ref(), d.image_pull_policy.as_ref()),
            command: pick(self.command.as_ref(), d.command.as_ref()),
            args: pick(self.args.as_ref(), d.args.as_ref()),
            env: pick(self.env.as_ref(), d.env.as_ref()),
            resources: pick(self.resources.as_ref(), d.resources.as_ref()),
            volume_mounts: pick(self.volume_mounts.as_ref(), d.volume_mounts.as_ref()),
            init_containers: pick(self.init_containers.as_ref(), d.init_containers.as_ref()),
            volumes: pick(self.volumes.as_ref(), d.volumes.as_ref()),
            node_selector: pick(self.node_selector.as_ref(), d.node_selector.as_ref()),
            tolerations: pick(self.tolerations.as_ref(), d.tolerations.as_ref()),
            service_account_name: pick(self.service_account_name.as_ref(), d.service_account_name.as_ref()),
        }
    }
}

impl Pools {
    /// The pools with defaults applied, in profile order.
    #[must_use]
    pub fn effective(&self) -> Vec<EffectivePool<'_>> {
        self.items
            .iter()
            .map(|p| EffectivePool {
                pool: p,
                template: p.with_defaults(&self.defaults),
                runtime_class_name: match p.runtime {
                    Runtime::Kata => Some(p.runtime_class_name.clone().unwrap_or_else(if p.builds == Some(true) {
                        kata_component::default_build_runtime_class
                    } else {
                        kata_component::default_runtime_class
                    })),
                    Runtime::Runc => None,
                },
            })
            .collect()
    }

    /// The build pools (Kata pools with `builds: true`), with their index in `items`.
    #[must_use]
    pub fn build_pools(&self) -> Vec<(usize, EffectivePool<'_>)> {
        self.effective().into_iter().enumerate().filter(|(_, p)| p.builds()).collect()
    }

    /// The RuntimeClasses the build pools use, sorted and without duplicates.
    #[must_use]
    pub fn build_classes(&self) -> Vec<String> {
        let set: BTreeSet<String> = self.build_pools().into_iter().filter_map(|(_, p)| p.runtime_class_name).collect();
        set.into_iter().collect()
    }

    /// The Kata RuntimeClasses the pools use, sorted and without duplicates.
    #[must_use]
    pub fn kata_classes(&self) -> Vec<String> {
        let set: BTreeSet<String> = self.effective().into_iter().filter_map(|p| p.runtime_class_name).collect();
        set.into_iter().collect()
    }
}

fn validate(s: &Sections, _: &Site<'_>, v: &mut Violations) {
    if let Some(image) = written(s.pools.defaults.image.as_ref()) {
        v.image("pools.defaults.image", image);
    }
    let mut seen = BTreeSet::new();
    for (i, pool) in s.pools.items.iter().enumerate() {
        let at = format!("pools.items[{i}]");
        v.dns_label(&format!("{at}.name"), &pool.name);
        if !seen.insert(pool.name.as_str()) {
            v.push(format!("{at}.name"), format!("duplicate pool name {:?}", pool.name));
        }
        match (pool.runtime, pool.runtime_class_name.as_deref()) {
            (Runtime::Kata, Some(rc)) if rc.trim().is_empty() => v.push(
                format!("{at}.runtimeClassName"),
                format!(
                    "a kata pool needs a runtime class (omit the field for {})",
                    kata_component::default_runtime_class()
                ),
            ),
            (Runtime::Kata, Some(rc)) => v.dns_label(&format!("{at}.runtimeClassName"), rc),
            (Runtime::Runc, Some(_)) => v.push(
                format!("{at}.runtimeClassName"),
                "only kata pools take a runtime class; remove it or set `runtime: kata`",
            ),
            _ => {}
        }
        if pool.builds == Some(true) && pool.runtime == Runtime::Runc {
            v.push(
                format!("{at}.builds"),
                "only kata pools take `builds` (a runc pool's emptyDirs are on the node's disk already); remove it or set `runtime: kata`",
            );
        }
        if let Some(k) = &pool.kata {
            kata::validate(&at, pool.runtime, k, v);
        }
        capacity(&at, pool.capacity, v);
        if pool.image.as_ref().or(s.pools.defaults.image.as_ref()).is_none_or(|s| s.trim().is_empty()) {
            v.push(format!("{at}.image"), "missing image (set it on the pool or in pools.defaults)");
        }
        if let Some(image) = written(pool.image.as_ref()) {
            v.image(&format!("{at}.image"), image);
        }
    }
}

/// An image the profile writes (a blank one is missing, said by the rule above).
fn written(image: Option<&String>) -> Option<&str> {
    image.map(String::as_str).filter(|i| !i.trim().is_empty())
}

fn capacity(at: &str, c: Capacity, v: &mut Violations) {
    for (name, n) in
        [("bufferMin", c.buffer_min), ("bufferMax", c.buffer_max), ("poolMin", c.pool_min), ("poolMax", c.pool_max)]
    {
        if n < 0 {
            v.push(format!("{at}.capacity.{name}"), format!("must not be negative (got {n})"));
        }
        if n > i64::from(i32::MAX) {
            v.push(format!("{at}.capacity.{name}"), format!("{n} does not fit the CRD's int32"));
        }
    }
    for (low_name, low, high_name, high) in [
        ("bufferMin", c.buffer_min, "bufferMax", c.buffer_max),
        ("poolMin", c.pool_min, "poolMax", c.pool_max),
        ("bufferMax", c.buffer_max, "poolMax", c.pool_max),
    ] {
        if low > high {
            v.push(
                format!("{at}.capacity.{low_name}"),
                format!("{low_name} ({low}) is greater than {high_name} ({high})"),
            );
        }
    }
}

/// `pools`: every pool with its defaults applied and the values templates should not compute.
fn view(s: &Sections, _: &Site<'_>, ctx: &mut Context) {
    let ns = &s.opensandbox.namespaces.sandbox;
    let pools: Vec<Value> = s
        .pools
        .effective()
        .into_iter()
        .map(|e| {
            let mut v = serde_json::to_value(&e.template).unwrap_or(Value::Null);
            let pool = e.pool;
            v["name"] = json!(pool.name);
            v["namespace"] = json!(ns);
            v["runtime"] = json!(pool.runtime.as_str());
            v["runtimeClassName"] = json!(e.runtime_class_name);
            v["containerName"] = json!(e.container_name());
            v["capacity"] = serde_json::to_value(pool.capacity).unwrap_or(Value::Null);
            v["scaleStrategy"] = serde_json::to_value(&pool.scale_strategy).unwrap_or(Value::Null);
            v["updateStrategy"] = serde_json::to_value(&pool.update_strategy).unwrap_or(Value::Null);
            v["recycleStrategy"] = serde_json::to_value(&pool.recycle_strategy).unwrap_or(Value::Null);
            v
        })
        .collect();
    ctx.insert("pools", &pools);
}
