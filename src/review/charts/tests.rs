//! Unit tests of the chart expansion: the cache's identity, release names and namespaces.

use super::fetch::slug;
use super::*;
use serde_json::json;

/// A pin that cannot change is read from the cache; one that floats (the same answer lint's
/// `chart.unpinned` gives) is fetched again, which air-gapped is refused: each floating kind.
#[test]
fn a_floating_pin_is_fetched_again_and_a_fixed_one_read_from_the_cache() {
    use crate::flux::source::{ChartVersion, GitRef, OciRef};
    let cache = tempfile::tempdir().unwrap();
    let helm = Helm { program: PathBuf::from("/nonexistent/helm"), version: "v3.20.0".into() };
    let charts = Charts::new(helm, cache.path().to_path_buf(), true, "1.33.0".into());
    let git = |r: Value| Fetch::Git {
        url: "https://example.org/c.git".into(),
        reference: GitRef::of(&r),
        path: "charts/c".into(),
    };
    let oci = |r: Value| Fetch::Oci {
        url: "oci://example.org/charts/c".into(),
        reference: OciRef::of(&r),
        plain_http: false,
    };
    let repo = |v: Option<&str>| Fetch::Repo {
        url: "https://example.org/charts".into(),
        chart: "c".into(),
        version: ChartVersion::of(&json!({"spec": {"chart": {"spec": {"version": v}}}})),
        oci: false,
        plain_http: false,
    };
    let cases = [
        (git(json!({"branch": "main"})), true),
        (git(json!({"name": "refs/heads/main"})), true),
        (git(json!({"semver": ">=0.1.0"})), true),
        (oci(json!({"tag": "latest"})), true),
        (oci(Value::Null), true),
        (oci(json!({"semver": "0.x"})), true),
        (repo(None), true),
        (repo(Some("0.x")), true),
        (git(json!({"tag": "c-0.1.0"})), false),
        (git(json!({"name": "refs/tags/c-0.1.0"})), false),
        (git(json!({"commit": "0123456789abcdef0123456789abcdef01234567"})), false),
        (git(json!({"semver": "0.1.0"})), false),
        (oci(json!({"tag": "0.1.0"})), false),
        (oci(json!({"digest": "sha256:0123"})), false),
        (repo(Some("0.1.0")), false),
    ];
    for (fetch, floats) in cases {
        let dir = cache.path().join(fetch.entry()).join(fetch.chart_dir());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("Chart.yaml"), "apiVersion: v2\nname: c\nversion: 0.1.0\n").unwrap();
        let got = charts.fetched("HelmRelease/n/r", &fetch, "the source");
        if floats {
            assert!(matches!(got, Err(ChartError::NotCached { .. })), "{fetch:?} floats: {got:?}");
        } else {
            assert_eq!(got.unwrap(), dir, "{fetch:?} is pinned");
        }
    }
}

/// A release name or namespace from the change becomes an argument of helm only when it is of
/// its kind; a refusal names the field it came from.
#[test]
fn release_names_and_namespaces_are_checked_before_helm_sees_them() {
    let hr = |spec: Value| json!({"metadata": {"name": "r", "namespace": "flux-system"}, "spec": spec});
    let refused = |spec: Value| match release_identity("HelmRelease/flux-system/r", &hr(spec)) {
        Err(ChartError::Refused { field, .. }) => field,
        other => panic!("not refused: {other:?}"),
    };
    assert_eq!(
        release_identity("x", &hr(json!({"targetNamespace": "t"}))).unwrap(),
        ("t-r".to_owned(), "t".to_owned())
    );
    assert_eq!(refused(json!({"releaseName": "--post-renderer=/tmp/x"})), "spec.releaseName");
    assert_eq!(refused(json!({"releaseName": "Upper"})), "spec.releaseName");
    assert!(refused(json!({"targetNamespace": "--post-renderer=x"})).contains("spec.targetNamespace"));
    let bad = json!({"metadata": {"name": "--post-renderer=x", "namespace": "flux-system"}, "spec": {}});
    assert!(matches!(
        release_identity("x", &bad),
        Err(ChartError::Refused { field, .. }) if field.contains("derives from metadata.name")
    ));
    // Not installed here: suspended, or into another cluster.
    assert_eq!(refused(json!({"suspend": true})), "spec.suspend");
    assert_eq!(refused(json!({"suspend": "yes"})), "spec.suspend");
    assert_eq!(refused(json!({"kubeConfig": {"secretRef": {"name": "remote"}}})), "spec.kubeConfig");
    assert!(release_identity("x", &hr(json!({"suspend": false}))).is_ok());
    let bad_ns = json!({"metadata": {"name": "r", "namespace": "--kubeconfig=/x"}, "spec": {"releaseName": "r"}});
    assert!(matches!(
        release_identity("x", &bad_ns),
        Err(ChartError::Refused { field, .. }) if field == "metadata.namespace"
    ));
}

/// Sources whose readable names are alike are different entries: the whole URL, its scheme
/// and the kind of source are in each entry's digest.
#[test]
fn cache_entries_are_keyed_by_the_whole_source() {
    use crate::flux::source::{ChartVersion, OciRef};
    let version = ChartVersion::of(&json!({"spec": {"chart": {"spec": {"version": "1.0.0"}}}}));
    let repo = |url: &str, oci: bool| Fetch::Repo {
        url: url.into(),
        chart: "c".into(),
        version: version.clone(),
        oci,
        plain_http: false,
    };
    let oci = |url: &str| Fetch::Oci { url: url.into(), reference: OciRef::Tag("1.0.0".into()), plain_http: false };
    let entries = [
        repo("http://h/a/b", false).entry(),
        repo("https://h/a/b", false).entry(),
        repo("http://h/a_b", false).entry(),
        repo("oci://h/a/b", true).entry(),
        oci("oci://h/a/b/c").entry(),
        Fetch::Oci { url: "oci://h/a/b/c".into(), reference: OciRef::Tag("1.0.0".into()), plain_http: true }.entry(),
    ];
    for (i, a) in entries.iter().enumerate() {
        for b in &entries[i + 1..] {
            assert_ne!(a, b);
        }
    }
    // The same source is the same entry, in every run.
    assert_eq!(repo("http://h/a/b", false).entry(), entries[0]);
    assert!(entries[0].starts_with("helm/h_a_b/c-1.0.0-"), "readable: {}", entries[0]);
}

/// A chart's `file://` dependency that climbs out of what was fetched is refused before helm
/// reads it.
#[test]
fn a_file_dependency_outside_the_fetched_source_is_refused() {
    let cache = tempfile::tempdir().unwrap();
    let helm = Helm { program: PathBuf::from("/nonexistent/helm"), version: "v3.20.0".into() };
    let charts = Charts::new(helm, cache.path().to_path_buf(), false, "1.33.0".into());
    let root = cache.path().join("entry");
    let dir = root.join("charts/c");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: c\nversion: 0.1.0\ndependencies: [{name: d, version: 0.1.0, repository: 'file://../../../victim'}]\n",
    )
    .unwrap();
    let e = charts.dependencies("HelmRelease/n/r", &root, &dir).unwrap_err().to_string();
    assert!(e.contains("dependencies[].repository is refused") && e.contains("points outside"), "{e}");
}

#[test]
fn paths_join_like_file_dependencies() {
    assert_eq!(
        crate::repo::join("kubernetes/charts/opensandbox", "../opensandbox-server"),
        "kubernetes/charts/opensandbox-server"
    );
    assert_eq!(crate::repo::join("a", "./b"), "a/b");
    assert_eq!(slug("https://github.com/a/b.git"), "github.com_a_b.git");
}
