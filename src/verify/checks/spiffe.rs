//! `spiffe.issued` and `spiffe.denied`: a Kata probe under the smoke ServiceAccount obtains
//! exactly the expected SPIFFE ID; the same probe under a wrong ServiceAccount gets none.
//!
//! The probe runs `spire-agent api fetch x509 -write /out` with `/out/svid.0.pem` as its
//! termination message path: the message is the SVID certificate (public; the key stays in a
//! memory emptyDir deleted with the pod), or, on failure, the agent's error. The container is
//! restarted on failure in the same pod (`restartPolicy: OnFailure`): the registration entry a
//! controller manager makes for a pod names its UID, and an agent learns of new entries only at
//! its next sync (every 5 s), so a fresh pod's first attempt is often denied; a new pod per
//! attempt would race that every time (seen against a real SPIRE agent).

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::cluster::operation::{Objects, Operation};
use crate::components::spire::smoke::CLUSTER_SPIFFE_ID;
use crate::object::{KnownKind, ObjectRef};
use crate::profile::{Profile, SpiffeSmoke};
use crate::verify::probe;
use crate::verify::{Check, Ctx, Reach, Verdict, scripts};

fn cluster_spiffe_id(name: &str) -> ObjectRef {
    CLUSTER_SPIFFE_ID.object(None, name)
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
    } else if msg.contains("connection refused") {
        format!(
            "no SPIRE agent listens on the Workload API socket on that node: the agent is down or restarting ({msg})"
        )
    } else if msg.contains("no such file or directory") && msg.contains("dial unix") {
        format!(
            "the Workload API socket does not exist on that node: no agent started there, or it uses another socket path ({msg})"
        )
    } else if msg.contains("driver name") && msg.contains("not found") {
        format!("the SPIFFE CSI node plugin is not registered on that node ({msg})")
    } else if msg.contains("workload attestation failed") {
        format!("the agent cannot attest the probe (kubelet unreachable or pod not found): {msg}")
    } else {
        format!("Workload API unreachable or broken: {msg}")
    }
}

/// How long a wrong ServiceAccount's denials must go on: more than two agent sync intervals.
const DENIAL_SPAN: Duration = Duration::from_secs(12);

/// What one SPIFFE probe pod came to.
enum Probed {
    /// An attempt exited 0: its termination message, and how many failed before it.
    Succeeded(String, i32),
    /// The last failed attempt (exit code, message), how many failed, and over how long (from
    /// the first failure seen to the last).
    Failed(i32, String, i32, Duration),
    /// No attempt ended: why (events, waiting states).
    Stuck(String),
}

/// The probe pod `name` under `sa` in the smoke namespace. That namespace is never the run's
/// own: other runs (the acceptance layer's Job and CronJob, an operator's) probe there too, so
/// the pod's name carries this run's id.
fn smoke_pod(run: &probe::Run, smoke: &SpiffeSmoke, name: &str, sa: &str, class: Option<&str>) -> serde_json::Value {
    let mut pod = probe::pod(run, name, "spiffe", &scripts::spiffe(run, smoke, sa, class));
    pod["metadata"]["namespace"] = json!(smoke.namespace);
    if run.owns_namespace {
        pod["metadata"]["name"] = json!(format!("{name}-{}", run.id));
    }
    pod
}

