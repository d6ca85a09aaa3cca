//! The shape of what a Flux source or chart names: chart names and versions, URLs, git and OCI
//! references, paths inside a repository, the entries of a git tree. A profile, a pull
//! request's Flux objects, a Helm repository's index or a git tree may be hostile, and osbx makes
//! paths and command arguments of these values; each is checked here, once, before it is used,
//! and the profile's loader and the offline review ask the same questions.
//!
//! Each check returns why the value is refused (for a message that names the field), never the
//! value itself. Paths on disk derived from them are made with [`under`], which refuses to leave
//! its root or to pass through a symbolic link.

use std::path::{Path, PathBuf};

/// Why a value is refused.
pub(crate) type Refusal = String;

fn plain(value: &str) -> Result<(), Refusal> {
    if value.is_empty() {
        return Err("it is empty".into());
    }
    if value.contains('\0') {
        return Err("it holds a NUL byte".into());
    }
    if value.chars().any(char::is_control) {
        return Err("it holds a control character".into());
    }
    if value.starts_with('-') {
        return Err("it starts with '-' (it would be read as a command-line option)".into());
    }
    Ok(())
}

/// A plain value (see [`plain`]) that is not a path: no `/`, `\\` or `..`; `what` names it.
fn not_a_path(value: &str, what: &str) -> Result<(), Refusal> {
    plain(value)?;
    if value.contains('/') || value.contains('\\') {
        return Err(format!("{what} is not a path: it may not hold '/' or '\\'"));
    }
    if value.contains("..") {
        return Err(format!("{what} may not hold '..'"));
    }
    Ok(())
}

/// A Helm chart's name: letters, digits, `.`, `_` and `-`, starting with a letter or digit (so
/// never `.`, `..` or a path).
pub(crate) fn chart_name(value: &str) -> Result<(), Refusal> {
    not_a_path(value, "a chart name")?;
    if !value.starts_with(|c: char| c.is_ascii_alphanumeric())
        || !value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err("a chart name is letters, digits, '.', '_' and '-', starting with a letter or digit".into());
    }
    Ok(())
}

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

/// A Helm release name, by Helm's own rule (`helm install` and helm-controller refuse any
/// other): a DNS-1123 subdomain (lower-case letters, digits, `-` and `.`, each part starting and
/// ending with a letter or digit) of at most 53 characters.
pub(crate) fn release_name(value: &str) -> Result<(), Refusal> {
    plain(value)?;
    if value.len() > 53 {
        return Err("a release name is at most 53 characters (Helm's limit)".into());
    }
    check_dns_subdomain(value)
        .map_err(|_| "a release name is a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', each part starting and ending with a letter or digit (Helm's rule)".into())
}

/// A Kubernetes namespace: a DNS-1123 label (lower-case letters, digits and `-`, starting and
/// ending with a letter or digit, at most 63 characters).
pub(crate) fn namespace(value: &str) -> Result<(), Refusal> {
    plain(value)?;
    check_dns_label(value).map_err(|why| format!("a namespace is a DNS-1123 label: {why}"))
}

/// A chart version or a semver range (`0.30.0`, `>=1.0.0 <2.0.0`, `4.x`): no path separator, no
/// `..`, no leading `-`.
pub(crate) fn version(value: &str) -> Result<(), Refusal> {
    not_a_path(value, "a version")
}

/// An OCI tag, as the distribution specification has it: `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
pub(crate) fn oci_tag(value: &str) -> Result<(), Refusal> {
    plain(value)?;
    let ok = value.len() <= 128
        && value.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err("an OCI tag is up to 128 of A-Z, a-z, 0-9, '_', '.' and '-', not starting with '.' or '-'".into())
    }
}

/// An OCI digest: `algorithm:encoded` (`sha256:` and 64 hex digits, say).
pub(crate) fn digest(value: &str) -> Result<(), Refusal> {
    plain(value)?;
    let ok = value.split_once(':').is_some_and(|(algorithm, encoded)| {
        !algorithm.is_empty()
            && algorithm
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '+' | '.' | '_' | '-'))
            && !encoded.is_empty()
            && encoded.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '=' | '_' | '-'))
    });
    if ok { Ok(()) } else { Err("a digest is algorithm:encoded (sha256:<64 hex digits>)".into()) }
}

