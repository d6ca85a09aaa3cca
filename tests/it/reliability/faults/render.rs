//! `render --commit` and the repository's faults (a failed or killed write, a held index lock).

use super::*;
use crate::support::git;

/// A git repository at `dir/repo` holding the render of `profile`, committed by `render
/// --commit`.
fn committed_repo(dir: &Path, profile: &TestProfile) -> PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    let out = render(&repo, &profile.write_to(dir), &["--commit", "-m", "first"], None);
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    repo
}

fn render(repo: &Path, profile: &Path, args: &[&str], failpoint: Option<&str>) -> std::process::Output {
    let mut cmd = osbx();
    if let Some(point) = failpoint {
        cmd.env("OSBX_FAILPOINT", point);
    }
    cmd.arg("render").args(args).arg("--profile").arg(profile).arg("--out").arg(repo).output().unwrap()
}

/// What a repository says about itself: work tree, `git status`, commit count, HEAD's files.
fn repo_state(repo: &Path) -> (BTreeMap<String, String>, String, String, String) {
    (
        tree(repo),
        git(repo, &["status", "--porcelain", "--untracked-files=all"]),
        git(repo, &["rev-list", "--count", "HEAD"]).trim().to_owned(),
        git(repo, &["ls-tree", "-r", "HEAD"]),
    )
}

#[test]
fn render_commit_after_a_failed_or_killed_write_or_commit_leaves_a_consistent_repository() {
    use std::os::unix::process::ExitStatusExt as _;
    // From two layers to one: files written, deleted, the cluster index and the state edited.
    let old = TestProfile::new("lab").pool("small", "runc", [1, 2, 1, 3]);
    let new = TestProfile::new("lab").set("layers", json!([{"name": "opensandbox", "component": "opensandbox"}]));
    let (expected, expected_head) = {
        let dir = tempfile::tempdir().unwrap();
        let repo = committed_repo(dir.path(), &old);
        let out = render(&repo, &new.write_to(dir.path()), &["--commit", "-m", "second"], None);
        assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
        let (files, status, count, head) = repo_state(&repo);
        assert_eq!((status.as_str(), count.as_str()), ("", "2"));
        (files, head)
    };
    let mut f = Findings::default();
    // The next run without a fault finishes the job: the new tree, committed, nothing left over.
    let converges = |f: &mut Findings, case: &str, repo: &Path, profile: &Path| {
        let out = render(repo, profile, &["--commit", "-m", "second"], None);
        let (_, stderr) = outputs(&out);
        f.check(out.status.code() == Some(0), || format!("{case}: the next render: {stderr}"));
        let (files, status, count, head) = repo_state(repo);
        f.check(files == expected, || format!("{case}: the work tree is not the new render"));
        f.check(status.is_empty(), || {
            format!("{case}: after the next `render --commit` the repository is not clean (Flux would not see these):\n{status}next render said:\n{stderr}")
        });
        f.check(head == expected_head && count == "2", || {
            format!("{case}: HEAD is not the new render in one commit ({count} commits)")
        });
    };
    let mut steps = 0;
    for step in 1.. {
        // A failure at a step of the write: undone at once, nothing committed.
        let dir = tempfile::tempdir().unwrap();
        let repo = committed_repo(dir.path(), &old);
        let before = repo_state(&repo);
        let profile = new.write_to(dir.path());
        let out = render(&repo, &profile, &["--commit", "-m", "second"], Some(&format!("rename:{step}")));
        if out.status.code() == Some(0) {
            break; // past the last step
        }
        steps += 1;
        let case = format!("render --commit | OSBX_FAILPOINT=rename:{step}");
        let (_, stderr) = outputs(&out);
        matrix("render --commit", &format!("OSBX_FAILPOINT=rename:{step}"), &format!("exit {:?}", out.status.code()));
        f.check(out.status.code() == Some(2) && stderr.contains("injected failure"), || format!("{case}: {stderr}"));
        f.check(repo_state(&repo) == before, || format!("{case}: the repository changed"));
        converges(&mut f, &case, &repo, &profile);

        // A kill at the same step: the next render completes the write, and must commit it.
        let dir = tempfile::tempdir().unwrap();
        let repo = committed_repo(dir.path(), &old);
        let out = render(&repo, &profile, &["--commit", "-m", "second"], Some(&format!("kill:{step}")));
        let case = format!("render --commit | OSBX_FAILPOINT=kill:{step}");
        f.check(out.status.signal() == Some(9), || format!("{case}: not killed: {:?}", out.status));
        let (files, status, ..) = repo_state(&repo);
        let uncommitted = status.lines().count();
        converges(&mut f, &case, &repo, &profile);
        let (_, status_after, ..) = repo_state(&repo);
        matrix(
            "render --commit",
            &format!("OSBX_FAILPOINT=kill:{step}"),
            &format!(
                "killed with {uncommitted} uncommitted path(s), {} file(s); next run leaves {} uncommitted",
                files.len(),
                status_after.lines().count()
            ),
        );
    }
    assert!(steps >= 5, "the write has only {steps} steps");

    // The commit itself fails (another git process holds the index): exit 2 naming it.
    let dir = tempfile::tempdir().unwrap();
    let repo = committed_repo(dir.path(), &old);
    let profile = new.write_to(dir.path());
    let lock = repo.join(".git/index.lock");
    std::fs::write(&lock, "").unwrap();
    let out = render(&repo, &profile, &["--commit", "-m", "second"], None);
    let (_, stderr) = outputs(&out);
    let case = "render --commit | .git/index.lock held";
    f.check(out.status.code() == Some(2) && stderr.contains("the index is locked"), || format!("{case}: {stderr}"));
    std::fs::remove_file(&lock).unwrap();
    converges(&mut f, case, &repo, &profile);
    let (_, status_after, ..) = repo_state(&repo);
    matrix(
        "render --commit",
        ".git/index.lock held",
        &format!(
            "exit {:?}: {}; next run leaves {} uncommitted",
            out.status.code(),
            error_of(&stderr),
            status_after.lines().count()
        ),
    );
    f.assert_none("render --commit");
}
