//! The per-property checks of one release's render; each returns what is wrong, worded so that
//! it can be fixed from the message alone.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;

use super::Finding;
use super::helm::{self, Job};
use super::manifest::{Baseline, describe};
use super::server_config::{self, CONFIG_MAP, SERVER_VERSION};
use super::values::{self, brief};

/// Warnings a chart prints whatever values it is given, with how often, and why. The OpenSandbox
/// umbrella's `values.yaml` has `global:` with no value; helm coalesces the chart's defaults on
/// their own once (to process its dependencies) and then warns once per subchart that the
/// source `global` is not a table. Values reach only the later coalescing, where the `global: {}`
/// osbx sets silences the other eight warnings.
pub const CHART_OWN_WARNINGS: &[(&str, &str, usize)] = &[(
    "opensandbox-401a525/opensandbox",
    "coalesce.go:145: warning: skipping globals because source global is not a table.",
    2,
)];

/// helm's stderr without the chart's own warnings (each removed as often as the chart prints it).
pub fn without_chart_own_warnings(chart: &str, stderr: &str) -> String {
    let mut budget: Vec<(&str, usize)> =
        CHART_OWN_WARNINGS.iter().filter(|(c, _, _)| *c == chart).map(|(_, line, n)| (*line, *n)).collect();
    let mut out = String::new();
    for line in stderr.lines() {
        if let Some((_, n)) = budget.iter_mut().find(|(l, n)| *l == line.trim() && *n > 0) {
            *n -= 1;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// The chart's own warnings are exactly what it prints for the quietest values (`global: {}`):
/// when an upstream fix silences them, this fails and the list must shrink.
pub fn chart_own_warnings_hold() -> Vec<Finding> {
    let mut out = Vec::new();
    for (chart, line, count) in CHART_OWN_WARNINGS {
        let run = helm::template(&Job::new(chart, "own-warnings", "default", &serde_json::json!({"global": {}})));
        let printed = run.stderr.lines().filter(|l| l.trim() == *line).count();
        if printed != *count || !without_chart_own_warnings(chart, &run.stderr).trim().is_empty() {
            out.push(Finding::new(
                format!("chart {chart}"),
                format!(
                    "CHART_OWN_WARNINGS is stale: with values `global: {{}}` helm prints {printed}× {line:?} (listed: {count}×) and {:?}",
                    without_chart_own_warnings(chart, &run.stderr).trim()
                ),
            ));
        }
    }
    out
}

/// helm's stderr, each distinct line once (with its count), plus what a known warning means.
pub fn warnings(chart: &str, stderr: &str) -> String {
    let mut lines: Vec<(&str, usize)> = Vec::new();
    for line in stderr.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match lines.iter_mut().find(|(l, _)| *l == line) {
            Some((_, n)) => *n += 1,
            None => lines.push((line, 1)),
        }
    }
    let text: Vec<String> =
        lines.iter().map(|(l, n)| if *n > 1 { format!("{l:?} (×{n})") } else { format!("{l:?}") }).collect();
    let mut out = format!("chart {chart}: helm template wrote to stderr: {}", text.join(", "));
    if stderr.contains("skipping globals because source global is not a table") {
        out.push_str(
            " — the chart's values.yaml has `global:` without a value (null); values that set `global: {}` \
             replace it and silence the warning",
        );
    }
    out
}

/// Keys the OpenSandbox chart at the pinned `helm/opensandbox/0.2.2` reads that the shared copy
/// (commit 401a525, from before that release) does not: at 0.2.2 `opensandbox/Chart.yaml` makes
/// `opensandbox-node-agent` a dependency with `condition: opensandbox-node-agent.enabled`
/// (`../shared/charts/SOURCES.md`). Not reported as dead; everything else is.
const READ_BY_THE_PINNED_RELEASE_ONLY: &[(&str, &str)] =
    &[("opensandbox-401a525/opensandbox", "opensandbox-node-agent.enabled")];

/// The values keys whose probe renders byte-identical output, over every release (probes run
/// in parallel; identical chart/values pairs of several profiles run once).
pub fn dead_keys(baselines: &[Baseline]) -> Vec<Finding> {
    let mut probes = Vec::new();
    // The generated variants change where and under which names things land, not which keys osbx
    // sets (their extra values are the user's, and lint's `chart.unread-value` reads those).
    let shipped = |b: &&Baseline| b.release.subject().origin != super::cases::Origin::Variant;
    for (i, b) in baselines.iter().enumerate().filter(|(_, b)| shipped(b)) {
        let Ok(values) = &b.release.values else { continue };
        for leaf in values::leaves(values) {
            if let Ok(job) = b.release.job_with(&leaf.probed(values)) {
                probes.push((i, leaf, job));
            }
        }
    }
    let mut distinct: Vec<Job> = Vec::new();
    let mut seen = BTreeSet::new();
    for (_, _, job) in &probes {
        if seen.insert((job.chart, &job.release, &job.namespace, &job.values)) {
            distinct.push(job.clone());
        }
    }
    eprintln!(
        "charts: {} value probes over {} releases, {} distinct renders",
        probes.len(),
        baselines.len(),
        distinct.len()
    );
    let runs: HashMap<Job, _> = distinct.iter().cloned().zip(helm::template_all(&distinct)).collect();
    let mut out = Vec::new();
    for (i, leaf, job) in probes {
        let b = &baselines[i];
        if READ_BY_THE_PINNED_RELEASE_ONLY.contains(&(b.chart, leaf.path().as_str())) {
            continue;
        }
        if *runs[&job] == *b.run {
            let ignored = match leaf.steps.first() {
                Some(values::Step::Key(top)) if !helm::top_level_names(b.chart).contains(top) => format!(
                    " (the chart has neither a value nor a subchart named `{top}`: the whole `{top}` section is ignored)"
                ),
                _ => String::new(),
            };
            out.push(b.release.finding(&format!(
                "chart {}: values key `{}` is dead configuration: setting it from {} to {} renders byte-identical output{ignored}",
                b.chart,
                leaf.path(),
                brief(&leaf.value),
                brief(&leaf.probe)
            )));
        }
    }
    out
}

/// What the real server says about the chart's config.toml.
pub fn config_problems(b: &Baseline, text: &str) -> Vec<String> {
    let at = format!("chart {}: config.toml of ConfigMap {CONFIG_MAP}", b.chart);
    match &*server_config::verdict(text) {
        Err(why) => vec![format!("{at}: not checked: {why}")],
        Ok(v) => {
            let errors =
                v.errors.iter().map(|e| format!("{at} does not load in opensandbox-server {SERVER_VERSION}: {e}"));
            let unknown = v.unknown.iter().map(|k| {
                format!(
                    "{at}: key `{k}` is unknown to opensandbox-server {SERVER_VERSION} (no field of its config model \
                     `opensandbox_server.config.AppConfig`; the server silently ignores it)"
                )
            });
            errors.chain(unknown).collect()
        }
    }
}

/// Where the server's API key comes from, against the profile's `opensandbox.server.apiKey`.
pub fn api_key_problems(b: &Baseline) -> Vec<String> {
    const ENV: &str = "OPENSANDBOX_SERVER_API_KEY";
    let key = &b.release.subject().profile.sections.opensandbox.server.api_key;
    let Some(deployment) = b.find("Deployment", "opensandbox-server") else {
        return vec![format!("chart {}: renders no Deployment opensandbox-server", b.chart)];
    };
    let containers = deployment["spec"]["template"]["spec"]["containers"].as_array().cloned().unwrap_or_default();
    let Some(container) = containers.iter().find(|c| c["name"] == "main").or(containers.first()) else {
        return vec![format!("chart {}: Deployment opensandbox-server has no container", b.chart)];
    };
    let at = format!("chart {}: Deployment opensandbox-server, container {}", b.chart, container["name"]);
    let envs: Vec<&Value> = container["env"].as_array().into_iter().flatten().filter(|e| e["name"] == ENV).collect();
    match (&key.secret_ref, &key.inline) {
        (Some(secret), _) => {
            let want = serde_json::json!({"name": secret.name, "key": secret.key});
            let from_secret = |e: &&Value| e["value"].is_null() && e["valueFrom"]["secretKeyRef"] == want;
            if envs.len() == 1 && envs.iter().all(from_secret) {
                return Vec::new();
            }
            vec![format!(
                "{at}: env {ENV} must be exactly one entry with valueFrom.secretKeyRef {want} \
                 (profile opensandbox.server.apiKey.secretRef); the chart renders {}",
                serde_json::to_string(&envs).unwrap_or_default()
            )]
        }
        (None, Some(inline)) => {
            let mut out = Vec::new();
            if !envs.is_empty() {
                out.push(format!(
                    "{at}: env {ENV} is set ({}), which overrides the profile's inline key (apiKey.inline) in config.toml",
                    serde_json::to_string(&envs).unwrap_or_default()
                ));
            }
            out.extend(inline_key_problems(b, inline));
            out
        }
        (None, None) => Vec::new(),
    }
}

/// With `apiKey.inline`, the real server must read that key as `[server].api_key`.
fn inline_key_problems(b: &Baseline, inline: &str) -> Vec<String> {
    let text = match server_config::config_toml(b) {
        Ok(text) => text,
        Err(why) => return vec![format!("chart {}: {why}", b.chart)],
    };
    match &*server_config::verdict(text) {
        Err(why) => vec![format!("chart {}: config.toml not checked: {why}", b.chart)],
        Ok(v) if !v.errors.is_empty() => vec![format!(
            "chart {}: config.toml does not load in opensandbox-server {SERVER_VERSION}, so [server].api_key cannot be read: {}",
            b.chart,
            v.errors.join("; ")
        )],
        Ok(v) if v.config["server"]["api_key"].as_str() == Some(inline) => Vec::new(),
        Ok(v) => vec![format!(
            "chart {}: the profile's apiKey.inline ({} characters) is not what opensandbox-server {SERVER_VERSION} reads \
             as [server].api_key of ConfigMap {CONFIG_MAP} config.toml: it reads {}",
            b.chart,
            inline.chars().count(),
            match &v.config["server"]["api_key"] {
                Value::String(s) => format!("a different key ({} characters)", s.chars().count()),
                other => other.to_string(),
            }
        )],
    }
}

/// kata-deploy's RuntimeClasses against the profile's Kata pools, when they differ.
pub fn runtime_class_mismatch(b: &Baseline) -> Option<String> {
    let want: BTreeSet<String> = b.release.subject().profile.sections.pools.kata_classes().into_iter().collect();
    let got: BTreeSet<String> =
        b.of_kind("RuntimeClass").filter_map(|o| o["metadata"]["name"].as_str()).map(str::to_owned).collect();
    if want == got {
        return None;
    }
    Some(format!(
        "chart {}: kata-deploy creates RuntimeClasses {got:?}, but the profile's Kata pools name {want:?} \
         (missing: {:?}; created but named by no Kata pool: {:?}); kata-deploy creates `kata-<shim>` per enabled \
         shim and `kata` with runtimeClasses.createDefault",
        b.chart,
        want.difference(&got).collect::<Vec<_>>(),
        got.difference(&want).collect::<Vec<_>>()
    ))
}

/// The ConfigMaps the profile says the operator creates: the SPIRE trust bundle
/// (`spire.trustBundle.configMap`).
pub fn operator_provided_config_maps(profile: &osbx::profile::Profile) -> Vec<String> {
    let bundle = profile.sections.spire.as_ref().and_then(|s| s.trust_bundle.as_ref());
    bundle.and_then(|b| b.operator_config_map()).map(str::to_owned).into_iter().collect()
}

/// The SPIRE agent DaemonSet's ConfigMap/Secret sources that nothing provides.
pub fn agent_volume_problems(b: &Baseline, siblings: &[&Baseline]) -> Vec<String> {
    let subject = b.release.subject();
    let operator = operator_provided_config_maps(&subject.profile);
    let agents: Vec<&Value> = b
        .of_kind("DaemonSet")
        .filter(|d| d["metadata"]["name"].as_str().is_some_and(|n| n.contains("spire-agent")))
        .collect();
    if agents.is_empty() {
        return vec![format!("chart {}: renders no spire-agent DaemonSet", b.chart)];
    }
    let mut out = Vec::new();
    for ds in agents {
        let ns = b.namespace_of(ds);
        for volume in ds["spec"]["template"]["spec"]["volumes"].as_array().into_iter().flatten() {
            for (kind, name) in required_sources(volume) {
                let rendered = |o: &Value, default_ns: &str| {
                    o["kind"] == kind
                        && o["metadata"]["name"] == name.as_str()
                        && o["metadata"]["namespace"].as_str().unwrap_or(default_ns) == ns
                };
                let by_chart = siblings.iter().any(|s| s.objects.iter().any(|o| rendered(o, &s.release.namespace)));
                let by_osbx = subject.objects.iter().any(|o| rendered(o, ns));
                let by_operator = kind == "ConfigMap" && operator.contains(&name);
                if !(by_chart || by_osbx || by_operator) {
                    out.push(missing_source(b, ds, ns, volume, kind, &name));
                }
            }
        }
    }
    out
}

fn missing_source(b: &Baseline, ds: &Value, ns: &str, volume: &Value, kind: &str, name: &str) -> String {
    let mut msg = format!(
        "chart {}: {} volume `{}` mounts {kind} {ns}/{name}, which neither a chart render nor the osbx render \
         creates{}; the agent pods would stay in ContainerCreating",
        b.chart,
        describe(ds, Some(ns)),
        volume["name"].as_str().unwrap_or("?"),
        if kind == "ConfigMap" {
            " and the profile does not name as operator-provided (spire.trustBundle.configMap)"
        } else {
            ""
        }
    );
    if name == "spire-bundle" {
        msg.push_str(
            ". Only an in-cluster SPIRE server creates it; agents of an external server need a trust bundle source: \
             spire-agent.trustBundleURL (+ trustBundleFormat), spire-agent.trustBundleHostPath, or that ConfigMap \
             provided by the operator",
        );
    }
    msg
}

/// The non-optional ConfigMaps and Secrets a pod volume reads: (kind, name).
fn required_sources(volume: &Value) -> Vec<(&'static str, String)> {
    let mut out = BTreeSet::new();
    let mut add = |kind: &'static str, source: &Value, name_key: &str| {
        if let Some(name) = source[name_key].as_str()
            && source["optional"] != true
        {
            out.insert((kind, name.to_owned()));
        }
    };
    add("ConfigMap", &volume["configMap"], "name");
    add("Secret", &volume["secret"], "secretName");
    for source in volume["projected"]["sources"].as_array().into_iter().flatten() {
        add("ConfigMap", &source["configMap"], "name");
        add("Secret", &source["secret"], "name");
    }
    out.into_iter().collect()
}

/// The Kata configuration drop-in a kata-deploy render gives a RuntimeClass's handler.
pub struct DropIn {
    /// The shim whose configuration the handler runs (a custom runtime's `baseConfig`).
    pub shim: String,
    /// The drop-in's TOML, when there is one the installer reads.
    pub text: Option<String>,
    /// Where it comes from, for messages.
    pub source: String,
}

/// The drop-in a kata-deploy render gives each RuntimeClass's handler: kata-deploy's installer
/// reads the ConfigMap it mounts at `/custom-configs/` (`custom-runtimes.list` lines
/// `handler:baseConfig:…`; `dropin-<handler>.toml` for a custom runtime, `dropin-<shim>.toml`
/// for a shim's own handler `kata-<shim>`, installed into that handler's `config.d`), and only
/// when its install pod says `CUSTOM_RUNTIMES_ENABLED=true` for the custom ones. Returns class →
/// drop-in, or why it cannot be told.
pub fn drop_ins(objects: &[Value], shims: &[String]) -> Result<BTreeMap<String, DropIn>, String> {
    let of_kind = |kind: &'static str| objects.iter().filter(move |o| o["kind"] == kind);
    let configs = of_kind("ConfigMap").find(|c| {
        let name = c["metadata"]["name"].as_str().unwrap_or_default();
        name.starts_with("kata-deploy-custom-configs") || c["data"]["custom-runtimes.list"].is_string()
    });
    let data = configs.map_or(Value::Null, |c| c["data"].clone());
    let installers = installer_pods(objects);
    let mounted = |name: &str| {
        installers.iter().any(|pod| {
            let volume = pod["volumes"].as_array().into_iter().flatten().find(|v| v["configMap"]["name"] == name);
            let Some(volume) = volume.and_then(|v| v["name"].as_str()) else { return false };
            pod["containers"].as_array().into_iter().flatten().any(|c| {
                c["volumeMounts"].as_array().into_iter().flatten().any(|m| {
                    m["name"] == volume
                        && m["mountPath"].as_str().is_some_and(|p| p.trim_end_matches('/') == "/custom-configs")
                })
            })
        })
    };
    let custom_enabled = installers.iter().any(|pod| {
        pod["containers"].as_array().into_iter().flatten().any(|c| {
            c["env"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| e["name"] == "CUSTOM_RUNTIMES_ENABLED" && e["value"] == "true")
        })
    });
    let configs_name = configs.and_then(|c| c["metadata"]["name"].as_str()).unwrap_or_default().to_owned();
    let read = configs.is_some() && mounted(&configs_name);
    let custom: BTreeMap<String, String> = data["custom-runtimes.list"]
        .as_str()
        .filter(|_| read && custom_enabled)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.trim().split_once(':').map(|(h, rest)| (h.to_owned(), rest.split(':').next().unwrap_or("").to_owned()))
        })
        .collect();
    let mut out = BTreeMap::new();
    for class in of_kind("RuntimeClass") {
        let (Some(name), Some(handler)) = (class["metadata"]["name"].as_str(), class["handler"].as_str()) else {
            continue;
        };
        let (key, shim, base) = match custom.get(handler) {
            Some(base) => {
                if !shims.contains(base) {
                    return Err(format!(
                        "custom runtime {handler} is based on {base:?}, not an enabled shim {shims:?}"
                    ));
                }
                (
                    format!("dropin-{handler}.toml"),
                    base.clone(),
                    format!("custom runtime {handler} (baseConfig {base})"),
                )
            }
            None => match handler.strip_prefix("kata-").filter(|s| shims.iter().any(|e| e == s)) {
                Some(shim) => (format!("dropin-{shim}.toml"), shim.to_owned(), format!("shim {shim}")),
                None => {
                    return Err(format!(
                        "RuntimeClass {name}: handler {handler} is neither a shim's nor a custom runtime's"
                    ));
                }
            },
        };
        let text = data[&key].as_str().filter(|_| read).map(str::to_owned);
        let source = if text.is_some() { format!("{base}: {key} of ConfigMap {configs_name}") } else { base };
        out.insert(name.to_owned(), DropIn { shim, text, source });
    }
    Ok(out)
}

