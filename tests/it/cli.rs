//! `osbx render` end to end: every flag and exit code, on real files and real git repositories.

use std::path::Path;

use predicates::prelude::*;

use crate::support::{git, osbx, outputs, tree, write};

fn render(dir: &Path, profile: &str) -> assert_cmd::assert::Assert {
    osbx().args(["render", "--profile", profile, "--out"]).arg(dir).assert()
}

#[test]
fn no_profile_renders_the_embedded_default_into_the_current_directory() {
    let dir = tempfile::tempdir().unwrap();
    osbx()
        .current_dir(dir.path())
        .arg("render")
        .assert()
        .success()
        .stderr(predicate::str::contains("rendered profile default"));
    let files = tree(dir.path());
    assert!(files.contains_key("clusters/sandbox/apps/opensandbox.yaml"), "{:?}", files.keys());
    assert!(files["platform/opensandbox/values.yaml"].contains("secretKeyRef"), "API key comes from a Secret");
    assert!(!files["platform/opensandbox/values.yaml"].contains("api_key"), "no API key in the ConfigMap");
}

#[test]
fn a_relative_out_directory_that_does_not_exist_yet_is_created() {
    let dir = tempfile::tempdir().unwrap();
    osbx().current_dir(dir.path()).args(["-q", "render", "--out", "new/repo"]).assert().success();
    assert!(dir.path().join("new/repo/clusters/sandbox/kustomization.yaml").is_file());
}

#[test]
fn check_reports_up_to_date_then_differences_with_a_diff() {
    let dir = tempfile::tempdir().unwrap();
    render(dir.path(), "homelab").success();
    osbx().args(["render", "--profile", "homelab", "--check", "--out"]).arg(dir.path()).assert().code(0).stdout("");

    let pools = dir.path().join("platform/sandbox-opensandbox-pools/pools.yaml");
    let edited = std::fs::read_to_string(&pools).unwrap().replace("poolMax: 4", "poolMax: 9");
    std::fs::write(&pools, &edited).unwrap();
    std::fs::remove_file(dir.path().join("platform/sandbox-opensandbox/README.md")).unwrap();
    let before = tree(dir.path());
    let out = osbx().args(["render", "--profile", "homelab", "--check", "--out"]).arg(dir.path()).output().unwrap();
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.contains("--- a/platform/sandbox-opensandbox-pools/pools.yaml"), "{stdout}");
    assert!(stdout.contains("-    poolMax: 9\n+    poolMax: 4"), "{stdout}");
    assert!(stdout.contains("--- /dev/null\n+++ b/platform/sandbox-opensandbox/README.md"), "{stdout}");
    assert!(!stdout.contains('\u{1b}'), "no colour when not a terminal");
    assert!(stderr.contains("2 file(s) differ"), "{stderr}");
    assert_eq!(tree(dir.path()), before, "--check writes nothing");
}