impl Spiffe {
    /// Run one probe pod under `sa`; the kubelet restarts its container on failure, in the same
    /// pod, so what the node registered for that pod (an entry with its `k8s:pod-uid`) holds for
    /// every attempt. Follow it until an attempt succeeds, denials have gone on for `span` (at
    /// least two), a failure is not a denial, the pod is over, or `limit` passes.
    async fn probe(
        ctx: &Ctx,
        smoke: &SpiffeSmoke,
        name: &str,
        sa: &str,
        class: Option<&str>,
        limit: Duration,
        span: Option<Duration>,
    ) -> Result<Probed, String> {
        let pod = smoke_pod(&ctx.run, smoke, name, sa, class);
        let (ns, name) = probe::create_pod(&ctx.cluster, &pod).await.map_err(|e| e.to_string())?;
        let start = Instant::now();
        let mut first_failure: Option<(Instant, i32)> = None;
        loop {
            let (a, pod) = probe::attempts(&ctx.cluster, &ns, &name).await.map_err(|e| e.to_string())?;
            if let Some(message) = a.succeeded {
                return Ok(Probed::Succeeded(message, a.failures));
            }
            let last = a.last_failure.clone();
            let denial = last.as_ref().is_some_and(|(code, m)| matches!(classify(*code, m), Attempt::Denied(_)));
            if a.failures > 0 && first_failure.is_none() {
                first_failure = Some((Instant::now(), a.failures));
            }
            let spanned = first_failure.map_or(Duration::ZERO, |(at, _)| at.elapsed());
            let newer = first_failure.is_some_and(|(_, n)| a.failures > n);
            let long_enough = span.is_some_and(|s| newer && a.failures >= 2 && spanned >= s);
            if let Some((code, message)) = last
                && (long_enough || !denial || a.over || start.elapsed() >= limit)
            {
                return Ok(Probed::Failed(code, message, a.failures, spanned));
            }
            if a.over || start.elapsed() >= limit {
                return Ok(Probed::Stuck(probe::diagnose(&ctx.cluster, &pod).await));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn issued(ctx: &Ctx, smoke: &SpiffeSmoke, class: Option<&str>) -> Verdict {
        // Attempts until the retry time is up (the pod's deadline ends it sooner if shorter).
        let limit = Duration::from_secs(smoke.retry_seconds);
        let probed = match Self::probe(ctx, smoke, "spiffe-smoke", &smoke.service_account, class, limit, None).await {
            Ok(p) => p,
            Err(e) => return Verdict::error("creating the probe", e),
        };
        let last = match probed {
            Probed::Stuck(why) => {
                return Verdict::error("the probe never ran", broken_diagnosis(&why, class.is_some()));
            }
            Probed::Succeeded(message, failed) => match classify(0, &message) {
                Attempt::Issued(id) if id == smoke.id => {
                    return Verdict::pass(format!("{} got {id} (attempt {})", smoke.service_account, failed + 1));
                }
                Attempt::Issued(id) => {
                    return Verdict::fail(
                        format!("{} got {id}", smoke.service_account),
                        format!("expected exactly {}", smoke.id),
                    )
                    .with_fix(
                        "check the smoke ClusterSPIFFEID's spiffeIDTemplate and the SPIRE server's trust domain",
                    );
                }
                Attempt::Denied(msg) | Attempt::Broken(msg) => {
                    return Verdict::error(msg.clone(), broken_diagnosis(&msg, class.is_some()));
                }
            },
            Probed::Failed(code, message, failures, _) => match classify(code, &message) {
                Attempt::Denied(msg) => (msg, failures),
                Attempt::Broken(msg) | Attempt::Issued(msg) => {
                    return Verdict::error(
                        format!("attempt {failures}: {msg}"),
                        broken_diagnosis(&msg, class.is_some()),
                    );
                }
            },
        };
        let evidence =
            format!("no identity after {}s ({} attempts in one pod): {}", smoke.retry_seconds, last.1, last.0);
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
        // Attempts in one pod (the kubelet restarts the container with a growing back-off) until
        // the denials span more than two agent sync intervals (5 s each), or the pod's deadline.
        let limit = ctx.run.deadline();
        match Self::probe(ctx, smoke, "spiffe-wrong", &wrong, class, limit, Some(DENIAL_SPAN)).await {
            Err(e) => Verdict::error("creating the probe", e),
            Ok(Probed::Stuck(why)) => Verdict::error(format!("{wrong}: the probe never ran"), broken_diagnosis(&why, class.is_some())),
            Ok(Probed::Succeeded(message, _)) => match classify(0, &message) {
                Attempt::Issued(id) => Verdict::fail(format!("{wrong} got {id}"), "an identity was issued to the wrong ServiceAccount: a catch-all (default fallback) ClusterSPIFFEID is enabled")
                    .with_fix("disable the chart's default ClusterSPIFFEID (controllerManager.identities.clusterSPIFFEIDs.default.enabled=false)"),
                Attempt::Denied(msg) | Attempt::Broken(msg) => Verdict::error(format!("{wrong}: {msg}"), broken_diagnosis(&msg, class.is_some())),
            },
            Ok(Probed::Failed(code, message, failures, spanned)) => match classify(code, &message) {
                Attempt::Denied(msg) if failures >= 2 => {
                    let over = if spanned >= DENIAL_SPAN {
                        format!("over {} s (more than two agent syncs)", DENIAL_SPAN.as_secs())
                    } else {
                        "until the probe's deadline".to_owned()
                    };
                    Verdict::pass(format!("{wrong} denied {failures} times in one pod {over}: {msg}"))
                }
                Attempt::Denied(msg) => Verdict::error(
                    format!("{wrong} denied once ({msg}); the pod ended before a second attempt"),
                    "raise verify.probeDeadlineSeconds",
                ),
                Attempt::Broken(msg) | Attempt::Issued(msg) => {
                    Verdict::error(format!("{wrong}: {msg}"), broken_diagnosis(&msg, class.is_some()))
                }
            },
        }
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
    fn images(&self, profile: &Profile) -> Vec<String> {
        profile.spiffe_smoke().map(|smoke| smoke.image.clone()).into_iter().collect()
    }

    fn operations(&self, profile: &Profile, _: &Reach) -> Vec<Operation> {
        let Some(smoke) = profile.spiffe_smoke() else { return Vec::new() };
        let mut out = vec![
            Operation::Probe(Some(smoke.namespace.clone())),
            Operation::Create(KnownKind::SERVICE_ACCOUNT.gvk(), Some(smoke.namespace.clone())),
        ];
        out.extend(
            smoke.cluster_spiffe_id.as_deref().map(|name| Operation::Get(Objects::Named(cluster_spiffe_id(name)))),
        );
        out
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            let Some(smoke) = ctx.profile.spiffe_smoke() else {
                return vec![
                    Verdict::skip("no verify.spiffe in the profile"),
                    Verdict::skip("no verify.spiffe in the profile"),
                ];
            };
            let class = ctx.profile.sections.pools.kata_classes().into_iter().next();
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

    /// Two runs probe the shared smoke namespace at once (the acceptance layer's Job and
    /// CronJob, an operator's run): each pod's name carries its run's id, whether the run has a
    /// namespace of its own or was given one.
    #[test]
    fn a_smoke_pod_is_named_after_its_run_in_the_shared_namespace() {
        let smoke = crate::profile::SpiffeSmoke {
            namespace: "spire-smoke".into(),
            service_account: "spire-smoke".into(),
            ..serde_json::from_value(json!({})).unwrap()
        };
        for given in [None, Some("osbx-acceptance-probes".to_owned())] {
            let run = probe::Run::new(60, Duration::from_secs(600), given.clone());
            let pod = smoke_pod(&run, &smoke, "spiffe-issued", "spire-smoke", None);
            assert_eq!(pod["metadata"]["namespace"], "spire-smoke");
            assert_eq!(pod["metadata"]["name"], format!("spiffe-issued-{}", run.id), "{given:?}");
        }
    }

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