/// A drop-in's TOML, or why it is not TOML.
fn parse_drop_in(d: &DropIn) -> Result<Option<toml::Value>, String> {
    d.text.as_deref().map(toml::from_str).transpose().map_err(|e| format!("{} is not TOML: {e}", d.source))
}

/// The `emptydir_mode` a kata-deploy render gives each RuntimeClass's handler ([`drop_ins`]); no
/// drop-in leaves Kata's default, `shared-fs`. Returns class → (mode, what set it), or why it
/// cannot be told.
pub fn empty_dir_modes(b: &Baseline, shims: &[String]) -> Result<BTreeMap<String, (String, String)>, String> {
    let mut out = BTreeMap::new();
    for (class, d) in drop_ins(&b.objects, shims)? {
        let mode = parse_drop_in(&d)?.and_then(|t| {
            t.get("runtime").and_then(|r| r.get("emptydir_mode")).and_then(|m| m.as_str()).map(str::to_owned)
        });
        let mode = mode.map_or_else(
            || ("shared-fs".to_owned(), format!("{}: no drop-in sets it (Kata's default)", d.source)),
            |m| (m, d.source.clone()),
        );
        out.insert(class, mode);
    }
    Ok(out)
}

/// The hypervisor annotations a kata-deploy render lets pods set on each RuntimeClass, against
/// what the profile allows the pools on it: every class's drop-in must set `enable_annotations`
/// in its shim's `[hypervisor.<table>]` (the table kata-deploy 4.1.0 itself names, by its VMM)
/// to exactly the names the pools on that class are allowed (none unless a pool is), and the
/// installer must be told no `ALLOWED_HYPERVISOR_ANNOTATIONS` beyond them. Returns the problems
/// and the (class, table) pairs checked.
pub fn hypervisor_annotation_problems(
    objects: &[Value],
    profile: &osbx::profile::Profile,
    chart: &str,
) -> (Vec<String>, Vec<(String, String)>) {
    let shims = profile.sections.kata.as_ref().map(|k| k.shims.clone()).unwrap_or_default();
    let drop_ins = match drop_ins(objects, &shims) {
        Ok(d) => d,
        Err(why) => return (vec![format!("chart {chart}: {why}")], Vec::new()),
    };
    let mut out = Vec::new();
    let mut checked = Vec::new();
    let allowed_on = |class: &str| -> BTreeSet<String> { profile.sections.pools.kata_demands().allowed_on(class) };
    for (class, d) in &drop_ins {
        let Some(table) = hypervisor_table(&d.shim) else {
            out.push(format!("chart {}: RuntimeClass {class}: no hypervisor table known for shim {}", chart, d.shim));
            continue;
        };
        let want: Vec<String> = allowed_on(class).into_iter().collect();
        let got = match parse_drop_in(d) {
            Ok(t) => t.and_then(|t| t.get("hypervisor")?.get(table)?.get("enable_annotations").cloned()),
            Err(why) => {
                out.push(format!("chart {chart}: {why}"));
                continue;
            }
        };
        let got: Option<Vec<String>> =
            got.and_then(|v| v.as_array().map(|a| a.iter().map(|s| s.as_str().unwrap_or("?").to_owned()).collect()));
        match got {
            None => out.push(format!(
                "chart {}: RuntimeClass {class} ({}) sets no [hypervisor.{table}] enable_annotations: the shim's defaults (kernel_params, …) stay enabled",
                chart, d.source
            )),
            Some(mut got) => {
                got.sort();
                if got != want {
                    out.push(format!(
                        "chart {}: RuntimeClass {class} ({}) enables hypervisor annotations {got:?}, the profile allows the pools on it {want:?}",
                        chart, d.source
                    ));
                }
            }
        }
        checked.push((class.clone(), table.to_owned()));
    }
    for pod in installer_pods(objects) {
        for c in pod["containers"].as_array().into_iter().flatten() {
            for e in c["env"].as_array().into_iter().flatten() {
                let name = e["name"].as_str().unwrap_or_default();
                if !name.starts_with("ALLOWED_HYPERVISOR_ANNOTATIONS") {
                    continue;
                }
                for entry in e["value"].as_str().unwrap_or_default().split_whitespace() {
                    let (shim, names) = entry.split_once(':').unwrap_or(("", entry));
                    let allowed = allowed_on(&format!("kata-{shim}"));
                    let extra: Vec<&str> =
                        names.split(',').filter(|n| shim.is_empty() || !allowed.contains(*n)).collect();
                    if !extra.is_empty() {
                        out.push(format!(
                            "chart {}: the installer's {name} enables {extra:?} for {}",
                            chart,
                            if shim.is_empty() { "every shim".to_owned() } else { format!("shim {shim}") }
                        ));
                    }
                }
            }
        }
    }
    (out, checked)
}

