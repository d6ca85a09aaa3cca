//! `opensandbox.server` and `opensandbox.pools`: the control plane answers and refuses anonymous
//! requests, and every Pool holds capacity (the Lifecycle checks are in `lifecycle`).

use futures::future::BoxFuture;
use http::Method;

use super::list;
use crate::cluster::operation::{Objects, Operation};
use crate::components::opensandbox::OpenSandbox;
use crate::components::pools;
use crate::object::KnownKind;
use crate::profile::Profile;
use crate::readiness::{self, Status};
use crate::verify::endpoint;
use crate::verify::{Check, Ctx, Reach, Verdict};

pub(super) struct Server;

impl Check for Server {
    fn ids(&self) -> Vec<String> {
        vec!["opensandbox.server".into()]
    }

    /// Through the service proxy: reading the server Deployment and `GET`s to the server.
    fn operations(&self, profile: &Profile, reach: &Reach) -> Vec<Operation> {
        let mut out = endpoint::requests(profile, reach, &[Method::GET]);
        if !reach.direct {
            out.push(Operation::Get(Objects::Named(profile.sections.opensandbox.server_deployment())));
        }
        out
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            let ns = &ctx.profile.sections.opensandbox.namespaces.control_plane;
            let server = OpenSandbox::SERVER_SERVICE;
            let mut evidence = Vec::new();
            if ctx.endpoint.is_proxy() {
                match ctx.cluster.get(&ctx.profile.sections.opensandbox.server_deployment()).await {
                    Err(e) => return vec![Verdict::error("reading the server Deployment", e.to_string())],
                    Ok(None) => {
                        return vec![Verdict::fail(
                            format!("no Deployment/{server}"),
                            format!("the chart has not installed the server in {ns}"),
                        )];
                    }
                    Ok(Some(d)) => {
                        let s = readiness::compute(&d);
                        if s.status != Status::Current {
                            return vec![Verdict::fail(format!("Deployment {}: {}", s.status, s.message), "the server is not Available")
                                .with_fix(format!("kubectl -n {ns} logs deploy/{server} (look for `Startup blocked: server.api_key is empty`)"))];
                        }
                        evidence.push("Deployment Available".to_owned());
                    }
                }
            }
            match ctx.endpoint.request(Method::GET, "/health", None, false).await {
                Err(e) => return vec![Verdict::fail(format!("GET /health via {}", ctx.endpoint.describe()), e)],
                Ok(r) if r.status != 200 => {
                    return vec![Verdict::fail(
                        format!("GET /health → {}", r.status),
                        format!("the server does not answer /health: {}", r.text.chars().take(200).collect::<String>()),
                    )];
                }
                Ok(_) => evidence.push("/health 200".to_owned()),
            }
            match ctx.endpoint.request(Method::GET, "/v1/sandboxes", None, false).await {
                Err(e) => vec![Verdict::error("GET /v1/sandboxes without a key", e)],
                Ok(r) if r.status == 401 => {
                    evidence.push(format!("no key → 401 {}", r.json["code"].as_str().unwrap_or_default()));
                    vec![Verdict::pass(evidence.join(", "))]
                }
                Ok(r) => {
                    vec![Verdict::fail(
                    format!("GET /v1/sandboxes without a key → {}", r.status),
                    "the server accepts requests without an API key: anyone in the cluster can create sandboxes",
                )
                .with_fix("set opensandbox.server.apiKey.secretRef and create the Secret")]
                }
            }
        })
    }
}

pub(super) struct Pools;

/// The Pools check's id.
pub(super) const POOLS: &str = "opensandbox.pools";

impl Check for Pools {
    fn ids(&self) -> Vec<String> {
        vec![POOLS.into()]
    }

    /// Reading each Pool, and listing the sandbox pods when a pool runs under a runtime class.
    fn operations(&self, profile: &Profile, _: &Reach) -> Vec<Operation> {
        let (os, pools) = (&profile.sections.opensandbox, profile.sections.pools.effective());
        let mut out: Vec<Operation> = pools
            .iter()
            .map(|p| Operation::Get(Objects::Named(pools::object(&profile.sections, &p.pool.name))))
            .collect();
        if pools.iter().any(|p| p.runtime_class_name.is_some()) {
            out.push(Operation::List(KnownKind::POD.gvk(), Some(os.namespaces.sandbox.clone())));
        }
        out
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            let ns = &ctx.profile.sections.opensandbox.namespaces.sandbox;
            let mut ok = Vec::new();
            let mut problems = Vec::new();
            for p in ctx.profile.sections.pools.effective() {
                let name = &p.pool.name;
                let pool = match ctx.cluster.get(&pools::object(&ctx.profile.sections, name)).await {
                    Err(e) => return vec![Verdict::error(format!("reading Pool {name}"), e.to_string())],
                    Ok(None) => {
                        problems.push(format!("Pool {ns}/{name} does not exist"));
                        continue;
                    }
                    Ok(Some(pool)) => pool,
                };
                let s = readiness::compute(&pool);
                if s.status != Status::Current {
                    problems.push(format!("Pool {name}: {}", s.message));
                    continue;
                }
                if let Some(class) = &p.runtime_class_name {
                    let pods = list(
                        &ctx.cluster,
                        &KnownKind::POD.gvk(),
                        Some(ns),
                        Some(&format!("sandbox.opensandbox.io/pool-name={name}")),
                    )
                    .await;
                    let wrong: Vec<String> = pods
                        .unwrap_or_default()
                        .iter()
                        .filter(|pod| pod["spec"]["runtimeClassName"].as_str() != Some(class))
                        .filter_map(|pod| pod["metadata"]["name"].as_str().map(str::to_owned))
                        .collect();
                    if !wrong.is_empty() {
                        problems.push(format!("Pool {name}: pods {} do not run under {class}", wrong.join(", ")));
                        continue;
                    }
                }
                ok.push(format!("{name}: {}", s.message));
            }
            vec![if problems.is_empty() {
                Verdict::pass(ok.join("; "))
            } else {
                Verdict::fail(ok.join("; "), problems.join("; "))
                    .with_fix("kubectl -n <sandbox ns> describe pool <name> (FailedCreate events show template errors)")
            }]
        })
    }
}
