//! `rollout.waves` of a fleet file: the order `osbx rollout` brings a change to the clusters.
//! A wave takes the clusters it names and those its selector matches, among the clusters no
//! earlier wave took; every cluster must be in exactly one wave. Without `rollout`, the whole
//! fleet is one wave.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::Deserialize;

/// How `osbx rollout` brings a change to the clusters.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RolloutSpec {
    /// The waves, in order: a wave is committed only after every cluster of the wave before it
    /// reconciled and passed `osbx verify`.
    pub waves: Vec<WaveSpec>,
    /// Whether a cluster whose every check was skipped passes its gate. Such a cluster has no
    /// evidence that the change works there: by default it fails its gate (as `gate.evidence`).
    #[serde(default)]
    pub accept_no_evidence: bool,
}

/// One wave of a rollout.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct WaveSpec {
    /// Wave name (a DNS-1123 label), in commit messages and the progress view.
    pub name: String,
    /// Clusters of the wave, by name.
    #[serde(default)]
    pub clusters: Vec<String>,
    /// Also every cluster whose labels match, among those no earlier wave took (`{}`: every
    /// remaining cluster).
    #[serde(default)]
    pub selector: Option<Selector>,
    /// How many of the wave's clusters are waited on and verified at once (default: all).
    #[serde(default)]
    pub max_parallel: Option<i64>,
}

/// A label selector over the fleet's clusters.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Selector {
    /// Every label here, with this value.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// A wave, resolved to clusters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wave {
    /// Its name.
    pub name: String,
    /// Its clusters, in fleet order.
    pub clusters: Vec<String>,
    /// How many of them are waited on and verified at once.
    pub max_parallel: usize,
}