/// The `[hypervisor.<table>]` of a shim's Kata configuration, as kata-deploy 4.1.0's installer
/// names it (`get_hypervisor_name`, `tools/packaging/kata-deploy/binary/src/artifacts/install.rs`):
/// read independently of osbx's own table, from the shim's name.
fn hypervisor_table(shim: &str) -> Option<&'static str> {
    if shim.starts_with("qemu") {
        return Some("qemu");
    }
    match shim {
        "clh" | "clh-azure" | "clh-runtime-rs" | "clh-azure-runtime-rs" => Some("clh"),
        "dragonball" => Some("dragonball"),
        "fc" | "firecracker" => Some("firecracker"),
        "openvmm-azure-runtime-rs" => Some("openvmm"),
        "remote" => Some("remote"),
        _ => None,
    }
}

/// The pod specs of kata-deploy's install workloads: a DaemonSet's, and the per-node install
/// Job's of `deploymentMode: job`, which the chart keeps as YAML text in a ConfigMap for its
/// dispatcher to create.
fn installer_pods(objects: &[Value]) -> Vec<Value> {
    let of_kind = |kind: &'static str| objects.iter().filter(move |o| o["kind"] == kind);
    let mut out: Vec<Value> = of_kind("DaemonSet").map(|d| d["spec"]["template"]["spec"].clone()).collect();
    for c in of_kind("ConfigMap") {
        for text in c["data"].as_object().into_iter().flatten().filter_map(|(_, v)| v.as_str()) {
            let Ok(docs): Result<Vec<Value>, _> = serde_saphyr::from_str_multiple(text) else { continue };
            out.extend(docs.into_iter().filter(|d| d["kind"] == "Job").map(|d| d["spec"]["template"]["spec"].clone()));
        }
    }
    out
}

