//! `kata.annotations`: the sandbox pods cannot reconfigure their VM. For each Kata pool, a
//! server-side dry-run create (nothing is created) of the pool's pod (its Pool's template, its
//! pool label) with a hypervisor annotation the pool is not allowed must be denied by the kata
//! layer's admission policy, naming it; the same pod without that annotation must be admitted
//! (the policy does not lock the pool out). Facts: [`annotations`].

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::if_kata;
use crate::cluster::operation::{Objects, Operation};
use crate::components::kata::{self, annotations};
use crate::components::pools::{self, EffectivePool};
use crate::object::KnownKind;
use crate::profile::Profile;
use crate::verify::{Check, Ctx, Reach, Verdict};

/// The hypervisor annotations the check tries, in order: the first the pool is not allowed.
const TRIED: &[&str] = &[
    annotations::PROBE_ANNOTATION,
    "io.katacontainers.config.hypervisor.default_memory",
    "io.katacontainers.config.hypervisor.default_vcpus",
    "io.katacontainers.config.hypervisor.enable_iommu",
    "io.katacontainers.config.hypervisor.kernel_verity_params",
    // No pool can be allowed an agent annotation.
    "io.katacontainers.config.agent.enable_tracing",
];

/// How to close the hole, for a failure.
fn fix() -> String {
    format!(
        "render and apply the kata layer (osbx apply): it holds ValidatingAdmissionPolicy {policy} and its bindings {policy} (the pools' namespace) and {probes} (verify's); check them with `kubectl get validatingadmissionpolicy,validatingadmissionpolicybinding | grep {policy}`",
        policy = annotations::POLICY,
        probes = annotations::PROBE_BINDING
    )
}

pub(in crate::verify::checks) struct Annotations;

impl Check for Annotations {
    fn ids(&self) -> Vec<String> {
        vec!["kata.annotations".into()]
    }

    /// Reading each Kata pool's Pool, and dry-run creates of pods in the pools' namespace
    /// (nothing from a run given its probe namespace: see [`in_the_cluster`]).
    fn operations(&self, profile: &Profile, reach: &Reach) -> Vec<Operation> {
        if profile.site().layer_of(&kata::COMPONENT).is_none() || reach.probes.is_some() {
            return Vec::new();
        }
        if_kata(profile, || {
            let s = &profile.sections;
            let mut out: Vec<Operation> = s
                .pools
                .effective()
                .iter()
                .filter(|p| p.runtime_class_name.is_some())
                .map(|p| Operation::Get(Objects::Named(pools::object(s, &p.pool.name))))
                .collect();
            out.push(Operation::Create(KnownKind::POD.gvk(), Some(s.opensandbox.namespaces.sandbox.clone())));
            out
        })
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            let profile = &ctx.profile;
            if profile.site().layer_of(&kata::COMPONENT).is_none() {
                return vec![Verdict::skip(format!(
                    "the profile renders no kata layer, so osbx renders no admission policy: whoever installs kata-deploy must keep io.katacontainers.* annotations off the sandbox pods (kata-deploy below {} lets them reconfigure the VM)",
                    annotations::FIXED_IN
                ))];
            }
            if !ctx.run.owns_namespace {
                return vec![in_the_cluster(profile)];
            }
            let kata_pools: Vec<EffectivePool<'_>> =
                profile.sections.pools.effective().into_iter().filter(|p| p.runtime_class_name.is_some()).collect();
            if kata_pools.is_empty() {
                return vec![Verdict::skip("no Kata pool in the profile")];
            }
            let mut evidence = Vec::new();
            for pool in &kata_pools {
                match pool_verdict(ctx, pool).await {
                    Ok(line) => evidence.push(line),
                    Err(verdict) => return vec![verdict],
                }
            }
            vec![Verdict::pass(evidence.join("; "))]
        })
    }
}

/// The verdict of a run given its probe namespace (the acceptance layer's, in the cluster): its
/// identity may create pods only there, and the dry run of a pool's pod is a `create` in the
/// sandbox namespace, so the check is left to a run from outside.
fn in_the_cluster(profile: &Profile) -> Verdict {
    Verdict::skip(format!(
        "in the cluster: the dry run of a sandbox pod in {} needs `pods create` there, which the acceptance layer's identity does not hold (it creates pods only in its probe namespace); run `osbx verify --only kata.annotations` from outside",
        profile.sections.opensandbox.namespaces.sandbox
    ))
}

