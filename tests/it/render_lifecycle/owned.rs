//! Render owns its past output: what a render no longer produces is deleted (never a file
//! without the marker, never an entry the user added), also across a kill.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::builder::{TestFleet, TestProfile};
use crate::support::{git, osbx, outputs, tree, write};

/// The cluster kustomization a person wrote before osbx came: a comment, the bootstrap and a
/// file of their own.
const USERS_INDEX: &str = "\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
# written by hand
resources:
  - flux-system
  - apps/mine.yaml # ours
";

fn two_layers() -> TestProfile {
    TestProfile::new("lab").pool("small", "runc", [1, 2, 1, 3])
}

fn render(profile: &Path, out: &Path, args: &[&str]) -> std::process::Output {
    osbx().arg("render").args(args).arg("--profile").arg(profile).arg("--out").arg(out).output().unwrap()
}

#[track_caller]
fn ok(out: &std::process::Output) -> String {
    let (_, stderr) = outputs(out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    stderr
}

/// A repository holding the user's files next to what osbx rendered from `profile`.
fn repo_with_users_files(dir: &Path, profile: &TestProfile) -> PathBuf {
    let repo = dir.join("repo");
    write(&repo, "clusters/lab/kustomization.yaml", USERS_INDEX);
    write(&repo, "clusters/lab/flux-system/gotk-sync.yaml", "# the bootstrap\n");
    write(&repo, "clusters/lab/apps/mine.yaml", "# mine\n");
    // A file of the user's inside a directory osbx renders.
    write(&repo, "platform/opensandbox-pools/notes.md", "# notes\n");
    ok(&render(&profile.write_to(dir), &repo, &[]));
    repo
}

fn paths(files: &BTreeMap<String, String>, prefix: &str) -> Vec<String> {
    files.keys().filter(|p| p.starts_with(prefix)).cloned().collect()
}

#[test]
fn dropping_a_layer_deletes_its_files_and_its_entry_and_nothing_of_the_users() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo_with_users_files(dir.path(), &two_layers());
    let before = tree(&repo);
    assert!(before["clusters/lab/kustomization.yaml"].contains("- apps/opensandbox-pools.yaml"));

    let one_layer = two_layers().set("layers", json!([{"name": "opensandbox", "component": "opensandbox"}]));
    let profile = one_layer.write_to(dir.path());

    // --check shows the deletions as diffs to /dev/null, and fails.
    let out = render(&profile, &repo, &["--check"]);
    let (stdout, _) = outputs(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("--- a/platform/opensandbox-pools/pools.yaml\n+++ /dev/null\n"), "{stdout}");
    assert!(stdout.contains("-  - apps/opensandbox-pools.yaml\n"), "{stdout}");
    assert_eq!(tree(&repo), before, "--check writes nothing");

    let stderr = ok(&render(&profile, &repo, &[]));
    assert!(stderr.contains("− clusters/lab/apps/opensandbox-pools.yaml deleted"), "{stderr}");
    assert!(stderr.contains("3 deleted"), "{stderr}");
    let after = tree(&repo);
    assert_eq!(paths(&after, "platform/opensandbox-pools/"), ["platform/opensandbox-pools/notes.md"]);
    assert!(!after.contains_key("clusters/lab/apps/opensandbox-pools.yaml"));
    assert_eq!(after["clusters/lab/apps/mine.yaml"], "# mine\n");
    assert_eq!(after["clusters/lab/flux-system/gotk-sync.yaml"], "# the bootstrap\n");
    // The user's kustomization is as they wrote it, plus the one layer osbx still renders.
    assert_eq!(after["clusters/lab/kustomization.yaml"], format!("{USERS_INDEX}  - apps/opensandbox.yaml\n"));
    ok(&render(&profile, &repo, &["--check"]));
}

