//! The `kata` component: kata-deploy from its OCI chart (a Flux `OCIRepository` and
//! `HelmRelease`), installing the Kata runtime and one RuntimeClass per enabled shim, and for
//! the shims the build pools run on (`pools.items[].builds`) a second one whose emptyDirs are
//! block devices in the guest.
//!
//! Facts (Kata 4.x, kata-deploy 4.1.0; `../shared/reference/sandbox-work.md` §2): a disk-backed
//! emptyDir reaches the guest through virtio-fs by default (`emptydir_mode = "shared-fs"`), where
//! Docker's overlay2 falls back to `vfs` or runs on FUSE; `emptydir_mode = "block-plain"` in the
//! `[runtime]` table (Kata ≥ 4.0; no pod annotation sets it) plugs a virtio-blk disk the agent
//! formats ext4. It applies to every emptyDir of every pod on that handler, so osbx gives it to a
//! handler of its own: a kata-deploy `customRuntimes` entry (a copy of the shim's configuration
//! with the drop-in in its `config.d`, a RuntimeClass of that handler) rather than the shim's
//! `dropIn`, which every pod on the shim's class would get. kata-deploy 4.1.0 has no value of
//! its own for the mode.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tera::Context;

use super::{Component, Sections, Site};
use crate::spec::mirror::{ChartImage, Shape};
use crate::spec::{Images, Violations};

pub mod annotations;
mod rules;
pub mod shim;

/// The table entry of this component.
pub(crate) static COMPONENT: Component = Component {
    name: "kata",
    about: "kata-deploy (RuntimeClasses and the Kata runtime on the nodes)",
    section: "kata",
    validate: rules::validate,
    view,
    pin: |_| Some("kata.chart.version"),
    values: |s| s.kata.as_ref()?.values.as_ref(),
    supplied: |_| None,
    health: &[],
    after_others: false,
    pulled: |_| Vec::new(),
    images,
};

/// The images kata-deploy pulls, by their values (each `reference` beside a `tag` that defaults
/// to the chart's version): the installer (the DaemonSet, or the per-node Jobs the dispatcher
/// creates from the chart's Job template), the dispatcher, kubectl of the hook Jobs and
/// kata-monitor.
const CHART_IMAGES: &[ChartImage] = &[
    ChartImage {
        path: "image.reference",
        shape: Shape::Reference,
        default: "quay.io/kata-containers/kata-deploy",
        about: "the installer",
    },
    ChartImage {
        path: "job.dispatcherImage.reference",
        shape: Shape::Reference,
        default: "quay.io/kata-containers/kata-deploy-job-dispatcher",
        about: "the Job dispatcher",
    },
    ChartImage {
        path: "kubectlImage.reference",
        shape: Shape::Reference,
        default: "quay.io/kata-containers/kubectl",
        about: "the hook Jobs' kubectl",
    },
    ChartImage {
        path: "monitor.image.reference",
        shape: Shape::Reference,
        default: "quay.io/kata-containers/kata-monitor",
        about: "kata-monitor",
    },
];

/// kata-deploy's images onto the mirror and the pull Secrets to its pods, through its values.
fn images(sections: &mut Sections, images: &Images, v: &mut Violations) {
    let Some(k) = &mut sections.kata else { return };
    images.chart_values(&mut k.values, CHART_IMAGES, "kata.values", v);
    images.chart_pull_secrets(&mut k.values, &["imagePullSecrets"]);
}

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

/// What ends the name of a build class (`kata-<shim>-build`), after kata-deploy's own variants
/// of a shim's handler (`kata-<shim>-debug`).
pub(crate) const BUILD_CLASS_SUFFIX: &str = "-build";

/// The RuntimeClass (and handler) the kata layer creates for build pools on a shim:
/// `kata-<shim>-build`, the shim's configuration with [`BUILD_DROP_IN`].
#[must_use]
pub fn build_runtime_class(shim: &str) -> String {
    format!("{}{BUILD_CLASS_SUFFIX}", runtime_class(shim))
}

/// The RuntimeClass a build pool uses unless it names another: the build class of
/// [`DEFAULT_SHIM`].
#[must_use]
pub(crate) fn default_build_runtime_class() -> String {
    build_runtime_class(DEFAULT_SHIM)
}

/// The Kata configuration drop-in of the build classes: emptyDirs as a virtio-blk disk the
/// agent formats ext4, instead of a virtio-fs share.
pub const BUILD_DROP_IN: &str = "[runtime]\nemptydir_mode = \"block-plain\"\n";

/// How a build pool gets block-backed emptyDirs (what `kata.build-storage` and
/// `workload.docker.<pool>` advise).
#[must_use]
pub(crate) fn block_storage_fix() -> String {
    format!(
        "render the kata layer (component: kata) and leave runtimeClassName unset (the pool then gets {}) or name kata-<shim>-build of an enabled shim; or set emptydir_mode = \"block-plain\" in the [runtime] table of that class's Kata configuration (Kata >= 4.0, e.g. kata-deploy's shims.<shim>.dropIn)",
        default_build_runtime_class()
    )
}

/// The first kata-deploy (and Kata) major version that knows `emptydir_mode = "block-plain"`.
const BLOCK_PLAIN_SINCE: u64 = 4;

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

