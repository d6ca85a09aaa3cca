//! `osbx rollout --dry-run`: where a rollout stands, read from the repository and its history
//! alone (no cluster is reached). The waves' commits are made as a rollout makes them: the
//! clusters of the waves so far rendered as the fleet file says (a fleet file with only their
//! change), committed with the rollout's subject and trailers.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::builder::TestFleet;
use crate::support::{osbx, outputs};

const CLUSTERS: [&str; 3] = ["lab-a", "lab-b", "lab-c"];

/// The fleet with each cluster's Kata pool at `pool_max`, in three waves of one cluster.
fn fleet(pool_max: [u32; 3]) -> String {
    CLUSTERS
        .iter()
        .zip(pool_max)
        .fold(TestFleet::new("labs", "fresh-cluster"), |f, (name, n)| {
            f.cluster(name, json!({"pools": {"items": [{"name": "vm", "capacity": {"poolMax": n}}]}}))
        })
        .waves(&json!([
            {"name": "canary", "clusters": ["lab-a"]},
            {"name": "second", "clusters": ["lab-b"]},
            {"name": "rest", "selector": {}},
        ]))
        .yaml()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", outputs(&out).1);
    outputs(&out).0
}

/// A Flux repository with the fleet at 8 rendered and committed by `render --commit`.
fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.email", "t@example.org"]);
    git(&repo, &["config", "user.name", "t"]);
    render_commit(dir.path(), &fleet([8; 3]), "the fleet");
    dir
}

/// `osbx render --fleet --commit -m message` of `text`.
fn render_commit(dir: &Path, text: &str, message: &str) {
    let file = dir.join("render.yaml");
    std::fs::write(&file, text).unwrap();
    osbx()
        .args(["-q", "render", "--fleet"])
        .arg(&file)
        .arg("--out")
        .arg(dir.join("repo"))
        .args(["--commit", "-m", message])
        .assert()
        .success();
}

/// Commit wave `wave` as `osbx rollout` does: `text` renders exactly the waves so far.
fn commit_wave(dir: &Path, text: &str, wave: &str, clusters: &str) {
    render_commit(
        dir,
        text,
        &format!("osbx rollout labs: wave {wave} ({clusters})\n\nOsbx-Rollout: labs\nOsbx-Wave: {wave}\n"),
    );
}

/// Each wave's state in `osbx rollout --dry-run -o json` of `text`, with `extra` flags.
fn plan(dir: &Path, text: &str, extra: &[&str]) -> Vec<String> {
    let file = dir.join("fleet.yaml");
    std::fs::write(&file, text).unwrap();
    let out = osbx()
        .args(["rollout", "--fleet"])
        .arg(&file)
        .arg("--repo")
        .arg(dir.join("repo"))
        .args(["--dry-run", "-o", "json"])
        .args(extra)
        .output()
        .unwrap();
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    report["waves"].as_array().unwrap().iter().map(|w| w["state"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn resume_starts_at_the_first_wave_the_history_does_not_show_passed() {
    let dir = repo();
    let d = dir.path();
    let target = fleet([12; 3]);
    // A render outside a rollout: every wave is in the repository, none is known to be verified.
    assert_eq!(plan(d, &fleet([8; 3]), &["--resume"]), ["committed"; 3]);
    assert_eq!(plan(d, &target, &["--resume"]), ["pending"; 3]);

    // The canary's commit, then the second wave's: the canary passed (the second wave was
    // committed after it); the second may not have (it failed, or the run was killed).
    commit_wave(d, &fleet([12, 8, 8]), "canary", "lab-a");
    commit_wave(d, &fleet([12, 12, 8]), "second", "lab-b");
    assert_eq!(plan(d, &target, &["--resume"]), ["done", "committed", "pending"]);
    // Without --resume every gate runs again; nothing is skipped.
    assert_eq!(plan(d, &target, &[]), ["committed", "committed", "pending"]);
    // A commit that changes nothing osbx renders (the fix of a fleet file kept here, say) keeps it.
    crate::support::write(&d.join("repo"), "README.md", "labs\n");
    git(&d.join("repo"), &["add", "README.md"]);
    git(&d.join("repo"), &["commit", "-q", "-m", "readme"]);
    assert_eq!(plan(d, &target, &["--resume"]), ["done", "committed", "pending"]);

    // The second wave failed and is fixed in the fleet file: it has something to commit again,
    // and --resume starts there, not at the canary.
    let fixed = fleet([12, 10, 12]);
    assert_eq!(plan(d, &fixed, &["--resume"]), ["done", "pending", "pending"]);

    // A change to the canary's clusters since: the canary is not done any more.
    assert_eq!(plan(d, &fleet([11, 10, 12]), &["--resume"]), ["pending"; 3]);

    // The repository rendered outside the rollout after those commits: the history says
    // nothing about what it holds now.
    render_commit(d, &fixed, "by hand");
    assert_eq!(plan(d, &fixed, &["--resume"]), ["committed"; 3]);
}

#[test]
fn a_dry_run_writes_and_commits_nothing() {
    let dir = repo();
    let d = dir.path();
    let before = git(&d.join("repo"), &["rev-parse", "HEAD"]);
    assert_eq!(plan(d, &fleet([12; 3]), &[]), ["pending"; 3]);
    assert_eq!(git(&d.join("repo"), &["rev-parse", "HEAD"]), before, "a dry run commits nothing");
    assert!(git(&d.join("repo"), &["status", "--porcelain"]).is_empty(), "a dry run writes nothing");
}
