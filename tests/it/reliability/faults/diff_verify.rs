//! `diff` and `verify` under every fault: the clean answer or a clear error.

use super::*;

/// The diff of every case: the objects and actions it lists (`► Kind/ns/name action`) and its
/// summary line, which a clean diff of the same state repeats exactly.
fn diff_lines(stdout: &str) -> Vec<String> {
    stdout.lines().filter(|l| l.starts_with('►') || l.ends_with("to prune")).map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diff_under_every_fault_is_the_clean_diff_or_a_clear_error() {
    let p = "pxd";
    let (client, kubeconfig) = prepare(p).await;
    let dir = tempfile::tempdir().unwrap();
    profile(p).write_to(dir.path());
    let applied = osbx_on(&kubeconfig, dir.path(), &["apply", "--no-wait"]).await;
    assert_eq!(applied.code, Some(0), "{}", applied.stderr);
    // The profile changes: a pool changed, one dropped, one added.
    let changed = (1..POOLS)
        .fold(TestProfile::new(p).pool("p0", "runc", [0, 2, 0, 3]), |pr, i| {
            if i == 3 { pr } else { pr.pool(&format!("p{i}"), "runc", [0, 1, 0, 2]) }
        })
        .pool("extra", "runc", [0, 1, 0, 2]);
    changed.write_to(dir.path());
    let args = ["diff", "--request-timeout", REQUEST_TIMEOUT];
    let (proxy, through) = Proxy::in_front_of(&kubeconfig, Script::clean());
    let reference = osbx_on(&through, dir.path(), &args).await;
    let clean = proxy.stats();
    drop(proxy);
    assert_eq!(reference.code, Some(1), "{}{}", reference.stdout, reference.stderr);
    let expected = diff_lines(&reference.stdout);
    assert!(expected.last().is_some_and(|l| l == "1 to create, 1 to change, 11 unchanged, 1 to prune"), "{expected:?}");

    let mut faults = cuts(clean, None, &(1..=12).map(|i| f64::from(i) / 13.0).collect::<Vec<_>>());
    faults.extend(timing(clean, &[0.4, 0.9]));
    let (kubeconfig, dir, expected) = (&kubeconfig, dir.path(), &expected);
    let f = all_cases(faults, PARALLEL, |_, case| async move {
        let mut f = Findings::default();
        let run = through_proxy(kubeconfig, dir, &args, case.script.clone(), p).await;
        matrix("diff", &case.fault, &outcome(&run.ran));
        run.check(&mut f, "diff", &case, &[1, 2]);
        let case = format!("diff | {}", case.fault);
        if run.ran.code == Some(1) {
            let got = diff_lines(&run.ran.stdout);
            f.check(got == *expected, || format!("{case}: a different diff:\n{got:#?}\nexpected:\n{expected:#?}"));
        }
        // A diff writes nothing, faulted or not: a clean diff still says the same.
        let again = osbx_on(kubeconfig, dir, &["diff"]).await;
        f.check(again.code == Some(1) && diff_lines(&again.stdout) == *expected, || {
            format!("{case}: state changed: {}", again.stdout)
        });
        f
    })
    .await;
    // Converges: the changed profile applied (with prune), then nothing to do.
    let out = osbx_on(kubeconfig, dir, &["apply", "--no-wait", "--prune"]).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let out = osbx_on(kubeconfig, dir, &["diff"]).await;
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    let want: BTreeSet<String> = ["p0", "p1", "p2", "p4", "p5", "extra"].map(String::from).into();
    assert_eq!(pools_in(&client, &format!("{p}-sbx")).await, want);
    f.assert_none("diff");
}

/// The probe namespace a verify run names on stderr (`► verify run … (probe namespace NS)`), if
/// it still exists and is not being deleted.
async fn probe_namespace_left(client: &kube::Client, stderr: &str) -> Option<String> {
    let name = stderr.split("(probe namespace ").nth(1)?.split(')').next()?.to_owned();
    let ns = Api::<Namespace>::all(client.clone()).get_opt(&name).await.unwrap()?;
    ns.metadata.deletion_timestamp.is_none().then_some(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_under_every_fault_passes_or_says_which_check_could_not_run() {
    let p = "pxv";
    let (client, kubeconfig) = prepare(p).await;
    let _controllers = controllers(&client, p);
    let dir = tempfile::tempdir().unwrap();
    profile(p).write_to(dir.path());
    let applied = osbx_on(&kubeconfig, dir.path(), &["apply", "--timeout", "60s"]).await;
    assert_eq!(applied.code, Some(0), "{}", applied.stderr);
    // The checks that read the cluster only (no probe pods, no Lifecycle API).
    let args = [
        "verify",
        "--only",
        "flux.layers,opensandbox.pools",
        "-o",
        "json",
        "--request-timeout",
        REQUEST_TIMEOUT,
        "--verify-timeout",
        "30s",
    ];
    let (proxy, through) = Proxy::in_front_of(&kubeconfig, Script::clean());
    let reference = osbx_on(&through, dir.path(), &args).await;
    let clean = proxy.stats();
    drop(proxy);
    assert_eq!(reference.code, Some(0), "{}{}", reference.stdout, reference.stderr);

    let mut faults = cuts(clean, Some(&[0.1, 0.3, 0.5, 0.7, 0.9][..]), &[0.2, 0.4, 0.6, 0.8, 0.95]);
    faults.extend(timing(clean, &[0.4, 0.9]));
    let (client, kubeconfig, dir) = (&client, &kubeconfig, dir.path());
    let f = all_cases(faults, PARALLEL, |_, case| async move {
        let mut f = Findings::default();
        let run = through_proxy(kubeconfig, dir, &args, case.script.clone(), p).await;
        run.check(&mut f, "verify", &case, &[0, 1, 2]);
        let (ran, fault) = (&run.ran, &case.fault);
        let case = format!("verify | {fault}");
        let mut said = outcome(ran);
        if matches!(ran.code, Some(0 | 1)) {
            let report = json_of(ran);
            let checks = report["checks"].as_array().cloned().unwrap_or_default();
            let not_passed: Vec<&Value> = checks.iter().filter(|c| c["outcome"] != "PASS").collect();
            for c in &not_passed {
                f.check(c["outcome"] == "ERROR" && says_why(&c.to_string()), || {
                    format!("{case}: the healthy platform got {} for {}: {c}", c["outcome"], c["id"])
                });
            }
            if !not_passed.is_empty() {
                let ids: Vec<String> = not_passed
                    .iter()
                    .map(|c| format!("{} {}", c["id"].as_str().unwrap_or("?"), c["outcome"].as_str().unwrap_or("?")))
                    .collect();
                said = format!("{said}: {}", ids.join(", "));
            }
        }
        if let Some(ns) = probe_namespace_left(client, &ran.stderr).await {
            said = format!("{said}; probe namespace {ns} left for a later run's sweep");
        }
        matrix("verify", fault, &said);
        f
    })
    .await;
    // Converges: a verify without faults passes.
    let out = osbx_on(kubeconfig, dir, &args).await;
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    f.assert_none("verify");
}
