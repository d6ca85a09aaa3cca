//! What `apply` and `diff` change and show: conflicts with other field managers, Secret values
//! masked, `--dry-run`, and the API key Secret (created, rotated, kept, never printed).

use crate::support::{git, osbx, outputs};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Output;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_name_the_other_manager_and_force_takes_ownership() {
    let (client, dir, kubeconfig) = setup("cf", &[("pod", "runc", [0, 1, 0, 2])]).await;
    let out = run(&kubeconfig, dir.path(), &["apply", "--no-wait"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    // Someone else takes over the pool's capacity with their own field manager.
    let pools = pool_api(&client, "cf-sbx").await;
    let theirs = json!({"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "Pool", "metadata": {"name": "pod", "namespace": "cf-sbx"},
                        "spec": {"capacitySpec": {"bufferMax": 5, "bufferMin": 0, "poolMax": 9, "poolMin": 0}}});
    pools.patch("pod", &PatchParams::apply("ops-team").force(), &Patch::Apply(&theirs)).await.unwrap();

    let out = run(&kubeconfig, dir.path(), &["apply", "--no-wait"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("Pool/cf-sbx/pod") && stderr.contains("conflict") && stderr.contains("\"ops-team\""),
        "{stderr}"
    );
    assert!(stderr.contains(".spec.capacitySpec.bufferMax") && stderr.contains("--force-conflicts"), "{stderr}");
    assert_eq!(pools.get("pod").await.unwrap().data["spec"]["capacitySpec"]["bufferMax"], 5, "nothing written");

    let out = run(&kubeconfig, dir.path(), &["apply", "--no-wait", "--force-conflicts"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    assert_eq!(pools.get("pod").await.unwrap().data["spec"]["capacitySpec"]["bufferMax"], 1);
}

/// The Flux repository `dir/flux`: the render of `dir/profile.yaml` committed and pushed (with
/// upstream tracking, as `git push -u` leaves it) to the bare repository `dir/flux.git`.
fn push_render(dir: &Path) -> PathBuf {
    let (bare, work) = (dir.join("flux.git"), dir.join("flux"));
    if !bare.exists() {
        std::fs::create_dir_all(&work).unwrap();
        git(dir, &["init", "-q", "--bare", "-b", "main", "flux.git"]);
        git(&work, &["init", "-q", "-b", "main"]);
        git(&work, &["config", "user.name", "Test"]);
        git(&work, &["config", "user.email", "test@example.com"]);
        git(&work, &["remote", "add", "origin", &bare.display().to_string()]);
    }
    let out =
        osbx().current_dir(dir).args(["-q", "render", "--profile", "profile.yaml", "--out", "flux"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "osbx: render"]);
    git(&work, &["push", "-q", "-u", "origin", "main"]);
    work
}

/// The managers of a live object's fields.
fn managers(object: &DynamicObject) -> Vec<&str> {
    object.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.as_deref()).collect()
}

/// An object planned as absent (so without a dry-run) that Flux's applier writes, from the render
/// the Flux repository's pushed HEAD holds, before osbx gets to it: the conflict is with
/// `kustomize-controller` alone, and osbx takes the fields, as it does when the dry-run of
/// planning sees that conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_flux_applied_after_it_was_planned_is_taken_over_when_the_render_is_pushed() {
    let (client, dir, kubeconfig) = setup("fx", &[("pod", "runc", [0, 1, 0, 2])]).await;
    let repo = push_render(dir.path());
    // Two requests per second: the Pool's write comes seconds after its namespace.
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("osbx"))
        .current_dir(dir.path())
        .args(["apply", "--no-wait", "--qps", "2", "--profile", "profile.yaml", "--repo"])
        .arg(&repo)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .env("OSBX_COLOR", "never")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let namespaces = Api::<Namespace>::all(client.clone());
    cluster::wait_for("the sandbox namespace created", std::time::Duration::from_secs(60), || {
        let namespaces = namespaces.clone();
        async move { namespaces.get_opt("fx-sbx").await.ok().flatten().map(|_| ()) }
    })
    .await;
    let pools = pool_api(&client, "fx-sbx").await;
    let flux = json!({"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "Pool", "metadata": {"name": "pod", "namespace": "fx-sbx"},
                      "spec": {"capacitySpec": {"bufferMax": 5, "bufferMin": 0, "poolMax": 2, "poolMin": 0}}});
    pools.patch("pod", &PatchParams::apply("kustomize-controller").force(), &Patch::Apply(&flux)).await.unwrap();

    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let pool = pools.get("pod").await.unwrap();
    assert_eq!(pool.data["spec"]["capacitySpec"]["bufferMax"], 1, "osbx's value");
    assert!(managers(&pool).contains(&"osbx"), "{:?}", managers(&pool));
}

/// Fields Flux's applier owns are not taken while the render being applied is not what the Flux
/// repository's pushed HEAD holds (a change not pushed yet, or no repository to tell): Flux would
/// put them back. The apply stops before any write, naming the fields, their owner and why; once
/// the change is pushed, the same apply takes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flux_fields_are_not_taken_while_the_render_is_not_pushed() {
    let (client, dir, kubeconfig) = setup("fn", &[("pod", "runc", [0, 1, 0, 2])]).await;
    let repo = push_render(dir.path());
    // Flux applies what is pushed (bufferMax 1), as kustomize-controller does: forced.
    let out = run(&kubeconfig, dir.path(), &["apply", "--no-wait"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    let pools = pool_api(&client, "fn-sbx").await;
    let pushed = json!({"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": "Pool", "metadata": {"name": "pod", "namespace": "fn-sbx"},
                        "spec": {"capacitySpec": {"bufferMax": 1, "bufferMin": 0, "poolMax": 2, "poolMin": 0}}});
    pools.patch("pod", &PatchParams::apply("kustomize-controller").force(), &Patch::Apply(&pushed)).await.unwrap();
    assert!(managers(&pools.get("pod").await.unwrap()).contains(&"kustomize-controller"));

    // The profile changes and is applied before it is pushed.
    std::fs::write(dir.path().join("profile.yaml"), profile("fn", &[("pod", "runc", [0, 3, 0, 4])])).unwrap();
    let repo_arg = repo.display().to_string();
    // Without --repo the current directory is read: no repository here (unless the temporary
    // directory is inside one, which then does not hold this render either).
    let in_a_repo = std::process::Command::new("git")
        .arg("-C")
        .arg(dir.path())
        .args(["rev-parse", "--is-inside-work-tree"])
        .output()
        .is_ok_and(|o| o.status.success());
    let no_repo = if in_a_repo { "" } else { "is not in a git repository" };
    for (args, why) in [
        (vec!["apply", "--no-wait", "--repo", &repo_arg], "is not what origin/main holds"),
        (vec!["apply", "--no-wait", "--dry-run", "--repo", &repo_arg], "is not what origin/main holds"),
        (vec!["apply", "--no-wait"], no_repo),
    ] {
        let out = run(&kubeconfig, dir.path(), &args).await;
        let (_, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        for said in [
            "Pool/fn-sbx/pod",
            ".spec.capacitySpec.bufferMax",
            "owned by Flux's kustomize-controller",
            why,
            "Flux would put them back",
            "--force-conflicts",
        ] {
            assert!(stderr.contains(said), "{args:?}: {said:?} not said: {stderr}");
        }
        let pool = pools.get("pod").await.unwrap();
        assert_eq!(pool.data["spec"]["capacitySpec"]["bufferMax"], 1, "{args:?}: nothing written");
    }

    // Pushed: Flux will apply the same render, so osbx takes the fields now.
    push_render(dir.path());
    let out = run(&kubeconfig, dir.path(), &["apply", "--no-wait", "--repo", &repo_arg]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    let pool = pools.get("pod").await.unwrap();
    assert_eq!(pool.data["spec"]["capacitySpec"]["bufferMax"], 3, "the pushed render's value");
    assert!(managers(&pool).contains(&"osbx"), "{:?}", managers(&pool));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_masks_secret_values_and_sets_exit_codes() {
    let (client, dir, kubeconfig) = setup("df", &[("pod", "runc", [0, 1, 0, 2])]).await;
    // A template override adds a Secret to the layer.
    let templates = dir.path().join("tpl");
    crate::support::write(
        &templates,
        "opensandbox/secret.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: extra\n  namespace: {{ opensandbox.namespaces.controlPlane }}\nstringData:\n  token: s3cr3t-new-value\n  same: unchanged-value\n",
    );
    let tpl = templates.display().to_string();
    let out = run(&kubeconfig, dir.path(), &["apply", "--no-wait", "--templates", &tpl]).await;
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    let out = run(&kubeconfig, dir.path(), &["diff", "--templates", &tpl]).await;
    assert_eq!(out.status.code(), Some(0), "in sync: {}", outputs(&out).0);

    // Someone changes the Secret in the cluster.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), "df-system");
    let patch = json!({"stringData": {"token": "old-live-value"}});
    secrets.patch("extra", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();

    for output in ["text", "json"] {
        let out = run(&kubeconfig, dir.path(), &["diff", "--templates", &tpl, "-o", output]).await;
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
        for secret in
            ["s3cr3t-new-value", "old-live-value", "unchanged-value", "czNjcjN0", "b2xkLWxpdmU", "dW5jaGFuZ2Vk"]
        {
            assert!(!stdout.contains(secret) && !stderr.contains(secret), "{secret} leaked: {stdout}");
        }
        if output == "text" {
            assert!(stdout.contains("► Secret/df-system/extra configured"), "{stdout}");
            assert!(stdout.contains("*** (before)") && stdout.contains("*** (after)"), "{stdout}");
            assert!(stdout.contains("0 to create, 1 to change"), "{stdout}");
        } else {
            let v: Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(v["summary"]["change"], 1);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_changes_nothing_and_prints_the_change_set() {
    let (client, dir, kubeconfig) = setup("dr", &[("pod", "runc", [0, 1, 0, 2])]).await;
    let out = run(&kubeconfig, dir.path(), &["apply", "--dry-run", "-o", "json"]).await;
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report = json_of(&out);
    assert!(actions(&report).iter().all(|(_, a)| a == "created"), "{report}");
    assert_eq!(report["requests"]["writes"], 0, "{}", report["requests"]);
    let names = cluster::namespace_names(&client).await;
    assert!(!names.contains(&"dr-system".to_owned()), "nothing created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_secret_is_created_and_rotated_and_never_printed() {
    let (client, dir, kubeconfig) = setup("sk", &[("pod", "runc", [0, 1, 0, 2])]).await;
    let _c = controllers("sk").spawn(client.clone());
    let (k1, k2) = ("k1-9f8e7d6c5b4a", "k2-0a1b2c3d4e5f");
    let secrets = [k1, k2, "azEtOWY4ZTdkNmM1YjRh", "azItMGExYjJjM2Q0ZTVm"]; // the keys and their base64
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, format!("{k2}\n")).unwrap();
    let mut transcript = String::new();
    let mut go = |out: Output, expect: i32, what: &str| {
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(expect), "{what}: {stdout}{stderr}");
        // Writing to a String cannot fail.
        let _ = write!(transcript, "== {what}\n{stdout}{stderr}");
        stdout
    };
    let with_key = |args: &[&str], key: Option<&str>| {
        let profile = dir.path().join("profile.yaml");
        let mut full: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        full.extend(["--profile".into(), profile.display().to_string()]);
        let mut cmd = osbx();
        cmd.current_dir(dir.path()).args(full);
        if args[0] != "render" && args[0] != "lint" {
            cmd.arg("--kubeconfig").arg(&kubeconfig);
        }
        match key {
            Some(k) => cmd.env("OSBX_API_KEY", k),
            None => cmd.env_remove("OSBX_API_KEY"),
        };
        cmd.output().unwrap()
    };
    go(with_key(&["render", "--out", "repo"], Some(k1)), 0, "render");
    go(with_key(&["lint", "-o", "json"], Some(k1)), 0, "lint");
    let diff = go(with_key(&["diff"], Some(k1)), 1, "diff before apply");
    assert!(
        diff.contains("► Secret/sk-system/api-key created") && diff.contains("api-key: '***'")
            || diff.contains("api-key: \"***\""),
        "{diff}"
    );
    let apply = go(with_key(&["apply", "-o", "json", "--timeout", "60s"], Some(k1)), 0, "apply");
    assert!(apply.contains("\"object\": \"Secret/sk-system/api-key\""), "{apply}");
    go(with_key(&["diff"], Some(k1)), 0, "diff in sync");
    // Rotation from a file: masked before/after, then configured.
    let key_arg = key_file.display().to_string();
    let rotate = go(with_key(&["apply", "--dry-run", "--api-key-file", &key_arg], None), 0, "apply --dry-run rotate");
    assert!(rotate.contains("Secret/sk-system/api-key configured"), "{rotate}");
    let apply = go(with_key(&["apply", "--api-key-file", &key_arg, "--timeout", "60s"], None), 0, "apply rotate");
    assert!(apply.contains("Secret/sk-system/api-key configured"), "{apply}");
    let stored: k8s_openapi::api::core::v1::Secret =
        Api::namespaced(client.clone(), "sk-system").get("api-key").await.unwrap();
    assert_eq!(stored.data.unwrap()["api-key"].0, k2.as_bytes());
    let verify = go(
        with_key(&["verify", "--only", "opensandbox.server", "-o", "json", "--api-key-file", &key_arg], None),
        1,
        "verify",
    );
    assert!(verify.contains("opensandbox.server"), "{verify}");
    // A later apply --prune without a key keeps the Secret: osbx writes it only when given a key,
    // and never prunes it for not having been given one.
    let prune = go(with_key(&["apply", "--prune", "--timeout", "60s"], None), 0, "apply --prune without a key");
    assert!(!prune.contains("Secret/sk-system/api-key deleted"), "{prune}");
    let kept: k8s_openapi::api::core::v1::Secret =
        Api::namespaced(client.clone(), "sk-system").get("api-key").await.unwrap();
    assert_eq!(kept.data.unwrap()["api-key"].0, k2.as_bytes());
    let diff = go(with_key(&["diff"], None), 0, "diff without a key");
    assert!(!diff.contains("api-key"), "{diff}");
    // Errors too: a broken kubeconfig.
    let bad = dir.path().join("bad-kubeconfig");
    std::fs::write(&bad, "not: [a kubeconfig").unwrap();
    let out = osbx()
        .env("OSBX_API_KEY", k1)
        .args(["apply", "--profile"])
        .arg(dir.path().join("profile.yaml"))
        .arg("--kubeconfig")
        .arg(&bad)
        .output()
        .unwrap();
    let said = outputs(&out).1;
    assert!(said.contains(&format!("cannot load kubeconfig {}", bad.display())), "{said}");
    go(out, 2, "apply with a broken kubeconfig");
    for secret in secrets {
        assert!(!transcript.contains(secret), "{secret} leaked:\n{transcript}");
    }
}
