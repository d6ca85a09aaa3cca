//! Where a run's time goes: named moments, in milliseconds since the process started, recorded by
//! the steps that reach them (the kubeconfig read, the TLS connection, the server's first answer,
//! discovery, the plan's reads, the render). `osbx apply`, `diff` and `status` with `-o json` report
//! them as `timings` ([`Timed`]), and the benchmarks break a no-op apply down by them (BENCHMARKS.md).
//!
//! A moment is recorded the first time it is reached, so a step that runs again later (a second
//! connection, discovery refreshed after a chart installed CRDs) does not move it.

use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use serde::Serialize;

static START: OnceLock<Instant> = OnceLock::new();
static MARKS: Mutex<Vec<Mark>> = Mutex::new(Vec::new());

/// One moment of a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Mark {
    /// What was reached (`config`, `tls`, `version`, `discovery`, `reads`, `rendered`, …).
    pub(crate) at: &'static str,
    /// Milliseconds since the process started (since [`start`]).
    pub(crate) ms: f64,
}

/// The process starts: moments are measured from here. The binary calls it first thing.
pub fn start() {
    START.get_or_init(Instant::now);
}

/// `at` is reached now (ignored when it was reached before).
pub(crate) fn mark(at: &'static str) {
    let ms = START.get_or_init(Instant::now).elapsed().as_secs_f64() * 1000.0;
    let mut marks = MARKS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !marks.iter().any(|m| m.at == at) {
        marks.push(Mark { at, ms: (ms * 10.0).round() / 10.0 });
    }
}

/// Every moment reached so far, in the order reached.
#[must_use]
pub(crate) fn marks() -> Vec<Mark> {
    let mut marks = MARKS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    marks.sort_by(|a, b| a.ms.total_cmp(&b.ms));
    marks
}

/// A command's JSON output and where the run's time went: `value`'s fields and `timings`.
#[derive(Serialize)]
pub(crate) struct Timed<'a, T: Serialize> {
    #[serde(flatten)]
    value: &'a T,
    timings: Vec<Mark>,
}

/// The run is `done`: `value` with every moment reached, for `-o json`.
pub(crate) fn done<T: Serialize>(value: &T) -> Timed<'_, T> {
    mark("done");
    Timed { value, timings: marks() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moment_is_kept_from_the_first_time_it_is_reached() {
        start();
        mark("unit-first");
        std::thread::sleep(std::time::Duration::from_millis(2));
        mark("unit-second");
        mark("unit-first");
        let m: Vec<Mark> = marks().into_iter().filter(|m| m.at.starts_with("unit-")).collect();
        assert_eq!(m.iter().map(|m| m.at).collect::<Vec<_>>(), ["unit-first", "unit-second"]);
        assert!(m[1].ms >= m[0].ms + 1.0, "{m:?}");
    }
}
