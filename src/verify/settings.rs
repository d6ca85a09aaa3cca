//! How a verify run is set up: which checks, how it reaches the Lifecycle API, its time limit.

use std::time::Duration;

/// Which checks to run.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Only these ids (prefixes: `kata` selects every `kata.*` check).
    pub only: Vec<String>,
    /// Not these ids (prefixes too).
    pub skip: Vec<String>,
    /// Run the checks that only run when asked for ([`OPT_IN`]: the build benchmark, `--bench`).
    pub bench: bool,
}

/// The checks a run makes only when asked for (`--bench`, or `--only` naming them): the build
/// benchmark, which builds in a runc pool as well.
pub(crate) const OPT_IN: &str = "workload.bench";

impl Selection {
    /// What the acceptance layer's runs select: its `only` and `skip` (no opt-in checks: its
    /// pods pass no `--bench`).
    #[must_use]
    pub(crate) fn of_acceptance(a: &crate::components::acceptance::Acceptance) -> Self {
        Self { only: a.only.clone(), skip: a.skip.clone(), bench: false }
    }

    /// Whether `pattern` (an id, or a prefix of whole segments) names the check `id`.
    pub(crate) fn matches(pattern: &str, id: &str) -> bool {
        id == pattern || id.starts_with(&format!("{pattern}."))
    }

    /// Whether a check id is selected.
    #[must_use]
    pub fn selects(&self, id: &str) -> bool {
        let asked = self.bench || self.only.iter().any(|p| Self::matches(OPT_IN, p) && Self::matches(p, id));
        (self.only.is_empty() || self.only.iter().any(|p| Self::matches(p, id)))
            && !self.skip.iter().any(|p| Self::matches(p, id))
            && (asked || !Self::matches(OPT_IN, id))
    }
}

/// How a run reaches the platform: besides the profile, what decides the operations of its
/// checks. The default is what `osbx rbac` grants: the Lifecycle API through the API server's
/// service proxy, and the API key read from the Secret the profile names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reach {
    /// The Lifecycle API at a URL (`--server-url`), not through the service proxy.
    pub direct: bool,
    /// The run was given the API key (`--api-key-file`, `OSBX_API_KEY`), so it reads no Secret.
    pub key_given: bool,
    /// The probe pods go to this namespace, which exists (`--probe-namespace`: the acceptance
    /// layer renders one): the run creates and deletes no namespace, only its own pods there.
    /// `None`: a namespace of the run's own, created and deleted by it.
    pub probes: Option<String>,
    /// Only the checks that change nothing run (`--read-only`: the serving pod, whose identity
    /// may create nothing); the run creates, sweeps and deletes nothing.
    pub read_only: bool,
}

/// How to run the checks.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Which checks.
    pub selection: Selection,
    /// The Lifecycle API's URL (default: through the API server's service proxy).
    pub server_url: Option<String>,
    /// The API key given to this run (`--api-key-file`, `OSBX_API_KEY`); else the profile's.
    pub api_key: ApiKeyValue,
    /// The whole run's time limit.
    pub timeout: Duration,
    /// Run the probe pods in this existing namespace (see [`Reach::probes`]).
    pub probe_namespace: Option<String>,
    /// Run only the checks that change nothing (see [`Reach::read_only`]).
    pub read_only: bool,
}

impl Settings {
    /// How this run reaches the platform.
    #[must_use]
    pub fn reach(&self) -> Reach {
        Reach {
            direct: self.server_url.is_some(),
            key_given: self.api_key.value().is_some(),
            probes: self.probe_namespace.clone(),
            read_only: self.read_only,
        }
    }
}

/// The value of an API key (a secret): it never prints, not even in debug output.
#[derive(Clone, Default)]
pub struct ApiKeyValue(Option<String>);

impl ApiKeyValue {
    /// Wrap a key (`None` or empty: no key).
    #[must_use]
    pub fn new(key: Option<String>) -> Self {
        Self(key.filter(|k| !k.is_empty()))
    }

    pub(crate) fn value(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl std::fmt::Debug for ApiKeyValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "ApiKeyValue(***)" } else { "ApiKeyValue(none)" })
    }
}

#[cfg(test)]
mod tests {
    use super::Selection;

    #[test]
    fn the_benchmark_runs_only_when_asked_for() {
        let all = Selection::default();
        assert!(all.selects("workload.docker.ci") && !all.selects("workload.bench.ci"));
        let bench = Selection { bench: true, ..Selection::default() };
        assert!(bench.selects("workload.bench.ci") && bench.selects("workload.docker.ci"));
        let only = |p: &str| Selection { only: vec![p.to_owned()], ..Selection::default() };
        assert!(only("workload.bench").selects("workload.bench.ci"));
        assert!(only("workload.bench.ci").selects("workload.bench.ci"));
        assert!(!only("workload").selects("workload.bench.ci"), "a prefix above it does not ask for it");
        assert!(!only("workload.bench.ci").selects("workload.bench.other"));
        let skipped = Selection { bench: true, skip: vec!["workload.bench".into()], ..Selection::default() };
        assert!(!skipped.selects("workload.bench.ci"));
    }
}