/// A git reference name (a branch, a tag, or a full `refs/…` name), by git's own rules
/// (`git check-ref-format`): no `..`, no `@{`, no space, control character or any of `~^:?*[\`,
/// no component starting with `.` or ending with `.lock`, no empty component.
pub(crate) fn git_ref(value: &str) -> Result<(), Refusal> {
    plain(value)?;
    let bad = value.contains("..")
        || value.contains("@{")
        || value == "@"
        || value.chars().any(|c| c == ' ' || "~^:?*[\\".contains(c))
        || value.ends_with('.')
        || value
            .split('/')
            .any(|c| c.is_empty() || c.starts_with('.') || Path::new(c).extension().is_some_and(|e| e == "lock"));
    if bad { Err("it is not a valid git reference name (git check-ref-format)".into()) } else { Ok(()) }
}

/// A commit id: 4 to 64 hexadecimal digits.
pub(crate) fn commit(value: &str) -> Result<(), Refusal> {
    if (4..=64).contains(&value.len()) && value.chars().all(|c| c.is_ascii_hexdigit()) {
        Ok(())
    } else {
        Err("a commit is 4 to 64 hexadecimal digits".into())
    }
}

/// A URL with one of `schemes` (`https://`, …): no NUL, space or control character.
pub(crate) fn url(value: &str, schemes: &[&str]) -> Result<(), Refusal> {
    plain(value)?;
    if value.contains(char::is_whitespace) {
        return Err("a URL may not hold whitespace".into());
    }
    if !schemes.iter().any(|s| value.starts_with(s)) {
        return Err(format!("it must start with {}", schemes.join(", ")));
    }
    Ok(())
}

/// A path inside a repository (a chart's directory in a git source: `./kubernetes/charts/x`):
/// relative, with no `..`, `\` or NUL. Returns it without its leading `./` and trailing `/`.
pub(crate) fn repo_path(value: &str) -> Result<String, Refusal> {
    plain(value)?;
    if value.starts_with('/') {
        return Err("it is an absolute path: give a path inside the repository".into());
    }
    if value.contains('\\') {
        return Err("it may not hold '\\'".into());
    }
    let parts: Vec<&str> = value.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    if parts.contains(&"..") {
        return Err("it may not hold '..': it must stay inside the repository".into());
    }
    if parts.is_empty() {
        return Err("it names the repository's root, not a directory in it".into());
    }
    Ok(parts.join("/"))
}

/// The name of one entry of a git tree, as osbx writes it to disk: not empty, `.`, `..` or
/// `.git` (in any case), and no `/`, `\` or NUL.
pub(crate) fn tree_entry(name: &str) -> Result<(), Refusal> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(format!("the tree entry {name:?} is not a file name"));
    }
    if name.contains(['/', '\\', '\0']) {
        return Err(format!("the tree entry {name:?} holds '/', '\\' or NUL"));
    }
    if name.eq_ignore_ascii_case(".git") {
        return Err("the tree holds a .git entry".into());
    }
    Ok(())
}

