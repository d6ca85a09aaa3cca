//! `nodes.ready` and `kata.runtimeclass`: API-only facts about nodes and RuntimeClasses (a Kata
//! pool's class, and the Ready nodes it admits that advertise its handler).

use futures::future::BoxFuture;
use serde_json::Value;

use super::list;
use crate::cluster::operation::{Objects, Operation};
use crate::object::{Gvk, KnownKind, ObjectRef};
use crate::profile::Profile;
use crate::readiness::runtime::{OnNodes, on_nodes};
use crate::verify::{Check, Ctx, Reach, Verdict};

/// The label kata-deploy sets to `true` on nodes that can run Kata.
pub(super) const KATA_LABEL: &str = "katacontainers.io/kata-runtime";

pub(super) struct NodesReady;

/// The Node kind.
pub(super) fn node() -> Gvk {
    KnownKind::NODE.gvk()
}

fn runtime_class(name: &str) -> ObjectRef {
    KnownKind::RUNTIME_CLASS.object(None, name)
}

fn name(v: &Value) -> String {
    v["metadata"]["name"].as_str().unwrap_or_default().to_owned()
}

/// Nodes meant for Kata: those carrying the kata-deploy label key (any value).
pub(super) fn kata_nodes(nodes: &[Value]) -> Vec<&Value> {
    nodes.iter().filter(|n| n["metadata"]["labels"].get(KATA_LABEL).is_some()).collect()
}

impl Check for NodesReady {
    fn ids(&self) -> Vec<String> {
        vec!["nodes.ready".into()]
    }

    /// Listing nodes.
    fn operations(&self, _: &Profile, _: &Reach) -> Vec<Operation> {
        vec![Operation::List(node(), None)]
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            let nodes = match list(&ctx.cluster, &node(), None, None).await {
                Ok(n) => n,
                Err(e) => return vec![Verdict::error("listing nodes", e.to_string())],
            };
            let mut problems = Vec::new();
            for n in &nodes {
                let ready = n["status"]["conditions"].as_array().and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
                if ready.is_none_or(|c| c["status"] != "True") {
                    let msg = ready.and_then(|c| c["message"].as_str()).unwrap_or("no Ready condition");
                    problems.push(format!("{} not Ready: {msg}", name(n)));
                }
                for t in n["spec"]["taints"].as_array().into_iter().flatten() {
                    let key = t["key"].as_str().unwrap_or_default();
                    if key == "node.kubernetes.io/not-ready" || key == "node.kubernetes.io/unreachable" {
                        problems.push(format!("{} tainted {key}", name(n)));
                    }
                }
                if n["spec"]["unschedulable"] == true {
                    problems.push(format!("{} is cordoned", name(n)));
                }
            }
            let classes = ctx.profile.sections.pools.kata_classes();
            let kata = kata_nodes(&nodes);
            let mut notes = Vec::new();
            if !classes.is_empty() {
                if kata.is_empty() {
                    problems.push(format!("no node carries {KATA_LABEL}: kata-deploy has not installed any node (job mode installs only nodes present at the last helm upgrade: reconcile the kata HelmRelease)"));
                }
                for n in &kata {
                    if n["metadata"]["labels"][KATA_LABEL] != "true" {
                        problems.push(format!(
                            "{} has {KATA_LABEL}={}: the install claimed the node but did not finish",
                            name(n),
                            n["metadata"]["labels"][KATA_LABEL]
                        ));
                    }
                    match n["status"]["runtimeHandlers"].as_array() {
                        None => notes.push(format!(
                            "{}: cannot verify handler (no status.runtimeHandlers: K8s < 1.30 or containerd < 2.0)",
                            name(n)
                        )),
                        Some(h) => {
                            let have: Vec<&str> = h.iter().filter_map(|x| x["name"].as_str()).collect();
                            // containerd lists its default runtime under the empty name.
                            let named: Vec<&str> =
                                have.iter().map(|h| if h.is_empty() { "the default" } else { h }).collect();
                            for class in &classes {
                                if !have.contains(&class.as_str()) {
                                    problems.push(format!(
                                        "{} does not list runtime handler {class} (has {}): the node's containerd has no runtime of that name",
                                        name(n),
                                        named.join(", ")
                                    ));
                                }
                            }
                        }
                    }
                }
            }
            let evidence = format!(
                "{} node(s), {} for Kata{}",
                nodes.len(),
                kata.len(),
                if notes.is_empty() { String::new() } else { format!("; {}", notes.join("; ")) }
            );
            vec![if nodes.is_empty() {
                Verdict::fail(evidence, "the cluster has no nodes")
            } else if problems.is_empty() {
                Verdict::pass(evidence)
            } else if problems.iter().any(|p| p.contains("does not list runtime handler")) {
                Verdict::fail(evidence, problems.join("; ")).with_fix(
                    "kata-deploy installs the handler into the node's containerd (a drop-in, then a containerd restart): check the kata layer's shims and its install on that node",
                )
            } else {
                Verdict::fail(evidence, problems.join("; "))
            }]
        })
    }
}