#[test]
fn check_colours_the_diff_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let out = osbx()
        .args(["--color", "always", "render", "--profile", "homelab", "--check", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\u{1b}[32m+"), "added lines are green");
}

#[test]
fn merge_keeps_foreign_entries_and_files_and_refuses_to_overwrite_foreign_files() {
    let dir = tempfile::tempdir().unwrap();
    let kustomization = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - flux-system   # bootstrap\n  - apps/monitoring.yaml\n";
    write(dir.path(), "clusters/homelab/kustomization.yaml", kustomization);
    write(dir.path(), "clusters/homelab/apps/monitoring.yaml", "# mine\nkind: Kustomization\n");
    write(dir.path(), "platform/monitoring/values.yaml", "# mine too\n");
    write(dir.path(), "platform/sandbox-opensandbox/values.yaml", "# hand-written, not osbx's\n");
    let before = tree(dir.path());

    let out = osbx().args(["render", "--profile", "homelab", "--out"]).arg(dir.path()).output().unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("refusing to overwrite files osbx does not own"), "{stderr}");
    assert!(stderr.contains("platform/sandbox-opensandbox/values.yaml"), "{stderr}");
    assert!(stderr.contains("--force"), "{stderr}");
    assert_eq!(tree(dir.path()), before, "nothing written on refusal");

    osbx().args(["render", "--profile", "homelab", "--force", "--out"]).arg(dir.path()).assert().success();
    let after = tree(dir.path());
    assert_eq!(after["clusters/homelab/apps/monitoring.yaml"], "# mine\nkind: Kustomization\n");
    assert_eq!(after["platform/monitoring/values.yaml"], "# mine too\n");
    assert!(osbx::render::is_owned(&after["platform/sandbox-opensandbox/values.yaml"]), "adopted with --force");
    assert_eq!(
        after["clusters/homelab/kustomization.yaml"],
        format!("{kustomization}  - apps/opensandbox.yaml\n  - apps/opensandbox-pools.yaml\n"),
        "existing entries, order and comments kept; ours appended"
    );
    // A second render changes nothing, and owned files are overwritten without --force.
    render(dir.path(), "homelab").success().stderr(predicate::str::contains("0 file(s) written"));
}

#[test]
fn a_new_cluster_kustomization_lists_flux_system_when_bootstrap_made_it() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "clusters/sandbox/flux-system/gotk-sync.yaml", "kind: GitRepository\n");
    render(dir.path(), "default").success();
    let k = std::fs::read_to_string(dir.path().join("clusters/sandbox/kustomization.yaml")).unwrap();
    assert!(
        k.ends_with("resources:\n  - flux-system\n  - apps/opensandbox.yaml\n  - apps/opensandbox-pools.yaml\n"),
        "{k}"
    );
}

#[test]
fn invalid_profile_exits_2_with_location_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(crate::support::root().join("profiles/homelab.yaml")).unwrap().replace(
        "bufferMin: 0, bufferMax: 1, poolMin: 0, poolMax: 2",
        "bufferMin: 2, bufferMax: 1, poolMin: 0, poolMax: 2",
    );
    let profile = dir.path().join("bad.yaml");
    std::fs::write(&profile, text).unwrap();
    let out_dir = dir.path().join("repo");
    let out = osbx().args(["render", "--profile"]).arg(&profile).arg("--out").arg(&out_dir).output().unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr.contains(
            "bad.yaml:162:18: pools.items[1].capacity.bufferMin: bufferMin (2) is greater than bufferMax (1)"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!out_dir.exists(), "nothing written");
}

#[test]
fn unknown_embedded_profile_names_the_known_ones() {
    osbx().args(["render", "--profile", "nope"]).assert().code(2).stderr(predicate::str::contains(
        "no embedded profile named \"nope\" (embedded: default, fresh-cluster, homelab, runc-only)",
    ));
}

#[test]
fn a_failure_part_way_leaves_the_previous_tree_intact() {
    let dir = tempfile::tempdir().unwrap();
    render(dir.path(), "homelab").success();
    let before = tree(dir.path());
    // A changed profile rewrites several files; fail the third rename.
    let text = std::fs::read_to_string(crate::support::root().join("profiles/homelab.yaml"))
        .unwrap()
        .replace("interval: 10m", "interval: 15m")
        .replace("poolMax: 4", "poolMax: 6");
    let profile = dir.path().join("changed.yaml");
    std::fs::write(&profile, &text).unwrap();
    let out = osbx()
        .env("OSBX_FAILPOINT", "rename:3")
        .args(["render", "--profile"])
        .arg(&profile)
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("injected failure"), "{stderr}");
    let mut after = tree(dir.path());
    after.remove("changed.yaml");
    assert_eq!(after, before, "old tree intact, no temp or backup files left");

    // The rerun converges.
    osbx().args(["-q", "render", "--profile"]).arg(&profile).arg("--out").arg(dir.path()).assert().success();
    osbx().args(["render", "--check", "--profile"]).arg(&profile).arg("--out").arg(dir.path()).assert().code(0);
}

