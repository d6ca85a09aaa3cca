//! Who may reconfigure a sandbox's VM: the `io.katacontainers.*` pod annotations.
//!
//! Facts (kata-deploy 4.1.0, Kata 4.1.0): kata-deploy registers every runtime in containerd with
//! `pod_annotations = ["io.katacontainers.*"]` (`../shared/reference/acceptance-checks.md` §2),
//! so containerd hands each such pod annotation to the shim. The shim applies a hypervisor
//! annotation (`io.katacontainers.config.hypervisor.<name>`) only when `<name>` is in the
//! `enable_annotations` list of its hypervisor table; the build defaults enable `enable_iommu`,
//! `kernel_params` and `kernel_verity_params` (Go runtime, `src/runtime/Makefile`
//! `DEFENABLEANNOTATIONS`) and also `default_vcpus` and `default_memory` (runtime-rs,
//! `src/runtime-rs/Makefile`). Whoever can put an annotation on a sandbox pod changes the guest
//! kernel's command line (`kernel_params`: e.g. the agent's debug console; with
//! `virtio_fs_extra_args` the host's root file system, GHSA-rr59-xxvx-96qr). The agent, runtime
//! and container annotations (`io.katacontainers.config.agent.*`, `…runtime.*`, `…container.*`)
//! have no such gate (kata-containers/kata-containers#13857). kata-deploy 4.3.0 closed this
//! (a CVSS 7.9 advisory); osbx pins 4.1.0, so it closes it with what 4.1.0 accepts:
//!
//! - `enable_annotations = []` (or the names a pool is allowed) in the `[hypervisor.<table>]`
//!   of every class's drop-in: the shim's `dropIn` (kata-deploy installs it as
//!   `config.d/50-user-overrides.toml` of that handler) and the build classes' `customRuntimes`
//!   drop-in. Both runtimes replace a key's value whole when they merge a drop-in (runtime-rs
//!   `kata-types/src/config/drop_in.rs`, Go `katautils/config.go` `updateFromDropIn`), so the
//!   list is exactly the drop-in's, whatever the base file or kata-deploy's
//!   `ALLOWED_HYPERVISOR_ANNOTATIONS` (which appends to the base file) say; and
//!   `allowedHypervisorAnnotations` (the chart's per-shim value) written out, so it is not left
//!   to the chart's defaults.
//! - A `ValidatingAdmissionPolicy` (`admissionregistration.k8s.io/v1`) rejecting a pod that
//!   carries any `io.katacontainers.` annotation in the pools' namespace and in `osbx verify`'s
//!   probe namespaces: the only gate for the annotations `enable_annotations` does not cover.
//!
//! A pool may be allowed named hypervisor annotations (`pools.items[].kata.allowedAnnotations`):
//! the policy lets that pool's pods (its namespace and its `sandbox.opensandbox.io/pool-name`
//! label) carry those names only, and the drop-in of the class the pool runs on enables them.
//! That class's configuration then accepts them from every pod on it: the policy is what keeps
//! them to that pool (lint `kata.allowed-annotation` says so).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::shim;

/// What every Kata annotation starts with.
pub(crate) const PREFIX: &str = "io.katacontainers.";

/// What a hypervisor annotation starts with; the rest is its name in `enable_annotations`.
pub(crate) const HYPERVISOR_PREFIX: &str = "io.katacontainers.config.hypervisor.";

/// The annotation `kata.annotations` puts on a pool's pod to prove the policy rejects it.
pub(crate) const PROBE_ANNOTATION: &str = "io.katacontainers.config.hypervisor.kernel_params";

/// The name of the admission policy, and of its binding for the pools' namespace.
pub(crate) const POLICY: &str = "osbx-kata-annotations";

/// The binding of [`POLICY`] for `osbx verify`'s probe namespaces.
pub(crate) const PROBE_BINDING: &str = "osbx-kata-annotations-verify";

/// The label the OpenSandbox controller puts on a pool's pods, naming the pool.
pub(crate) const POOL_LABEL: &str = "sandbox.opensandbox.io/pool-name";

/// The label of `osbx verify`'s probe namespaces (`app.kubernetes.io/managed-by`, its value).
pub(crate) const PROBE_NAMESPACE_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "osbx-verify");

/// The first kata-deploy that registers runtimes without `io.katacontainers.*`.
pub(crate) const FIXED_IN: &str = "4.3.0";

/// The advisory, in words (for lint and docs).
pub(crate) const ADVISORY: &str = "the kata-deploy 4.3.0 security advisory (CVSS 7.9): kata-deploy up to 4.2 registers every runtime with pod_annotations = [\"io.katacontainers.*\"] and runtime-rs enables kernel_params, default_vcpus, default_memory, enable_iommu and kernel_verity_params by default, so whoever can annotate a sandbox pod changes the guest kernel's command line";

