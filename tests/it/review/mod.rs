//! `osbx diff --base`: the offline review of a change, on real git repositories with two commits,
//! with the real helm (`tests/cluster/build helm`) expanding the real charts, fetched for real from
//! the loopback sources of [`sources`]: the OpenSandbox charts from a git server at their upstream
//! tags, kata-deploy from an OCI registry, SPIRE from a Helm repository.
//!
//! Each scenario commits a render of a profile (the base: what Flux applies), changes the profile
//! in the work tree (the head) and reads what the review says, object by object and note by note.

mod bad_input;
mod bench;
mod fleet;
mod hostile;
mod images;
mod registry;
pub(crate) mod sources;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex, Weak};

use serde_json::{Value, json};

use self::sources::ChartSources;
use crate::support::{git, osbx, outputs, root};

/// The chart sources, shared by the scenarios that run at once (stopped when the last drops it).
fn sources() -> Arc<ChartSources> {
    static SHARED: Mutex<Weak<ChartSources>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap();
    if let Some(s) = shared.upgrade() {
        return s;
    }
    let s = Arc::new(ChartSources::start());
    *shared = Arc::downgrade(&s);
    s
}

/// The fresh-cluster profile (kata from OCI, SPIRE from a Helm repository, OpenSandbox from git)
/// with its chart sources on loopback, as JSON (which is YAML).
fn profile(sources: Option<&ChartSources>) -> Value {
    let text = std::fs::read_to_string(root().join("profiles/fresh-cluster.yaml")).unwrap();
    let mut p: Value = serde_saphyr::from_str(&text).unwrap();
    if let Some(s) = sources {
        p["opensandbox"]["source"]["url"] = json!(s.opensandbox_git);
        p["kata"]["chart"]["url"] = json!(s.kata_oci);
        p["kata"]["chart"]["insecure"] = json!(true);
        p["spire"]["chart"] = json!({"repository": s.spire_repo});
    }
    p
}

/// A Flux repository holding a committed render of a profile (the base), and the profile file in
/// it (`profile.yaml`) the scenario then changes (the head).
pub struct Case {
    pub dir: tempfile::TempDir,
    pub repo: PathBuf,
    _sources: Option<Arc<ChartSources>>,
}

impl Case {
    /// A repository whose first commit holds `profile` and its render.
    pub fn new(sources: Option<Arc<ChartSources>>, profile: &Value) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("flux");
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        let case = Self { dir, repo, _sources: sources };
        case.set_profile(profile);
        case.render();
        case.commit("the base");
        case
    }

    pub fn profile_path(&self) -> PathBuf {
        self.repo.join("profile.yaml")
    }

    pub fn set_profile(&self, profile: &Value) {
        std::fs::write(self.profile_path(), serde_json::to_string_pretty(profile).unwrap()).unwrap();
    }

    /// `osbx render` of the profile into the repository.
    pub fn render(&self) {
        let out =
            osbx().arg("render").arg("-p").arg(self.profile_path()).arg("--out").arg(&self.repo).output().unwrap();
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(0), "render: {stdout}{stderr}");
    }

    pub fn commit(&self, message: &str) {
        git(&self.repo, &["add", "-A"]);
        git(&self.repo, &["-c", "user.name=t", "-c", "user.email=t@osbx.invalid", "commit", "-q", "-m", message]);
    }

    /// The chart cache and helm's homes of this case.
    pub fn scratch(&self) -> &Path {
        self.dir.path()
    }

    /// `osbx diff --base REF -p profile.yaml --repo REPO ARGS` with helm and the cache of this case.
    pub fn review(&self, base: &str, args: &[&str]) -> Output {
        self.command(base, args).output().unwrap()
    }

    /// The command [`Case::review`] runs, for a test to add to.
    pub fn command(&self, base: &str, args: &[&str]) -> assert_cmd::Command {
        let mut cmd = osbx();
        cmd.arg("diff").arg(format!("--base={base}")).arg("-p").arg(self.profile_path()).arg("--repo").arg(&self.repo);
        cmd.args(args);
        self.with_helm(&mut cmd);
        cmd
    }

    /// `cmd` given the helm, the chart cache and helm's homes of this case.
    pub fn with_helm(&self, cmd: &mut assert_cmd::Command) {
        cmd.env("OSBX_HELM", crate::charts::helm::helm()).env("OSBX_CHART_CACHE", self.scratch().join("chart-cache"));
        for (var, sub) in [("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"), ("HELM_DATA_HOME", "data")] {
            cmd.env(var, self.scratch().join("helm-home").join(sub));
        }
    }

    /// A review as JSON, its exit code checked.
    pub fn review_json(&self, base: &str, args: &[&str], code: i32) -> Value {
        let mut all = vec!["-o", "json"];
        all.extend_from_slice(args);
        let out = self.review(base, &all);
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(code), "{stdout}{stderr}");
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    }

    /// `git status --porcelain` and every file's bytes: what "nothing written" is checked against.
    pub fn state(&self) -> (String, std::collections::BTreeMap<String, String>) {
        (git(&self.repo, &["status", "--porcelain"]), crate::support::tree(&self.repo))
    }
}

