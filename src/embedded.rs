//! Templates and profiles compiled into the binary (see `build.rs`).
//!
//! Both tables are `(relative path, contents)` pairs sorted by path.

include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

/// Embedded templates, keyed by their path under `templates/`.
#[must_use]
pub(crate) fn templates() -> &'static [(&'static str, &'static str)] {
    TEMPLATES
}

/// Embedded starters for `osbx init` (Tera templates), keyed by their file name under
/// `starters/`.
#[must_use]
pub(crate) fn starters() -> &'static [(&'static str, &'static str)] {
    STARTERS
}

/// Embedded profiles, keyed by their file name under `profiles/`.
#[must_use]
pub(crate) fn profiles() -> &'static [(&'static str, &'static str)] {
    PROFILES
}
