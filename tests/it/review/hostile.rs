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

/// A chart `name` at `version` whose one ConfigMap holds `from`, packaged into `srv/static/<dir>`
/// with an index: a Helm repository served at `<http>/static/<dir>`.
fn helm_repository(srv: &Path, http: &str, dir: &str, name: &str, version: &str, from: &str) -> String {
    let repo_dir = srv.join("static").join(dir);
    std::fs::create_dir_all(&repo_dir).unwrap();
    let chart = srv.join("src").join(dir).join(name);
    write(&chart.join("Chart.yaml"), &format!("apiVersion: v2\nname: {name}\nversion: {version}\n"));
    write(
        &chart.join("templates/cm.yaml"),
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: pulled}}\ndata: {{from: {from}}}\n"),
    );
    let out = helm_command(srv).arg("package").arg(&chart).arg("-d").arg(&repo_dir).output().unwrap();
    assert!(out.status.success(), "{}", outputs(&out).1);
    let url = format!("{http}/static/{dir}");
    write(
        &repo_dir.join("index.yaml"),
        &format!(
            "apiVersion: v1\nentries:\n  {name}:\n    - apiVersion: v2\n      name: {name}\n      version: {version}\n      urls: [{url}/{name}-{version}.tgz]\n"
        ),
    );
    url
}

/// A HelmRepository `evil` at `url` and a HelmRelease `evil` of its chart `c` 1.0.0, with `spec`
/// added to the release's (YAML flow entries, `key: value, …`).
fn helm_release(url: &str, metadata: &str, spec: &str) -> String {
    format!(
        "apiVersion: source.toolkit.fluxcd.io/v1\nkind: HelmRepository\nmetadata: {{name: evil, namespace: flux-system}}\nspec: {{url: '{url}', interval: 1h}}\n---\napiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {{{metadata}}}\nspec:\n  interval: 1h\n  chart:\n    spec: {{chart: c, version: 1.0.0, sourceRef: {{kind: HelmRepository, name: evil, namespace: flux-system}}}}\n{spec}"
    )
}

/// A release name from the change is an argument of `helm template`: named `--post-renderer=…`
/// (given outright, or derived by helm-controller from `targetNamespace` and the name), helm
/// would run the change's program on the reviewing machine. Refused with exit 2 naming the field
/// and the file, before anything is fetched; the program never runs.
#[test]
fn a_release_name_that_is_a_helm_option_is_refused_and_runs_nothing() {
    let srv = tempfile::tempdir().unwrap();
    let (_server, http) = git_http(srv.path(), &srv.path().join("port"));
    let url = helm_repository(srv.path(), &http, "charts", "c", "1.0.0", "the-pr");
    let marker = srv.path().join("ran");
    // The change's own program: it leaves a marker, then passes the manifests on.
    let program = srv.path().join("pr");
    write(&program, &format!("#!/bin/sh\necho ran >> '{}'\ncat\n", marker.display()));
    std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::copy(&program, srv.path().join("pr-evil")).unwrap();
    // The same program would run through helm as the change's chart is templated: the attack is
    // real on a helm that is given the name as it comes.
    let out = helm_command(srv.path())
        .args(["template", &format!("--post-renderer={}", program.display())])
        .arg(srv.path().join("src/charts/c"))
        .output()
        .unwrap();
    assert!(out.status.success() && marker.exists(), "helm runs a post-renderer: {}", outputs(&out).1);
    std::fs::remove_file(&marker).unwrap();

    let sources = tempfile::tempdir().unwrap();
    let (_os, os_http) = git_http(sources.path(), &sources.path().join("port"));
    let os_url = opensandbox_repository(sources.path(), &os_http);
    let option = format!("--post-renderer={}", program.display());
    for (metadata, spec, field) in [
        ("name: evil, namespace: flux-system".to_owned(), format!("  releaseName: '{option}'\n"), "spec.releaseName"),
        (
            "name: evil, namespace: flux-system".to_owned(),
            format!("  targetNamespace: '{option}'\n"),
            "spec.targetNamespace and metadata.name",
        ),
        (format!("name: '{option}', namespace: flux-system"), String::new(), "derives from metadata.name"),
    ] {
        let case = Case::new(None, &profile(&os_url, "v1"));
        add_to_cluster(&case, "evil.yaml", &helm_release(&url, &metadata, &spec));
        refused(&case, &["head: clusters/sandbox/evil.yaml: HelmRelease/flux-system/", field, "is refused"]);
        assert!(!marker.exists(), "{field}: the change's program ran on the reviewing machine");
        assert!(
            !case.scratch().join("chart-cache/helm").exists(),
            "{field}: nothing is fetched for a release helm could not be given"
        );
    }
}