/// The change entry for `object` (`Kind/namespace/name`), panicking with the review if absent.
pub fn entry<'a>(review: &'a Value, object: &str) -> &'a Value {
    review["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["object"] == object)
        .unwrap_or_else(|| panic!("no change to {object} in {}", summary(review)))
}

/// Whether `object` changes.
pub fn changes(review: &Value, object: &str) -> bool {
    review["changes"].as_array().unwrap().iter().any(|e| e["object"] == object)
}

/// `object action` per change, for messages.
pub fn summary(review: &Value) -> String {
    review["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| format!("{} {} {:?}", e["object"].as_str().unwrap(), e["action"], e["notes"]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The notes of `object`, joined.
pub fn notes(review: &Value, object: &str) -> String {
    entry(review, object)["notes"]
        .as_array()
        .map(|n| n.iter().map(|n| n.as_str().unwrap()).collect::<Vec<_>>().join("\n"))
        .unwrap_or_default()
}

fn pool<'a>(profile: &'a mut Value, name: &str) -> &'a mut Value {
    profile["pools"]["items"].as_array_mut().unwrap().iter_mut().find(|p| p["name"] == name).unwrap()
}

#[test]
fn a_pool_template_and_capacity_change_says_what_the_controller_does_and_writes_nothing() {
    let s = sources();
    let mut p = profile(Some(&s));
    let case = Case::new(Some(s.clone()), &p);
    // Unchanged: exit 0, every chart expanded (all three sources fetched), nothing to show.
    let r = case.review_json("HEAD", &[], 0);
    assert!(r["changes"].as_array().unwrap().is_empty(), "{}", summary(&r));
    assert!(r["helm"].as_str().unwrap().starts_with("helm v3."), "{r}");
    let first = r.clone();
    let unchanged = |layer: &str| -> u64 {
        r["summary"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["layer"] == layer)
            .map(|c| c["unchanged"].as_u64().unwrap())
            .sum()
    };
    // The Flux objects alone are a handful per layer; with the charts, each layer holds the
    // chart's objects too.
    assert!(unchanged("opensandbox") > 15, "{r}");
    assert!(unchanged("kata") > 5, "{r}");
    assert!(unchanged("spire-agents") > 10, "{r}");
    let cached: Vec<String> = std::fs::read_dir(case.scratch().join("chart-cache"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    for kind in ["git", "helm", "oci"] {
        assert!(cached.iter().any(|c| c == kind), "no {kind} chart was fetched into the cache: {cached:?}");
    }
    // Air-gapped: that cache copied elsewhere is enough, and an empty one names what it lacks.
    let copy = case.scratch().join("air-gapped");
    sources::copy_dir(&case.scratch().join("chart-cache"), &copy);
    let r = case.review_json("HEAD", &["--charts", &copy.display().to_string()], 0);
    assert_eq!(r["summary"], first["summary"], "{r}");
    let empty = case.scratch().join("empty-cache");
    std::fs::create_dir_all(&empty).unwrap();
    let out = case.review("HEAD", &["--charts", &empty.display().to_string()]);
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stderr.contains(&format!("--charts {}: no ", empty.display())), "{stderr}");

    // The head: the shared pool image changes (both Pools' templates), the runc pool grows.
    p["pools"]["defaults"]["image"] = json!("registry.example/code-interpreter:v1.2.0");
    pool(&mut p, "pod")["capacity"]["poolMax"] = json!(12);
    case.set_profile(&p);
    let before = case.state();
    let r = case.review_json("HEAD", &[], 1);
    assert_eq!(case.state(), before, "the review wrote into the repository");
    assert_eq!(r["base"]["how"]["sandbox"], "committed tree", "{r}");
    let pod = notes(&r, "Pool/opensandbox/pod");
    assert!(
        pod.contains("template changed: the OpenSandbox controller replaces this pool's idle pods")
            && pod.contains("at most poolMax = 12 pods")
            && pod.contains("allocated sandboxes keep running"),
        "{pod}"
    );
    assert!(pod.contains("capacity buffer 1–2, pool 1–8 → buffer 1–2, pool 1–12"), "{pod}");
    let vm = notes(&r, "Pool/opensandbox/vm");
    assert!(vm.contains("at most poolMax = 4 pods") && !vm.contains("capacity"), "{vm}");
    let diff = entry(&r, "Pool/opensandbox/pod")["diff"].as_str().unwrap();
    assert!(
        diff.lines().any(|l| l.starts_with('+')
            && l.trim_start_matches('+').trim() == "image: registry.example/code-interpreter:v1.2.0"),
        "{diff}"
    );
    // Only the Pools change, and with them the acceptance layer's revision and profile (its
    // checks re-run): no chart object, no other Flux object.
    let objects: Vec<&str> = r["changes"].as_array().unwrap().iter().map(|e| e["object"].as_str().unwrap()).collect();
    assert_eq!(
        objects,
        [&["Pool/opensandbox/pod", "Pool/opensandbox/vm"][..], &ACCEPTANCE[..]].concat(),
        "{}",
        summary(&r)
    );

    // Once rendered and committed, there is nothing to review against the new commit.
    case.render();
    case.commit("bigger pods pool");
    let r = case.review_json("HEAD", &[], 0);
    assert!(r["changes"].as_array().unwrap().is_empty(), "{}", summary(&r));
    // And the commit before it still shows the same change, from the work tree's render.
    let r = case.review_json("HEAD~1", &["--no-charts"], 1);
    assert_eq!(r["changes"].as_array().unwrap().len(), 2 + ACCEPTANCE.len(), "{}", summary(&r));
}

#[test]
fn chart_objects_from_the_oci_and_helm_repository_charts_change_with_the_profile() {
    let s = sources();
    let mut p = profile(Some(&s));
    let case = Case::new(Some(s.clone()), &p);
    // A second shim: kata-deploy's chart (from the OCI registry) renders its RuntimeClass.
    p["kata"]["shims"] = json!(["clh-runtime-rs", "qemu-runtime-rs"]);
    // Another trust domain: the SPIRE chart (from the Helm repository) renders it into the
    // agent's configuration.
    p["spire"]["trustDomain"] = json!("other.example.org");
    case.set_profile(&p);
    let r = case.review_json("HEAD", &[], 1);
    let rc = entry(&r, "RuntimeClass/kata-qemu-runtime-rs");
    assert_eq!(
        (rc["action"].as_str(), rc["release"].as_str()),
        (Some("created"), Some("HelmRelease/kata-system/kata-deploy")),
        "{rc}"
    );
    let spire: Vec<&Value> = r["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["release"].as_str().is_some_and(|r| r.contains("spire"))
                && e["diff"].as_str().unwrap().contains("other.example.org")
        })
        .collect();
    assert!(!spire.is_empty(), "no object of the SPIRE chart carries the new trust domain:\n{}", summary(&r));
}