fn init_repo(dir: &Path) {
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.name", "Test"]);
    git(dir, &["config", "user.email", "test@example.com"]);
    write(dir, "README.md", "flux repo\n");
    write(dir, "notes.txt", "untracked and unstaged\n");
    git(dir, &["add", "README.md"]);
    git(dir, &["commit", "-q", "-m", "init"]);
}

#[test]
fn commit_commits_exactly_the_files_osbx_changed() {
    let dir = tempfile::tempdir().unwrap();
    init_repo(dir.path());
    let out = osbx()
        .args(["render", "--profile", "homelab", "--commit", "-m", "Add OpenSandbox", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let id = stdout.trim();
    assert_eq!(git(dir.path(), &["rev-parse", "HEAD"]).trim(), id, "prints the commit id");
    assert_eq!(git(dir.path(), &["log", "-1", "--format=%s"]).trim(), "Add OpenSandbox");
    let files = git(dir.path(), &["show", "--name-only", "--format=", "HEAD"]);
    let mut files: Vec<&str> = files.lines().collect();
    files.sort_unstable();
    assert_eq!(files.len(), 12, "{files:?}");
    assert!(files.contains(&".osbx/profile-homelab.yaml"), "the render's state goes with it");
    assert!(!files.contains(&"notes.txt"));
    assert_eq!(git(dir.path(), &["status", "--porcelain"]), "?? notes.txt\n");

    // Nothing changed: no new commit.
    osbx()
        .args(["render", "--profile", "homelab", "--commit", "--out"])
        .arg(dir.path())
        .assert()
        .success()
        .stderr(predicate::str::contains("nothing to commit"));
    assert_eq!(git(dir.path(), &["rev-parse", "HEAD"]).trim(), id);
}

#[test]
fn commit_refuses_when_unrelated_changes_are_staged() {
    let dir = tempfile::tempdir().unwrap();
    init_repo(dir.path());
    git(dir.path(), &["add", "notes.txt"]);
    let out = osbx().args(["render", "--profile", "homelab", "--commit", "--out"]).arg(dir.path()).output().unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("staged changes osbx did not make") && stderr.contains("notes.txt"), "{stderr}");
    assert!(!dir.path().join("clusters").exists(), "refused before writing anything");
}

#[test]
fn commit_outside_a_repository_is_an_error_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let out = osbx().args(["render", "--profile", "homelab", "--commit", "--out"]).arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(outputs(&out).1.contains("not inside a git repository"));
    assert!(!dir.path().join("clusters").exists());
}

#[test]
fn templates_dir_overrides_embedded_templates() {
    let dir = tempfile::tempdir().unwrap();
    let templates = dir.path().join("tpl");
    write(
        &templates,
        "pools/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - pools.yaml\ncommonLabels:\n  team: sandbox\n",
    );
    let out_dir = dir.path().join("repo");
    osbx()
        .args(["-q", "render", "--profile", "homelab", "--templates"])
        .arg(&templates)
        .arg("--out")
        .arg(&out_dir)
        .assert()
        .success();
    let k = std::fs::read_to_string(out_dir.join("platform/sandbox-opensandbox-pools/kustomization.yaml")).unwrap();
    assert!(k.contains("team: sandbox"), "{k}");
    let v = std::fs::read_to_string(out_dir.join("platform/sandbox-opensandbox/values.yaml")).unwrap();
    assert!(v.contains("configToml"), "other templates stay embedded");
}

#[test]
fn a_broken_template_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let templates = dir.path().join("tpl");
    write(&templates, "pools/pools.yaml", "kind: Pool\nname: {{ nope.missing }}\n");
    osbx()
        .args(["render", "--profile", "homelab", "--templates"])
        .arg(&templates)
        .arg("--out")
        .arg(dir.path().join("repo"))
        .assert()
        .code(2)
        .stderr(predicate::str::contains("template pools/pools.yaml"));
    assert!(!dir.path().join("repo").exists());
}