/// What the pools ask of the Kata installation (the pools component states it:
/// `Pools::kata_demands`): the build classes they run on, and the hypervisor annotations they are
/// allowed, per class (names without [`annotations::HYPERVISOR_PREFIX`]) and per pool (full keys).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolDemands {
    /// The build classes the build pools use.
    pub(crate) build_classes: Vec<String>,
    /// RuntimeClass → the annotation names the pools on it are allowed, together.
    pub(crate) allowed_on_class: BTreeMap<String, BTreeSet<String>>,
    /// Pool name → the annotation keys it is allowed.
    pub(crate) allowed_by_pool: BTreeMap<String, Vec<String>>,
}

impl PoolDemands {
    /// The annotation names the pools on `class` are allowed.
    #[must_use]
    pub fn allowed_on(&self, class: &str) -> BTreeSet<String> {
        self.allowed_on_class.get(class).cloned().unwrap_or_default()
    }
}

impl Kata {
    /// The RuntimeClasses this installation creates for `pools`: one per enabled shim, and the
    /// build class of each enabled shim a build pool runs on.
    #[must_use]
    pub fn runtime_classes(&self, build_classes: &[String]) -> Vec<String> {
        let mut classes: Vec<String> = self.shims.iter().map(|s| runtime_class(s)).collect();
        classes.extend(self.block_storage_classes(build_classes));
        classes
    }

    /// The enabled shims whose build class a build pool of `pools` uses, in `shims` order.
    #[must_use]
    pub fn build_shims(&self, build_classes: &[String]) -> Vec<&str> {
        self.shims.iter().map(String::as_str).filter(|s| build_classes.contains(&build_runtime_class(s))).collect()
    }

    /// The RuntimeClasses this installation gives block-backed emptyDirs
    /// (`emptydir_mode = "block-plain"`): the build classes the build pools of `pools` use.
    #[must_use]
    pub fn block_storage_classes(&self, build_classes: &[String]) -> Vec<String> {
        self.build_shims(build_classes).into_iter().map(build_runtime_class).collect()
    }

    /// The chart values osbx sets for `pools`, with `values` merged over them: every enabled
    /// shim and every build class gets a drop-in that enables no hypervisor annotation but those
    /// the pools on it are allowed ([`annotations`]), and each shim its
    /// `allowedHypervisorAnnotations` written out.
    #[must_use]
    pub(crate) fn chart_values(&self, demands: &PoolDemands) -> Value {
        let build_classes = demands.build_classes.as_slice();
        let mut shims = serde_json::Map::new();
        shims.insert("disableAll".into(), json!(true));
        for s in &self.shims {
            let allowed = demands.allowed_on(&runtime_class(s));
            let mut shim = json!({"enabled": true, "allowedHypervisorAnnotations": allowed});
            if let Some(drop_in) = annotations::drop_in(s, &allowed) {
                shim["dropIn"] = json!(drop_in);
            }
            shims.insert(s.clone(), shim);
        }
        let mut values = json!({
            "deploymentMode": self.deployment_mode,
            "k8sDistribution": self.k8s_distribution,
            "shims": shims,
            "defaultShim": {"amd64": self.default_shim},
            "runtimeClasses": {"enabled": true, "createDefault": self.create_default_runtime_class},
        });
        let builds = self.build_shims(build_classes);
        if !builds.is_empty() {
            let runtimes: serde_json::Map<String, Value> =
                builds.into_iter().map(|shim| (build_runtime_class(shim), build_runtime(shim, demands))).collect();
            values["customRuntimes"] = json!({"enabled": true, "runtimes": runtimes});
        }
        if !self.node_selector.is_empty() {
            values["nodeSelector"] = json!(self.node_selector);
        }
        if let Some(extra) = &self.values {
            crate::merge::merge(&mut values, extra);
        }
        values
    }
}

/// The kata-deploy `customRuntimes` entry of a shim's build class: the shim's configuration
/// (`baseConfig`; the chart adds the shim's overhead to the RuntimeClass) with
/// [`BUILD_DROP_IN`] and the class's hypervisor annotations ([`annotations::drop_in`]), and a
/// RuntimeClass of its own handler on the nodes Kata is installed on (the label kata-deploy's own
/// classes select; the chart adds its instance gate).
fn build_runtime(shim: &str, demands: &PoolDemands) -> Value {
    let class = build_runtime_class(shim);
    let allowed = demands.allowed_on(&class);
    let drop_in = format!("{BUILD_DROP_IN}{}", annotations::drop_in(shim, &allowed).unwrap_or_default());
    let runtime_class = format!(
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: {class}\n  labels:\n    app.kubernetes.io/managed-by: kata-deploy\nhandler: {class}\nscheduling:\n  nodeSelector:\n    katacontainers.io/kata-runtime: \"true\"\n"
    );
    json!({"baseConfig": shim, "dropIn": drop_in, "runtimeClass": runtime_class})
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

/// `kata` (the section with its chart values and RuntimeClasses) and `kataLayer` (the name of
/// the layer that renders it, for other components' text).
fn view(s: &Sections, site: &Site<'_>, ctx: &mut Context) {
    ctx.insert("kataLayer", &site.layer_of(&COMPONENT).map(|(_, name)| name));
    if let Some(k) = &s.kata {
        let mut v = serde_json::to_value(k).unwrap_or(Value::Null);
        let demands = s.pools.kata_demands();
        v["chartValues"] = k.chart_values(&demands);
        v["admissionPolicy"] = annotations::policy_view(&demands.allowed_by_pool, &s.opensandbox.namespaces.sandbox);
        v["runtimeClasses"] = json!(k.runtime_classes(&demands.build_classes));
        ctx.insert("kata", &v);
    }
}