/// `rel` resolved against the directory `dir` of a repository (both `/`-separated, relative to
/// the repository's root), or `None` when its `..` climb above that root.
#[must_use]
pub(crate) fn join_within(dir: &str, rel: &str) -> Option<String> {
    if rel.starts_with('/') || rel.contains(['\\', '\0']) {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for p in dir.split('/').chain(rel.split('/')) {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// `root` joined with the `/`-separated relative path `rel`, refused when `rel` is absolute,
/// holds `..` or NUL, or when a directory on the way below `root` that already exists is a
/// symbolic link (or not a directory): a path made from untrusted names stays under its root.
///
/// # Errors
/// Why the path would leave `root`.
pub(crate) fn under(root: &Path, rel: &str) -> Result<PathBuf, Refusal> {
    if rel.starts_with('/') || rel.contains(['\\', '\0']) {
        return Err(format!("{rel:?} is not a relative path"));
    }
    let mut path = root.to_path_buf();
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    for (i, part) in parts.iter().enumerate() {
        if *part == ".." {
            return Err(format!("{rel:?} climbs out of {}", root.display()));
        }
        path.push(part);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(format!("{} is a symbolic link", path.display()));
            }
            Ok(meta) if !meta.is_dir() && i + 1 < parts.len() => {
                return Err(format!("{} is not a directory", path.display()));
            }
            _ => {}
        }
    }
    Ok(path)
}

/// Every entry under `dir` (not following links): refused when one is a symbolic link or
/// anything but a regular file or a directory (what `helm pull` unpacked, say).
///
/// # Errors
/// The first such entry, or an unreadable directory.
pub(crate) fn plain_tree(dir: &Path) -> Result<(), Refusal> {
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))? {
            let entry = entry.map_err(|e| format!("{}: {e}", d.display()))?;
            let kind = entry.file_type().map_err(|e| format!("{}: {e}", entry.path().display()))?;
            if kind.is_dir() {
                pending.push(entry.path());
            } else if !kind.is_file() {
                return Err(format!("{} is a symbolic link or a special file", entry.path().display()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_names_and_versions_are_not_paths_or_options() {
        for ok in ["spire", "kata-deploy", "spire-crds", "a_b.c"] {
            assert!(chart_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "..", ".", "../../x", "a/b", "/etc", "a\0b", "-x", "--untardir=/tmp", ".hidden", "a..b", "a b"]
        {
            assert!(chart_name(bad).is_err(), "{bad:?}");
        }
        for ok in ["0.30.0", ">=1.0.0 <2.0.0", "4.x", "v1.2.3-rc.1+b", "*"] {
            assert!(version(ok).is_ok(), "{ok}");
        }
        for bad in ["", "../1", "1/2", "-1", "1\n2", "1..2"] {
            assert!(version(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn release_names_and_namespaces_are_helms_and_kubernetes_names() {
        for ok in ["opensandbox", "kata-deploy", "a.b-c", "x", &"a".repeat(53)] {
            assert!(release_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "--post-renderer=/tmp/x",
            "-x",
            "",
            "A",
            "a_b",
            "a/b",
            "a..b",
            "a-",
            "a b",
            "a\nb",
            &"a".repeat(54),
            "--kubeconfig=/etc/shadow",
        ] {
            assert!(release_name(bad).is_err(), "{bad:?}");
        }
        assert!(namespace("sandbox-system").is_ok());
        for bad in ["", "--namespace=x", "-x", "a.b", "A", &"a".repeat(64)] {
            assert!(namespace(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn oci_and_git_references_follow_their_grammars() {
        assert!(oci_tag("4.1.0").is_ok() && oci_tag("_x").is_ok() && oci_tag("latest").is_ok());
        for bad in ["", "../x", ".x", "-x", "a/b", "x --untardir=/tmp", &"a".repeat(129)] {
            assert!(oci_tag(bad).is_err(), "{bad:?}");
        }
        assert!(digest(&format!("sha256:{}", "a".repeat(64))).is_ok());
        assert!(digest("sha256").is_err() && digest("../x:y").is_err());
        for ok in ["helm/opensandbox/0.2.2", "main", "refs/pull/1/head", "v1.0"] {
            assert!(git_ref(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a..b", "../x", "a//b", "/a", "a/", "-b", "a b", "a:b", ".a", "a/.b", "a.lock", "x@{1}"] {
            assert!(git_ref(bad).is_err(), "{bad:?}");
        }
        assert!(commit("1a2b3c4").is_ok() && commit("xyz1").is_err() && commit("--x").is_err());
    }

    #[test]
    fn urls_have_their_sources_schemes_and_no_whitespace() {
        let git = ["http://", "https://", "ssh://"];
        for ok in ["https://github.com/a/b.git", "ssh://git@h/a.git", "http://127.0.0.1:9/x"] {
            assert!(url(ok, &git).is_ok(), "{ok}");
        }
        for bad in ["", "--upload-pack=touch /tmp/x", "-x", "file:///etc", "ext::sh -c x", "https://h/a b", "oci://h/c"]
        {
            assert!(url(bad, &git).is_err(), "{bad:?}");
        }
        assert!(url("oci://h/c", &["oci://"]).is_ok() && url("https://h/c", &["oci://"]).is_err());
    }

    #[test]
    fn paths_stay_inside_their_root() {
        assert_eq!(repo_path("./kubernetes/charts/x/").unwrap(), "kubernetes/charts/x");
        for bad in ["/etc", "../x", "a/../../b", "a\\b", "", ".", "./"] {
            assert!(repo_path(bad).is_err(), "{bad:?}");
        }
        assert_eq!(join_within("a/b", "../c").as_deref(), Some("a/c"));
        assert_eq!(join_within("a", "../../c"), None);
        assert_eq!(join_within("a", "/etc"), None);
        for bad in ["", ".", "..", "a/b", ".git", ".GIT", "a\0"] {
            assert!(tree_entry(bad).is_err(), "{bad:?}");
        }
        assert!(tree_entry("Chart.yaml").is_ok());

        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("d")).unwrap();
        assert_eq!(under(&root, "d/x").unwrap(), root.join("d/x"));
        assert!(under(&root, "../x").is_err());
        assert!(under(&root, "d/../../x").is_err());
        assert!(under(&root, "/etc").is_err());
        std::os::unix::fs::symlink(dir.path(), root.join("link")).unwrap();
        assert!(under(&root, "link/x").unwrap_err().contains("symbolic link"));
        assert!(under(&root, "link").is_err());
        assert!(plain_tree(&root).unwrap_err().contains("link"));
        std::fs::remove_file(root.join("link")).unwrap();
        assert!(plain_tree(&root).is_ok());
    }
}
