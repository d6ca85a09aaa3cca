//! A pull request is untrusted input: `osbx diff --base` runs on every one, so the head's
//! HelmReleases and sources, the chart repositories they name, their indexes and git trees may be
//! hostile. Each scenario here gives the review such a head and shows that it is refused with exit
//! 2 naming the field, and that nothing outside the chart cache changed, byte for byte: every file
//! of the case's directory outside `chart-cache/` (and helm's own homes), where each attack aims.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::Case;
use super::sources::{copy_dir, git_http, helm_command};
use crate::support::{git, outputs, root, shared};

/// Every file under `dir` but the chart cache and helm's homes, with its bytes (and every
/// directory, so that one made or removed shows too).
fn outside_the_cache(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == "chart-cache" || rel == "helm-home" {
                continue;
            }
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                out.insert(format!("{rel}/"), None);
                walk(root, &path, out);
            } else {
                out.insert(rel, Some(std::fs::read(&path).unwrap_or_default()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The runc-only profile (the OpenSandbox chart only) with its chart from `url` at `tag`.
fn profile(url: &str, tag: &str) -> Value {
    let text = std::fs::read_to_string(root().join("profiles/runc-only.yaml")).unwrap();
    let mut p: Value = serde_saphyr::from_str(&text).unwrap();
    p["opensandbox"]["source"]["url"] = json!(url);
    p["opensandbox"]["source"]["ref"] = json!({"tag": tag});
    p
}

/// Run git with `input` on stdin; its stdout, trimmed.
fn git_in(dir: &Path, args: &[&str], input: &str) -> String {
    let mut child = Command::new("git")
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = outputs(&out);
    assert!(out.status.success(), "git {args:?}: {stderr}");
    stdout.trim().to_owned()
}

/// The tree `tree` with the entry `name` of it replaced by (or added as) `entry` (a `git
/// ls-tree` line), as a new tree.
fn with_entry(repo: &Path, tree: &str, name: &str, entry: &str) -> String {
    let mut lines: Vec<String> = git(repo, &["ls-tree", tree])
        .lines()
        .filter(|l| l.split('\t').nth(1) != Some(name))
        .map(str::to_owned)
        .collect();
    lines.push(entry.to_owned());
    git_in(repo, &["mktree"], &(lines.join("\n") + "\n"))
}

/// The case's head reviewed with charts: exit 2, stderr naming each of `said`, nothing outside the
/// cache changed.
fn refused(case: &Case, said: &[&str]) {
    let before = outside_the_cache(case.scratch());
    let out = case.review("HEAD", &[]);
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "refused, not reviewed: {stdout}{stderr}");
    for s in said {
        assert!(stderr.contains(s), "{s:?} not in: {stderr}");
    }
    let after = outside_the_cache(case.scratch());
    let changed: Vec<&String> = before.keys().chain(after.keys()).filter(|k| before.get(*k) != after.get(*k)).collect();
    assert!(changed.is_empty(), "changed outside the chart cache: {changed:?}\n{stderr}");
}

/// A chart directory whose git tree holds crafted `..` entries (`git mktree` makes them; `git
/// fetch` does not fsck by default): exported as written, they would climb from the chart's
/// directory out of the cache and write `escaped.txt` into the case's directory.
#[test]
fn a_git_tree_with_dot_dot_entries_writes_nothing_outside_the_cache() {
    let srv = tempfile::tempdir().unwrap();
    let (_server, http) = git_http(srv.path(), &srv.path().join("port"));
    let url = opensandbox_repository(srv.path(), &http);
    let work = srv.path().join("work");
    // v2: kubernetes/charts/opensandbox/ holds `..` → `..` → … (six levels: charts, kubernetes,
    // the export's staging directory, git/, the cache, the case) → escaped.txt.
    let blob = git_in(&work, &["hash-object", "-w", "--stdin"], "written outside the cache\n");
    let mut tree = git_in(&work, &["mktree"], &format!("100644 blob {blob}\tescaped.txt\n"));
    for _ in 0..5 {
        tree = git_in(&work, &["mktree"], &format!("040000 tree {tree}\t..\n"));
    }
    let chart = with_entry(&work, "HEAD:kubernetes/charts/opensandbox", "..", &format!("040000 tree {tree}\t.."));
    let charts =
        with_entry(&work, "HEAD:kubernetes/charts", "opensandbox", &format!("040000 tree {chart}\topensandbox"));
    let kubernetes = with_entry(&work, "HEAD:kubernetes", "charts", &format!("040000 tree {charts}\tcharts"));
    let top = with_entry(&work, "HEAD^{tree}", "kubernetes", &format!("040000 tree {kubernetes}\tkubernetes"));
    let commit = git_in(
        &work,
        &["-c", "user.name=t", "-c", "user.email=t@osbx.invalid", "commit-tree", &top, "-p", "HEAD", "-m", "hostile"],
        "",
    );
    git(&work, &["tag", "v2", &commit]);
    git(&work, &["push", "-q", &url, "--tags"]);

    let case = Case::new(None, &profile(&url, "v1"));
    case.set_profile(&profile(&url, "v2"));
    refused(&case, &["is refused", "the tree entry \"..\" is not a file name"]);
    assert!(!case.scratch().join("escaped.txt").exists());
}

/// Write `text` to `path`, making its directory.
fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Add the file `name` (Flux objects of the change's own) to the case's cluster directory and its
/// kustomization, in the work tree: the head a pull request makes.
fn add_to_cluster(case: &Case, name: &str, objects: &str) {
    let dir = case.repo.join("clusters/sandbox");
    write(&dir.join(name), objects);
    let k = dir.join("kustomization.yaml");
    let text = std::fs::read_to_string(&k).unwrap();
    std::fs::write(&k, format!("{text}  - {name}\n")).unwrap();
}

/// A Helm repository whose index keys a chart by a path (`../../../victim`): helm finds the
/// entry, and the cache entry made of the chart's name would be the case's `victim-1.0.0/`,
/// replaced by the pulled chart.
#[test]
fn a_helm_repository_index_with_a_path_for_a_chart_name_is_refused() {
    let srv = tempfile::tempdir().unwrap();
    let (_server, http) = git_http(srv.path(), &srv.path().join("port"));
    let repo_dir = srv.path().join("static/repo");
    std::fs::create_dir_all(&repo_dir).unwrap();
    let chart = srv.path().join("victim");
    write(&chart.join("Chart.yaml"), "apiVersion: v2\nname: victim\nversion: 1.0.0\n");
    write(&chart.join("templates/cm.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: pulled}\n");
    let out = helm_command(srv.path()).arg("package").arg(&chart).arg("-d").arg(&repo_dir).output().unwrap();
    assert!(out.status.success(), "{}", outputs(&out).1);
    write(
        &repo_dir.join("index.yaml"),
        &format!(
            "apiVersion: v1\nentries:\n  ../../../victim:\n    - apiVersion: v2\n      name: victim\n      version: 1.0.0\n      urls: [{http}/static/repo/victim-1.0.0.tgz]\n"
        ),
    );

    let sources = tempfile::tempdir().unwrap();
    let (_os, os_http) = git_http(sources.path(), &sources.path().join("port"));
    let url = opensandbox_repository(sources.path(), &os_http);
    let case = Case::new(None, &profile(&url, "v1"));
    write(&case.scratch().join("victim-1.0.0/keep.txt"), "the user's\n");
    add_to_cluster(
        &case,
        "evil.yaml",
        &format!(
            "apiVersion: source.toolkit.fluxcd.io/v1\nkind: HelmRepository\nmetadata: {{name: evil, namespace: flux-system}}\nspec: {{url: '{http}/static/repo', interval: 1h}}\n---\napiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {{name: evil, namespace: flux-system}}\nspec:\n  interval: 1h\n  chart:\n    spec: {{chart: ../../../victim, version: 1.0.0, sourceRef: {{kind: HelmRepository, name: evil}}}}\n"
        ),
    );
    refused(&case, &["HelmRelease/flux-system/evil: spec.chart.spec.chart is refused: a chart name is not a path"]);
    assert_eq!(std::fs::read_to_string(case.scratch().join("victim-1.0.0/keep.txt")).unwrap(), "the user's\n");
}

/// The OpenSandbox charts at tag `v1` of a repository under `srv`, served at `http`; its URL.
fn opensandbox_repository(srv: &Path, http: &str) -> String {
    let url = format!("{http}/git/opensandbox.git");
    let work = srv.join("work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    for chart in ["opensandbox", "opensandbox-controller", "opensandbox-server"] {
        copy_dir(&shared().join("charts/opensandbox-401a525").join(chart), &work.join("kubernetes/charts").join(chart));
    }
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "the charts"]);
    git(&work, &["tag", "v1"]);
    git(srv, &["init", "-q", "--bare", "git/opensandbox.git"]);
    git(&work, &["push", "-q", &url, "main", "--tags"]);
    url
}

/// An OCIRepository whose tag is a path, or smuggles a helm option after a space: refused
/// before helm runs, naming `spec.ref.tag`.
#[test]
fn a_hostile_oci_tag_is_refused_before_helm_runs() {
    let sources = tempfile::tempdir().unwrap();
    let (_os, os_http) = git_http(sources.path(), &sources.path().join("port"));
    let url = opensandbox_repository(sources.path(), &os_http);
    for tag in ["../../../x", "1.0 --untardir=../../owned", "-x"] {
        let case = Case::new(None, &profile(&url, "v1"));
        add_to_cluster(
            &case,
            "evil.yaml",
            &format!(
                "apiVersion: source.toolkit.fluxcd.io/v1\nkind: OCIRepository\nmetadata: {{name: evil, namespace: flux-system}}\nspec: {{url: 'oci://127.0.0.1:9/charts/x', interval: 1h, ref: {{tag: '{tag}'}}}}\n---\napiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {{name: evil, namespace: flux-system}}\nspec:\n  interval: 1h\n  chartRef: {{kind: OCIRepository, name: evil}}\n"
            ),
        );
        refused(&case, &["OCIRepository flux-system/evil (oci://127.0.0.1:9/charts/x): spec.ref.tag is refused"]);
    }
}

/// A Kustomization the change adds that Flux would transform (`postBuild`) or that applies
/// another source: the review would not show what Flux applies, so it refuses, naming the field.
#[test]
fn a_kustomization_the_review_cannot_follow_is_refused_by_name() {
    let case =
        Case::new(None, &profile("https://github.com/opensandbox-group/OpenSandbox.git", "helm/opensandbox/0.2.2"));
    for (spec, said) in [
        ("postBuild: {substitute: {x: y}}, sourceRef: {kind: GitRepository, name: flux-system}", "spec.postBuild"),
        ("targetNamespace: other, sourceRef: {kind: GitRepository, name: flux-system}", "spec.targetNamespace"),
        ("sourceRef: {kind: GitRepository, name: elsewhere}", "spec.sourceRef"),
    ] {
        write(
            &case.repo.join("clusters/sandbox/extra.yaml"),
            &format!(
                "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {{name: extra, namespace: flux-system}}\nspec: {{interval: 1h, path: ./platform/opensandbox, prune: true, {spec}}}\n"
            ),
        );
        if !std::fs::read_to_string(case.repo.join("clusters/sandbox/kustomization.yaml"))
            .unwrap()
            .contains("extra.yaml")
        {
            add_to_cluster(
                &case,
                "extra.yaml",
                &std::fs::read_to_string(case.repo.join("clusters/sandbox/extra.yaml")).unwrap(),
            );
        }
        let out = case.review("HEAD", &["--no-charts"]);
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
        assert!(
            stderr.contains(&format!("Kustomization flux-system/extra: {said} is not applied by the offline review")),
            "{stderr}"
        );
    }
}
