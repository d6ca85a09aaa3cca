//! A newcomer's first rollout: `osbx init --fleet`, then `osbx rollout` on a repository made
//! with `git init`. What a first run can meet is handled, or refused in one line that says what
//! is wrong and what to do (exit 2), before anything is written: a repository with no commit
//! yet (handled, as `render --commit` handles it), `--push` with no upstream, a detached HEAD, a
//! directory that is not a repository, a cluster whose kubeconfig or context is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::{git, osbx, outputs};

/// `osbx init --fleet` in a fresh directory, and `repo/` made with `git init` (no commit).
fn newcomer() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    osbx().current_dir(dir.path()).args(["-q", "init", "--fleet"]).assert().success();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.email", "t@example.org"]);
    git(&repo, &["config", "user.name", "t"]);
    (dir, repo)
}

/// `osbx -q rollout --fleet fleet.yaml --repo repo` with `extra`: exit code, stdout, stderr.
fn rollout(dir: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let out = osbx()
        .current_dir(dir)
        .env_remove("KUBECONFIG")
        .args(["-q", "rollout", "--fleet", "fleet.yaml", "--repo", "repo"])
        .args(extra)
        .output()
        .unwrap();
    let (stdout, stderr) = outputs(&out);
    (out.status.code(), stdout, stderr)
}

/// A refusal: exit 2, and stderr exactly one line, `error: ` and `line`.
#[track_caller]
fn refused(result: &(Option<i32>, String, String), line: &str) {
    let (code, stdout, stderr) = result;
    assert_eq!(*code, Some(2), "{stdout}{stderr}");
    assert_eq!(stderr.trim_end(), format!("error: {line}"), "one line, saying what to do");
}

/// Nothing was written: no commit, an empty work tree, no gate note.
#[track_caller]
fn untouched(repo: &Path, head: Option<&str>) {
    let now = Command::new("git").arg("-C").arg(repo).args(["rev-parse", "-q", "--verify", "HEAD"]).output().unwrap();
    assert_eq!(outputs(&now).0.trim(), head.unwrap_or(""), "no commit");
    assert_eq!(git(repo, &["status", "--porcelain"]), "", "nothing written");
    let notes = git(repo, &["for-each-ref", "refs/notes"]);
    assert_eq!(notes, "", "no gate recorded");
}

#[test]
fn a_first_dry_run_on_a_repository_with_no_commit_plans_every_wave() {
    let (dir, repo) = newcomer();
    let (code, stdout, stderr) = rollout(dir.path(), &["--dry-run", "-o", "json"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let states: Vec<&str> = report["waves"].as_array().unwrap().iter().map(|w| w["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["pending", "pending"]);
    assert!(report["waves"][0]["files"].as_u64().unwrap() > 0, "{report}");
    let (code, stdout, stderr) = rollout(dir.path(), &["--dry-run", "--resume"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.starts_with("wave canary: sandbox-a (pending; "), "{stdout}");
    untouched(&repo, None);
}

#[test]
fn push_without_an_upstream_is_refused_before_anything_is_written() {
    let (dir, repo) = newcomer();
    refused(
        &rollout(dir.path(), &["--push", "--dry-run"]),
        "--push: branch main of repo has no upstream to push to; push it once with `git push -u <remote> main` (after a first commit), or drop --push",
    );
    git(&repo, &["remote", "add", "origin", &dir.path().join("flux.git").display().to_string()]);
    let line = "--push: branch main of repo has no upstream to push to; push it once with `git push -u origin main` (after a first commit), or drop --push";
    refused(&rollout(dir.path(), &["--push", "--dry-run"]), line);
    // Not only in a dry run: the run stops before it reaches a cluster or writes.
    refused(&rollout(dir.path(), &["--push"]), line);
    untouched(&repo, None);
}

#[test]
fn a_detached_head_is_refused() {
    let (dir, repo) = newcomer();
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "first"]);
    let head = git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    git(&repo, &["checkout", "-q", "--detach"]);
    let line = format!(
        "repo: HEAD is detached at {}, so a wave's commit would reach no branch Flux follows; check out that branch (`git switch <branch>`) and run again",
        &head[..12]
    );
    refused(&rollout(dir.path(), &["--dry-run"]), &line);
    refused(&rollout(dir.path(), &[]), &line);
    untouched(&repo, Some(&head));
}

#[test]
fn a_directory_that_is_not_a_repository_is_refused() {
    let (dir, repo) = newcomer();
    std::fs::remove_dir_all(repo.join(".git")).unwrap();
    refused(
        &rollout(dir.path(), &["--dry-run"]),
        "repo is not inside a git repository: osbx rollout commits each wave to the branch Flux follows (give --repo the Flux repository's work tree, or `git init` it)",
    );
    assert_eq!(std::fs::read_dir(&repo).unwrap().count(), 0, "nothing written");
}

#[test]
fn a_cluster_without_its_kubeconfig_context_is_refused_naming_the_fleet_field() {
    let (dir, repo) = newcomer();
    // A kubeconfig whose one context is not the cluster's name (nothing listens at its server:
    // the run must stop before it connects).
    let kubeconfig = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:9\"}\n\
        users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: lab\n  context: {cluster: c, user: u}\ncurrent-context: lab\n";
    std::fs::write(dir.path().join("kubeconfig"), kubeconfig).unwrap();
    refused(
        &rollout(dir.path(), &["--kubeconfig", "kubeconfig"]),
        "cluster sandbox-a: kubeconfig kubeconfig has no context \"sandbox-a\" (its contexts: lab); set clusters[0].context (and .kubeconfig) in the fleet file to the context that reaches it, or give --kubeconfig",
    );
    // No kubeconfig at all (none given, no KUBECONFIG, no ~/.kube/config).
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let out = osbx()
        .current_dir(dir.path())
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", &home)
        .args(["-q", "rollout", "--fleet", "fleet.yaml", "--repo", "repo"])
        .output()
        .unwrap();
    let (stdout, stderr) = outputs(&out);
    refused(
        &(out.status.code(), stdout, stderr),
        &format!(
            "cluster sandbox-a: no kubeconfig: --kubeconfig is not given, KUBECONFIG is not set, {home}/.kube/config does not exist, and this is not a pod in a cluster (KUBERNETES_SERVICE_HOST is not set); give --kubeconfig FILE, set KUBECONFIG=FILE, or write your cluster's kubeconfig to {home}/.kube/config; set clusters[0].context (and .kubeconfig) in the fleet file to the context that reaches it, or give --kubeconfig",
            home = home.display()
        ),
    );
    untouched(&repo, None);
}