#[test]
fn profiles_lists_the_embedded_profiles_and_marks_the_default() {
    let out = osbx().arg("profiles").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(stdout.lines().any(|l| l.starts_with("default") && l.contains('*')), "{stdout}");
    assert!(stdout.contains("homelab") && stdout.contains("runc-only"), "{stdout}");
}

#[test]
fn completions_are_generated() {
    osbx().args(["completions", "bash"]).assert().success().stdout(predicate::str::contains("osbx"));
}

#[test]
fn a_qps_of_zero_is_refused_naming_the_flag() {
    // No `--qps` means no client-side limit; a limit of zero requests per second is an error.
    osbx().args(["diff", "--qps", "0"]).assert().code(2).stderr(predicate::str::contains("--qps"));
}

/// A build pool of fresh-cluster (`builds: true`) renders on `kata-clh-runtime-rs-build`, and the
/// kata layer's values give that class, and only it, a kata-deploy custom runtime with the
/// `block-plain` drop-in; the plain Kata pool keeps `kata-clh-runtime-rs`.
#[test]
fn a_build_pool_renders_on_the_build_class_the_kata_layer_installs() {
    let dir = tempfile::tempdir().unwrap();
    let shipped = std::fs::read_to_string(crate::support::root().join("profiles/fresh-cluster.yaml")).unwrap();
    let plain = "    - name: vm\n      runtime: kata\n";
    assert!(shipped.contains(plain), "fresh-cluster has a Kata pool vm");
    let profile = shipped.replacen(
        plain,
        &format!("{plain}      capacity: {{bufferMin: 1, bufferMax: 1, poolMin: 1, poolMax: 2}}\n    - name: build\n      runtime: kata\n      builds: true\n"),
        1,
    );
    std::fs::write(dir.path().join("p.yaml"), profile).unwrap();
    render(&dir.path().join("repo"), dir.path().join("p.yaml").to_str().unwrap()).success();
    let files = tree(&dir.path().join("repo"));
    let pools: Vec<serde_json::Value> =
        serde_saphyr::from_str_multiple(&files["platform/opensandbox-pools/pools.yaml"]).unwrap();
    let class = |name: &str| {
        let pool = pools.iter().find(|p| p["metadata"]["name"] == name).unwrap_or_else(|| panic!("Pool {name}"));
        pool["spec"]["template"]["spec"]["runtimeClassName"].as_str().unwrap_or_default().to_owned()
    };
    assert_eq!((class("vm"), class("build")), ("kata-clh-runtime-rs".into(), "kata-clh-runtime-rs-build".into()));
    let cm: serde_json::Value = serde_saphyr::from_str(&files["platform/kata/values.yaml"]).unwrap();
    let values: serde_json::Value = serde_saphyr::from_str(cm["data"]["values.yaml"].as_str().unwrap()).unwrap();
    let runtimes = values["customRuntimes"]["runtimes"].as_object().unwrap();
    assert_eq!(values["customRuntimes"]["enabled"], true);
    assert_eq!(runtimes.keys().collect::<Vec<_>>(), ["kata-clh-runtime-rs-build"]);
    let runtime = &runtimes["kata-clh-runtime-rs-build"];
    assert_eq!(runtime["baseConfig"], "clh-runtime-rs");
    // block-plain, and (issue 52) no hypervisor annotation enabled.
    assert_eq!(
        runtime["dropIn"],
        "[runtime]\nemptydir_mode = \"block-plain\"\n[hypervisor.clh]\nenable_annotations = []\n"
    );
    let class_object: serde_json::Value = serde_saphyr::from_str(runtime["runtimeClass"].as_str().unwrap()).unwrap();
    assert_eq!(
        (&class_object["metadata"]["name"], &class_object["handler"]),
        (&serde_json::json!("kata-clh-runtime-rs-build"), &serde_json::json!("kata-clh-runtime-rs-build"))
    );
    let shim_drop_in = values["shims"]["clh-runtime-rs"]["dropIn"].as_str().unwrap_or_default();
    assert!(!shim_drop_in.contains("emptydir_mode"), "the shim's own class keeps shared-fs: {shim_drop_in}");
    assert_eq!(shim_drop_in, "[hypervisor.clh]\nenable_annotations = []\n");
}