#[test]
fn a_removed_pool_and_a_moved_namespace_say_what_goes() {
    let mut p = profile(None);
    let case = Case::new(None, &p);
    // The Kata pool removed.
    p["pools"]["items"].as_array_mut().unwrap().retain(|i| i["name"] != "vm");
    case.set_profile(&p);
    let r = case.review_json("HEAD", &["--no-charts"], 1);
    assert_eq!(entry(&r, "Pool/opensandbox/vm")["action"], "deleted");
    assert!(
        notes(&r, "Pool/opensandbox/vm")
            .contains("the Pool is deleted: its pods go with it, and so does every sandbox allocated from it"),
        "{}",
        summary(&r)
    );
    assert!(!changes(&r, "Pool/opensandbox/pod"), "{}", summary(&r));

    // The sandbox namespace renamed: both Pools move, the old namespace is pruned.
    let mut p = profile(None);
    p["opensandbox"]["namespaces"] = json!({"sandbox": "sandboxes"});
    case.set_profile(&p);
    let r = case.review_json("HEAD", &["--no-charts"], 1);
    let old = notes(&r, "Pool/opensandbox/pod");
    assert!(old.contains("moved from namespace opensandbox to sandboxes: this Pool is deleted with its pods and every sandbox allocated from it"), "{old}");
    let new = notes(&r, "Pool/sandboxes/pod");
    assert!(
        new.contains("moved here from namespace opensandbox: a new Pool, filled from nothing (up to poolMax = 8)"),
        "{new}"
    );
    let ns = notes(&r, "Namespace/opensandbox");
    assert!(
        ns.contains("namespace opensandbox moves to sandboxes: its objects are created there and the old ones pruned"),
        "{ns}"
    );
    assert!(notes(&r, "Namespace/sandboxes").contains("namespace sandboxes is new"), "{}", summary(&r));
}

