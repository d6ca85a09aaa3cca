//! The syntax of names, durations and repository paths, as Kubernetes and Flux define them.

/// The units of a Flux duration (Go's `time.ParseDuration` without `ns`/`us`).
pub(crate) const FLUX_UNITS: &[&str] = &["ms", "s", "m", "h"];

/// The units Flux accepts for a Git timeout.
pub(crate) const GIT_TIMEOUT_UNITS: &[&str] = &["ms", "s", "m"];

// The DNS-1123 names are stated with the other names' shapes, in `refs`.
pub(crate) use crate::refs::{check_dns_label, check_dns_subdomain};

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

/// Check a container image reference by the distribution reference grammar (what containerd
/// and the kubelet parse): `[host[:port]/]path[:tag][@digest]`, where the path is `/`-separated
/// components of lower-case letters and digits joined by `.`, `_`, `__` or dashes; the tag is up
/// to 128 letters, digits, `_`, `.` and `-` (not starting with `.` or `-`); the digest is
/// `algorithm:hex` (32 hex digits or more); the name is at most 255 characters. The first
/// component is the registry host when it has a `.` or `:`, is `localhost`, or has upper case.
///
/// # Errors
/// Which part is not of the grammar, and why.
pub(crate) fn check_image_reference(s: &str) -> Result<(), String> {
    ImageRef::parse(s).map(|_| ())
}

/// An image reference as a registry reads it: the registry host (`docker.io` when none is
/// named), the repository (`library/<name>` for a one-component name on `docker.io`), the tag
/// and the digest (`latest` is the tag when neither is given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ImageRef {
    /// `registry.example.org:5000`, `docker.io`.
    pub registry: String,
    /// `library/busybox`, `opensandbox/execd`.
    pub repository: String,
    /// The tag, when named (`latest` when neither a tag nor a digest is).
    pub tag: Option<String>,
    /// `sha256:…`, when named.
    pub digest: Option<String>,
}

impl ImageRef {
    /// Parse `s` by the distribution reference grammar ([`check_image_reference`]).
    ///
    /// # Errors
    /// Which part is not of the grammar, and why.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let (rest, digest) = match s.split_once('@') {
            Some((rest, digest)) => (rest, Some(digest)),
            None => (s, None),
        };
        if let Some(digest) = digest {
            check_image_digest(digest)?;
        }
        let (name, tag) = match rest.rfind(':') {
            Some(i) if !rest[i + 1..].contains('/') => (&rest[..i], Some(&rest[i + 1..])),
            _ => (rest, None),
        };
        if let Some(tag) = tag {
            check_image_tag(tag)?;
        }
        if name.is_empty() {
            return Err("it names no repository".into());
        }
        if name.len() > 255 {
            return Err(format!("its name is {} characters long, more than 255", name.len()));
        }
        let (registry, path) = match name.split_once('/') {
            Some((first, remote))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first.bytes().any(|b| b.is_ascii_uppercase()) =>
            {
                check_image_host(first)?;
                (first, remote)
            }
            _ => ("docker.io", name),
        };
        path.split('/').try_for_each(check_image_path_component)?;
        let repository =
            if registry == "docker.io" && !path.contains('/') { format!("library/{path}") } else { path.to_owned() };
        let tag = tag.map(str::to_owned).or_else(|| digest.is_none().then(|| "latest".to_owned()));
        Ok(Self { registry: registry.to_owned(), repository, tag, digest: digest.map(str::to_owned) })
    }
}

/// `host[:port]`, the host a DNS name, an IPv4 address or a bracketed IPv6 address.
fn check_image_host(s: &str) -> Result<(), String> {
    let bad = || {
        Err(format!(
            "registry {s:?} is not a host name or IP address with an optional :port (letters, digits, '-' and '.'; IPv6 in brackets)"
        ))
    };
    let (host, port) = if let Some(inner) = s.strip_prefix('[') {
        let Some((v6, after)) = inner.split_once(']') else { return bad() };
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return bad();
        }
        match after {
            "" => (None, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (None, Some(port)),
                None => return bad(),
            },
        }
    } else {
        match s.split_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(s), None),
        }
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return bad();
    }
    let label = |l: &str| {
        !l.is_empty()
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if host.is_some_and(|h| !h.split('.').all(label)) {
        return bad();
    }
    Ok(())
}

