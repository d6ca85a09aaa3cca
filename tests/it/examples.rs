//! `examples/<profile>/` is exactly what the binary renders for each embedded profile.
//!
//! Run with `OSBX_UPDATE_EXAMPLES=1` to rewrite the examples after an intended change.

use crate::support::{osbx, root, shipped_profiles, tree};

#[test]
fn every_shipped_profile_has_an_up_to_date_example() {
    let names = shipped_profiles();
    assert!(names.len() >= 3, "default, homelab and at least one more profile ship: {names:?}");
    for name in names {
        let dir = tempfile::tempdir().unwrap();
        osbx().args(["-q", "render", "--profile", &name, "--out"]).arg(dir.path()).assert().success();
        let rendered = tree(dir.path());
        let example_dir = root().join("examples").join(&name);
        if std::env::var_os("OSBX_UPDATE_EXAMPLES").is_some() {
            crate::support::remove_dir_if_there(&example_dir);
            for (rel, content) in &rendered {
                crate::support::write(&example_dir, rel, content);
            }
        }
        let example = tree(&example_dir);
        assert_eq!(
            example.keys().collect::<Vec<_>>(),
            rendered.keys().collect::<Vec<_>>(),
            "examples/{name} lists other files than the render; run OSBX_UPDATE_EXAMPLES=1 cargo test --test it examples"
        );
        for (rel, content) in &rendered {
            assert_eq!(
                &example[rel], content,
                "examples/{name}/{rel} is out of date; run OSBX_UPDATE_EXAMPLES=1 cargo test --test it examples"
            );
        }
    }
}

#[test]
fn rendering_is_byte_identical_on_every_run() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    for dir in [&a, &b] {
        osbx().args(["-q", "render", "--profile", "homelab", "--out"]).arg(dir.path()).assert().success();
    }
    assert_eq!(tree(a.path()), tree(b.path()));
}
