//! `osbx init` and minimal profiles: a starter renders and lints clean whatever its options;
//! the smallest useful profile is a cluster name and its pools.

use std::path::Path;

use crate::support::{osbx, outputs, tree};

fn init(dir: &Path, args: &[&str]) -> std::process::Output {
    osbx().current_dir(dir).arg("init").args(args).output().unwrap()
}

#[track_caller]
fn renders_and_lints_clean(dir: &Path, flag: &str, file: &str) {
    let out = osbx().current_dir(dir).args(["lint", flag, file]).output().unwrap();
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    // The one warning a starter may carry: kata.advisory, on a kata layer pinning kata-deploy
    // below 4.3.0 (issue 52, item 4: it stays until osbx knows 4.3.0; the layer closes the hole), once per
    // cluster of a fleet; every other warning still fails.
    let advisories = stdout.lines().filter(|l| l.contains("warning[kata.advisory]")).count();
    assert!(stdout.ends_with(&format!("0 error(s), {advisories} warning(s)\n")), "{stdout}");
    let out = osbx().current_dir(dir).args(["render", flag, file, "--out", "repo"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
}

#[test]
fn every_starter_renders_and_lints_clean() {
    for args in
        [&[][..], &["--runtime", "runc"], &["--runtime", "kata"], &["--spire"], &["--runtime", "runc", "--spire"]]
    {
        let dir = tempfile::tempdir().unwrap();
        let out = init(dir.path(), &[&["--cluster", "lab"], args].concat());
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", outputs(&out).1);
        let text = std::fs::read_to_string(dir.path().join("profile.yaml")).unwrap();
        assert!(text.starts_with("# yaml-language-server: $schema=profile.schema.json\n"), "{text}");
        assert!(dir.path().join("profile.schema.json").is_file());
        renders_and_lints_clean(dir.path(), "--profile", "profile.yaml");
        let files = tree(&dir.path().join("repo"));
        assert!(files.contains_key("clusters/lab/apps/opensandbox.yaml"), "{args:?}: {:?}", files.keys());
        assert_eq!(files.contains_key("platform/kata/helmrelease.yaml"), !args.contains(&"runc"), "{args:?}");
        assert_eq!(files.contains_key("platform/spire-agents/helmrelease.yaml"), args.contains(&"--spire"), "{args:?}");
    }
}

#[test]
fn a_fleet_starter_writes_its_base_profile_and_renders() {
    let dir = tempfile::tempdir().unwrap();
    let out = init(dir.path(), &["--fleet", "--cluster", "lab"]);
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
    for f in ["fleet.yaml", "base.yaml", "fleet.schema.json", "profile.schema.json"] {
        assert!(dir.path().join(f).is_file(), "{f}");
    }
    renders_and_lints_clean(dir.path(), "--fleet", "fleet.yaml");
    let files = tree(&dir.path().join("repo"));
    assert!(
        files.contains_key("clusters/lab-a/kustomization.yaml")
            && files.contains_key("clusters/lab-b/kustomization.yaml")
    );
}

#[test]
fn init_refuses_to_overwrite_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("profile.yaml"), "mine\n").unwrap();
    let out = init(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(outputs(&out).1.contains("profile.yaml exists; pass --force to overwrite it"), "{}", outputs(&out).1);
    assert_eq!(std::fs::read_to_string(dir.path().join("profile.yaml")).unwrap(), "mine\n");
    assert!(!dir.path().join("profile.schema.json").exists(), "nothing written");
    let out = init(dir.path(), &["--force"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(std::fs::read_to_string(dir.path().join("profile.yaml")).unwrap().contains("kind: Profile"));
    // The schema osbx wrote is refreshed without --force.
    let out = init(dir.path(), &["other.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
}

/// The smallest useful profile: a cluster's name and its pools; `-v` lists what was filled in.
#[test]
fn a_minimal_profile_renders_and_says_what_it_filled_in() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("min.yaml"),
        "cluster: {name: lab}\npools:\n  items:\n    - {name: pod, runtime: runc, capacity: {bufferMin: 1, bufferMax: 2, poolMin: 1, poolMax: 4}}\n",
    )
    .unwrap();
    let out = osbx()
        .current_dir(dir.path())
        .args(["render", "-v", "--profile", "min.yaml", "--out", "repo"])
        .output()
        .unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for line in [
        "default opensandbox.source.ref.tag: \"helm/opensandbox/0.2.2\"",
        "default opensandbox.server.config.runtime.execdImage: \"sandbox-registry.cn-zhangjiakou.cr.aliyuncs.com/opensandbox/execd:v1.0.22\"",
        "default opensandbox.server.apiKey.secretRef.name: \"opensandbox-api-key\"",
        "default pools.defaults.image: \"sandbox-registry.cn-zhangjiakou.cr.aliyuncs.com/opensandbox/code-interpreter:v1.1.0\"",
    ] {
        assert!(stderr.contains(line), "{line} not in\n{stderr}");
    }
    assert!(!stderr.contains("default pools.items"), "what the profile wrote is not listed: {stderr}");
    let files = tree(&dir.path().join("repo"));
    assert!(
        files["platform/opensandbox-pools/pools.yaml"]
            .contains("image: sandbox-registry.cn-zhangjiakou.cr.aliyuncs.com/opensandbox/code-interpreter:v1.1.0")
    );
    assert!(files["platform/opensandbox/values.yaml"].contains("name: opensandbox-api-key"));
    let out = osbx().current_dir(dir.path()).args(["lint", "--profile", "min.yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).0);
}
