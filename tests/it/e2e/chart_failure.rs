//! A chart install the API server rejects: `osbx apply` must fail about as fast as Flux does,
//! and say what helm-controller said.

use serde_json::json;

use super::flux;
use super::world::World;
use super::{Findings, bench};
use crate::support::outputs;

/// The controller asks for more CPU than its limit (`requests.cpu: 2`, `limits.cpu: 1`): both are
/// valid quantities, osbx renders them into the chart's values as they are, helm renders the
/// Deployment, and the API server refuses it during helm-controller's install ("must be less
/// than or equal to cpu limit"). The
/// real helm-controller marks the HelmRelease `Ready=False` (`InstallFailed`) within seconds;
/// `osbx apply` must then fail (exit 1) quoting that message, within 3× Flux's own failure time
/// (creation to the Ready=False transition) plus 20 s, far below its `--timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chart_install_the_api_server_rejects_fails_the_apply_fast() {
    const S: &str = "chart_failure";
    let world = World::scenario(S)
        .profile(|p| {
            p["opensandbox"]["controller"]["resources"] = json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}});
        })
        .start()
        .await;
    let mut findings = Findings::default();

    let (out, took, _) = world.apply("90s").await;
    let (stdout, stderr) = outputs(&out);
    bench(S, "apply_wall", took.as_secs_f64());
    let hr = flux::get(&world.client, "helm.toolkit.fluxcd.io/v2", "HelmRelease", "opensandbox-system", "opensandbox")
        .await
        .expect("the HelmRelease");
    let ready = flux::condition(&hr, "Ready").unwrap_or_else(|| panic!("no Ready condition: {hr:#}")).clone();
    assert_eq!(ready["status"], "False", "{hr:#}");
    assert_eq!(ready["reason"], "InstallFailed", "{hr:#}");
    let message = ready["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains("must be less than or equal to cpu limit"),
        "helm-controller failed for another reason: {message}"
    );
    let (flux_failed_after, _) = flux::ready_times(&hr);
    bench(S, "flux_failed_since_created", flux_failed_after);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(!stdout.contains("Pool/"), "the pools layer was applied after a failed chart: {stdout}");

    let output = format!("{stdout}{stderr}");
    findings.expect(
        output.contains("HelmRelease/opensandbox-system/opensandbox")
            && output.contains("must be less than or equal to cpu limit"),
        || format!("osbx apply does not quote helm-controller's message ({message:?}):\n{output}"),
    );
    let bound = 3.0 * flux_failed_after + 20.0;
    findings.expect(took.as_secs_f64() <= bound, || {
        let reconciling = flux::condition(&hr, "Reconciling").map(ToString::to_string).unwrap_or_default();
        format!(
            "osbx apply took {:.1} s, Flux failed the release {flux_failed_after:.0} s after creating it (bound {bound:.0} s); \
             the HelmRelease's Reconciling condition: {reconciling}",
            took.as_secs_f64()
        )
    });
    bench(S, "scenario_wall", world.seconds());
    drop(world);
    findings.assert_none();
}
