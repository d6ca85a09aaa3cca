//! `apply` under every fault: a cut at every request burst, resets part-way through responses,
//! stalls, latency and refused connections; the rerun converges.

use super::*;

/// Each object's subject (`Kind/ns/name`) and action in a report of `apply` or `diff`.
fn actions(report: &Value) -> BTreeMap<String, String> {
    report["changes"]
        .as_array()
        .map(|changes| {
            changes
                .iter()
                .map(|c| {
                    (
                        c["object"].as_str().unwrap_or_default().to_owned(),
                        c["action"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The inventory of the profile `p` (`None`: no ConfigMap): each entry's subject and `created`,
/// in stored order, or why it is unreadable.
async fn inventory(client: &kube::Client, p: &str) -> Option<Result<Vec<(String, bool)>, String>> {
    let name = format!("osbx-inventory-{p}-{p}");
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &format!("{p}-flux")).get_opt(&name).await.unwrap()?;
    let Some(text) = cm.data.as_ref().and_then(|d| d.get("inventory.json")) else {
        return Some(Err(format!("{name} has no inventory.json: {:?}", cm.data)));
    };
    let entries: Vec<Value> = match serde_json::from_str(text) {
        Ok(e) => e,
        Err(e) => return Some(Err(format!("{name}: inventory.json is not JSON ({e}): {text}"))),
    };
    Some(Ok(entries
        .iter()
        .map(|e| {
            let ns = e["namespace"].as_str().map(|n| format!("{n}/")).unwrap_or_default();
            let subject = format!("{}/{ns}{}", e["kind"].as_str().unwrap_or("?"), e["name"].as_str().unwrap_or("?"));
            (subject, e["created"] == true)
        })
        .collect()))
}

/// After a faulted apply of the profile `p` on a cluster that had none of its objects: the
/// inventory covers every object that now exists; a rerun without faults creates exactly what
/// is missing and converges (diff clean, every object once, all in the inventory as created).
async fn check_apply_converges(
    f: &mut Findings,
    case: &str,
    client: &kube::Client,
    kubeconfig: &Path,
    dir: &Path,
    p: &str,
) {
    // What exists now, as a diff without faults sees it (a diff writes nothing).
    let before = osbx_on(kubeconfig, dir, &["diff", "-o", "json"]).await;
    f.check(matches!(before.code, Some(0 | 1)), || {
        format!("{case}: diff after the fault: {}\n{}", outcome(&before), before.stderr)
    });
    let before = actions(&json_of(&before));
    let existing: Vec<&String> = before.iter().filter(|(_, a)| *a != "created").map(|(s, _)| s).collect();
    match inventory(client, p).await {
        None => f.check(existing.is_empty(), || {
            format!("{case}: the faulted apply created {existing:?} and wrote no inventory: osbx no longer knows it created them")
        }),
        Some(Err(e)) => f.check(false, || format!("{case}: half-written inventory: {e}")),
        Some(Ok(entries)) => {
            let listed: BTreeMap<&str, bool> = entries.iter().map(|(s, c)| (s.as_str(), *c)).collect();
            let untracked: Vec<&&String> =
                existing.iter().filter(|s| listed.get(s.as_str()) != Some(&true)).collect();
            f.check(untracked.is_empty(), || {
                format!("{case}: objects the faulted apply created are not in its inventory as created: {untracked:?}; inventory: {entries:?}")
            });
        }
    }

    let rerun = osbx_on(kubeconfig, dir, &["apply", "--no-wait", "-o", "json"]).await;
    f.check(rerun.code == Some(0), || {
        format!("{case}: the rerun without faults: {}\n{}", outcome(&rerun), rerun.stderr)
    });
    if rerun.code != Some(0) {
        return;
    }
    let done = actions(&json_of(&rerun));
    for (subject, was) in &before {
        let now = done.get(subject).map_or("missing", String::as_str);
        // Created exactly when it was missing: never "unchanged" for an object that was not there.
        let expected = if was == "created" {
            "created"
        } else if was == "configured" {
            "configured"
        } else {
            "unchanged"
        };
        f.check(now == expected, || {
            format!("{case}: rerun says {subject} {now}, expected {expected} (diff before it: {was})")
        });
    }
    let after = osbx_on(kubeconfig, dir, &["diff", "-o", "json"]).await;
    let summary = json_of(&after)["summary"].clone();
    f.check(
        after.code == Some(0) && summary == json!({"create": 0, "change": 0, "unchanged": before.len(), "prune": 0}),
        || format!("{case}: not converged: diff {} {summary}", outcome(&after)),
    );
    let want: BTreeSet<String> = (0..POOLS).map(|i| format!("p{i}")).collect();
    let live = pools_in(client, &format!("{p}-sbx")).await;
    f.check(live == want, || format!("{case}: pools {live:?}, expected {want:?}"));
    match inventory(client, p).await {
        Some(Ok(entries)) => {
            let subjects: Vec<&String> = entries.iter().map(|(s, _)| s).collect();
            let unique: BTreeSet<&String> = subjects.iter().copied().collect();
            let expected: BTreeSet<&String> = before.keys().collect();
            f.check(unique.len() == subjects.len() && unique == expected, || {
                format!("{case}: the inventory lists {subjects:?}, expected each of {expected:?} once")
            });
            let not_created: Vec<&String> = entries.iter().filter(|(_, c)| !c).map(|(s, _)| s).collect();
            f.check(not_created.is_empty(), || {
                format!("{case}: osbx created every object of {p}, but its inventory says it did not create {not_created:?} (so --prune would never delete them)")
            });
        }
        other => f.check(false, || format!("{case}: no readable inventory after the rerun: {other:?}")),
    }
}

/// A first `apply` of a fresh profile `p` through the proxy under `case` (`None`: no fault, to
/// measure a clean run), then the convergence checks; the proxy's counts and what was wrong.
async fn apply_case(p: String, case: Option<Case>, wait: bool) -> (Stats, Findings) {
    let mut f = Findings::default();
    let p = p.as_str();
    let (client, kubeconfig) = prepare(p).await;
    let _controllers = wait.then(|| controllers(&client, p));
    let dir = tempfile::tempdir().unwrap();
    profile(p).write_to(dir.path());
    let command = if wait { "apply" } else { "apply --no-wait" };
    let extra: &[&str] = if wait { &["--timeout", "30s"] } else { &["--no-wait"] };
    let args = [&["apply", "-o", "json", "--request-timeout", REQUEST_TIMEOUT], extra].concat();
    let script = case.as_ref().map_or_else(Script::clean, |c| c.script.clone());
    let run = through_proxy(&kubeconfig, dir.path(), &args, script, p).await;
    let Some(case) = case else {
        f.check(run.ran.code == Some(0), || format!("clean {command}: {}\n{}", outcome(&run.ran), run.ran.stderr));
        return (run.stats, f);
    };
    matrix(command, &case.fault, &outcome(&run.ran));
    run.check(&mut f, command, &case, &[0, 2]);
    let what = format!("{command} | {}", case.fault);
    if run.ran.code == Some(0) {
        // A first apply: everything created, nothing claimed unchanged.
        let got = actions(&json_of(&run.ran));
        f.check(got.len() == 7 + POOLS && got.values().all(|a| a == "created"), || format!("{what}: {got:?}"));
    }
    check_apply_converges(&mut f, &what, &client, &kubeconfig, dir.path(), p).await;
    (run.stats, f)
}

/// A clean first apply of `<prefix>0` to measure, then every case on `<prefix>1`, `<prefix>2`…,
/// `parallel` at a time.
async fn apply_matrix(test: &str, prefix: &str, wait: bool, parallel: usize, cases: impl FnOnce(Stats) -> Vec<Case>) {
    let (clean, f) = apply_case(format!("{prefix}0"), None, wait).await;
    f.assert_none(&format!("{test} (the clean run)"));
    let f = all_cases(cases(clean), parallel, |i, case| async move {
        apply_case(format!("{prefix}{}", i + 1), Some(case), wait).await.1
    })
    .await;
    f.assert_none(test);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_cut_at_every_request_burst_converges() {
    // One at a time: when several run at once, a run's concurrent requests share TLS records
    // more often, and the cut between the first objects and the inventory written with them
    // falls less often.
    apply_matrix("apply, cut at every client record", "pxr", false, 1, |clean| cuts(clean, None, &[])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_reset_part_way_through_the_responses_converges() {
    let fractions: Vec<f64> = (1..=12).map(|i| f64::from(i) / 13.0).collect();
    apply_matrix("apply, reset part-way", "pxb", false, PARALLEL, |clean| cuts(clean, Some(&[][..]), &fractions)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_with_stalls_latency_and_refused_connections_ends_in_time_and_converges() {
    apply_matrix("apply, time faults", "pxt", true, PARALLEL, |clean| timing(clean, &[0.3, 0.6, 0.9])).await;
}