#[test]
fn a_runtime_class_change_names_the_pools_that_use_it() {
    let s = sources();
    let mut p = profile(Some(&s));
    let case = Case::new(Some(s.clone()), &p);
    // The default shim moves: the vm pool's RuntimeClass goes, another comes.
    p["kata"]["shims"] = json!(["qemu-runtime-rs"]);
    p["kata"]["defaultShim"] = json!("qemu-runtime-rs");
    pool(&mut p, "vm")["runtimeClassName"] = json!("kata-qemu-runtime-rs");
    case.set_profile(&p);
    let out = case.review("HEAD", &["-o", "json"]);
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let r: Value = serde_json::from_str(&stdout).unwrap();
    let gone = notes(&r, "RuntimeClass/kata-clh-runtime-rs");
    assert!(gone.contains("RuntimeClass kata-clh-runtime-rs is deleted"), "{gone}\n{}", summary(&r));
    let new = notes(&r, "RuntimeClass/kata-qemu-runtime-rs");
    assert!(new.contains("RuntimeClass kata-qemu-runtime-rs for (Pool/opensandbox/vm)"), "{new}\n{}", summary(&r));
}

#[test]
fn a_chart_bump_names_the_chart_its_images_and_what_its_crds_do() {
    let s = sources();
    let mut p = profile(Some(&s));
    p["opensandbox"]["source"]["ref"] = json!({"tag": "helm/opensandbox/0.1.0"});
    let case = Case::new(Some(s.clone()), &p);
    // 0.2.0 ships a Chart.lock out of sync with its Chart.yaml: expanding it needs `helm
    // dependency update`, as upstream shipped it.
    p["opensandbox"]["source"]["ref"] = json!({"tag": "helm/opensandbox/0.2.0"});
    case.set_profile(&p);
    let r = case.review_json("HEAD", &[], 1);
    // The HelmRelease is the same in git (the GitRepository's tag moved): its chart changes.
    let hr = entry(&r, "HelmRelease/opensandbox-system/opensandbox");
    assert_eq!(hr["action"], "configured", "{hr}");
    let hr = notes(&r, "HelmRelease/opensandbox-system/opensandbox");
    assert!(hr.contains("chart opensandbox 0.1.0 → opensandbox 0.2.0"), "{hr}\n{}", summary(&r));
    assert!(hr.contains("images: ") && hr.contains(":v0.1.13"), "the server image 0.2.0 deploys: {hr}");
    assert!(changes(&r, "GitRepository/opensandbox-system/opensandbox"), "{}", summary(&r));
    // A CRD the new chart adds, one it changes.
    let added = entry(&r, "CustomResourceDefinition/sandboxsnapshots.sandbox.opensandbox.io");
    assert_eq!(added["action"], "created", "{added}");
    let changed = notes(&r, "CustomResourceDefinition/batchsandboxes.sandbox.opensandbox.io");
    assert!(changed.contains("the BatchSandbox schema changes"), "{changed}");

    // Back from 0.2.0 to 0.1.0: the CRD 0.1.0 lacks is deleted, with every object of its kind.
    case.render();
    case.commit("0.2.0");
    p["opensandbox"]["source"]["ref"] = json!({"tag": "helm/opensandbox/0.1.0"});
    case.set_profile(&p);
    let r = case.review_json("HEAD", &[], 1);
    let gone = notes(&r, "CustomResourceDefinition/sandboxsnapshots.sandbox.opensandbox.io");
    assert!(gone.contains("the CRD is deleted, and with it every SandboxSnapshot in the cluster"), "{gone}");
}