/// What each hypervisor annotation a pool may be allowed opens, by name; a name not here is
/// still one Kata knows or ignores, said as such.
const OPENS: &[(&str, &str)] = &[
    ("kernel_params", "the guest kernel's command line (e.g. the agent's debug console, init=)"),
    ("kernel_verity_params", "the guest root file system's dm-verity parameters (integrity of the guest image)"),
    ("default_vcpus", "the VM's vCPUs at boot, beyond the pod's CPU limit"),
    ("default_maxvcpus", "the VM's vCPU ceiling"),
    ("default_memory", "the VM's memory at boot, beyond the pod's memory limit"),
    ("default_maxmemory", "the VM's memory ceiling"),
    ("enable_iommu", "a virtual IOMMU in the guest"),
    (
        "virtio_fs_extra_args",
        "virtiofsd's arguments on the host (with -o source=/ the host's root, GHSA-rr59-xxvx-96qr)",
    ),
    ("path", "which binary the host runs as the VMM"),
    ("jailer_path", "which binary the host runs as the jailer"),
    ("ctlpath", "which binary the host runs as the VMM's control tool"),
    ("virtio_fs_daemon", "which binary the host runs as virtiofsd"),
    ("kernel", "which guest kernel the VM boots"),
    ("image", "which guest image the VM boots"),
    ("initrd", "which initrd the VM boots"),
    ("firmware", "which firmware the VM boots"),
    ("machine_type", "the VM's machine type"),
    ("default_gpus", "GPUs given to the VM"),
    ("cc_init_data", "the confidential guest's init data (its policy)"),
];

/// What allowing hypervisor annotation `name` opens, in words.
#[must_use]
pub(crate) fn opens(name: &str) -> String {
    OPENS.iter().find(|(n, _)| *n == name).map_or_else(
        || format!("whatever the hypervisor setting {name} controls (osbx has no note on it)"),
        |(_, what)| (*what).to_owned(),
    )
}

/// The drop-in of a class on `shim` that enables exactly `allowed` (names without
/// [`HYPERVISOR_PREFIX`]) in its hypervisor table; `None` for a shim osbx has no facts on.
#[must_use]
pub(crate) fn drop_in(shim: &str, allowed: &BTreeSet<String>) -> Option<String> {
    let table = shim::by_name(shim)?.hypervisor_table();
    let names: Vec<String> = allowed.iter().map(|n| format!("{n:?}")).collect();
    Some(format!("[hypervisor.{table}]\nenable_annotations = [{}]\n", names.join(", ")))
}

/// A CEL string literal.
fn cel(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The policy's view for the templates: its name, the bindings' namespaces and the CEL of its
/// variables (the allowed annotations of each pool, `by_pool`, as a map `namespace/pool →
/// [keys]`).
#[must_use]
pub(crate) fn policy_view(by_pool: &BTreeMap<String, Vec<String>>, namespace: &str) -> Value {
    let allowed: BTreeMap<String, &Vec<String>> = by_pool
        .iter()
        .filter(|(_, keys)| !keys.is_empty())
        .map(|(pool, keys)| (format!("{namespace}/{pool}"), keys))
        .collect();
    let map: Vec<String> = allowed
        .iter()
        .map(|(k, keys)| format!("{}: [{}]", cel(k), keys.iter().map(|a| cel(a)).collect::<Vec<_>>().join(", ")))
        .collect();
    let pool = format!(
        "has(object.metadata.labels) && {label} in object.metadata.labels ? request.namespace + '/' + object.metadata.labels[{label}] : ''",
        label = cel(POOL_LABEL)
    );
    let denied = format!(
        "has(object.metadata.annotations) ? object.metadata.annotations.filter(k, k.startsWith({prefix}) && !(variables.pool in variables.allowed && k in variables.allowed[variables.pool]) && !(oldObject != null && has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations && oldObject.metadata.annotations[k] == object.metadata.annotations[k])) : []",
        prefix = cel(PREFIX)
    );
    let message = format!(
        "{} + variables.denied.join(', ') + {}",
        cel("pod annotations "),
        cel(&format!(
            " reconfigure the Kata VM (its kernel command line, vCPUs, memory, the agent) and are not allowed on sandbox pods (ValidatingAdmissionPolicy {POLICY}; a pool is allowed named ones by pools.items[].kata.allowedAnnotations)"
        ))
    );
    json!({
        "name": POLICY,
        "probeBinding": PROBE_BINDING,
        "namespaces": [namespace],
        "probeLabel": {"key": PROBE_NAMESPACE_LABEL.0, "value": PROBE_NAMESPACE_LABEL.1},
        "poolExpression": pool,
        "allowedExpression": format!("{{{}}}", map.join(", ")),
        "deniedExpression": denied,
        "messageExpression": message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drop_in_names_the_shims_hypervisor_table_and_exactly_the_allowed_names() {
        let none = BTreeSet::new();
        assert_eq!(drop_in("qemu", &none).as_deref(), Some("[hypervisor.qemu]\nenable_annotations = []\n"));
        let some: BTreeSet<String> = ["default_memory".to_owned(), "default_vcpus".to_owned()].into();
        let text = drop_in("clh-runtime-rs", &some).unwrap();
        let parsed: toml::Value = toml::from_str(&text).unwrap();
        assert_eq!(
            parsed["hypervisor"]["clh"]["enable_annotations"],
            toml::Value::Array(vec!["default_memory".into(), "default_vcpus".into()])
        );
        assert!(drop_in("no-such-shim", &none).is_none());
    }

    #[test]
    fn every_default_annotation_says_what_it_opens() {
        for name in ["enable_iommu", "kernel_params", "kernel_verity_params", "default_vcpus", "default_memory"] {
            assert!(!opens(name).contains("no note"), "{name}");
        }
        assert!(opens("something_new").contains("no note"));
    }
}