/// The waves of `spec` over `clusters` (name and labels, in fleet order), or the problems, each
/// with the field it is about.
pub(super) fn resolve(
    spec: Option<&RolloutSpec>,
    clusters: &[(String, BTreeMap<String, String>)],
) -> Result<Vec<Wave>, Vec<(String, String)>> {
    let names: Vec<String> = clusters.iter().map(|(n, _)| n.clone()).collect();
    let Some(spec) = spec else {
        return Ok(vec![Wave { name: "all".into(), max_parallel: names.len().max(1), clusters: names }]);
    };
    let mut problems = Vec::new();
    if spec.waves.is_empty() {
        problems.push(("rollout.waves".into(), "name at least one wave".into()));
    }
    let mut taken: BTreeSet<&str> = BTreeSet::new();
    let mut wave_names = BTreeSet::new();
    let mut waves = Vec::new();
    for (i, w) in spec.waves.iter().enumerate() {
        let at = format!("rollout.waves[{i}]");
        if let Err(why) = crate::spec::syntax::check_dns_label(&w.name) {
            problems.push((format!("{at}.name"), format!("{:?} is not a valid name: {why}", w.name)));
        }
        if !wave_names.insert(w.name.as_str()) {
            problems.push((format!("{at}.name"), format!("duplicate wave {:?}", w.name)));
        }
        if w.clusters.is_empty() && w.selector.is_none() {
            problems.push((at.clone(), "name its clusters, or a selector (`{}`: every remaining cluster)".into()));
        }
        let mut members: BTreeSet<&str> = BTreeSet::new();
        for (j, c) in w.clusters.iter().enumerate() {
            if !names.contains(c) {
                problems.push((format!("{at}.clusters[{j}]"), format!("no cluster {c:?} in the fleet")));
            } else if taken.contains(c.as_str()) {
                problems.push((format!("{at}.clusters[{j}]"), format!("{c:?} is in an earlier wave already")));
            } else {
                members.insert(c);
            }
        }
        if let Some(selector) = &w.selector {
            for (name, labels) in clusters {
                let matches = selector.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v));
                if matches && !taken.contains(name.as_str()) {
                    members.insert(name);
                }
            }
        }
        if members.is_empty() && (!w.clusters.is_empty() || w.selector.is_some()) {
            problems.push((at.clone(), "selects no cluster that an earlier wave did not take".into()));
        }
        let max_parallel = match w.max_parallel {
            Some(n) if n < 1 => {
                problems.push((format!("{at}.maxParallel"), format!("must be at least 1 (got {n})")));
                1
            }
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            None => members.len().max(1),
        };
        taken.extend(members.iter().copied());
        let ordered = names.iter().filter(|n| members.contains(n.as_str())).cloned().collect();
        waves.push(Wave { name: w.name.clone(), clusters: ordered, max_parallel });
    }
    let left: Vec<&str> = names.iter().map(String::as_str).filter(|n| !taken.contains(n)).collect();
    if !left.is_empty() && !spec.waves.is_empty() {
        problems.push((
            "rollout.waves".into(),
            format!(
                "{} in no wave: add them to a wave, or end with {{name: rest, selector: {{}}}} (every remaining cluster)",
                left.join(", ")
            ),
        ));
    }
    if problems.is_empty() { Ok(waves) } else { Err(problems) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fleet() -> Vec<(String, BTreeMap<String, String>)> {
        [("a", "canary"), ("b", "prod"), ("c", "prod"), ("d", "prod")]
            .map(|(n, tier)| (n.to_owned(), [("tier".to_owned(), tier.to_owned())].into()))
            .to_vec()
    }

    fn spec(yaml: &str) -> RolloutSpec {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn waves_take_named_then_selected_clusters_in_order() {
        let s = spec(
            "waves: [{name: canary, clusters: [a]}, {name: two, clusters: [c], maxParallel: 1}, {name: rest, selector: {}}]",
        );
        let waves = resolve(Some(&s), &fleet()).unwrap();
        let got: Vec<(&str, Vec<&str>, usize)> = waves
            .iter()
            .map(|w| (w.name.as_str(), w.clusters.iter().map(String::as_str).collect(), w.max_parallel))
            .collect();
        assert_eq!(got, [("canary", vec!["a"], 1), ("two", vec!["c"], 1), ("rest", vec!["b", "d"], 2)]);
        let by_label = spec(
            "waves: [{name: canary, selector: {matchLabels: {tier: canary}}}, {name: prod, selector: {matchLabels: {tier: prod}}}]",
        );
        assert_eq!(resolve(Some(&by_label), &fleet()).unwrap()[1].clusters, ["b", "c", "d"]);
        assert_eq!(resolve(None, &fleet()).unwrap()[0].clusters.len(), 4, "no rollout: one wave");
    }

    #[test]
    fn every_cluster_in_exactly_one_wave() {
        let problems = |yaml: &str| resolve(Some(&spec(yaml)), &fleet()).unwrap_err();
        let p = problems("waves: [{name: canary, clusters: [a]}]");
        assert_eq!(p, [("rollout.waves".to_owned(), "b, c, d in no wave: add them to a wave, or end with {name: rest, selector: {}} (every remaining cluster)".to_owned())]);
        let p =
            problems("waves: [{name: one, clusters: [a, x]}, {name: two, clusters: [a]}, {name: rest, selector: {}}]");
        assert_eq!(p[0], ("rollout.waves[0].clusters[1]".to_owned(), "no cluster \"x\" in the fleet".to_owned()));
        assert_eq!(p[1], ("rollout.waves[1].clusters[0]".to_owned(), "\"a\" is in an earlier wave already".to_owned()));
        let p = problems("waves: [{name: all, selector: {}}, {name: more, selector: {}}]");
        assert_eq!(
            p,
            [("rollout.waves[1]".to_owned(), "selects no cluster that an earlier wave did not take".to_owned())]
        );
        let p = problems("waves: [{name: all, selector: {}, maxParallel: 0}]");
        assert_eq!(p, [("rollout.waves[0].maxParallel".to_owned(), "must be at least 1 (got 0)".to_owned())]);
    }
}