/// Pinning digests (`images.digests`, what `osbx images --resolve` writes) is an image change in
/// the review: the chart's installer (through kata-deploy's own value, expanded by the real helm)
/// and the Pools' image (in the rendered Pool) are pulled by the digest from then on.
#[test]
fn a_pinned_digest_is_an_image_change_in_the_review() {
    let s = sources();
    let mut p = profile(Some(&s));
    let case = Case::new(Some(s.clone()), &p);
    let kata = format!("sha256:{}", "a".repeat(64));
    let pool = format!("sha256:{}", "b".repeat(64));
    let image = p["pools"]["defaults"]["image"].as_str().unwrap().to_owned();
    let (name, _tag) = image.rsplit_once(':').unwrap();
    p["images"] = json!({"digests": {"quay.io/kata-containers/kata-deploy": kata, name: pool}});
    case.set_profile(&p);
    let r = case.review_json("HEAD", &[], 1);
    let hr = notes(&r, "HelmRelease/kata-system/kata-deploy");
    assert!(hr.contains("images: ") && hr.contains(&format!("quay.io/kata-containers/kata-deploy@{kata}")), "{hr}");
    let pinned: Vec<&Value> = r["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["object"].as_str().is_some_and(|o| o.starts_with("Pool/")))
        .collect();
    assert!(!pinned.is_empty(), "{}", summary(&r));
    for e in pinned {
        let diff = e["diff"].as_str().unwrap();
        assert!(diff.contains(&format!("{image}@{pool}")), "{e}");
    }
}

#[test]
fn a_value_the_new_chart_no_longer_reads_is_named_before_it_merges() {
    let s = sources();
    let mut p = profile(Some(&s));
    // 0.2.0's controller chart has `networkPolicy`; the chart at 0.2.2 dropped it.
    p["opensandbox"]["source"]["ref"] = json!({"tag": "helm/opensandbox/0.2.0"});
    p["opensandbox"]["values"] = json!({"opensandbox-controller": {"networkPolicy": {"enabled": true}}});
    let case = Case::new(Some(s.clone()), &p);
    p["opensandbox"]["source"]["ref"] = json!({"tag": "helm/opensandbox/0.2.2"});
    case.set_profile(&p);
    let r = case.review_json("HEAD", &[], 1);
    let hr = notes(&r, "HelmRelease/opensandbox-system/opensandbox");
    assert!(
        hr.contains("does not read") && hr.contains("opensandbox-controller.networkPolicy.enabled"),
        "{hr}\n{}",
        summary(&r)
    );
    // Read by the base's chart: no such note when the chart does not change.
    case.render();
    case.commit("0.2.2");
    p["pools"]["items"][0]["capacity"]["poolMax"] = json!(9);
    case.set_profile(&p);
    let r = case.review_json("HEAD", &[], 1);
    assert!(!changes(&r, "HelmRelease/opensandbox-system/opensandbox"), "{}", summary(&r));
}

/// The markers around the generated comment in docs/review.md.
const BEGIN: &str = "<!-- begin: generated by review::the_worked_comment_in_docs_review_md_is_what_osbx_prints -->\n";
const END: &str = "<!-- end: generated -->";

#[test]
fn the_worked_comment_in_docs_review_md_is_what_osbx_prints() {
    let mut p = profile(None);
    let case = Case::new(None, &p);
    p["pools"]["defaults"]["image"] = json!("registry.example/code-interpreter:v1.2.0");
    pool(&mut p, "pod")["capacity"]["poolMax"] = json!(12);
    case.set_profile(&p);
    let out = case.review("HEAD", &["--no-charts", "-o", "markdown"]);
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    // The commit and the scratch path are this run's: shown as in the doc.
    let head = git(&case.repo, &["rev-parse", "--short=7", "HEAD"]).trim().to_owned();
    let comment = stdout.replace(&head, "1a2b3c4").replace(&case.repo.display().to_string(), "flux-repo");
    for line in
        ["| sandbox | opensandbox-pools | 0 | 2 | 0 |", "#### What it means for sandboxes", "<details><summary>"]
    {
        assert!(comment.contains(line), "{comment}");
    }
    let generated =
        format!("{BEGIN}\n````markdown\n{}\n````\n\nRendered:\n\n{}\n{END}", comment.trim_end(), comment.trim_end());
    let path = root().join("docs/review.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (start, end) = (doc.find(BEGIN).expect("the begin marker"), doc.find(END).expect("the end marker"));
    let current = &doc[start..end + END.len()];
    if std::env::var_os("OSBX_UPDATE_EXAMPLES").is_some() {
        std::fs::write(&path, format!("{}{generated}{}", &doc[..start], &doc[end + END.len()..])).unwrap();
        return;
    }
    assert!(
        current == generated,
        "docs/review.md's worked comment differs from what osbx prints; refresh it with OSBX_UPDATE_EXAMPLES=1 tests/run review\n{generated}"
    );
}

#[test]
fn a_base_that_holds_only_the_profile_is_rendered_as_that_commit_holds_it() {
    let mut p = profile(None);
    let case = Case::new(None, &p);
    std::fs::remove_dir_all(case.repo.join("clusters")).unwrap();
    std::fs::remove_dir_all(case.repo.join("platform")).unwrap();
    case.commit("the profile only: Flux's tree is made elsewhere");
    let r = case.review_json("HEAD", &["--no-charts"], 0);
    assert_eq!(r["base"]["how"]["sandbox"], "rendered from the profile as HEAD holds it", "{r}");
    pool(&mut p, "vm")["capacity"]["poolMax"] = json!(6);
    case.set_profile(&p);
    let r = case.review_json("HEAD", &["--no-charts"], 1);
    let objects: Vec<&str> = r["changes"].as_array().unwrap().iter().map(|e| e["object"].as_str().unwrap()).collect();
    assert_eq!(objects, [&["Pool/opensandbox/vm"][..], &ACCEPTANCE[..]].concat(), "{}", summary(&r));
}

/// What fresh-cluster's acceptance layer changes with any change to another layer: its profile,
/// and the revision its Job and Deployment check.
const ACCEPTANCE: [&str; 4] = [
    "ConfigMap/osbx-acceptance/osbx-acceptance-profile",
    "Deployment/osbx-acceptance/osbx-acceptance",
    "CronJob/osbx-acceptance/osbx-acceptance-deep",
    "Job/osbx-acceptance/osbx-acceptance",
];

#[test]
fn a_git_chart_source_is_fetched_by_the_users_git_with_its_settings() {
    let s = sources();
    let mut p = profile(Some(&s));
    // Nothing listens on port 9 of the loopback: only the user's git configuration (a
    // `url.<base>.insteadOf`, as one points a public URL at a mirror) reaches the chart.
    let alias = "http://127.0.0.1:9/mirrored/opensandbox.git";
    p["opensandbox"]["source"]["url"] = json!(alias);
    let case = Case::new(Some(s.clone()), &p);
    p["pools"]["items"][0]["capacity"]["poolMax"] = json!(9);
    case.set_profile(&p);
    let config = case.scratch().join("gitconfig");
    std::fs::write(&config, format!("[url \"{}\"]\n\tinsteadOf = {alias}\n", s.opensandbox_git)).unwrap();
    let out = case.command("HEAD", &["-o", "json"]).env("GIT_CONFIG_GLOBAL", &config).output().unwrap();
    let (stdout, stderr) = outputs(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the chart fetched through the mirror, the pool's change shown: {stdout}{stderr}"
    );
    let review: Value = serde_json::from_str(&stdout).unwrap();
    assert!(review["changes"].as_array().is_some_and(|c| !c.is_empty()), "{stdout}");
    assert!(!stderr.contains("cannot fetch"), "{stderr}");
}
