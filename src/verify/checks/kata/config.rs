//! `kata.annotations.<class>`: the Kata configuration each class's handler loads on the node
//! enables no hypervisor annotation beyond what the profile allows the pools on that class. A
//! host probe on each Kata node (read-only: kata-deploy's configuration tree, nothing else)
//! reads the file containerd's `ConfigPath` names for the class's handler and its `config.d/`
//! drop-ins, merges them as Kata does (name order, later files replace a key; a list is
//! replaced whole) and reports the effective `enable_annotations` of the shim's
//! `[hypervisor.<table>]`. Where kata-deploy 4.1.0 puts each file:
//! [`shim::config_file`](crate::components::kata::shim::config_file); why it matters and what
//! the kata layer writes: [`annotations`].

use std::collections::BTreeSet;

use futures::future::BoxFuture;
use serde_json::{Value, json};

use super::{if_kata, kata_diagnosis};
use crate::cluster::operation::Operation;
use crate::components::kata::{self, annotations, shim};
use crate::profile::Profile;
use crate::verify::checks::list;
use crate::verify::checks::nodes::{kata_nodes, node};
use crate::verify::probe::{self, ProbeEnd};
use crate::verify::{Check, Ctx, Reach, Verdict, scripts};

/// The verdict id of one class.
#[must_use]
pub(in crate::verify::checks) fn id(class: &str) -> String {
    format!("kata.annotations.{class}")
}

/// One verdict per Kata RuntimeClass the profile's pools use (shim classes and build classes).
pub(in crate::verify::checks) struct Config {
    /// The classes, sorted.
    pub classes: Vec<String>,
}

impl Check for Config {
    fn ids(&self) -> Vec<String> {
        self.classes.iter().map(|c| id(c)).collect()
    }

    /// Listing nodes, and a probe pod per Kata node.
    /// Its host probe (or, for a build pool, its privileged probe) uses the node.
    fn uses_the_node(&self, _: &Profile) -> bool {
        true
    }

    fn images(&self, profile: &Profile) -> Vec<String> {
        vec![profile.verify.host_probe_image.clone()]
    }

    fn operations(&self, profile: &Profile, _: &Reach) -> Vec<Operation> {
        if profile.site().layer_of(&kata::COMPONENT).is_none() {
            return Vec::new();
        }
        if_kata(profile, || vec![Operation::Probe(None), Operation::List(node(), None)])
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            let all = |v: &Verdict| self.classes.iter().map(|_| v.clone()).collect::<Vec<_>>();
            if ctx.profile.site().layer_of(&kata::COMPONENT).is_none() {
                return all(&Verdict::skip(
                    "the profile renders no kata layer, so osbx writes no Kata configuration drop-in: whoever installs kata-deploy decides which hypervisor annotations each class enables",
                ));
            }
            let nodes = match list(&ctx.cluster, &node(), None, None).await {
                Ok(n) => n,
                Err(e) => return all(&Verdict::error("listing nodes", e.to_string())),
            };
            let kata: Vec<String> =
                kata_nodes(&nodes).iter().filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned)).collect();
            if kata.is_empty() {
                return self
                    .classes
                    .iter()
                    .map(|c| {
                        Verdict::skip(format!(
                            "no node of class {c} (none carries katacontainers.io/kata-runtime): no host probe can run, so the Kata configuration its handler loads was not read"
                        ))
                    })
                    .collect();
            }
            let targets: Vec<Value> = self
                .classes
                .iter()
                .filter_map(|c| {
                    let (path, s) = shim::config_file(c)?;
                    Some(json!({"class": c, "path": path, "table": s.hypervisor_table()}))
                })
                .collect();
            let mut reports: Vec<ClassReport> = self.classes.iter().map(|c| ClassReport::new(ctx, c)).collect();
            if !targets.is_empty() {
                let targets = Value::Array(targets);
                let runs = kata.iter().enumerate().map(|(i, node)| {
                    let targets = &targets;
                    async move {
                        let spec = scripts::kata_config(&ctx.run, node, &ctx.profile.verify.host_probe_image, targets);
                        let pod = probe::pod(&ctx.run, &format!("kata-config-{i}"), "kata-config", &spec);
                        (node.clone(), probe::run_pod(&ctx.cluster, &pod, ctx.run.wait_limit()).await)
                    }
                });
                for (node, end) in futures::future::join_all(runs).await {
                    let line = match end {
                        Err(e) => Err(format!("{node}: the host probe: {e}")),
                        Ok(ProbeEnd::Stuck { diagnosis }) if diagnosis.contains("hostPath type check failed") => {
                            Err(format!(
                                "{node}: kata-deploy's configuration directory {} is not on the node (is kata-deploy installed there?)",
                                shim::CONFIG_ROOT
                            ))
                        }
                        Ok(ProbeEnd::Stuck { diagnosis }) => {
                            Err(format!("{node}: the host probe did not run: {}", kata_diagnosis(&diagnosis).0))
                        }
                        Ok(ProbeEnd::Terminated { message, .. }) => {
                            probe::json_line(&message).ok_or_else(|| format!("{node}: no result ({message})"))
                        }
                    };
                    for report in &mut reports {
                        match &line {
                            Ok(r) => report.node(&node, r),
                            Err(why) => report.unknown.push(why.clone()),
                        }
                    }
                }
            }
            reports.into_iter().map(ClassReport::verdict).collect()
        })
    }
}

