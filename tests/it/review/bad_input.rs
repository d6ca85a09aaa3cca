//! A review that cannot be made says why, with exit 2, and writes nothing; a base that does not
//! render is reported, and the head is still shown.

use serde_json::json;

use super::{Case, entry, profile, sources, summary};
use crate::support::{git, outputs};

#[test]
fn a_ref_that_does_not_exist_is_named() {
    let case = Case::new(None, &profile(None));
    let before = case.state();
    let out = case.review("no-such-ref", &["--no-charts"]);
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("--base no-such-ref: no such commit, branch or tag"), "{stderr}");
    assert_eq!(case.state(), before);
    // No --base value and no upstream: say what to give.
    let out = case.review("", &["--no-charts"]);
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--base origin/main"), "{stderr}");
}

#[test]
fn a_base_that_does_not_render_is_reported_and_the_head_is_shown() {
    let mut p = profile(None);
    let case = Case::new(None, &p);
    // A second commit whose profile is invalid (poolMin above poolMax) and whose tree holds no
    // render: the base must be rendered from that profile, and cannot be.
    std::fs::remove_dir_all(case.repo.join("clusters")).unwrap();
    std::fs::remove_dir_all(case.repo.join("platform")).unwrap();
    p["pools"]["items"][0]["capacity"]["poolMin"] = json!(99);
    case.set_profile(&p);
    case.commit("a broken profile, nothing rendered");
    p["pools"]["items"][0]["capacity"]["poolMin"] = json!(1);
    case.set_profile(&p);
    let r = case.review_json("HEAD", &["--no-charts"], 1);
    let why = r["base"]["unrenderable"].as_str().unwrap_or_else(|| panic!("{r}"));
    assert!(why.contains("HEAD:profile.yaml") && why.contains("poolMin"), "{why}");
    assert_eq!(r["base"]["how"]["sandbox"], "unrenderable");
    assert_eq!(entry(&r, "Pool/opensandbox/pod")["action"], "created", "{}", summary(&r));
    // The text output says so too.
    let out = case.review("HEAD", &["--no-charts"]);
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(format!("{stdout}{stderr}").contains("unrenderable"), "{stdout}{stderr}");
}

#[test]
fn an_unreachable_chart_source_names_the_source_and_the_ref() {
    let s = sources();
    let mut p = profile(Some(&s));
    // Nothing listens on port 9 of the loopback.
    p["opensandbox"]["source"]["url"] = json!("http://127.0.0.1:9/opensandbox.git");
    let case = Case::new(Some(s.clone()), &p);
    let before = case.state();
    let out = case.review("HEAD", &[]);
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("cannot fetch the chart from")
            && stderr.contains("http://127.0.0.1:9/opensandbox.git")
            && stderr.contains("helm/opensandbox/0.2.2"),
        "{stderr}"
    );
    assert_eq!(case.state(), before);
}

#[test]
fn a_chart_that_fails_to_template_quotes_helm() {
    let s = sources();
    let mut p = profile(Some(&s));
    // The OpenSandbox chart requires Kubernetes >= 1.21.1.
    p["cluster"]["kubernetesVersion"] = json!("1.20");
    let case = Case::new(Some(s.clone()), &p);
    let out = case.review("HEAD", &[]);
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("helm template of chart") && stderr.contains("incompatible with Kubernetes v1.20"),
        "{stderr}"
    );
}

#[test]
fn no_helm_or_an_old_one_is_an_error_unless_no_charts_is_asked() {
    let case = Case::new(None, &profile(None));
    let before = git(&case.repo, &["status", "--porcelain"]);
    let review = |helm: &std::path::Path, args: &[&str]| {
        let mut cmd = crate::support::osbx();
        cmd.args(["diff", "--base=HEAD", "-p"]).arg(case.profile_path()).arg("--repo").arg(&case.repo).args(args);
        cmd.env("OSBX_HELM", helm).env("OSBX_CHART_CACHE", case.scratch().join("cache"));
        cmd.output().unwrap()
    };
    let missing = case.scratch().join("no-helm-here");
    let out = review(&missing, &[]);
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("there is no `helm` on PATH") && stderr.contains("--no-charts"), "{stderr}");
    // A helm that says it is 3.12.
    let old = case.scratch().join("old-helm");
    std::fs::write(&old, "#!/bin/sh\necho v3.12.3\n").unwrap();
    std::process::Command::new("chmod").arg("+x").arg(&old).status().unwrap();
    let out = review(&old, &[]);
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("v3.12.3: helm ≥ 3.13 is needed"), "{stderr}");
    // The Flux objects alone need no helm.
    let out = review(&missing, &["--no-charts"]);
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    // A review only reads: whatever helm was, the work tree is as it was.
    assert_eq!(git(&case.repo, &["status", "--porcelain"]), before, "the reviews changed the work tree");
}