/// The Kata pools' classes against the emptyDir mode the kata-deploy render gives them: a build
/// pool's class (`builds: true`) is `block-plain`, unless it is a shim's own class
/// `kata-<shim>` named by hand (every pod of that shim would get it: lint warns instead), and
/// no other class is.
pub fn block_storage_problems(b: &Baseline) -> (Vec<String>, usize) {
    let profile = &b.release.subject().profile;
    let shims = profile.sections.kata.as_ref().map(|k| k.shims.clone()).unwrap_or_default();
    let modes = match empty_dir_modes(b, &shims) {
        Ok(modes) => modes,
        Err(why) => return (vec![format!("chart {}: {why}", b.chart)], 0),
    };
    let builds: BTreeSet<String> = profile.sections.pools.build_classes().into_iter().collect();
    let mut out = Vec::new();
    let mut block = 0;
    for class in profile.sections.pools.kata_classes() {
        let shared = class.strip_prefix("kata-").is_some_and(|s| shims.iter().any(|e| e == s));
        let want = builds.contains(&class) && !shared;
        let Some((mode, why)) = modes.get(&class) else { continue };
        let got = mode == "block-plain";
        block += usize::from(got);
        if want && !got {
            out.push(format!(
                "chart {}: RuntimeClass {class} is a build pool's class, but gets emptydir_mode {mode:?} ({why}): Docker's overlay2 needs \"block-plain\"",
                b.chart
            ));
        } else if got && !want {
            out.push(format!(
                "chart {}: RuntimeClass {class} is no build pool's own class, but gets emptydir_mode {mode:?} ({why}): every pod on it would",
                b.chart
            ));
        }
    }
    for (class, (mode, why)) in &modes {
        if mode == "block-plain" && !builds.contains(class) {
            out.push(format!(
                "chart {}: RuntimeClass {class} gets block-plain ({why}), but no build pool uses it",
                b.chart
            ));
        }
    }
    (out, block)
}
