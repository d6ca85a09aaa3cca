//! The report a run publishes: its writer, its verdict, its Events, and which runs write the
//! verdicts ConfigMap.
use super::{Published, Writer};

/// The downward API gives a label that is not there as empty: a pod of the Deployment is a
/// pod, a pod of a Job (both labels) is the Job's, a run outside a pod is unnamed.
#[test]
fn a_writer_is_what_the_pod_was_given() {
    assert_eq!(Writer::of(Some("acc-1"), Some(("", "")), None), Writer::Pod { name: "acc-1".into() });
    assert_eq!(
        Writer::of(Some("acc-x"), Some(("acc", "u-1")), Some("")),
        Writer::Job { name: "acc".into(), uid: "u-1".into(), pod: "acc-x".into() }
    );
    assert_eq!(Writer::of(Some("acc-x"), Some(("acc", " ")), None), Writer::Pod { name: "acc-x".into() });
    assert_eq!(Writer::of(None, None, None), Writer::Unnamed);
    assert_eq!(Writer::of(Some(""), None, None), Writer::Unnamed);
    assert_eq!(Writer::of(None, Some(("acc", "u-1")), None).to_string(), r#"Job "acc" (uid "u-1")"#);
    // A Job of the CronJob is never the layer's Job, whatever its name.
    let scheduled = Writer::of(Some("acc-deep-1-x"), Some(("acc-deep-1", "u-2")), Some("acc-deep"));
    assert_eq!(
        scheduled,
        Writer::Scheduled { cron_job: "acc-deep".into(), job: "acc-deep-1".into(), pod: "acc-deep-1-x".into() }
    );
    assert_eq!(scheduled.to_string(), r#"Job "acc-deep-1" of the CronJob "acc-deep""#);
    // A name read back from the cluster is escaped, never a terminal's control sequence.
    assert_eq!(Writer::Pod { name: "x\u{1b}[2Jy\n".into() }.to_string(), r#"pod "x\u{1b}[2Jy\n""#);
}

/// A run of no check is no verdict: its report is never Ready (a serving pod with nothing to
/// run and no Job report yet is an error, never a green report).
#[test]
fn a_report_of_no_check_is_not_ready() {
    let publishing = super::Publishing {
        report: crate::object::ObjectRef {
            gvk: crate::object::Gvk::new("", "v1", "ConfigMap"),
            namespace: Some("osbx-acceptance".into()),
            name: "osbx-acceptance-report".into(),
        },
        revision: "0123456789abcdef".into(),
        writer: Writer::Pod { name: "acc-serve-x".into() },
    };
    let none = super::Published::of("r", &publishing, "c", std::time::SystemTime::now(), &[]);
    assert!(!none.ready, "a report of no check must not be Ready");
    let pass = crate::verify::CheckResult {
        id: "nodes.ready".into(),
        started_ms: 0,
        duration_ms: 0,
        verdict: crate::verify::Verdict::pass("1 node(s)"),
    };
    assert!(super::Published::of("r", &publishing, "c", std::time::SystemTime::now(), &[pass]).ready);
}

/// Only a run of every selected check writes the verdicts ConfigMap; any other run's
/// identity only reads it, and it sits beside the report.
#[test]
fn only_the_deep_runs_write_the_verdicts() {
    let report = crate::object::ObjectRef {
        gvk: crate::object::Gvk::new("", "v1", "ConfigMap"),
        namespace: Some("acc".into()),
        name: "acc-report".into(),
    };
    let verdicts = super::verdicts(&report);
    assert_eq!((verdicts.namespace.as_deref(), verdicts.name.as_str()), (Some("acc"), "acc-report-verdicts"));
    let writes = |deep| {
        super::operations(&report, deep)
            .into_iter()
            .any(|o| matches!(o, super::Operation::Apply { object, .. } if object == verdicts))
    };
    assert!(writes(true) && !writes(false));
    assert!(super::operations(&report, false).contains(&super::Operation::Get(super::Objects::Named(verdicts))));
    let job = Writer::Job { name: "acc".into(), uid: "u".into(), pod: "p".into() };
    let scheduled = Writer::Scheduled { cron_job: "c".into(), job: "j".into(), pod: "p".into() };
    assert!(job.is_deep() && scheduled.is_deep());
    assert!(!Writer::Pod { name: "acc-serve-x".into() }.is_deep() && !Writer::Unnamed.is_deep());
}

/// A Warning Event says what failed, why and the fix, within an Event's bound.
#[test]
fn an_event_says_why_a_check_failed() {
    let result =
        |verdict| crate::verify::CheckResult { id: "nodes.ready".into(), started_ms: 0, duration_ms: 0, verdict };
    let failed = result(
        crate::verify::Verdict::fail("1 node(s), 1 for Kata", "nd-node is cordoned")
            .with_fix("kubectl uncordon nd-node"),
    );
    assert_eq!(
        super::event_message(&failed),
        "nodes.ready FAIL: 1 node(s), 1 for Kata; why: nd-node is cordoned; fix: kubectl uncordon nd-node"
    );
    let long = result(crate::verify::Verdict::fail("e".repeat(2000), "d"));
    assert_eq!(super::event_message(&long).chars().count(), 1024);
}

/// The serving pod takes the other checks' verdicts from the newer of the Job's and the
/// CronJob's reports at its revision and criteria; one of another revision or criteria, or
/// the serving pod's own, never.
#[test]
fn the_deep_verdicts_are_the_newest_of_the_job_and_the_cron_job() {
    let report = |writer: &str, revision: &str, criteria: &str, time: &str| {
        serde_json::json!({"run": writer, "writer": {"kind": "Unnamed"}, "revision": revision, "criteria": criteria,
                           "time": time, "ready": true, "summary": "Ready", "checks": []})
        .to_string()
    };
    // The verdicts ConfigMap (a serving pod's report is never in it).
    let map = |job: Option<String>, scheduled: Option<String>| serde_json::json!({"data": {"job.json": job, "scheduled.json": scheduled}});
    let run = |m: &serde_json::Value| super::newest_of(m, "r1", "c1").map(|p| p.run);
    let job = report("job", "r1", "c1", "2026-12-06T10:00:00Z");
    let later = report("cron", "r1", "c1", "2026-12-06T16:00:00Z");
    assert_eq!(run(&map(Some(job.clone()), Some(later.clone()))).as_deref(), Some("cron"));
    let earlier = report("cron", "r1", "c1", "2026-12-06T04:00:00Z");
    assert_eq!(run(&map(Some(job.clone()), Some(earlier))).as_deref(), Some("job"));
    // Of an earlier revision or other criteria: not this run's.
    assert_eq!(
        run(&map(Some(job.clone()), Some(report("cron", "r0", "c1", "2026-12-06T16:00:00Z")))).as_deref(),
        Some("job")
    );
    assert_eq!(run(&map(Some(report("job", "r1", "c0", "2026-12-06T10:00:00Z")), None)), None);
    assert_eq!(run(&map(None, Some(later))).as_deref(), Some("cron"));
    assert_eq!(run(&map(None, None)), None);
}

/// A report written before reports named their writer and criteria reads back as unnamed,
/// of no criteria: never this wave's.
#[test]
fn an_older_report_names_no_writer() {
    let old = r#"{"run": "r", "revision": "0123456789abcdef", "time": "2026-12-01T00:00:00Z", "ready": true,
                  "summary": "Ready", "checks": []}"#;
    let p: Published = serde_json::from_str(old).unwrap();
    assert_eq!((p.writer, p.criteria.as_str(), p.started.as_str()), (Writer::Unnamed, "", ""));
    let job = Writer::Job { name: "a".into(), uid: "u".into(), pod: "a-1".into() };
    let text = serde_json::to_string(&job).unwrap();
    assert_eq!(text, r#"{"kind":"Job","name":"a","uid":"u","pod":"a-1"}"#);
}