/// Two Helm repositories whose URLs are alike but for `/` and `_` (`…/a/b` and `…/a_b`) serve
/// different charts under one name and version. The base expands its release from the first;
/// the head moves it to the second: the review expands it from the second (its ConfigMap
/// changes), never from the cache entry the first filled.
#[test]
fn a_source_with_a_colliding_name_is_fetched_from_itself_not_from_the_cache() {
    let srv = tempfile::tempdir().unwrap();
    let (_server, http) = git_http(srv.path(), &srv.path().join("port"));
    let first = helm_repository(srv.path(), &http, "a/b", "c", "1.0.0", "the-base");
    let second = helm_repository(srv.path(), &http, "a_b", "c", "1.0.0", "the-head");
    let sources = tempfile::tempdir().unwrap();
    let (_os, os_http) = git_http(sources.path(), &sources.path().join("port"));
    let os_url = opensandbox_repository(sources.path(), &os_http);
    let case = Case::new(None, &profile(&os_url, "v1"));
    let metadata = "name: moved, namespace: flux-system";
    add_to_cluster(&case, "moved.yaml", &helm_release(&first, metadata, ""));
    case.commit("a release of the first repository");
    // The base alone: the cache now holds the first repository's chart.
    let unchanged = case.review_json("HEAD", &[], 0);
    assert!(unchanged["changes"].as_array().unwrap().is_empty(), "{unchanged}");
    std::fs::write(case.repo.join("clusters/sandbox/moved.yaml"), helm_release(&second, metadata, "")).unwrap();
    let review = case.review_json("HEAD", &[], 1);
    let cm = super::entry(&review, "ConfigMap/flux-system/pulled");
    let diff = cm["diff"].as_str().unwrap();
    assert!(diff.contains("-  from: the-base") && diff.contains("+  from: the-head"), "{diff}");
    // Each repository has an entry of its own.
    let entries: Vec<String> = std::fs::read_dir(case.scratch().join("chart-cache/helm"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries.len(), 1, "one readable URL directory: {entries:?}");
    let charts = std::fs::read_dir(case.scratch().join("chart-cache/helm").join(&entries[0])).unwrap().count();
    assert_eq!(charts, 2, "two entries beside it, one per repository");
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

/// What GitHub would link or notify in `md` outside code blocks and spans (its autolinks
/// extension and its reference filters, which read every other text): `@name`, `@org/team` and
/// so an email address, a URL scheme's `://`, `www.`, `#1`, `GH-1`.
fn linkable(md: &str) -> Vec<String> {
    use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
    let mut out = Vec::new();
    let mut in_code = false;
    for event in Parser::new_ext(md, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH) {
        let text = match event {
            Event::Start(Tag::CodeBlock(_)) => {
                in_code = true;
                continue;
            }
            Event::End(TagEnd::CodeBlock) => {
                in_code = false;
                continue;
            }
            Event::Text(t) | Event::Html(t) | Event::InlineHtml(t) if !in_code => t.to_ascii_lowercase(),
            _ => continue,
        };
        let b = text.as_bytes();
        for i in 0..b.len() {
            let next = |k: usize| b.get(i + k).copied().unwrap_or(b' ');
            let at = &b[i..];
            if (b[i] == b'@' && next(1).is_ascii_alphanumeric())
                || (b[i] == b'#' && next(1).is_ascii_digit() && (i == 0 || b[i - 1] != b'&'))
                || at.starts_with(b"://")
                || at.starts_with(b"www.")
                || (at.starts_with(b"gh-") && next(3).is_ascii_digit())
            {
                out.push(text.clone());
            }
        }
    }
    out
}

/// A pull request's names and values reach the comment (the summary, the table, the notes): none
/// of them may mention anyone, reference an issue or link anywhere, yet each reads as written.
#[test]
fn the_pull_request_comment_notifies_no_one_and_links_nowhere_the_change_chose() {
    let case =
        Case::new(None, &profile("https://github.com/opensandbox-group/OpenSandbox.git", "helm/opensandbox/0.2.2"));
    let hostile = "cc @octocat @github/security https://evil.example/x www.evil.example admin@evil.example #1 GH-2";
    add_to_cluster(
        &case,
        "hello.yaml",
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: '{hostile}'}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x, namespace: '{hostile}'}}\ndata: {{note: '{hostile}'}}\n"
        ),
    );
    let out = case.review("HEAD", &["--no-charts", "-o", "markdown"]);
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let found = linkable(&stdout);
    assert!(found.is_empty(), "GitHub would link or notify in: {found:#?}\n{stdout}");
    // Shown as written (the neutraliser is invisible): the summary, the note, the diff.
    let shown: String = stdout.chars().filter(|c| !matches!(c, '\u{200B}'..='\u{200D}' | '\u{2060}' | '\\')).collect();
    assert!(shown.contains(&format!("<b>Namespace/{hostile}</b>")), "{shown}");
    assert!(shown.contains(&format!("namespace {hostile} is new")), "{shown}");
    assert!(
        stdout.lines().any(|l| l.starts_with("+  note: ") && l.contains(hostile)),
        "the diff is as the change wrote it, in its fence: {stdout}"
    );
}