/// A path component: runs of lower-case letters and digits joined by `.`, `_`, `__` or dashes.
fn check_image_path_component(c: &str) -> Result<(), String> {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let joined = c
        .split(|ch: char| ch.is_ascii_lowercase() || ch.is_ascii_digit())
        .all(|sep| sep.is_empty() || sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|b| b == b'-'));
    let ends = c.bytes().next().is_some_and(alnum) && c.bytes().last().is_some_and(alnum);
    if joined && ends {
        Ok(())
    } else {
        Err(format!("path component {c:?} is not lower-case letters and digits joined by '.', '_', '__' or '-'"))
    }
}

/// A tag: `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
fn check_image_tag(t: &str) -> Result<(), String> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let ok =
        t.bytes().next().is_some_and(word) && t.len() <= 128 && t.bytes().all(|b| word(b) || b == b'.' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "tag {t:?} is not 1 to 128 letters, digits, '_', '.' and '-' (starting with a letter, digit or '_')"
        ))
    }
}

/// A digest: `algorithm:hex`, the algorithm `[A-Za-z][A-Za-z0-9]*` components joined by
/// `+`, `.`, `_` or `-`, the hex at least 32 digits.
pub(crate) fn check_image_digest(d: &str) -> Result<(), String> {
    let ok = d.split_once(':').is_some_and(|(algorithm, hex)| {
        algorithm.split(['+', '.', '_', '-']).all(|part| {
            part.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
                && part.bytes().all(|b| b.is_ascii_alphanumeric())
        }) && hex.len() >= 32
            && hex.bytes().all(|b| b.is_ascii_hexdigit())
    });
    if ok { Ok(()) } else { Err(format!("digest {d:?} is not algorithm:hex (e.g. sha256: and 64 hex digits)")) }
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
    #[test]
    fn image_references() {
        let digest = format!("sha256:{}", "a".repeat(64));
        for ok in [
            "busybox".to_owned(),
            "busybox:1.37".to_owned(),
            "library/busybox:latest".to_owned(),
            "example.com/sandbox:v1".to_owned(),
            "sandbox-registry.cn-zhangjiakou.cr.aliyuncs.com/opensandbox/code-interpreter:v1.1.0".to_owned(),
            "localhost:5000/x/y_z__w.v-1---2:Tag_1.0-rc".to_owned(),
            "localhost/probe".to_owned(),
            "127.0.0.1:5000/probe:1".to_owned(),
            "[::1]:5000/probe".to_owned(),
            "Registry.Example/x".to_owned(),
            format!("example.com/x@{digest}"),
            format!("example.com/x:v1@{digest}"),
            format!("x@sha256+b64u.v2:{}", "0".repeat(32)),
            "a".repeat(255),
        ] {
            assert_eq!(check_image_reference(&ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("evil.example/x:1 <img src=x> **bold**", "tag \"1 <img src=x> **bold**\""),
            ("example.com/Sandbox:v1", "path component \"Sandbox\""),
            ("busybox ", "path component \"busybox \""),
            ("example.com//x", "path component \"\""),
            ("example.com/x/", "path component \"\""),
            ("example.com/-x", "path component \"-x\""),
            ("example.com/x..y", "path component \"x..y\""),
            ("example.com/x___y", "path component \"x___y\""),
            ("example.com/x:", "tag \"\""),
            ("example.com/x:.v1", "tag \".v1\""),
            ("example.com/x@sha256:abc", "digest \"sha256:abc\""),
            ("example.com/x@", "digest \"\""),
            ("exa_mple.com/x", "registry \"exa_mple.com\""),
            ("example.com:port/x", "registry \"example.com:port\""),
            ("[::1/x", "registry \"[::1\""),
            ("-example.com/x", "registry \"-example.com\""),
            (":v1", "names no repository"),
        ] {
            let err = check_image_reference(bad).expect_err(bad);
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert!(check_image_reference(&"a".repeat(256)).unwrap_err().contains("more than 255"));
        assert!(check_image_reference(&format!("x:{}", "t".repeat(129))).is_err());
    }
}
