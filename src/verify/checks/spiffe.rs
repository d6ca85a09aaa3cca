//! `spiffe.issued` and `spiffe.denied`: a Kata probe under the smoke ServiceAccount obtains
//! exactly the expected SPIFFE ID; the same probe under a wrong ServiceAccount gets none.
//!
//! The probe runs `spire-agent api fetch x509 -write /out` with `/out/svid.0.pem` as its
//! termination message path: the message is the SVID certificate (public; the key stays in a
//! memory emptyDir deleted with the pod), or, on failure, the agent's error.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::cluster::need::Need;
use crate::object::{Gvk, ObjectRef};
use crate::profile::{Profile, SpiffeSmoke};
use crate::verify::probe::{self, ProbeEnd};
use crate::verify::session::Settings;
use crate::verify::{Check, Ctx, Verdict, scripts};

fn cluster_spiffe_id(name: &str) -> ObjectRef {
    Gvk::new("spire.spiffe.io", "v1alpha1", "ClusterSPIFFEID").object(None, name)
}

pub(super) struct Spiffe;

/// What one probe attempt saw.
enum Attempt {
    /// An SVID with this SPIFFE ID.
    Issued(String),
    /// The agent answered: no entry matched.
    Denied(String),
    /// The Workload API or attestation is broken.
    Broken(String),
}

fn classify(exit_code: i32, message: &str) -> Attempt {
    if exit_code == 0 || message.contains("BEGIN CERTIFICATE") {
        return match spiffe_id(message) {
            Some(id) => Attempt::Issued(id),
            None => Attempt::Broken(format!("unreadable SVID: {}", first_line(message))),
        };
    }
    if message.contains("PermissionDenied") || message.contains("no identity issued") {
        Attempt::Denied(first_line(message))
    } else {
        Attempt::Broken(first_line(message))
    }
}

fn first_line(s: &str) -> String {
    s.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().chars().take(300).collect()
}

/// The URI SAN of the first certificate in a PEM bundle.
fn spiffe_id(pem: &str) -> Option<String> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = pem.parse_x509().ok()?;
    let san = cert.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|n| match n {
        x509_parser::extensions::GeneralName::URI(u) if u.starts_with("spiffe://") => Some((*u).to_owned()),
        _ => None,
    })
}

fn broken_diagnosis(msg: &str, kata: bool) -> String {
    if msg.contains("connection refused") && kata {
        format!(
            "Workload API unreachable from the Kata guest ({msg}): Unix sockets do not cross the VM boundary; run an agent inside the pod/VM"
        )
    } else if msg.contains("driver name") && msg.contains("not found") {
        format!("the SPIFFE CSI node plugin is not registered on that node ({msg})")
    } else if msg.contains("workload attestation failed") {
        format!("the agent cannot attest the probe (kubelet unreachable or pod not found): {msg}")
    } else {
        format!("Workload API unreachable or broken: {msg}")
    }
}

impl Spiffe {
    async fn attempt(
        ctx: &Ctx,
        smoke: &SpiffeSmoke,
        name: &str,
        sa: &str,
        class: Option<&str>,
    ) -> Result<Attempt, String> {
        let mut pod = probe::pod(&ctx.run, name, "spiffe", &scripts::spiffe(&ctx.run, smoke, sa, class));
        pod["metadata"]["namespace"] = json!(smoke.namespace);
        let timeout = Duration::from_secs(u64::try_from(ctx.run.deadline_seconds).unwrap_or(180));
        match probe::run_pod(&ctx.cluster, &pod, timeout).await.map_err(|e| e.to_string())? {
            ProbeEnd::Terminated { exit_code, message, .. } => Ok(classify(exit_code, &message)),
            ProbeEnd::Stuck { diagnosis } => Ok(Attempt::Broken(diagnosis)),
        }
    }

