//! The two git repositories of the loop, served by the plane's git smart-HTTP server
//! (`tests/cluster/githttp.py`) on loopback: the "OpenSandbox" repository holding the real chart,
//! and the Flux repository that `osbx render --commit` writes into and Flux reconciles.

use std::path::{Path, PathBuf};

use super::world::ControllerPlane;
use crate::support::{git, shared};

/// The upstream chart copy (`kubernetes/charts/` of the OpenSandbox repository at 401a525).
const CHART_DIRS: [&str; 3] = ["opensandbox", "opensandbox-controller", "opensandbox-server"];
/// The tag the default profile pins.
pub const CHART_TAG: &str = "helm/opensandbox/0.2.2";

/// A bare repository `GIT_ROOT/<name>.git`; returns its URL on the git server.
fn bare(plane: &ControllerPlane, name: &str) -> String {
    let path = plane.git_root.join(format!("{name}.git"));
    git(&plane.git_root, &["init", "-q", "--bare", "-b", "main", &path.display().to_string()]);
    format!("{}/git/{name}.git", plane.git_http_url)
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())).flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The "OpenSandbox" repository: the three chart directories of `../shared/charts/opensandbox-401a525`
/// at `kubernetes/charts/` (where the umbrella's `file://../opensandbox-*` dependencies resolve),
/// committed in a temporary work tree, tagged [`CHART_TAG`] and pushed over HTTP. Returns the URL.
pub fn publish_chart(plane: &ControllerPlane, work: &Path) -> String {
    let url = bare(plane, "opensandbox");
    let tree = work.join("opensandbox-src");
    for dir in CHART_DIRS {
        copy_dir(&shared().join("charts/opensandbox-401a525").join(dir), &tree.join("kubernetes/charts").join(dir));
    }
    git(&tree, &["init", "-q", "-b", "main"]);
    git(&tree, &["add", "-A"]);
    git(&tree, &["commit", "-q", "-m", "OpenSandbox charts at 401a525"]);
    git(&tree, &["tag", CHART_TAG]);
    git(&tree, &["push", "-q", &url, "main", "--tags"]);
    url
}

/// The Flux repository: a work tree whose `origin` is `flux.git` on the git server.
pub struct FluxRepo {
    /// The work tree (`osbx render --out`, `osbx apply --repo`).
    pub dir: PathBuf,
    /// `$GIT_HTTP_URL/git/flux.git`.
    pub url: String,
}

impl FluxRepo {
    /// `git init -b main` in `work/flux`, `origin` set, the identity `osbx render --commit` uses
    /// configured in the repository.
    pub fn init(plane: &ControllerPlane, work: &Path) -> Self {
        let url = bare(plane, "flux");
        let dir = work.join("flux");
        std::fs::create_dir_all(&dir).unwrap();
        git(&dir, &["init", "-q", "-b", "main"]);
        git(&dir, &["config", "user.name", "osbx e2e"]);
        git(&dir, &["config", "user.email", "e2e@osbx.invalid"]);
        git(&dir, &["remote", "add", "origin", &url]);
        Self { dir, url }
    }

    /// Commit everything in the work tree (the bootstrap files).
    pub fn commit_all(&self, message: &str) {
        git(&self.dir, &["add", "-A"]);
        git(&self.dir, &["commit", "-q", "-m", message]);
    }

    /// Push `main` (with upstream tracking, so `osbx apply --repo` can tell what is unpushed);
    /// returns the pushed commit.
    pub fn push(&self) -> String {
        git(&self.dir, &["push", "-q", "-u", "origin", "main"]);
        self.head()
    }

    /// The commit checked out.
    pub fn head(&self) -> String {
        git(&self.dir, &["rev-parse", "HEAD"]).trim().to_owned()
    }

    /// Files with uncommitted changes (`git status --porcelain`).
    pub fn dirty(&self) -> String {
        git(&self.dir, &["status", "--porcelain"])
    }
}
