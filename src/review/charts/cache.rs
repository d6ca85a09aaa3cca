//! Where the chart cache lives: a directory kept between runs, or, with no home to keep one in,
//! a private directory of the run's own.

use std::path::{Path, PathBuf};

use super::ChartError;

/// Where the chart cache lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CacheRoot {
    /// A directory kept between runs (`--charts DIR`, `$OSBX_CHART_CACHE`, the user's cache).
    Dir(PathBuf),
    /// No home to keep a cache in: a private directory made new for the run (mode 0700, owned by
    /// the user, checked; a random name, never a predictable path in a shared temporary
    /// directory), deleted when the review ends.
    Private,
}

/// The default chart cache: `$OSBX_CHART_CACHE`, `$XDG_CACHE_HOME/osbx/charts`,
/// `~/.cache/osbx/charts`; without any of them, [`CacheRoot::Private`].
#[must_use]
pub(crate) fn default_cache() -> CacheRoot {
    if let Some(dir) = std::env::var_os("OSBX_CHART_CACHE").filter(|d| !d.is_empty()) {
        return CacheRoot::Dir(PathBuf::from(dir));
    }
    std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|d| !d.is_empty()).map(|h| PathBuf::from(h).join(".cache")))
        .map_or(CacheRoot::Private, |base| CacheRoot::Dir(base.join("osbx").join("charts")))
}

impl CacheRoot {
    /// The cache's directory, and for a private one the handle that deletes it when dropped.
    ///
    /// # Errors
    /// [`ChartError::Cache`]: a private directory that cannot be made, or is not private.
    pub(crate) fn open(&self) -> Result<(PathBuf, Option<tempfile::TempDir>), ChartError> {
        match self {
            Self::Dir(dir) => Ok((dir.clone(), None)),
            Self::Private => {
                let fail = |dir: &Path, reason: String| ChartError::Cache { dir: dir.display().to_string(), reason };
                let scratch = tempfile::Builder::new()
                    .prefix("osbx-charts-")
                    .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
                    .tempdir()
                    .map_err(|e| fail(&std::env::temp_dir(), e.to_string()))?;
                private(scratch.path()).map_err(|why| fail(scratch.path(), why))?;
                Ok((scratch.path().to_path_buf(), Some(scratch)))
            }
        }
    }
}

/// Whether `dir` is a directory (not a link) that only its owner, this user, can enter.
fn private(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if !meta.file_type().is_dir() {
        return Err("it is not a directory".into());
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!("its mode is {:o}, not 0700", meta.permissions().mode() & 0o777));
    }
    #[cfg(target_os = "linux")]
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(format!("it is owned by uid {}, not this user", meta.uid()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a home, the cache is a directory of the run's own: made new, private, checked, and
    /// gone afterwards.
    #[test]
    fn without_a_home_the_cache_is_private_to_the_run() {
        let (dir, scratch) = CacheRoot::Private.open().unwrap();
        assert!(scratch.is_some());
        private(&dir).unwrap();
        let again = CacheRoot::Private.open().unwrap();
        assert_ne!(dir, again.0, "a new name each run");
        drop(scratch);
        assert!(!dir.exists(), "deleted when the review ends");
        let open = tempfile::tempdir().unwrap();
        std::fs::set_permissions(open.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert!(private(open.path()).unwrap_err().contains("755"));
        let link = open.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(private(&link).is_err(), "a link is no private directory");
        assert_eq!(
            CacheRoot::Dir(PathBuf::from("/c")).open().unwrap().0,
            PathBuf::from("/c"),
            "a directory named is used as it is"
        );
    }
}