#[test]
fn renaming_a_layer_or_moving_its_path_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo_with_users_files(dir.path(), &two_layers());
    let renamed = two_layers().set(
        "layers",
        json!([
            {"name": "sandbox", "component": "opensandbox", "path": "infra/sandbox"},
            {"name": "opensandbox-pools", "component": "pools", "dependsOn": ["sandbox"]},
        ]),
    );
    ok(&render(&renamed.write_to(dir.path()), &repo, &[]));
    let after = tree(&repo);
    assert!(paths(&after, "platform/opensandbox/").is_empty(), "{:?}", after.keys());
    assert!(!repo.join("platform/opensandbox").exists(), "the emptied directory goes too");
    assert!(after.contains_key("infra/sandbox/helmrelease.yaml"));
    assert!(after.contains_key("clusters/lab/apps/sandbox.yaml"));
    assert!(!after.contains_key("clusters/lab/apps/opensandbox.yaml"));
    let index = &after["clusters/lab/kustomization.yaml"];
    assert!(index.contains("- apps/sandbox.yaml") && !index.contains("- apps/opensandbox.yaml\n"), "{index}");
    assert!(index.contains("- apps/mine.yaml # ours"), "{index}");

    // And back: the first tree again (the entry osbx adds back is appended, so the cluster
    // kustomization lists the same entries in another order).
    let fresh = tempfile::tempdir().unwrap();
    let expected = repo_with_users_files(fresh.path(), &two_layers());
    ok(&render(&two_layers().write_to(dir.path()), &repo, &[]));
    let sorted_lines = |mut files: BTreeMap<String, String>| {
        let index = files.get_mut("clusters/lab/kustomization.yaml").unwrap();
        let mut lines: Vec<&str> = index.lines().collect();
        lines.sort_unstable();
        *index = lines.join("\n");
        files
    };
    assert_eq!(sorted_lines(tree(&repo)), sorted_lines(tree(&expected)));
}

#[test]
fn a_cluster_that_leaves_the_fleet_leaves_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let base = two_layers().write_to(dir.path());
    let repo = dir.path().join("repo");
    let fleet = |names: &[&str]| {
        let fleet =
            names.iter().fold(TestFleet::new("fleet", &base.to_string_lossy()), |f, n| f.cluster(n, json!(null)));
        let path = dir.path().join("fleet.yaml");
        std::fs::write(&path, fleet.yaml()).unwrap();
        osbx().args(["render", "--fleet"]).arg(&path).arg("--out").arg(&repo).output().unwrap()
    };
    ok(&fleet(&["a", "b"]));
    write(&repo, "clusters/b/README.md", "# the b cluster's runbook\n");
    let stderr = ok(&fleet(&["a"]));
    assert!(stderr.contains("clusters/b/kustomization.yaml deleted"), "{stderr}");
    let after = tree(&repo);
    assert_eq!(paths(&after, "clusters/b/"), ["clusters/b/README.md"], "only the user's file stays");
    assert!(paths(&after, "").iter().all(|p| !p.contains("-b/") && !p.contains("/b-")), "{:?}", after.keys());
    assert!(after.contains_key("clusters/a/kustomization.yaml"));

    // With its last file gone, nothing of b is left at all.
    std::fs::remove_file(repo.join("clusters/b/README.md")).unwrap();
    ok(&fleet(&["a", "b"]));
    ok(&fleet(&["a"]));
    assert!(!repo.join("clusters/b").exists());
}

#[test]
fn a_file_the_user_took_over_is_not_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo_with_users_files(dir.path(), &two_layers());
    // The user removes the marker: the file is theirs now.
    let taken = repo.join("platform/opensandbox-pools/pools.yaml");
    let text = std::fs::read_to_string(&taken).unwrap();
    let text: String = text.lines().filter(|l| !l.contains("Managed by osbx")).flat_map(|l| [l, "\n"]).collect();
    std::fs::write(&taken, &text).unwrap();
    let one_layer = two_layers().set("layers", json!([{"name": "opensandbox", "component": "opensandbox"}]));
    ok(&render(&one_layer.write_to(dir.path()), &repo, &[]));
    assert_eq!(std::fs::read_to_string(&taken).unwrap(), text);
}

#[test]
fn commit_records_the_deletions() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.name", "T"]);
    git(&repo, &["config", "user.email", "t@example.com"]);
    ok(&render(&two_layers().write_to(dir.path()), &repo, &["--commit", "-m", "two layers"]));
    let one_layer = two_layers().set("layers", json!([{"name": "opensandbox", "component": "opensandbox"}]));
    ok(&render(&one_layer.write_to(dir.path()), &repo, &["--commit", "-m", "one layer"]));
    let changes = git(&repo, &["show", "--name-status", "--format=", "HEAD"]);
    let mut changes: Vec<&str> = changes.lines().collect();
    changes.sort_unstable();
    assert_eq!(
        changes,
        [
            "D\tclusters/lab/apps/opensandbox-pools.yaml",
            "D\tplatform/opensandbox-pools/kustomization.yaml",
            "D\tplatform/opensandbox-pools/pools.yaml",
            "M\t.osbx/profile-lab.yaml",
            "M\tclusters/lab/kustomization.yaml",
        ]
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]), "", "the work tree is clean");
}

/// Files a transaction leaves while it runs, which must never outlive it.
fn residue(files: &BTreeMap<String, String>) -> Vec<&String> {
    files
        .keys()
        .filter(|p| p.contains(".osbx-tmp") || p.ends_with(".osbx-old") || p.ends_with("journal.json"))
        .collect()
}

