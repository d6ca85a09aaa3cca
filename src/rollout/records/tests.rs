//! The gate records: parsed, merged and pushed through real git repositories.

use super::*;
use crate::verify::Verdict;

fn result(id: &str, verdict: Verdict) -> CheckResult {
    CheckResult { id: id.into(), started_ms: 0, duration_ms: 0, verdict }
}

#[test]
fn a_cluster_whose_checks_all_skip_has_no_evidence() {
    let skipped = [
        result("kata.guest-kernel", Verdict::skip("no Kata pool")),
        result("spiffe.issued", Verdict::skip("no spire")),
    ];
    let (outcome, failure) = judge(&skipped, false);
    assert_eq!(outcome, GateOutcome::NoEvidence);
    let failure = failure.unwrap();
    assert_eq!(failure.check, NO_EVIDENCE);
    assert_eq!(failure.evidence, "every check skipped: kata.guest-kernel (no Kata pool); spiffe.issued (no spire)");
    assert!(!outcome.passes(false));
    // Accepted by the fleet file: no failure, and the outcome still says so.
    let (outcome, failure) = judge(&skipped, true);
    assert_eq!((outcome, failure.is_none()), (GateOutcome::NoEvidence, true));
    assert!(outcome.passes(true));
    assert_eq!(judge(&[], false).1.unwrap().evidence, "no check ran");
    // One pass among the skips is evidence; one failure fails, whatever passed.
    let mut some = skipped.to_vec();
    some.push(result("nodes.ready", Verdict::pass("1 node")));
    assert_eq!(judge(&some, false).0, GateOutcome::Passed);
    some.push(result("opensandbox.pools", Verdict::error("no answer", "down")));
    let (outcome, failure) = judge(&some, true);
    assert_eq!((outcome, failure.unwrap().check.as_str()), (GateOutcome::Failed, "opensandbox.pools"));
}

#[test]
fn a_record_holds_only_for_a_pass_with_every_selected_check() {
    let gate = Gate {
        fleet: "labs".into(),
        wave: "canary".into(),
        cluster: "lab-a".into(),
        outcome: GateOutcome::Passed,
        commit: "0".repeat(40),
        at: "2026-01-01T00:00:00Z".into(),
        checks: [("flux.layers".into(), "PASS".into()), ("nodes.ready".into(), "SKIP".into())].into(),
        failed: None,
    };
    let selected = ["flux.layers".to_owned(), "nodes.ready".to_owned()];
    assert!(gate.holds(&selected, false));
    assert!(!gate.holds(&["opensandbox.pools".to_owned()], false), "a check it did not run");
    let failed = Gate { outcome: GateOutcome::Failed, ..gate.clone() };
    assert!(!failed.holds(&selected, true));
    let none = Gate { outcome: GateOutcome::NoEvidence, ..gate.clone() };
    assert!(!none.holds(&selected, false) && none.holds(&selected, true));
    // The note's text reads back.
    let text = serde_saphyr::to_string(&vec![gate.clone()]).unwrap();
    assert_eq!(parse("c", &text).unwrap(), [gate]);
}

/// Two clones of one Flux repository, as two CI jobs have them, and how their gate
/// records meet on the remote.
mod clones {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use super::super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "init.defaultBranch=main"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// `origin.git` with one commit on `main`, pushed from the clone `a`.
    fn origin(dir: &Path) -> PathBuf {
        git(dir, &["init", "-q", "--bare", "-b", "main", "origin.git"]);
        git(dir, &["clone", "-q", "origin.git", "a"]);
        let a = dir.join("a");
        git(&a, &["commit", "-q", "--allow-empty", "-m", "first"]);
        git(&a, &["push", "-q", "-u", "origin", "main"]);
        a
    }

    /// A fresh clone `name` of `origin.git` (no notes: git clones none).
    fn clone(dir: &Path, name: &str) -> PathBuf {
        git(dir, &["clone", "-q", "origin.git", name]);
        dir.join(name)
    }

    fn gate(cluster: &str, outcome: GateOutcome, commit: &str, at: &str) -> Gate {
        Gate {
            fleet: "labs".into(),
            wave: "canary".into(),
            cluster: cluster.into(),
            outcome,
            commit: commit.into(),
            at: at.into(),
            checks: [("nodes.ready".into(), "PASS".into())].into(),
            failed: None,
        }
    }

    /// The records on `commit` in the remote, each as (cluster, outcome).
    fn on_remote(dir: &Path, commit: &str) -> Vec<(String, GateOutcome)> {
        let text = git(&dir.join("origin.git"), &["notes", "--ref", "osbx-rollout", "show", commit]);
        parse(commit, &text).unwrap().into_iter().map(|g| (g.cluster, g.outcome)).collect()
    }

    const ALL: [&str; 3] = ["lab-a", "lab-b", "lab-c"];

    /// A remote, two clones (`b` before `a` records), their commit, `a`'s record for lab-a.
    fn two_clones(dir: &Path) -> (PathBuf, PathBuf, String) {
        let (a, b) = (origin(dir), clone(dir, "b"));
        let first = git(&a, &["rev-parse", "HEAD"]);
        record(&a, &gate("lab-a", GateOutcome::Passed, &first, "2026-01-01T00:00:01Z")).unwrap();
        (a, b, first)
    }

    #[test]
    fn a_second_clone_keeps_the_first_ones_records_and_a_fresh_clone_reads_them_all() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (a, b, first) = two_clones(dir);
        publish(&a, "origin").unwrap();

