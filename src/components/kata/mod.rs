//! The `kata` component: kata-deploy from its OCI chart (a Flux `OCIRepository` and
//! `HelmRelease`), installing the Kata runtime and one RuntimeClass per enabled shim.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tera::Context;

use super::{Component, Sections, Site};
use crate::spec::Violations;

pub mod shim;

/// The table entry of this component.
pub(crate) static COMPONENT: Component = Component {
    name: "kata",
    about: "kata-deploy (RuntimeClasses and the Kata runtime on the nodes)",
    section: "kata",
    validate,
    view,
    pin: |_| Some("kata.chart.version"),
    values: |s| s.kata.as_ref()?.values.as_ref(),
    supplied: |_| None,
    health: &[],
};

/// The shim osbx enables unless the profile names others: Cloud Hypervisor with runtime-rs.
pub(crate) const DEFAULT_SHIM: &str = "clh-runtime-rs";

/// The shims each kata-deploy chart version osbx knows defines (the keys of its values'
/// `shims`): a shim the chart does not know installs nothing, and pools naming its RuntimeClass
/// never schedule.
const KNOWN_SHIMS: &[(&str, &[&str])] = &[(
    "4.1.0",
    &[
        "clh",
        "clh-azure",
        "clh-runtime-rs",
        "clh-azure-runtime-rs",
        "dragonball",
        "fc",
        "qemu",
        "qemu-runtime-rs",
        "qemu-nvidia-cpu",
        "qemu-nvidia-cpu-runtime-rs",
        "qemu-nvidia-gpu",
        "qemu-nvidia-gpu-runtime-rs",
        "qemu-nvidia-gpu-snp",
        "qemu-nvidia-gpu-snp-runtime-rs",
        "qemu-nvidia-gpu-tdx",
        "qemu-nvidia-gpu-tdx-runtime-rs",
        "qemu-snp",
        "qemu-snp-runtime-rs",
        "qemu-tdx",
        "qemu-tdx-runtime-rs",
        "qemu-se",
        "qemu-se-runtime-rs",
        "qemu-coco-dev",
        "qemu-coco-dev-runtime-rs",
        "remote",
        "openvmm-azure-runtime-rs",
    ],
)];

/// The shims kata-deploy `version` knows, when osbx knows that version.
#[must_use]
pub fn known_shims(version: &str) -> Option<&'static [&'static str]> {
    KNOWN_SHIMS.iter().find(|(v, _)| *v == version).map(|(_, shims)| *shims)
}

/// The RuntimeClass kata-deploy creates for a shim (`kata-<shim>`).
#[must_use]
pub fn runtime_class(shim: &str) -> String {
    format!("kata-{shim}")
}

/// The RuntimeClass a Kata pool uses unless it names another: that of [`DEFAULT_SHIM`].
#[must_use]
pub(crate) fn default_runtime_class() -> String {
    runtime_class(DEFAULT_SHIM)
}

/// kata-deploy, installed by a Flux HelmRelease from its OCI chart.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Kata {
    /// Namespace of the HelmRelease and the chart's objects.
    pub namespace: String,
    /// The OCI chart.
    pub chart: OciChart,
    /// HelmRelease name.
    pub release: String,
    /// Reconcile interval.
    pub interval: String,
    /// Helm timeout; must cover artifact extraction and a CRI restart on every node.
    pub timeout: String,
    /// `job` (short-lived install Jobs) or `daemonset`.
    pub deployment_mode: String,
    /// `k3s`, `rke2`, `k8s`, … (sets the containerd paths).
    pub k8s_distribution: String,
    /// The shims to install (all others disabled).
    pub shims: Vec<String>,
    /// The default shim (must be one of `shims`).
    pub default_shim: String,
    /// Create the `kata` alias RuntimeClass.
    pub create_default_runtime_class: bool,
    /// Nodes to install on.
    pub node_selector: BTreeMap<String, String>,
    /// Extra chart values, merged over what osbx sets.
    pub values: Option<Value>,
}

impl Default for Kata {
    fn default() -> Self {
        Self {
            namespace: "kata-system".into(),
            chart: OciChart::default(),
            release: "kata-deploy".into(),
            interval: "30m".into(),
            timeout: "20m".into(),
            deployment_mode: "job".into(),
            k8s_distribution: "k3s".into(),
            shims: vec![DEFAULT_SHIM.into()],
            default_shim: DEFAULT_SHIM.into(),
            create_default_runtime_class: false,
            node_selector: BTreeMap::new(),
            values: None,
        }
    }
}

impl Kata {
    /// The RuntimeClasses this installation creates.
    #[must_use]
    pub fn runtime_classes(&self) -> Vec<String> {
        self.shims.iter().map(|s| runtime_class(s)).collect()
    }

