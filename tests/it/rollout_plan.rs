//! `osbx rollout --dry-run`: where a rollout stands, read from the repository, its history and
//! the gate records alone (no cluster is reached). The waves' commits are made as a rollout
//! makes them: the clusters of the waves so far rendered as the fleet file says (a fleet file
//! with only their change), committed with the rollout's subject and trailers; each gate's
//! outcome is recorded as a rollout records it, a note in `refs/notes/osbx-rollout` on the
//! commit gated, written here with `git notes` in the format docs/fleet.md gives.

use std::path::Path;

use serde_json::{Value, json};

use crate::builder::TestFleet;
use crate::support::{git, osbx, outputs};

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

/// The checks each run here selects (`--only`), and a gate record runs.
const CHECKS: &str = "flux.layers,nodes.ready";

/// One gate record: wave, cluster, outcome, and each check run with its outcome.
type Record<'a> = (&'a str, &'a str, &'a str, &'a [(&'a str, &'a str)]);

/// Record gates on HEAD as a rollout does, replacing the note there.
fn gates(dir: &Path, records: &[Record<'_>]) {
    let repo = dir.join("repo");
    let head = git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let list: Vec<Value> = records
        .iter()
        .map(|(wave, cluster, outcome, checks)| {
            let checks: serde_json::Map<String, Value> =
                checks.iter().map(|(id, o)| ((*id).to_owned(), json!(o))).collect();
            json!({"fleet": "labs", "wave": wave, "cluster": cluster, "outcome": outcome, "commit": head,
                   "at": "2026-01-01T00:00:00Z", "checks": checks})
        })
        .collect();
    let text = serde_saphyr::to_string(&list).unwrap();
    git(&repo, &["notes", "--ref", "osbx-rollout", "add", "-f", "-m", &text, "HEAD"]);
}

/// Every check of [`CHECKS`] passed.
const PASSED: &[(&str, &str)] = &[("flux.layers", "PASS"), ("nodes.ready", "PASS")];

/// Each wave's state in `osbx rollout --dry-run -o json` of `text`, with `extra` flags (and
/// `--only` [`CHECKS`] unless they give it).
fn plan(dir: &Path, text: &str, extra: &[&str]) -> Vec<String> {
    let file = dir.join("fleet.yaml");
    std::fs::write(&file, text).unwrap();
    let mut cmd = osbx();
    cmd.args(["rollout", "--fleet"]).arg(&file).arg("--repo").arg(dir.join("repo")).args(["--dry-run", "-o", "json"]);
    if !extra.contains(&"--only") {
        cmd.args(["--only", CHECKS]);
    }
    let out = cmd.args(extra).output().unwrap();
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    report["waves"].as_array().unwrap().iter().map(|w| w["state"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn resume_starts_at_the_first_wave_the_gate_records_do_not_show_passed() {
    let dir = repo();
    let d = dir.path();
    let target = fleet([12; 3]);
    // A render outside a rollout: every wave is in the repository, none is known to be verified.
    assert_eq!(plan(d, &fleet([8; 3]), &["--resume"]), ["committed"; 3]);
    assert_eq!(plan(d, &target, &["--resume"]), ["pending"; 3]);

    // The canary's commit, gated and passed; then the second wave's, whose gate has no record
    // yet (the run was killed while Flux reconciled it).
    commit_wave(d, &fleet([12, 8, 8]), "canary", "lab-a");
    gates(d, &[("canary", "lab-a", "passed", PASSED)]);
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

    // The repository rendered outside the rollout after those commits: the canary's files are
    // what it passed with, so it stays done; nothing else is known to be verified.
    render_commit(d, &fixed, "by hand");
    assert_eq!(plan(d, &fixed, &["--resume"]), ["done", "committed", "committed"]);
    // Rendered again with the canary changed and committed: its gate was at other files.
    let moved = fleet([11, 10, 12]);
    render_commit(d, &moved, "by hand, the canary too");
    assert_eq!(plan(d, &moved, &["--resume"]), ["committed"; 3]);
}

#[test]
fn a_fresh_clone_sees_the_gate_records_an_earlier_run_pushed() {
    let dir = repo();
    let d = dir.path();
    let repo = d.join("repo");
    commit_wave(d, &fleet([12, 8, 8]), "canary", "lab-a");
    gates(d, &[("canary", "lab-a", "passed", PASSED)]);
    commit_wave(d, &fleet([12, 12, 8]), "second", "lab-b");
    // Pushed as `rollout --push` pushes: the branch, and the notes ref beside it.
    let origin = d.join("origin.git").display().to_string();
    git(d, &["init", "-q", "--bare", "-b", "main", "origin.git"]);
    git(&repo, &["remote", "add", "origin", &origin]);
    git(&repo, &["push", "-q", "-u", "origin", "main"]);
    git(&repo, &["push", "-q", "origin", "refs/notes/osbx-rollout:refs/notes/osbx-rollout"]);
    // A CI job's fresh clone: git cloned no notes, and the rollout fetches them.
    let ci = tempfile::tempdir().unwrap();
    git(ci.path(), &["clone", "-q", &origin, "repo"]);
    let clone = ci.path().join("repo");
    assert_eq!(git(&clone, &["for-each-ref", "refs/notes"]), "", "git clones no notes");
    let target = fleet([12; 3]);
    assert_eq!(plan(ci.path(), &target, &["--resume"]), ["done", "committed", "pending"]);
    // A dry run only fetched them: no commit, no file, no note of its own.
    assert_eq!(git(&clone, &["rev-parse", "HEAD"]), git(&repo, &["rev-parse", "HEAD"]));
    assert_eq!(git(&clone, &["status", "--porcelain"]), "");
    assert_eq!(
        git(&clone, &["for-each-ref", "--format=%(refname)", "refs/notes"]).trim(),
        "refs/notes/remotes/origin/osbx-rollout"
    );
    // The canary gated again from the first clone, and failed there; pushed, the clone's next
    // run sees that newer record, not the one it fetched before.
    let failed: &[(&str, &str)] = &[("flux.layers", "PASS"), ("nodes.ready", "FAIL")];
    git(&repo, &["checkout", "-q", "HEAD~1"]);
    gates(d, &[("canary", "lab-a", "failed", failed)]);
    git(&repo, &["checkout", "-q", "main"]);
    git(&repo, &["push", "-q", "origin", "refs/notes/osbx-rollout:refs/notes/osbx-rollout"]);
    assert_eq!(plan(ci.path(), &target, &["--resume"]), ["committed", "committed", "pending"]);
}

#[test]
fn a_failed_gate_is_never_counted_as_passed() {
    let dir = repo();
    let d = dir.path();
    let target = fleet([12; 3]);
    // The canary passed at its commit; wave `second` was committed and failed its gate.
    commit_wave(d, &fleet([12, 8, 8]), "canary", "lab-a");
    gates(d, &[("canary", "lab-a", "passed", PASSED)]);
    commit_wave(d, &fleet([12, 12, 8]), "second", "lab-b");
    let failed: &[(&str, &str)] = &[("flux.layers", "PASS"), ("nodes.ready", "FAIL")];
    gates(d, &[("second", "lab-b", "failed", failed)]);
    assert_eq!(plan(d, &target, &["--resume"]), ["done", "committed", "pending"]);
    // A run without --resume gated the canary again, at the same commit, and it failed: the
    // canary is not done, whatever its commit and the commit after it say.
    gates(d, &[("second", "lab-b", "failed", failed), ("canary", "lab-a", "failed", failed)]);
    assert_eq!(plan(d, &target, &["--resume"]), ["committed", "committed", "pending"]);
    // Gated again and passed: done again.
    gates(d, &[("second", "lab-b", "failed", failed), ("canary", "lab-a", "passed", PASSED)]);
    assert_eq!(plan(d, &target, &["--resume"]), ["done", "committed", "pending"]);
    // Flux did not reconcile in time: no check ran, and that is no pass.
    gates(d, &[("second", "lab-b", "failed", failed), ("canary", "lab-a", "failed", &[])]);
    assert_eq!(plan(d, &target, &["--resume"]), ["committed", "committed", "pending"]);
}

#[test]
fn a_cluster_whose_checks_all_skipped_passed_only_when_the_fleet_says_so() {
    let dir = repo();
    let d = dir.path();
    commit_wave(d, &fleet([12, 8, 8]), "canary", "lab-a");
    let skipped: &[(&str, &str)] = &[("flux.layers", "SKIP"), ("nodes.ready", "SKIP")];
    gates(d, &[("canary", "lab-a", "no-evidence", skipped)]);
    let target = fleet([12; 3]);
    assert_eq!(plan(d, &target, &["--resume"]), ["committed", "pending", "pending"]);
    let accepting = TestFleet::new("labs", "fresh-cluster");
    let accepting = CLUSTERS
        .iter()
        .fold(accepting, |f, name| {
            f.cluster(name, json!({"pools": {"items": [{"name": "vm", "capacity": {"poolMax": 12}}]}}))
        })
        .waves(&json!([
            {"name": "canary", "clusters": ["lab-a"]},
            {"name": "second", "clusters": ["lab-b"]},
            {"name": "rest", "selector": {}},
        ]))
        .accept_no_evidence(true)
        .yaml();
    assert_eq!(plan(d, &accepting, &["--resume"]), ["done", "pending", "pending"]);
}

#[test]
fn a_gate_counts_only_for_the_checks_it_ran() {
    let dir = repo();
    let d = dir.path();
    commit_wave(d, &fleet([12, 8, 8]), "canary", "lab-a");
    gates(d, &[("canary", "lab-a", "passed", &[("flux.layers", "PASS")])]);
    let target = fleet([12; 3]);
    assert_eq!(plan(d, &target, &["--resume"]), ["committed", "pending", "pending"], "nodes.ready did not run");
    assert_eq!(plan(d, &target, &["--resume", "--only", "flux.layers"]), ["done", "pending", "pending"]);
    // A gate of another fleet at the same commit says nothing of this one.
    let other = serde_saphyr::to_string(&json!([{"fleet": "other", "wave": "canary", "cluster": "lab-a",
        "outcome": "failed", "commit": "x", "at": "2026-01-01T00:00:00Z", "checks": {}},
        {"fleet": "labs", "wave": "canary", "cluster": "lab-a", "outcome": "passed", "commit": "x",
         "at": "2026-01-01T00:00:00Z", "checks": {"flux.layers": "PASS"}}]))
    .unwrap();
    git(&d.join("repo"), &["notes", "--ref", "osbx-rollout", "add", "-f", "-m", &other, "HEAD"]);
    assert_eq!(plan(d, &target, &["--resume", "--only", "flux.layers"]), ["done", "pending", "pending"]);
}

#[test]
fn a_note_that_is_not_gate_records_is_refused() {
    let dir = repo();
    let d = dir.path();
    commit_wave(d, &fleet([12, 8, 8]), "canary", "lab-a");
    git(&d.join("repo"), &["notes", "--ref", "osbx-rollout", "add", "-f", "-m", "looks good to me", "HEAD"]);
    let head = git(&d.join("repo"), &["rev-parse", "HEAD"]).trim().to_owned();
    let file = d.join("fleet.yaml");
    std::fs::write(&file, fleet([12; 3])).unwrap();
    let out = osbx()
        .args(["rollout", "--fleet"])
        .arg(&file)
        .arg("--repo")
        .arg(d.join("repo"))
        .arg("--dry-run")
        .output()
        .unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let line = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        line.starts_with(&format!("error: {head}: its note in refs/notes/osbx-rollout is not gate records osbx can read ("))
            && line.ends_with(&format!(
                "remove it (`git notes --ref refs/notes/osbx-rollout remove {head}`) and the waves it recorded are gated again"
            )),
        "{stderr}"
    );
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