/// One pool: `Ok(evidence)` when the annotated pod is denied by the policy and its own pod is
/// admitted, else the verdict.
async fn pool_verdict(ctx: &Ctx, pool: &EffectivePool<'_>) -> Result<String, Verdict> {
    let s = &ctx.profile.sections;
    let ns = &s.opensandbox.namespaces.sandbox;
    let name = &pool.pool.name;
    let id = pools::object(s, name);
    let live = match ctx.cluster.get(&id).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            return Err(Verdict::error(
                format!("Pool {ns}/{name} does not exist"),
                "the check dry-runs the pool's own pod: apply the pools layer first",
            ));
        }
        Err(e) => return Err(Verdict::error(format!("reading Pool {ns}/{name}"), e.to_string())),
    };
    let allowed = pool.allowed_annotations();
    let key = TRIED.iter().find(|k| !allowed.iter().any(|a| a == *k)).copied().unwrap_or(annotations::PROBE_ANNOTATION);
    let own = pod_of(ctx, &live, ns, name, None);
    let annotated = pod_of(ctx, &live, ns, name, Some(key));
    let what = format!("pool {name}'s pod (in {ns}) with {key}");
    match dry_run_create(ctx, ns, &annotated).await {
        Ok(()) => Err(Verdict::fail(
                format!("the API server admitted {what} (a dry run: nothing was created)"),
                format!(
                    "no admission policy rejects io.katacontainers.* annotations in {ns}: a sandbox pod can reconfigure its Kata VM (kata-deploy below {} forwards them to the shim)",
                    annotations::FIXED_IN
                ),
            )
            .with_fix(fix())),
        Err(Denial::Refused(message)) if message.contains(annotations::POLICY) => {
            let evidence = format!("{what} denied: {message}");
            match dry_run_create(ctx, ns, &own).await {
                Ok(()) => Ok(format!("{evidence}; its own pod admitted")),
                Err(Denial::Refused(m)) => Err(Verdict::fail(
                    format!("{evidence}; but its own pod (without {key}) was denied too: {m}"),
                    format!("the pool's own pods cannot be created, so pool {name} never fills"),
                )
                .with_fix(if m.contains(annotations::POLICY) {
                    "the pool's template carries an io.katacontainers.* annotation: remove it, or allow it for this pool in its kata.allowedAnnotations".to_owned()
                } else {
                    "see the message".to_owned()
                })),
                Err(Denial::Unknown(e)) => Err(Verdict::error(format!("dry-run create of pool {name}'s own pod"), e)),
            }
        }
        Err(Denial::Refused(message)) => Err(Verdict::fail(
            format!("{what} was denied, but not by ValidatingAdmissionPolicy {}: {message}", annotations::POLICY),
            "whatever denied it says nothing about io.katacontainers.* annotations: the policy that must reject them did not run",
        )
        .with_fix(fix())),
        Err(Denial::Unknown(e)) => Err(Verdict::error(format!("dry-run create of {what}"), e)),
    }
}

/// The pod the OpenSandbox controller would create for the pool (its template, its pool label),
/// labelled as this run's (a sweep deletes it should a server ignore the dry run), with `key`
/// added to its annotations when given.
fn pod_of(ctx: &Ctx, live: &Value, ns: &str, pool: &str, key: Option<&str>) -> Value {
    let template = &live["spec"]["template"];
    let mut labels = template["metadata"]["labels"].as_object().cloned().unwrap_or_default();
    labels.insert(annotations::POOL_LABEL.into(), json!(pool));
    if let Some(own) = ctx.run.labels("kata-annotations").as_object() {
        labels.extend(own.clone());
    }
    let mut annotations = template["metadata"]["annotations"].as_object().cloned().unwrap_or_default();
    if let Some(key) = key {
        annotations.insert(key.into(), json!("agent.debug_console"));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": format!("{pool}-kata-annotations-"), "namespace": ns, "labels": labels, "annotations": annotations},
        "spec": template["spec"],
    })
}

/// Why a dry-run create did not succeed.
enum Denial {
    /// The API server refused the pod (admission, validation): its message.
    Refused(String),
    /// No answer about the pod: the request failed, or osbx may not create pods there.
    Unknown(String),
}

async fn dry_run_create(ctx: &Ctx, ns: &str, pod: &Value) -> Result<(), Denial> {
    let pod: Pod = serde_json::from_value(pod.clone()).map_err(|e| Denial::Unknown(format!("the pod: {e}")))?;
    let api: Api<Pod> = Api::namespaced(ctx.cluster.client.clone(), ns);
    let params = PostParams { dry_run: true, ..PostParams::default() };
    match api.create(&params, &pod).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("cannot create resource") => {
            Err(Denial::Unknown(crate::cluster::describe(&kube::Error::Api(s))))
        }
        Err(kube::Error::Api(s)) if (400..500).contains(&s.code) => Err(Denial::Refused(s.message)),
        Err(e) => Err(Denial::Unknown(crate::cluster::describe(&e))),
    }
}
