//! Where a rollout stands before it writes anything: what each wave's render changes, which
//! waves the repository holds already, which were rolled out and verified, and so where this
//! run starts.
//!
//! A wave's commit carries two trailers, `Osbx-Rollout: <fleet>` and `Osbx-Wave: <wave>`, for
//! whoever reads the history. What a wave's gate showed is not in the history but in the gate
//! records ([`super::records`]): a wave counts as done when the repository holds its render (it
//! changes nothing) and every one of its clusters' newest records shows it passed with the checks
//! this run selects, at a commit where the cluster's files (its `clusters/<name>/apps` and the
//! directories they point Flux at) were what HEAD holds; the done waves are those before the
//! first that does not.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use super::{RolloutError, records};
use crate::fleet::{self, Fleet};
use crate::render::{Rendered, Renderer, Source};
use crate::repo;
use crate::verify::Selection;
use crate::verify::session::selected_ids;

/// The trailer that names the fleet of a wave's commit.
const FLEET_TRAILER: &str = "Osbx-Rollout";
/// The trailer that names the wave of a wave's commit.
const WAVE_TRAILER: &str = "Osbx-Wave";
/// How many of a wave's clusters its commit's subject names.
const SUBJECT_CLUSTERS: usize = 5;

/// Where a rollout stands.
pub(super) struct Plan {
    /// How many files each wave changes: the first compared with the repository, every other
    /// compared with the wave before it.
    pub files: Vec<usize>,
    /// The first wave whose render the repository does not hold yet; every wave before it is
    /// committed.
    pub first_pending: usize,
    /// The waves before this one were rolled out and verified, as the gate records say, and the
    /// repository still holds them.
    pub done: usize,
}

impl Plan {
    /// The rollout of `fleet` over the repository at `root` as it is now, for a run selecting
    /// the checks `selection`; the gate records are those made here and those fetched from
    /// `remote`.
    pub(super) fn new(
        fleet: &Fleet,
        renderer: &Renderer,
        root: &Path,
        remote: Option<&str>,
        source: &Source,
        selection: &Selection,
    ) -> Result<Self, RolloutError> {
        // The gate records first: without any (a first rollout), nothing below reads the
        // clusters' directories.
        let names: BTreeSet<&str> = fleet.members.iter().map(|m| m.profile.cluster.name.as_str()).collect();
        let records = records::newest(root, &fleet.name, &names, remote)?;
        let mut files = Vec::new();
        let mut previous: Option<Rendered> = None;
        let mut first_pending = fleet.waves.len();
        let mut held = BTreeMap::new();
        let current = fleet::Current::new(repo::rendered_before(root, source)?);
        for k in 0..fleet.waves.len() {
            let rendered = wave_render(fleet, renderer, &current, k)?;
            let staged = repo::stage(root, &rendered, renderer, false)?;
            let ours = repo::commit_paths(&staged, &rendered);
            let uncommitted = repo::uncommitted(root, &ours);
            let changes = staged.changed().count();
            if (changes > 0 || uncommitted) && first_pending == fleet.waves.len() {
                first_pending = k;
            }
            if k < first_pending {
                let gated = fleet.waves[k].clusters.iter().filter(|c| records.contains_key(*c));
                held.extend(fleet::cluster_dirs(&rendered, gated));
            }
            files.push(previous.as_ref().map_or(changes, |p| changed_between(p, &rendered)));
            previous = Some(rendered);
        }
        let mut done = 0;
        'waves: for wave in &fleet.waves[..first_pending] {
            for cluster in &wave.clusters {
                let Some(member) = fleet.position(cluster).map(|i| &fleet.members[i]) else { break 'waves };
                let selected = selected_ids(&member.profile, selection);
                let Some(gate) = records.get(cluster).filter(|g| g.holds(&selected, fleet.accept_no_evidence)) else {
                    break 'waves;
                };
                if !repo::unchanged_since(root, &gate.commit, &held[cluster])? {
                    break 'waves;
                }
            }
            done += 1;
        }
        Ok(Self { files, first_pending, done })
    }

    /// Whether every wave's render is committed.
    pub(super) fn up_to_date(&self) -> bool {
        self.first_pending == self.files.len()
    }
}

/// The render of wave `k` over the repository's render `current` (what it holds now, as
/// `repo::rendered_before` reads it): the clusters of this and earlier waves as the fleet file
/// says, every later one as the repository holds it.
pub(super) fn wave_render(
    fleet: &Fleet,
    renderer: &Renderer,
    current: &fleet::Current,
    k: usize,
) -> Result<Rendered, RolloutError> {
    let reached: BTreeSet<String> = fleet.waves[..=k].iter().flat_map(|w| w.clusters.iter().cloned()).collect();
    Ok(fleet::render_wave(fleet, renderer, current, &reached)?)
}

/// The commit message of wave `k`: a subject naming the fleet, the wave and its clusters, and
/// the trailers naming them for tools that read the history.
pub(super) fn commit_message(fleet: &Fleet, k: usize) -> String {
    let wave = &fleet.waves[k];
    let mut clusters = wave.clusters.iter().take(SUBJECT_CLUSTERS).cloned().collect::<Vec<_>>().join(", ");
    if wave.clusters.len() > SUBJECT_CLUSTERS {
        let _ = write!(clusters, " and {} more", wave.clusters.len() - SUBJECT_CLUSTERS);
    }
    format!(
        "osbx rollout {}: wave {} ({clusters})\n\n{FLEET_TRAILER}: {}\n{WAVE_TRAILER}: {}\n",
        fleet.name, wave.name, fleet.name, wave.name
    )
}

/// How many files differ between two renders (changed, added or gone).
fn changed_between(a: &Rendered, b: &Rendered) -> usize {
    let map = |r: &Rendered| r.files.iter().map(|f| (f.path.clone(), f.content.clone())).collect::<BTreeMap<_, _>>();
    let (a, b) = (map(a), map(b));
    let paths: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    paths.into_iter().filter(|p| a.get(*p) != b.get(*p)).count()
}