#[test]
fn a_render_killed_at_any_step_is_finished_by_the_next() {
    let old = two_layers();
    // Files written, a file deleted, directories created and emptied.
    let new = two_layers().pool("big", "runc", [2, 4, 2, 8]).set(
        "layers",
        json!([
            {"name": "opensandbox", "component": "opensandbox"},
            {"name": "pools", "component": "pools", "dependsOn": ["opensandbox"]},
        ]),
    );
    let expected = {
        let fresh = tempfile::tempdir().unwrap();
        let repo = repo_with_users_files(fresh.path(), &old);
        ok(&render(&new.write_to(fresh.path()), &repo, &[]));
        tree(&repo)
    };
    let old_tree = tree(&repo_with_users_files(tempfile::tempdir().unwrap().path(), &old));
    let mut killed = 0;
    for step in 1.. {
        let case = tempfile::tempdir().unwrap();
        let repo = repo_with_users_files(case.path(), &old);
        let profile = new.write_to(case.path());
        let out = osbx()
            .env("OSBX_FAILPOINT", format!("kill:{step}"))
            .arg("render")
            .arg("--profile")
            .arg(&profile)
            .arg("--out")
            .arg(&repo)
            .output()
            .unwrap();
        if out.status.code() == Some(0) {
            break; // past the last step
        }
        assert_eq!(out.status.signal(), Some(9), "step {step}: {}", outputs(&out).1);
        killed += 1;
        let stderr = ok(&render(&profile, &repo, &[]));
        assert!(stderr.contains("an earlier render was interrupted part-way: completed it"), "step {step}: {stderr}");
        let after = tree(&repo);
        assert!(residue(&after).is_empty(), "step {step}: {:?}", residue(&after));
        assert_eq!(after, expected, "step {step}");

        // A failure (not a kill) at the same step is undone on the spot: the old tree, exactly.
        let case = tempfile::tempdir().unwrap();
        let repo = repo_with_users_files(case.path(), &old);
        let out = osbx()
            .env("OSBX_FAILPOINT", format!("rename:{step}"))
            .arg("render")
            .arg("--profile")
            .arg(new.write_to(case.path()))
            .arg("--out")
            .arg(&repo)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "step {step}");
        assert_eq!(tree(&repo), old_tree, "step {step}");
    }
    // Every rename and deletion of the transaction was a kill point: a file written into a
    // directory that was there is renamed over its target, a new directory (the new layer's) is
    // renamed into place whole, once.
    let ancestors = |p: &str| p.match_indices('/').map(|(i, _)| p[..i].to_owned()).collect::<Vec<_>>();
    let old_dirs: BTreeSet<String> = old_tree.keys().flat_map(|p| ancestors(p)).collect();
    let written: Vec<&String> = expected.iter().filter(|(p, t)| old_tree.get(*p) != Some(*t)).map(|(p, _)| p).collect();
    let new_dirs: BTreeSet<String> =
        written.iter().filter_map(|p| ancestors(p).into_iter().find(|d| !old_dirs.contains(d))).collect();
    assert!(!new_dirs.is_empty(), "the new layer's directory is created: {written:?}");
    let into_old_dirs = written.iter().filter(|p| ancestors(p).iter().all(|d| old_dirs.contains(d))).count();
    let steps = into_old_dirs + new_dirs.len() + old_tree.keys().filter(|p| !expected.contains_key(*p)).count();
    assert_eq!(killed, steps);
}

#[test]
fn renders_into_one_repository_take_turns() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let small = two_layers();
    let big = two_layers().pool("big", "runc", [2, 4, 2, 8]);
    let trees: Vec<BTreeMap<String, String>> = [&small, &big]
        .iter()
        .map(|p| {
            let fresh = tempfile::tempdir().unwrap();
            let out = fresh.path().join("repo");
            ok(&render(&p.write_to(fresh.path()), &out, &[]));
            tree(&out)
        })
        .collect();
    let profiles: Vec<PathBuf> = [&small, &big]
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let path = dir.path().join(format!("p{i}.yaml"));
            std::fs::write(&path, p.yaml()).unwrap();
            path
        })
        .collect();
    for round in 0..5 {
        let children: Vec<_> = (0..6)
            .map(|i| {
                std::process::Command::new(env!("CARGO_BIN_EXE_osbx"))
                    .env("OSBX_COLOR", "never")
                    .arg("-q")
                    .arg("render")
                    .arg("--profile")
                    .arg(&profiles[i % 2])
                    .arg("--out")
                    .arg(&repo)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(0), "round {round}: {}", outputs(&out).1);
        }
        let after = tree(&repo);
        assert!(trees.contains(&after), "round {round}: a mix of two renders: {:?}", after.keys());
    }
}