/// A Kustomization the change suspends applies nothing, and one with a `kubeConfig` applies to
/// another cluster: neither is reviewed as applied here; each is refused naming the field.
#[test]
fn a_suspended_or_remote_kustomization_is_refused_by_name() {
    for (spec, said) in [
        ("suspend: true", "spec.suspend is not applied by the offline review (suspended"),
        (
            "kubeConfig: {secretRef: {name: remote}}",
            "spec.kubeConfig is not applied by the offline review (it applies to another cluster",
        ),
    ] {
        let case =
            Case::new(None, &profile("https://github.com/opensandbox-group/OpenSandbox.git", "helm/opensandbox/0.2.2"));
        add_to_cluster(
            &case,
            "extra.yaml",
            &format!(
                "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {{name: extra, namespace: flux-system}}\nspec: {{interval: 1h, path: ./platform/opensandbox, prune: true, sourceRef: {{kind: GitRepository, name: flux-system}}, {spec}}}\n"
            ),
        );
        let out = case.review("HEAD", &["--no-charts", "-o", "markdown"]);
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(2), "refused, not reviewed as applied here: {stdout}{stderr}");
        assert!(stderr.contains(&format!("Kustomization flux-system/extra: {said}")), "{stderr}");
        assert!(stdout.is_empty(), "{stdout}");
    }
}

/// osbx's note that the acceptance checks run again is the acceptance layer's Job's own: a Job
/// the change annotates the same way, in another layer or as osbx names its Job, gets none.
#[test]
fn only_the_acceptance_layers_own_job_says_the_checks_run_again() {
    let mut p = super::profile(None);
    let case = Case::new(None, &p);
    p["pools"]["items"].as_array_mut().unwrap().iter_mut().find(|x| x["name"] == "pod").unwrap()["capacity"]["poolMax"] =
        json!(12);
    case.set_profile(&p);
    let job = |ns: &str, name: &str| {
        format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  template:\n    metadata:\n      annotations: {{osbx.dev/revision: 0123456789abcdef}}\n    spec: {{restartPolicy: Never, containers: [{{name: x, image: x}}]}}\n"
        )
    };
    add_to_cluster(
        &case,
        "impostors.yaml",
        &format!("{}---\n{}", job("flux-system", "impostor"), job("osbx-acceptance", "osbx-acceptance")),
    );
    let r = case.review_json("HEAD", &["--no-charts"], 1);
    let own = r["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["object"] == "Job/osbx-acceptance/osbx-acceptance" && e["layer"] == "acceptance")
        .unwrap_or_else(|| panic!("{}", super::summary(&r)));
    assert!(
        own["notes"][0].as_str().unwrap().starts_with("the acceptance checks run again in the cluster at revision "),
        "{own}"
    );
    let impostors: Vec<&Value> =
        r["changes"].as_array().unwrap().iter().filter(|e| e["layer"] == "clusters/sandbox").collect();
    assert_eq!(impostors.len(), 2, "{}", super::summary(&r));
    for e in impostors {
        assert!(e["notes"].is_null(), "a Job of the change's own is not the acceptance layer's: {e}");
    }
}
