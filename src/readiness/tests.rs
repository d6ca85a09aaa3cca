//! The status rules, case by case.

use super::*;

fn status_of(yaml: &str) -> StatusResult {
    compute(&serde_saphyr::from_str::<Value>(yaml).unwrap())
}

/// (case, object, expected status, message fragment)
const CASES: &[(&str, &str, Status, &str)] = &[
    ("configmap", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}", Status::Current, "always"),
    (
        "deleting",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, deletionTimestamp: '2026-01-01T00:00:00Z'}",
        Status::Terminating,
        "deleted",
    ),
    (
        "stale generation",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a, generation: 3}\nstatus: {observedGeneration: 2}",
        Status::InProgress,
        "generation 3 not yet observed",
    ),
    (
        "deployment progressing",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a, generation: 1}\nspec: {replicas: 2}\nstatus: {observedGeneration: 1, replicas: 2, updatedReplicas: 2, readyReplicas: 1, availableReplicas: 1}",
        Status::InProgress,
        "ready replicas: 1/2",
    ),
    (
        "deployment available",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a, generation: 1}\nspec: {replicas: 2}\nstatus: {observedGeneration: 1, replicas: 2, updatedReplicas: 2, readyReplicas: 2, availableReplicas: 2}",
        Status::Current,
        "2 replicas",
    ),
    (
        "deployment deadline",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a}\nstatus: {conditions: [{type: Progressing, status: 'False', reason: ProgressDeadlineExceeded, message: too slow}]}",
        Status::Failed,
        "too slow",
    ),
    (
        "crd established",
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: a}\nstatus: {conditions: [{type: Established, status: 'True'}]}",
        Status::Current,
        "Established",
    ),
    (
        "crd pending",
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: a}\nstatus: {}",
        Status::InProgress,
        "not Established",
    ),
    (
        "job failed",
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: a}\nstatus: {conditions: [{type: Failed, status: 'True', message: BackoffLimitExceeded}]}",
        Status::Failed,
        "Backoff",
    ),
    (
        "job complete",
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: a}\nstatus: {conditions: [{type: Complete, status: 'True'}]}",
        Status::Current,
        "Complete",
    ),
    (
        "stalled",
        "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: a}\nstatus: {conditions: [{type: Stalled, status: 'True', message: bad spec}]}",
        Status::Failed,
        "bad spec",
    ),
    (
        "reconciling",
        "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: a}\nstatus: {conditions: [{type: Reconciling, status: 'True', message: working}]}",
        Status::InProgress,
        "working",
    ),
    ("unknown kind", "apiVersion: example.com/v1\nkind: Thing\nmetadata: {name: a}", Status::Current, "no readiness"),
    (
        "flux never reconciled",
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: a, generation: 1}",
        Status::InProgress,
        "not yet reconciled",
    ),
    (
        "flux ready",
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: a, generation: 2}\nstatus: {observedGeneration: 2, conditions: [{type: Ready, status: 'True', observedGeneration: 2, message: Applied revision}]}",
        Status::Current,
        "Applied",
    ),
    (
        "flux stale ready",
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: a, generation: 2}\nstatus: {observedGeneration: 1, conditions: [{type: Ready, status: 'True', observedGeneration: 1}]}",
        Status::InProgress,
        "generation 2 not yet observed",
    ),
    (
        "flux stale condition",
        "apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: a, generation: 2}\nstatus: {observedGeneration: 2, conditions: [{type: Ready, status: 'True', observedGeneration: 1}]}",
        Status::InProgress,
        "Ready condition is for generation 1",
    ),
    (
        "helmrelease ready, condition generation 0",
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: a, generation: 1}\nstatus: {observedGeneration: 1, conditions: [{type: Ready, status: 'True', reason: InstallSucceeded, message: Helm install succeeded}]}",
        Status::Current,
        "install succeeded",
    ),
    (
        "helmrelease install failed",
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: a, generation: 1}\nstatus: {observedGeneration: 1, conditions: [{type: Ready, status: 'False', reason: InstallFailed, message: 'timed out waiting for the condition'}]}",
        Status::Failed,
        "InstallFailed: timed out",
    ),
    (
        // helm-controller v1.6.2 with `install.strategy: RetryOnFailure`, as seen by the e2e test.
        "helmrelease install failed, retry scheduled",
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: a, generation: 1}\nstatus: {observedGeneration: 1, conditions: [{type: Reconciling, status: 'True', reason: ProgressingWithRetry, message: retrying after 5m0s}, {type: Ready, status: 'False', reason: InstallFailed, message: 'Helm install failed for release a/a with chart opensandbox@0.2.2: quantities must match the regular expression'}]}",
        Status::Failed,
        "InstallFailed: Helm install failed for release a/a with chart opensandbox@0.2.2: quantities must match the regular expression (retrying after 5m0s)",
    ),
    (
        "helmrelease retrying now",
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: a, generation: 1}\nstatus: {observedGeneration: 1, conditions: [{type: Reconciling, status: 'True', reason: Progressing, message: 'Running install'}, {type: Ready, status: 'False', reason: InstallFailed, message: 'earlier attempt failed'}]}",
        Status::InProgress,
        "Running install",
    ),
    (
        "helmrelease dependency",
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata: {name: a, generation: 1}\nstatus: {observedGeneration: 1, conditions: [{type: Ready, status: 'False', reason: DependencyNotReady, message: waiting}]}",
        Status::InProgress,
        "waiting",
    ),
    (
        "pool without status",
        "apiVersion: sandbox.opensandbox.io/v1alpha1\nkind: Pool\nmetadata: {name: a, generation: 1}\nspec: {capacitySpec: {bufferMin: 1, bufferMax: 2, poolMin: 1, poolMax: 4}}",
        Status::InProgress,
        "no status",
    ),
    (
        "pool no capacity",
        "apiVersion: sandbox.opensandbox.io/v1alpha1\nkind: Pool\nmetadata: {name: a, generation: 1}\nspec: {capacitySpec: {bufferMin: 1, bufferMax: 2, poolMin: 1, poolMax: 4}}\nstatus: {observedGeneration: 1, total: 1, allocated: 0, available: 0, revision: abc}",
        Status::InProgress,
        "available 0 < 1",
    ),
    (
        "pool ready",
        "apiVersion: sandbox.opensandbox.io/v1alpha1\nkind: Pool\nmetadata: {name: a, generation: 1}\nspec: {capacitySpec: {bufferMin: 1, bufferMax: 2, poolMin: 1, poolMax: 4}}\nstatus: {observedGeneration: 1, total: 2, allocated: 0, available: 2, revision: abc}",
        Status::Current,
        "total 2",
    ),
    (
        "pool at zero",
        "apiVersion: sandbox.opensandbox.io/v1alpha1\nkind: Pool\nmetadata: {name: a, generation: 1}\nspec: {capacitySpec: {bufferMin: 0, bufferMax: 1, poolMin: 0, poolMax: 4}}\nstatus: {observedGeneration: 1, total: 0, allocated: 0, available: 0, revision: abc}",
        Status::Current,
        "total 0",
    ),
    (
        "pod failed",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nstatus: {phase: Failed, message: evicted}",
        Status::Failed,
        "evicted",
    ),
];

#[test]
fn table() {
    for (case, yaml, status, fragment) in CASES {
        let r = status_of(yaml);
        assert_eq!(r.status, *status, "{case}: {r:?}");
        assert!(r.message.contains(fragment), "{case}: {:?} does not contain {fragment:?}", r.message);
    }
}

#[test]
fn a_failed_first_reconcile_says_why() {
    let k = |reason: &str| {
        serde_saphyr::from_str::<Value>(&format!("apiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {{name: a, generation: 1}}\n\
                    status: {{observedGeneration: -1, conditions: [{{type: Ready, status: 'False', reason: {reason}, observedGeneration: 1, message: 'kustomize build failed: no kustomization.yaml'}}]}}"))
        .unwrap()
    };
    let failed = compute(&k("BuildFailed"));
    assert_eq!(
        (failed.status, failed.message.as_str()),
        (Status::Failed, "BuildFailed: kustomize build failed: no kustomization.yaml")
    );
    let waiting = compute(&k("ArtifactFailed"));
    assert_eq!(waiting.status, Status::InProgress);
    assert!(waiting.message.ends_with(": kustomize build failed: no kustomization.yaml"), "{}", waiting.message);
}