/// `osbx` run with `HOME` at `home`, no `KUBECONFIG` and not in a pod, in `home`: its exit code
/// and stderr.
fn first_run(home: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = osbx()
        .current_dir(home)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("OSBX_API_KEY")
        .env("HOME", home)
        .args(args)
        .output()
        .unwrap();
    let (stdout, stderr) = outputs(&out);
    (out.status.code(), stdout, stderr)
}

/// The commands that reach a cluster, run as a new user would: each refuses in one line of
/// osbx's own that names where it looked and what to do (not kube's `failed to infer config:
/// in-cluster: (…), kubeconfig: (…)`), exit 2, nothing on stdout.
#[test]
fn a_first_run_without_a_kubeconfig_says_where_it_looked_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let default = home.join(".kube/config");
    let none = format!(
        "error: no kubeconfig: --kubeconfig is not given, KUBECONFIG is not set, {} does not exist, and this is not a pod in a cluster (KUBERNETES_SERVICE_HOST is not set); give --kubeconfig FILE, set KUBECONFIG=FILE, or write your cluster's kubeconfig to {}",
        default.display(),
        default.display()
    );
    for command in [&["status"][..], &["verify"], &["diff"], &["apply"], &["status", "--context", "lab"]] {
        let (code, stdout, stderr) = first_run(home, command);
        assert_eq!((code, stdout.as_str()), (Some(2), ""), "{command:?}: {stderr}");
        assert_eq!(stderr.trim_end(), none, "{command:?}");
    }
    let (code, _, stderr) = first_run(home, &["status", "--kubeconfig", "lab.yaml"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.trim_end(), "error: kubeconfig lab.yaml does not exist; give the path of your kubeconfig file");
    // In a pod (KUBERNETES_SERVICE_HOST set) without its service account: the in-cluster
    // config is tried, and its failure said with the places looked at before it.
    let out = osbx()
        .current_dir(home)
        .env_remove("KUBECONFIG")
        .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        .env("KUBERNETES_SERVICE_PORT", "9")
        .env("HOME", home)
        .arg("status")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = outputs(&out).1;
    let said = said.trim_end();
    let prefix = format!(
        "error: no kubeconfig (--kubeconfig is not given, KUBECONFIG is not set, {} does not exist), and KUBERNETES_SERVICE_HOST is set but this pod's in-cluster config cannot be read (",
        default.display()
    );
    assert!(said.starts_with(&prefix) && said.ends_with("); give --kubeconfig FILE or set KUBECONFIG=FILE"), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
    let out = osbx()
        .current_dir(home)
        .env("KUBECONFIG", "a.yaml:b.yaml")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", home)
        .arg("status")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        outputs(&out).1.trim_end(),
        format!(
            "error: no kubeconfig: --kubeconfig is not given and KUBECONFIG=a.yaml:b.yaml names no file that exists; set KUBECONFIG to your kubeconfig file (or unset it to use {}), or give --kubeconfig FILE",
            default.display()
        )
    );
}