pub(super) struct RuntimeClasses;

impl Check for RuntimeClasses {
    fn ids(&self) -> Vec<String> {
        vec!["kata.runtimeclass".into()]
    }

    /// Reading each Kata pool's RuntimeClass, and listing the nodes that may run it.
    fn operations(&self, profile: &Profile, _: &Reach) -> Vec<Operation> {
        let classes = profile.sections.pools.kata_classes();
        let mut ops: Vec<Operation> =
            classes.iter().map(|class| Operation::Get(Objects::Named(runtime_class(class)))).collect();
        if !ops.is_empty() {
            ops.push(Operation::List(node(), None));
        }
        ops
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            let classes = ctx.profile.sections.pools.kata_classes();
            if classes.is_empty() {
                return vec![Verdict::skip("no Kata pool in the profile")];
            }
            let nodes = match list(&ctx.cluster, &node(), None, None).await {
                Ok(n) => n,
                Err(e) => return vec![Verdict::error("listing nodes", e.to_string())],
            };
            let mut ok = Vec::new();
            let mut problems = Vec::new();
            let mut unknown = Vec::new();
            let mut handler_missing = false;
            for class in &classes {
                let rc = match ctx.cluster.get(&runtime_class(class)).await {
                    Err(e) => return vec![Verdict::error(format!("reading RuntimeClass {class}"), e.to_string())],
                    Ok(None) => {
                        problems.push(format!("RuntimeClass {class} not found: kata-deploy's runtimeClasses.enabled is off, the shim is disabled, or a multiInstallSuffix renamed it"));
                        continue;
                    }
                    Ok(Some(rc)) => rc,
                };
                let handler = rc["handler"].as_str().unwrap_or_default();
                if handler != class {
                    problems.push(format!("RuntimeClass {class} has handler {handler:?}, expected {class:?}"));
                } else if rc["overhead"]["podFixed"].is_null() {
                    problems.push(format!(
                        "RuntimeClass {class} has no overhead.podFixed: pods will not account for the VM"
                    ));
                } else if rc["scheduling"]["nodeSelector"][KATA_LABEL] != "true" {
                    problems.push(format!("RuntimeClass {class} does not select {KATA_LABEL}=true nodes"));
                } else {
                    match on_nodes(&rc, handler, &nodes) {
                        OnNodes::Advertised(on) => ok.push(format!("{class} → handler {handler} on {}", on.join(", "))),
                        OnNodes::Missing(why) => {
                            handler_missing = true;
                            problems.push(format!("RuntimeClass {class}: {why}"));
                        }
                        OnNodes::NoNode(why) => problems.push(format!("RuntimeClass {class}: {why}")),
                        OnNodes::Unknown(why) => unknown.push(format!("RuntimeClass {class}: {why}")),
                    }
                }
            }
            let evidence = ok.join(", ");
            vec![if !problems.is_empty() {
                let fix = if handler_missing {
                    "kata-deploy installs the handler into the node's containerd (a drop-in, then a containerd restart): check the kata layer's shims and its install on those nodes"
                } else {
                    "check the kata layer's HelmRelease values (shims, runtimeClasses.enabled) and that kata-deploy finished on the Kata nodes"
                };
                Verdict::fail(evidence, problems.iter().chain(&unknown).cloned().collect::<Vec<_>>().join("; "))
                    .with_fix(fix)
            } else if !unknown.is_empty() {
                Verdict::error(evidence, unknown.join("; "))
            } else {
                Verdict::pass(evidence)
            }]
        })
    }
}
