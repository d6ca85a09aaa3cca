//! Rules that serde cannot express: names, durations, paths, references between layers and the
//! pool capacity bounds. Every rule yields a [`Finding`] naming the offending field path; the
//! loader turns paths into `file:line:column`.

use std::collections::{BTreeMap, BTreeSet};

mod layers;

use super::types::{ApiKey, Profile, Runtime, StrategyName};
use super::{API_VERSION, KIND};

/// One violated rule: the field path and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Field path, e.g. `pools.items[1].capacity.bufferMin`.
    pub field: String,
    /// What is wrong, and the fix where it is not obvious.
    pub message: String,
}

#[derive(Default)]
struct Findings(Vec<Finding>);

impl Findings {
    fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(Finding { field: field.into(), message: message.into() });
    }

    fn dns_label(&mut self, field: &str, value: &str) {
        if let Err(why) = check_dns_label(value) {
            self.push(field, format!("{value:?} is not a valid name: {why}"));
        }
    }

    fn duration(&mut self, field: &str, value: &str, units: &[&str]) {
        if !is_duration(value, units) {
            self.push(
                field,
                format!(
                    "{value:?} is not a valid duration: use a number followed by {} (e.g. 10m, 1h30m)",
                    units.join(", ")
                ),
            );
        }
    }

    fn opt_duration(&mut self, field: &str, value: Option<&String>) {
        if let Some(v) = value {
            self.duration(field, v, FLUX_UNITS);
        }
    }
}

const FLUX_UNITS: &[&str] = &["ms", "s", "m", "h"];

/// Check a whole profile; an empty list means it is valid.
#[must_use]
pub fn validate(p: &Profile) -> Vec<Finding> {
    let mut f = Findings::default();
    if p.api_version != API_VERSION {
        f.push("apiVersion", format!("unsupported apiVersion {:?}: expected {API_VERSION:?}", p.api_version));
    }
    if p.kind != KIND {
        f.push("kind", format!("unsupported kind {:?}: expected {KIND:?}", p.kind));
    }
    f.dns_label("metadata.name", &p.metadata.name);
    f.dns_label("cluster.name", &p.cluster.name);
    f.dns_label("cluster.fluxNamespace", &p.cluster.flux_namespace);
    f.dns_label("cluster.sourceRef", &p.cluster.source_ref);
    layers(p, &mut f);
    opensandbox(p, &mut f);
    pools(p, &mut f);
    layers::kata(p, &mut f);
    layers::spire(p, &mut f);
    f.0
}

fn layers(p: &Profile, f: &mut Findings) {
    let names: BTreeSet<&str> = p.layers.iter().map(|l| l.name.as_str()).collect();
    let mut seen = BTreeSet::new();
    let mut paths = BTreeMap::new();
    let mut components = BTreeMap::new();
    for (i, layer) in p.layers.iter().enumerate() {
        let at = format!("layers[{i}]");
        f.dns_label(&format!("{at}.name"), &layer.name);
        if !seen.insert(layer.name.as_str()) {
            f.push(format!("{at}.name"), format!("duplicate layer name {:?}", layer.name));
        }
        for (j, dep) in layer.depends_on.iter().enumerate() {
            let field = format!("{at}.dependsOn[{j}]");
            if dep == &layer.name {
                f.push(field, format!("layer {:?} depends on itself", layer.name));
            } else if !names.contains(dep.as_str()) {
                f.push(
                    field,
                    format!("unknown layer {dep:?}: declare it under layers (use `external: true` for a layer osbx does not render)"),
                );
            }
        }
        if layer.external {
            if layer.component.is_some() {
                f.push(format!("{at}.component"), "an external layer has no component: osbx does not render it");
            }
            if layer.path.is_some() {
                f.push(format!("{at}.path"), "an external layer has no path: osbx does not render it");
            }
            continue;
        }
        match layer.component {
            None => f.push(
                format!("{at}.component"),
                "missing field `component` (one of: opensandbox, pools, kata, spire-agents, spire-smoke); set `external: true` for a layer osbx does not render",
            ),
            Some(c) => {
                if let Some(first) = components.insert(c, i) {
                    f.push(format!("{at}.component"), format!("component {c:?} is already rendered by layers[{first}]"));
                }
            }
        }
        f.duration(&format!("{at}.interval"), &layer.interval, FLUX_UNITS);
        f.opt_duration(&format!("{at}.timeout"), layer.timeout.as_ref());
        f.opt_duration(&format!("{at}.retryInterval"), layer.retry_interval.as_ref());
        let raw = layer.path.clone().unwrap_or_else(|| format!("platform/{}", layer.name));
        match normalize_repo_path(&raw) {
            Ok(path) => {
                if let Some(other) = paths.insert(path.clone(), i) {
                    f.push(format!("{at}.path"), format!("path {path:?} is already used by layers[{other}]"));
                }
            }
            Err(why) => f.push(format!("{at}.path"), format!("{raw:?} {why}")),
        }
    }
    if let Some(cycle) = find_cycle(p) {
        f.push("layers", format!("dependsOn cycle: {}", cycle.join(" -> ")));
    }
}