/// What the host probes found for one class, node by node.
struct ClassReport {
    class: String,
    /// The hypervisor annotation names the pools on the class are allowed.
    allowed: BTreeSet<String>,
    ok: Vec<String>,
    /// Annotations enabled beyond what the profile allows.
    open: Vec<String>,
    /// What set them: the base file (no drop-in closed them) or a drop-in after the kata layer's.
    reopened_by_drop_in: bool,
    /// No verdict on a node.
    unknown: Vec<String>,
}

impl ClassReport {
    fn new(ctx: &Ctx, class: &str) -> Self {
        let allowed = ctx.profile.sections.pools.kata_demands().allowed_on(class);
        let mut report = Self {
            class: class.to_owned(),
            allowed,
            ok: Vec::new(),
            open: Vec::new(),
            reopened_by_drop_in: false,
            unknown: Vec::new(),
        };
        if shim::config_file(class).is_none() {
            report.unknown.push(format!(
                "osbx cannot tell which configuration the handler of {class} loads (not kata-<shim> or kata-<shim>-build of a shim kata-deploy 4.1.0 knows)"
            ));
        }
        report
    }

    fn node(&mut self, node: &str, r: &Value) {
        let Some(c) = r["classes"].as_array().into_iter().flatten().find(|c| c["class"] == self.class.as_str()) else {
            return;
        };
        let path = c["path"].as_str().unwrap_or_default();
        let table = c["table"].as_str().unwrap_or_default();
        if c["missing"] == true {
            self.unknown.push(format!(
                "{node}: {path} does not exist: kata-deploy installed no configuration for the handler of {} there",
                self.class
            ));
            return;
        }
        if let Some(e) = c["error"].as_str() {
            self.unknown.push(format!("{node}: the configuration cannot be read: {e}"));
            return;
        }
        let files = c["files"].as_array().map_or(0, Vec::len);
        let enabled: Vec<String> = c["enable_annotations"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect();
        let set_by = c["set_by"].as_str();
        let beyond: Vec<&String> = enabled.iter().filter(|a| !self.allowed.contains(*a)).collect();
        let shown = |names: &[String]| {
            if names.is_empty() { "none".to_owned() } else { names.join(", ") }
        };
        if beyond.is_empty() {
            self.ok.push(format!(
                "{node}: {path} with {} drop-in(s): [hypervisor.{table}] enable_annotations = [{}]{}",
                files.saturating_sub(1),
                enabled.join(", "),
                set_by.map_or_else(|| " (not set: Kata enables none)".to_owned(), |f| format!(" (set by {f})"))
            ));
            return;
        }
        let from_drop_in = set_by.is_some_and(|f| f != path);
        self.reopened_by_drop_in |= from_drop_in;
        let names: Vec<String> = beyond.iter().map(|a| (*a).clone()).collect();
        let opens: Vec<String> = names.iter().map(|n| format!("{n} ({})", annotations::opens(n))).collect();
        self.open.push(format!(
            "{node}: {path}{}: [hypervisor.{table}] enables {} beyond what the profile allows the pools on {} ({}): a pod annotation io.katacontainers.config.hypervisor.<name> changes {}",
            match set_by {
                Some(f) if from_drop_in => format!(" (set last by drop-in {f})"),
                _ => " (no drop-in in its config.d sets enable_annotations: kata-deploy's installed default)".to_owned(),
            },
            names.join(", "),
            self.class,
            shown(&self.allowed.iter().cloned().collect::<Vec<_>>()),
            opens.join("; ")
        ));
    }

    fn fix(&self) -> String {
        let mut fix = format!(
            "render and apply the kata layer (osbx apply): kata-deploy then installs the class's drop-in (config.d/50-user-overrides.toml of a shim's class, config.d/50-overrides.toml of a build class) setting enable_annotations to what the pools on {} are allowed",
            self.class
        );
        if self.reopened_by_drop_in {
            fix.push_str(
                "; a drop-in named after it re-opens them (later files win): remove it, or allow the names for the pool in pools.items[].kata.allowedAnnotations",
            );
        }
        fix
    }

    fn verdict(self) -> Verdict {
        let evidence = self.ok.join("; ");
        if !self.open.is_empty() {
            let fix = self.fix();
            let diagnosis = self.open.iter().chain(&self.unknown).cloned().collect::<Vec<_>>().join("; ");
            Verdict::fail(evidence, diagnosis).with_fix(fix)
        } else if !self.unknown.is_empty() {
            Verdict::error(evidence, self.unknown.join("; "))
        } else {
            Verdict::pass(evidence)
        }
    }
}
