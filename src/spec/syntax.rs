//! The syntax of names, durations and repository paths, as Kubernetes and Flux define them.

/// The units of a Flux duration (Go's `time.ParseDuration` without `ns`/`us`).
pub(crate) const FLUX_UNITS: &[&str] = &["ms", "s", "m", "h"];

/// The units Flux accepts for a Git timeout.
pub(crate) const GIT_TIMEOUT_UNITS: &[&str] = &["ms", "s", "m"];

/// Check a DNS-1123 label (namespaces, most object names).
///
/// # Errors
/// A short reason when `s` is not a label.
pub(crate) fn check_dns_label(s: &str) -> Result<(), String> {
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
pub(crate) fn check_dns_subdomain(s: &str) -> Result<(), String> {
    if s.len() > 253 {
        return Err(format!("{s:?} is longer than 253 characters"));
    }
    s.split('.').try_for_each(check_dns_label).map_err(|why| format!("{s:?} is not a valid name: {why}"))
}

/// Whether `s` is a Go/Flux duration made only of the given units (`1h30m`, `90s`, `1.5h`).
#[must_use]
pub(crate) fn is_duration(s: &str, units: &[&str]) -> bool {
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
pub(crate) fn normalize_repo_path(raw: &str) -> Result<String, String> {
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
pub(crate) fn parse_duration(s: &str) -> Option<std::time::Duration> {
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