/// A kubeconfig that is there but names no context to use, a context it lacks, or a context
/// whose cluster it does not define: one line each, naming the file, what is missing, what it
/// has and what to do. Nothing listens at its server: each is refused before any connection.
#[test]
fn a_kubeconfig_without_a_context_or_cluster_says_what_is_missing_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    std::fs::create_dir(home.join(".kube")).unwrap();
    let default = home.join(".kube/config");
    let kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:9\"}\n\
        users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: lab\n  context: {cluster: c, user: u}\n\
        - name: moved\n  context: {cluster: gone, user: u}\n";
    std::fs::write(&default, kubeconfig).unwrap();
    let at = format!("kubeconfig {} (the default: no --kubeconfig, KUBECONFIG not set)", default.display());
    let cases = [
        (
            &["verify"][..],
            format!(
                "{at} sets no current-context and no context was asked for (its contexts: lab, moved); give --context NAME, or set one with `kubectl config use-context NAME`"
            ),
        ),
        (
            &["status", "--context", "prod"],
            format!(
                "{at} has no context \"prod\" (its contexts: lab, moved); give --context one of them, or --kubeconfig the file that has it"
            ),
        ),
        (
            &["diff", "--context", "moved"],
            format!(
                "{at}: context \"moved\" names cluster \"gone\", which it does not define (its clusters: c); add the cluster with its server to the kubeconfig (`kubectl config set-cluster gone --server URL`), or use another context"
            ),
        ),
    ];
    for (command, line) in cases {
        let (code, stdout, stderr) = first_run(home, command);
        assert_eq!((code, stdout.as_str()), (Some(2), ""), "{command:?}: {stderr}");
        assert_eq!(stderr.trim_end(), format!("error: {line}"), "{command:?}");
    }
    std::fs::write(&default, format!("{kubeconfig}current-context: prod\n")).unwrap();
    let (code, _, stderr) = first_run(home, &["apply"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "error: {at} has no context \"prod\", which its current-context names (its contexts: lab, moved); give --context NAME, or set one with `kubectl config use-context NAME`"
        )
    );
}

/// A check id the profile has no check for is refused before anything connects (exit 2, naming
/// the option, the id and the profile's checks), and so is a selection of nothing: a typo never
/// becomes an empty run that passes. The same for `apply --verify`.
#[test]
fn verify_refuses_an_unknown_check_id_and_an_empty_selection() {
    let dir = tempfile::tempdir().unwrap();
    let no_cluster = dir.path().join("no-kubeconfig");
    let refused = |args: &[&str], said: &str| {
        let out = osbx().current_dir(dir.path()).args(args).arg("--kubeconfig").arg(&no_cluster).output().unwrap();
        let (stdout, stderr) = crate::support::outputs(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stdout}{stderr}");
        assert!(stderr.starts_with(&format!("error: {said}")), "{args:?}: {stderr}");
        assert!(stderr.contains("opensandbox.lifecycle.pod, "), "the known ids are named: {stderr}");
        assert!(stdout.is_empty(), "{stdout}");
    };
    let unknown = "no check of this profile has that id or starts with it; its checks: flux.layers, nodes.ready";
    refused(&["verify", "--only", "opensandbox.lifecyle"], &format!("--only \"opensandbox.lifecyle\": {unknown}"));
    refused(
        &["verify", "--only", "flux.layers", "--skip", "kata.hostkvm"],
        &format!("--skip \"kata.hostkvm\": {unknown}"),
    );
    // A prefix of a real id is not a check (`opensandbox.life` is not `opensandbox.lifecycle`).
    refused(&["verify", "--only", "opensandbox.life"], &format!("--only \"opensandbox.life\": {unknown}"));
    refused(&["verify", "--only", "kata", "--skip", "kata"], "--only and --skip select none of this profile's checks");
    refused(&["apply", "--verify", "--only", "opensandbox.lifecyle"], "--only \"opensandbox.lifecyle\": ");
}

/// `-o crane` and `-o skopeo-sync` list copies to make: with `--check` or `--resolve` (which
/// print text or JSON) they are refused before any registry is asked (exit 2, saying why).
#[test]
fn images_refuses_a_copier_output_with_check_or_resolve() {
    for mode in ["--check", "--resolve"] {
        for output in ["crane", "skopeo-sync"] {
            let out = osbx().args(["images", "--no-charts", mode, "-o", output, "-p", "default"]).output().unwrap();
            let (stdout, stderr) = outputs(&out);
            assert_eq!(out.status.code(), Some(2), "{mode} -o {output}: {stdout}{stderr}");
            assert!(stderr.contains(&format!("-o {output} lists the copies to make")), "{stderr}");
            assert!(stdout.is_empty(), "{stdout}");
        }
    }
}