/// Depth-first search for a `dependsOn` cycle; returns it as a closed path of layer names.
fn find_cycle(p: &Profile) -> Option<Vec<String>> {
    let deps: BTreeMap<&str, Vec<&str>> =
        p.layers.iter().map(|l| (l.name.as_str(), l.depends_on.iter().map(String::as_str).collect())).collect();
    fn visit<'a>(
        n: &'a str,
        deps: &BTreeMap<&'a str, Vec<&'a str>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|s| *s == n) {
            let mut cycle: Vec<String> = stack[at..].iter().map(|s| (*s).to_owned()).collect();
            cycle.push(n.to_owned());
            return Some(cycle);
        }
        if !done.insert(n) {
            return None;
        }
        stack.push(n);
        for d in deps.get(n).into_iter().flatten() {
            if *d != n
                && let Some(c) = visit(d, deps, stack, done)
            {
                return Some(c);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    deps.keys().find_map(|n| visit(n, &deps, &mut Vec::new(), &mut done))
}

fn opensandbox(p: &Profile, f: &mut Findings) {
    let o = &p.opensandbox;
    f.dns_label("opensandbox.namespaces.controlPlane", &o.namespaces.control_plane);
    f.dns_label("opensandbox.namespaces.sandbox", &o.namespaces.sandbox);
    f.dns_label("opensandbox.source.name", &o.source.name);
    if !["http://", "https://", "ssh://"].iter().any(|s| o.source.url.starts_with(s)) {
        f.push("opensandbox.source.url", format!("{:?} must start with http://, https:// or ssh://", o.source.url));
    }
    let r = &o.source.git_ref;
    if [&r.branch, &r.tag, &r.semver, &r.name, &r.commit].iter().all(|v| v.is_none()) {
        f.push("opensandbox.source.ref", "set one of branch, tag, semver, name or commit (pin the chart)");
    }
    f.duration("opensandbox.source.interval", &o.source.interval, FLUX_UNITS);
    if let Some(t) = &o.source.timeout {
        f.duration("opensandbox.source.timeout", t, &["ms", "s", "m"]);
    }
    if o.chart.path.trim().is_empty() {
        f.push("opensandbox.chart.path", "must not be empty");
    }
    f.opt_duration("opensandbox.chart.interval", o.chart.interval.as_ref());
    let rel = &o.release;
    f.dns_label("opensandbox.release.name", &rel.name);
    let helm_name = rel.release_name.as_deref().unwrap_or(&rel.name);
    if helm_name.len() > 53 {
        f.push("opensandbox.release.releaseName", format!("{helm_name:?} is longer than Helm's 53 characters"));
    }
    for (field, ns) in [("namespace", &rel.namespace), ("targetNamespace", &rel.target_namespace)] {
        if let Some(ns) = ns {
            f.dns_label(&format!("opensandbox.release.{field}"), ns);
        }
    }
    f.duration("opensandbox.release.interval", &rel.interval, FLUX_UNITS);
    f.opt_duration("opensandbox.release.timeout", rel.timeout.as_ref());
    for (field, s) in [("install", &rel.install), ("upgrade", &rel.upgrade)] {
        let Some(s) = s else { continue };
        if let Some(ri) = &s.retry_interval {
            let at = format!("opensandbox.release.{field}.retryInterval");
            if s.strategy == StrategyName::RetryOnFailure {
                f.duration(&at, ri, FLUX_UNITS);
            } else {
                f.push(at, "retryInterval is allowed only with strategy RetryOnFailure");
            }
        }
    }
    if let Err(why) = check_dns_subdomain(&rel.values_config_map) {
        f.push("opensandbox.release.valuesConfigMap", why);
    }
    api_key(&o.server.api_key, f);
    for (field, n) in [("controller.replicas", o.controller.replicas), ("server.replicas", o.server.replicas)] {
        if n.is_some_and(|n| n < 0) {
            f.push(format!("opensandbox.{field}"), "must not be negative");
        }
    }
    if o.server.config.runtime.execd_image.trim().is_empty() {
        f.push("opensandbox.server.config.runtime.execdImage", "must not be empty");
    }
}

fn api_key(k: &ApiKey, f: &mut Findings) {
    match (&k.inline, &k.secret_ref) {
        (Some(_), Some(_)) => f.push("opensandbox.server.apiKey", "set either `inline` or `secretRef`, not both"),
        (None, None) => {
            f.push("opensandbox.server.apiKey", "set `secretRef` (a Secret in the control-plane namespace) or `inline`")
        }
        (None, Some(s)) => {
            if let Err(why) = check_dns_subdomain(&s.name) {
                f.push("opensandbox.server.apiKey.secretRef.name", why);
            }
            if s.key.is_empty() {
                f.push("opensandbox.server.apiKey.secretRef.key", "must not be empty");
            }
        }
        (Some(_), None) => {}
    }
}

fn pools(p: &Profile, f: &mut Findings) {
    let mut seen = BTreeSet::new();
    for (i, pool) in p.pools.items.iter().enumerate() {
        let at = format!("pools.items[{i}]");
        f.dns_label(&format!("{at}.name"), &pool.name);
        if !seen.insert(pool.name.as_str()) {
            f.push(format!("{at}.name"), format!("duplicate pool name {:?}", pool.name));
        }
        match (pool.runtime, pool.runtime_class_name.as_deref()) {
            (Runtime::Kata, Some(rc)) if rc.trim().is_empty() => f.push(
                format!("{at}.runtimeClassName"),
                "a kata pool needs a runtime class (omit the field for kata-clh-runtime-rs)",
            ),
            (Runtime::Kata, Some(rc)) => f.dns_label(&format!("{at}.runtimeClassName"), rc),
            (Runtime::Runc, Some(_)) => f.push(
                format!("{at}.runtimeClassName"),
                "only kata pools take a runtime class; remove it or set `runtime: kata`",
            ),
            _ => {}
        }
        let c = pool.capacity;
        for (name, v) in
            [("bufferMin", c.buffer_min), ("bufferMax", c.buffer_max), ("poolMin", c.pool_min), ("poolMax", c.pool_max)]
        {
            if v < 0 {
                f.push(format!("{at}.capacity.{name}"), format!("must not be negative (got {v})"));
            }
            if v > i64::from(i32::MAX) {
                f.push(format!("{at}.capacity.{name}"), format!("{v} does not fit the CRD's int32"));
            }
        }
        if c.buffer_min > c.buffer_max {
            f.push(
                format!("{at}.capacity.bufferMin"),
                format!("bufferMin ({}) is greater than bufferMax ({})", c.buffer_min, c.buffer_max),
            );
        }
        if c.pool_min > c.pool_max {
            f.push(
                format!("{at}.capacity.poolMin"),
                format!("poolMin ({}) is greater than poolMax ({})", c.pool_min, c.pool_max),
            );
        }
        if c.buffer_max > c.pool_max {
            f.push(
                format!("{at}.capacity.bufferMax"),
                format!("bufferMax ({}) is greater than poolMax ({})", c.buffer_max, c.pool_max),
            );
        }
        if pool.image.as_ref().or(p.pools.defaults.image.as_ref()).is_none_or(|s| s.trim().is_empty()) {
            f.push(format!("{at}.image"), "missing image (set it on the pool or in pools.defaults)");
        }
    }
}

/// Check a DNS-1123 label (namespaces, most object names).
///
/// # Errors
/// A short reason when `s` is not a label.
pub fn check_dns_label(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > 63 {
        return Err("must be at most 63 characters".into());
    }
    if !s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
        return Err("use only lower-case letters, digits and '-' (DNS-1123 label)".into());
    }
    if s.starts_with('-') || s.ends_with('-') {
        return Err("must start and end with a letter or digit (DNS-1123 label)".into());
    }
    Ok(())
}