    /// The chart values osbx sets, with `values` merged over them.
    #[must_use]
    pub fn chart_values(&self) -> Value {
        let mut shims = serde_json::Map::new();
        shims.insert("disableAll".into(), json!(true));
        for s in &self.shims {
            shims.insert(s.clone(), json!({"enabled": true}));
        }
        let mut values = json!({
            "deploymentMode": self.deployment_mode,
            "k8sDistribution": self.k8s_distribution,
            "shims": shims,
            "defaultShim": {"amd64": self.default_shim},
            "runtimeClasses": {"enabled": true, "createDefault": self.create_default_runtime_class},
        });
        if !self.node_selector.is_empty() {
            values["nodeSelector"] = json!(self.node_selector);
        }
        if let Some(extra) = &self.values {
            crate::merge::merge(&mut values, extra);
        }
        values
    }
}

/// A chart in an OCI registry (a Flux `OCIRepository`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct OciChart {
    /// `oci://` URL of the chart.
    pub url: String,
    /// Chart version (the OCI tag).
    pub version: String,
    /// Fetch interval.
    pub interval: String,
    /// Plain HTTP (Flux's `spec.insecure`): a registry without TLS on a private network.
    pub insecure: bool,
}

impl Default for OciChart {
    fn default() -> Self {
        Self {
            url: "oci://ghcr.io/kata-containers/kata-deploy-charts/kata-deploy".into(),
            version: "4.1.0".into(),
            interval: "1h".into(),
            insecure: false,
        }
    }
}

fn validate(s: &Sections, site: &Site<'_>, v: &mut Violations) {
    let layer = site.layer_of(&COMPONENT);
    let Some(k) = &s.kata else {
        if let Some((i, _)) = layer {
            v.push(format!("layers[{i}].component"), "a kata layer needs a top-level `kata` section");
        }
        return;
    };
    v.dns_label("kata.namespace", &k.namespace);
    v.dns_label("kata.release", &k.release);
    v.duration("kata.interval", &k.interval);
    v.duration("kata.timeout", &k.timeout);
    v.duration("kata.chart.interval", &k.chart.interval);
    if k.chart.url.starts_with("oci://") {
        v.shape("kata.chart.url", &k.chart.url, |u| {
            crate::refs::url(u, &["oci://"])?;
            crate::refs::chart_name(u.trim_end_matches('/').rsplit('/').next().unwrap_or_default())
                .map_err(|why| format!("its last segment names the chart, and {why}"))
        });
    } else {
        v.push("kata.chart.url", format!("{:?} must be an oci:// URL", k.chart.url));
    }
    v.shape("kata.chart.version", &k.chart.version, crate::refs::oci_tag);
    if k.shims.is_empty() {
        v.push("kata.shims", format!("enable at least one shim (e.g. {DEFAULT_SHIM})"));
    }
    if let Some(known) = known_shims(&k.chart.version) {
        for (i, shim) in k.shims.iter().enumerate() {
            if !known.contains(&shim.as_str()) {
                v.push(
                    format!("kata.shims[{i}]"),
                    format!(
                        "kata-deploy {} has no shim {shim:?}: it would install no RuntimeClass for it (known: {})",
                        k.chart.version,
                        known.join(", ")
                    ),
                );
            }
        }
    }
    if !k.shims.contains(&k.default_shim) {
        v.push(
            "kata.defaultShim",
            format!("{:?} is not among the enabled shims [{}]: kata-deploy refuses to install (DEFAULT_SHIM must be one of the configured SHIMS)", k.default_shim, k.shims.join(", ")),
        );
    }
    if !matches!(k.deployment_mode.as_str(), "job" | "daemonset") {
        v.push("kata.deploymentMode", format!("{:?} is neither job nor daemonset", k.deployment_mode));
    }
    if layer.is_some() {
        let installed = k.runtime_classes();
        for (i, pool) in s.pools.effective().iter().enumerate() {
            if let Some(rc) = &pool.runtime_class_name
                && !installed.contains(rc)
            {
                v.push(
                    format!("pools.items[{i}].runtimeClassName"),
                    format!(
                        "RuntimeClass {rc} is not installed by the kata layer (it installs {})",
                        installed.join(", ")
                    ),
                );
            }
        }
    }
}

/// `kata` (the section with its chart values and RuntimeClasses) and `kataLayer` (the name of
/// the layer that renders it, for other components' text).
fn view(s: &Sections, site: &Site<'_>, ctx: &mut Context) {
    ctx.insert("kataLayer", &site.layer_of(&COMPONENT).map(|(_, name)| name));
    if let Some(k) = &s.kata {
        let mut v = serde_json::to_value(k).unwrap_or(Value::Null);
        v["chartValues"] = k.chart_values();
        v["runtimeClasses"] = json!(k.runtime_classes());
        ctx.insert("kata", &v);
    }
}