    async fn issued(ctx: &Ctx, smoke: &SpiffeSmoke, class: Option<&str>) -> Verdict {
        let start = Instant::now();
        let mut last = String::new();
        for i in 0.. {
            match Self::attempt(ctx, smoke, &format!("spiffe-smoke-{i}"), &smoke.service_account, class).await {
                Err(e) => return Verdict::error("creating the probe", e),
                Ok(Attempt::Issued(id)) if id == smoke.id => {
                    return Verdict::pass(format!("{} got {id} (attempt {})", smoke.service_account, i + 1));
                }
                Ok(Attempt::Issued(id)) => {
                    return Verdict::fail(
                        format!("{} got {id}", smoke.service_account),
                        format!("expected exactly {}", smoke.id),
                    )
                    .with_fix("check the smoke ClusterSPIFFEID's spiffeIDTemplate");
                }
                Ok(Attempt::Broken(msg)) => {
                    return Verdict::error(
                        format!("attempt {}: {msg}", i + 1),
                        broken_diagnosis(&msg, class.is_some()),
                    );
                }
                Ok(Attempt::Denied(msg)) => last = msg,
            }
            if start.elapsed() >= Duration::from_secs(smoke.retry_seconds) {
                break;
            }
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        let evidence = format!("no identity after {}s: {last}", smoke.retry_seconds);
        if let Some(why) = Self::ignored(ctx, smoke).await {
            return Verdict::fail(evidence, why).with_fix(
                "set spire.className to the className of the spire-controller-manager that serves this cluster",
            );
        }
        Verdict::fail(
            evidence,
            "no registration entry matches the smoke ServiceAccount: the ClusterSPIFFEID is missing, its className does not match the controller's, or its namespace is ignored",
        )
        .with_fix("kubectl get clusterspiffeid -o yaml (status.stats.podsSelected must be ≥ 1)")
    }

    /// Why the smoke ClusterSPIFFEID is not processed, when its status shows it: a controller
    /// manager that processes it writes `status.stats`; one that ignores it (another className)
    /// leaves it empty.
    async fn ignored(ctx: &Ctx, smoke: &SpiffeSmoke) -> Option<String> {
        let name = smoke.cluster_spiffe_id.as_deref()?;
        let Ok(found) = ctx.cluster.get(&cluster_spiffe_id(name)).await else { return None };
        let Some(obj) = found else {
            return Some(format!("ClusterSPIFFEID {name} does not exist: the spire-smoke layer has not been applied"));
        };
        let stats = &obj["status"]["stats"];
        let empty = stats.is_null() || stats.as_object().is_some_and(serde_json::Map::is_empty);
        empty.then(|| {
            format!(
                "ClusterSPIFFEID {name} has no status.stats: the installed spire-controller-manager ignores it (its className is not {}, or it does not watch this cluster)",
                obj["spec"]["className"]
            )
        })
    }

    async fn denied(ctx: &Ctx, smoke: &SpiffeSmoke, class: Option<&str>) -> Verdict {
        let wrong = format!("{}-wrong", smoke.service_account);
        let sa: Result<ServiceAccount, _> =
            serde_json::from_value(json!({"metadata": {"name": wrong, "labels": ctx.run.labels("spiffe")}}));
        let api = Api::<ServiceAccount>::namespaced(ctx.cluster.client.clone(), &smoke.namespace);
        if let Ok(sa) = sa
            && let Err(e) = api.create(&PostParams::default(), &sa).await
            && !matches!(&e, kube::Error::Api(s) if s.code == 409)
        {
            return Verdict::error(format!("creating ServiceAccount {wrong}"), e.to_string());
        }
        // Two attempts at least two agent sync intervals apart.
        let mut seen = Vec::new();
        for i in 0..2 {
            if i > 0 {
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            match Self::attempt(ctx, smoke, &format!("spiffe-wrong-{i}"), &wrong, class).await {
                Err(e) => return Verdict::error("creating the probe", e),
                Ok(Attempt::Issued(id)) => {
                    return Verdict::fail(format!("{wrong} got {id}"), "an identity was issued to the wrong ServiceAccount: a catch-all (default fallback) ClusterSPIFFEID is enabled")
                        .with_fix("disable the chart's default ClusterSPIFFEID (controllerManager.identities.clusterSPIFFEIDs.default.enabled=false)");
                }
                Ok(Attempt::Broken(msg)) => {
                    return Verdict::error(format!("{wrong}: {msg}"), broken_diagnosis(&msg, class.is_some()));
                }
                Ok(Attempt::Denied(msg)) => seen.push(msg),
            }
        }
        Verdict::pass(format!("{wrong} denied twice, 10 s apart: {}", seen.last().cloned().unwrap_or_default()))
    }
}

impl Check for Spiffe {
    fn ids(&self) -> Vec<String> {
        vec!["spiffe.issued".into(), "spiffe.denied".into()]
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(600)
    }

    /// Probe pods in the smoke namespace, the wrong ServiceAccount there, and reading the smoke
    /// ClusterSPIFFEID to explain a missing identity.
    fn needs(&self, profile: &Profile, _: &Settings) -> Vec<Need> {
        let Some(smoke) = profile.spiffe_smoke() else { return Vec::new() };
        let mut needs = probe::pod_needs(Some(&smoke.namespace));
        needs.push(Need::any("create", &Gvk::new("", "v1", "ServiceAccount"), Some(&smoke.namespace)));
        needs.extend(smoke.cluster_spiffe_id.as_deref().map(|name| Need::on("get", &cluster_spiffe_id(name))));
        needs
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            let Some(smoke) = ctx.profile.spiffe_smoke() else {
                return vec![
                    Verdict::skip("no verify.spiffe in the profile"),
                    Verdict::skip("no verify.spiffe in the profile"),
                ];
            };
            let class = ctx.profile.pools.kata_classes().into_iter().next();
            let issued = Self::issued(ctx, &smoke, class.as_deref()).await;
            let denied = if issued.outcome == crate::verify::Outcome::Pass {
                Self::denied(ctx, &smoke, class.as_deref()).await
            } else {
                Verdict::error("not run", "the smoke identity was not issued, so a denial would prove nothing")
            };
            vec![issued, denied]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_agent_answers() {
        assert!(matches!(
            classify(1, "rpc error: code = PermissionDenied desc = no identity issued"),
            Attempt::Denied(_)
        ));
        assert!(matches!(
            classify(
                1,
                "rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: dial unix /spiffe-workload-api/spire-agent.sock: connect: connection refused\""
            ),
            Attempt::Broken(_)
        ));
        assert!(matches!(
            classify(1, "rpc error: code = Unavailable desc = workload attestation failed"),
            Attempt::Broken(_)
        ));
        assert!(broken_diagnosis("connect: connection refused", true).contains("do not cross the VM boundary"));
    }
}