/// Check a DNS-1123 subdomain (ConfigMap and Secret names).
///
/// # Errors
/// A short reason when `s` is not a subdomain.
pub fn check_dns_subdomain(s: &str) -> Result<(), String> {
    if s.len() > 253 {
        return Err(format!("{s:?} is longer than 253 characters"));
    }
    s.split('.').try_for_each(check_dns_label).map_err(|why| format!("{s:?} is not a valid name: {why}"))
}

/// Whether `s` is a Go/Flux duration made only of the given units (`1h30m`, `90s`, `1.5h`).
#[must_use]
pub fn is_duration(s: &str, units: &[&str]) -> bool {
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        if int_len == 0 {
            return false;
        }
        rest = &rest[int_len..];
        if let Some(frac) = rest.strip_prefix('.') {
            let frac_len = frac.bytes().take_while(u8::is_ascii_digit).count();
            if frac_len == 0 {
                return false;
            }
            rest = &frac[frac_len..];
        }
        // Longest unit first so that `ms` is not read as `m` + `s`.
        let mut sorted: Vec<&&str> = units.iter().collect();
        sorted.sort_by_key(|u| std::cmp::Reverse(u.len()));
        match sorted.iter().find(|u| rest.starts_with(**u)) {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

/// Normalise a repository-relative path (`./platform/x/` → `platform/x`).
///
/// # Errors
/// Why the path is not inside the repository.
pub fn normalize_repo_path(raw: &str) -> Result<String, String> {
    if raw.starts_with('/') || raw.contains('\\') {
        return Err("must be a relative path inside the repository".into());
    }
    let mut parts = Vec::new();
    for part in raw.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err("leaves the repository (contains '..')".into()),
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err("must name a directory inside the repository, not its root".into());
    }
    Ok(parts.join("/"))
}

/// Parse a Go/Flux duration (`90s`, `5m`, `1h30m`, `1.5h`, `500ms`).
#[must_use]
pub fn parse_duration(s: &str) -> Option<std::time::Duration> {
    if !is_duration(s, FLUX_UNITS) {
        return None;
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest.bytes().take_while(|b| b.is_ascii_digit() || *b == b'.').count();
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let (unit, scale) = if rest.starts_with("ms") {
            ("ms", 0.001)
        } else if rest.starts_with('h') {
            ("h", 3600.0)
        } else if rest.starts_with('m') {
            ("m", 60.0)
        } else {
            ("s", 1.0)
        };
        total += n * scale;
        rest = &rest[unit.len()..];
    }
    Some(std::time::Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for ok in ["10m", "1h", "60s", "1h30m", "1.5h", "500ms"] {
            assert!(is_duration(ok, FLUX_UNITS), "{ok}");
        }
        for bad in ["", "10", "m", "10 m", "1d", "-1m", "1.m", "10M"] {
            assert!(!is_duration(bad, FLUX_UNITS), "{bad}");
        }
        assert!(!is_duration("1h", &["ms", "s", "m"]));
    }

    #[test]
    fn dns_labels() {
        assert!(check_dns_label("ci-pod").is_ok());
        assert!(check_dns_label("a").is_ok());
        assert_eq!(check_dns_label("").unwrap_err(), "must not be empty");
        assert!(check_dns_label("Ci").unwrap_err().contains("lower-case"));
        assert!(check_dns_label("ci_pod").unwrap_err().contains("lower-case"));
        assert!(check_dns_label("-ci").unwrap_err().contains("start and end"));
        assert!(check_dns_label(&"a".repeat(64)).unwrap_err().contains("63"));
        assert!(check_dns_subdomain("opensandbox.values").is_ok());
    }

    #[test]
    fn repo_paths() {
        assert_eq!(normalize_repo_path("./platform/x/").unwrap(), "platform/x");
        assert!(normalize_repo_path("/etc").unwrap_err().contains("relative"));
        assert!(normalize_repo_path("platform/../../x").unwrap_err().contains(".."));
        assert!(normalize_repo_path("./").unwrap_err().contains("root"));
    }
}