        // The second job gates lab-b at the same commit, then a commit of its own for lab-c.
        record(&b, &gate("lab-b", GateOutcome::Passed, &first, "2026-01-01T00:00:02Z")).unwrap();
        git(&b, &["commit", "-q", "--allow-empty", "-m", "second"]);
        git(&b, &["push", "-q"]);
        let second = git(&b, &["rev-parse", "HEAD"]);
        record(&b, &gate("lab-c", GateOutcome::Failed, &second, "2026-01-01T00:00:03Z")).unwrap();
        // Its notes ref and the remote's share no history: a plain push is refused (what a
        // rollout from a fresh clone met after its wave was pushed) …
        assert!(repo::push_ref(&b, "origin", NOTES).is_err(), "the remote's records would be replaced");
        // … and one with the remote's records merged in is a fast-forward that keeps them.
        publish(&b, "origin").unwrap();
        assert_eq!(
            on_remote(dir, &first),
            [("lab-b".to_owned(), GateOutcome::Passed), ("lab-a".to_owned(), GateOutcome::Passed)]
        );
        assert_eq!(on_remote(dir, &second), [("lab-c".to_owned(), GateOutcome::Failed)]);
        let tip = |repo: &Path, name: &str| git(repo, &["rev-parse", name]);
        assert_eq!(tip(&b, NOTES), tip(&dir.join("origin.git"), NOTES));

        // The first job gates lab-a again at its commit, later, and it fails: its newer
        // record replaces its older one there, and lab-b's stays.
        record(&a, &gate("lab-a", GateOutcome::Failed, &first, "2026-01-01T00:00:04Z")).unwrap();
        publish(&a, "origin").unwrap();
        assert_eq!(
            on_remote(dir, &first),
            [("lab-a".to_owned(), GateOutcome::Failed), ("lab-b".to_owned(), GateOutcome::Passed)]
        );

        // A fresh clone has no records of its own; it reads the fetched ones.
        let c = clone(dir, "c");
        let clusters: BTreeSet<&str> = ALL.into();
        fetch(&c, "origin").unwrap();
        assert!(newest(&c, "labs", &clusters, None).unwrap().is_empty(), "a clone has no notes");
        let found = newest(&c, "labs", &clusters, Some("origin")).unwrap();
        let seen: Vec<(&str, GateOutcome, &str)> =
            found.values().map(|g| (g.cluster.as_str(), g.outcome, g.commit.as_str())).collect();
        assert_eq!(
            seen,
            [
                ("lab-a", GateOutcome::Failed, first.as_str()),
                ("lab-b", GateOutcome::Passed, first.as_str()),
                ("lab-c", GateOutcome::Failed, second.as_str()),
            ]
        );
        // A record made there and one fetched, on the same commit: the newer counts.
        record(&c, &gate("lab-c", GateOutcome::Passed, &second, "2026-01-01T00:00:05Z")).unwrap();
        assert_eq!(newest(&c, "labs", &clusters, Some("origin")).unwrap()["lab-c"].outcome, GateOutcome::Passed);
        record(&c, &gate("lab-c", GateOutcome::Passed, &second, "2025-12-31T00:00:00Z")).unwrap();
        assert_eq!(newest(&c, "labs", &clusters, Some("origin")).unwrap()["lab-c"].outcome, GateOutcome::Failed);
    }

    #[test]
    fn records_another_run_pushes_while_this_one_pushes_are_merged_and_pushed_again() {
        let (tmp, (a, b, first)) = {
            let tmp = tempfile::tempdir().unwrap();
            let c = two_clones(tmp.path());
            (tmp, c)
        };
        let dir = tmp.path();
        record(&b, &gate("lab-b", GateOutcome::Passed, &first, "2026-01-01T00:00:02Z")).unwrap();
        // The first job pushes its records while the second's push is under way (after the
        // second fetched and merged): the second's pre-push hook pushes them, once.
        let hook = b.join(".git/hooks/pre-push");
        let script = format!(
            "#!/bin/sh\nset -e\n[ -e \"{m}\" ] && exit 0\ntouch \"{m}\"\n\
             env -u GIT_DIR -u GIT_WORK_TREE -u GIT_INDEX_FILE git -C \"{a}\" push -q origin {NOTES}:{NOTES}\n",
            m = dir.join("pushed").display(),
            a = a.display()
        );
        std::fs::write(&hook, script).unwrap();
        let mut perms = std::fs::metadata(&hook).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&hook, perms).unwrap();
        publish(&b, "origin").unwrap();
        assert!(dir.join("pushed").exists(), "the hook ran");
        assert_eq!(
            on_remote(dir, &first),
            [("lab-b".to_owned(), GateOutcome::Passed), ("lab-a".to_owned(), GateOutcome::Passed)]
        );
    }

    #[test]
    fn a_push_that_fails_for_another_reason_is_reported_once() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let a = origin(dir);
        let first = git(&a, &["rev-parse", "HEAD"]);
        record(&a, &gate("lab-a", GateOutcome::Passed, &first, "2026-01-01T00:00:01Z")).unwrap();
        let hook = a.join(".git/hooks/pre-push");
        let script = format!("#!/bin/sh\necho refused >&2\necho x >> \"{}\"\nexit 1\n", dir.join("tries").display());
        std::fs::write(&hook, script).unwrap();
        let mut perms = std::fs::metadata(&hook).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&hook, perms).unwrap();
        let err = publish(&a, "origin").unwrap_err();
        assert!(matches!(&err, RolloutError::Push { reason, .. } if reason.contains("refused")), "{err}");
        assert_eq!(std::fs::read_to_string(dir.join("tries")).unwrap(), "x\n", "the remote did not move: no retry");
    }
}
