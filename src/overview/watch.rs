//! What `osbx status --watch` waits on: API watches (not polls) of what the overview reads (the
//! layers' Kustomizations and the Pools in their namespaces, the HelmReleases and RuntimeClasses
//! by name, the Nodes), each started from the version a read saw and resumed from the last
//! version it reported when the server ends it, plus a slow tick for the server's `/health`,
//! which no object reports.
//!
//! What it watches is [`operations`], the same list `osbx rbac --for status` grants. A watch
//! the server refuses or breaks, or a read that fails, is tried again after a bounded, jittered
//! exponential delay ([`Backoff`]), never at once; a kind not served yet is looked up again the
//! same way, so a CRD installed after the start is watched once it is served.

use std::time::Duration;

use futures::StreamExt as _;
use kube::api::{Api, DynamicObject, ListParams, WatchEvent, WatchParams};
use tokio::sync::mpsc;

use crate::cluster::Cluster;
use crate::cluster::operation::{Objects, Operation};
use crate::components::pools;
use crate::deploy::Layer;
use crate::object::{KnownKind, ObjectRef};
use crate::profile::Profile;

/// How often the server's health is read again without an object changing.
const HEALTH_EVERY: Duration = Duration::from_secs(10);

/// The first delay after a failure; each further failure doubles it, up to the bound.
const FIRST_DELAY: Duration = Duration::from_millis(250);
/// The longest delay between two attempts of a watch the server refuses or breaks.
const MOST_DELAY: Duration = Duration::from_secs(30);
/// The longest delay between two look-ups of a kind that is not served yet.
const MOST_LOOKUP_DELAY: Duration = Duration::from_secs(5);

/// What the watches of [`operations`] report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// Something the overview reads may have changed.
    Changed,
    /// A watch could not be kept (refused, broken, a kind not resolved): it is tried again
    /// after the delay said.
    Trouble(String),
}

/// What arrived since the last [`Changes::next`].
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Batch {
    /// Something changed: the overview is read again.
    pub(crate) changed: bool,
    /// What went wrong with a watch, each said once until that watch works again.
    pub(crate) troubles: Vec<String>,
}

/// Events arrive on it; dropping it stops the watches.
pub(crate) struct Changes {
    rx: mpsc::Receiver<Event>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Changes {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Changes {
    /// Wait for the next events (those within 100 ms of the first count as one batch); `None`
    /// when every watch has ended.
    pub(crate) async fn next(&mut self) -> Option<Batch> {
        let mut batch = Batch::default();
        let add = |batch: &mut Batch, e: Event| match e {
            Event::Changed => batch.changed = true,
            Event::Trouble(t) => batch.troubles.push(t),
        };
        add(&mut batch, self.rx.recv().await?);
        let settle = tokio::time::sleep(Duration::from_millis(100));
        tokio::pin!(settle);
        loop {
            tokio::select! {
                () = &mut settle => return Some(batch),
                more = self.rx.recv() => match more {
                    Some(e) => add(&mut batch, e),
                    None => return Some(batch),
                },
            }
        }
    }
}

/// A bounded exponential delay with jitter: each failure doubles it from [`FIRST_DELAY`] up to
/// its bound, and the delay waited is drawn from its upper half, so that clients that failed
/// together do not return together.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    next: Duration,
    most: Duration,
}

impl Backoff {
    /// Delays from [`FIRST_DELAY`] up to `most`.
    pub(crate) fn new(most: Duration) -> Self {
        Self { next: FIRST_DELAY.min(most), most }
    }

    /// The delay to wait after one more failure.
    pub(crate) fn delay(&mut self) -> Duration {
        let ceiling = self.next;
        self.next = (self.next * 2).min(self.most);
        let half = ceiling / 2;
        half + half.mul_f64(fastrand::f64())
    }

    /// It worked: the next failure waits the first delay again.
    pub(crate) fn reset(&mut self) {
        self.next = FIRST_DELAY.min(self.most);
    }
}

/// What `--watch` follows for the profile rendered as `layers`: what the overview reads, each
/// read then watched (the Nodes only when a pool names a RuntimeClass, as the overview reads
/// them).
#[must_use]
pub(crate) fn operations(profile: &Profile, layers: &[Layer]) -> Vec<Operation> {
    let os = &profile.sections.opensandbox;
    let mut out =
        vec![Operation::Watch(Objects::any(crate::flux::KUSTOMIZATION, Some(&profile.cluster.flux_namespace)))];
    out.extend(super::releases(layers).into_iter().map(|r| Operation::Watch(Objects::Named(r))));
    if !profile.sections.pools.items.is_empty() {
        out.push(Operation::Watch(Objects::Any(pools::POOL.gvk(), Some(os.namespaces.sandbox.clone()))));
    }
    let classes = super::runtime_classes(profile);
    if !classes.is_empty() {
        out.push(Operation::Watch(Objects::any(KnownKind::NODE, None)));
        out.extend(classes.iter().map(|c| Operation::Watch(Objects::Named(KnownKind::RUNTIME_CLASS.object(None, c)))));
    }
    out
}

/// Start following what the overview of `profile` (rendered as `layers`) reads.
pub(crate) fn watch(cluster: &Cluster, profile: &Profile, layers: &[Layer]) -> Changes {
    let (tx, rx) = mpsc::channel(64);
    let mut tasks = Vec::new();
    for op in operations(profile, layers) {
        let Operation::Watch(objects) = op else { continue };
        tasks.push(tokio::spawn(follow(cluster.clone(), objects, tx.clone())));
    }
    tasks.push(tokio::spawn(async move {
        loop {
            tokio::time::sleep(HEALTH_EVERY).await;
            if tx.send(Event::Changed).await.is_err() {
                return;
            }
        }
    }));
    Changes { rx, tasks }
}

/// What one watch follows, as a user reads it (`Pools in opensandbox`).
fn subject(objects: &Objects) -> String {
    match objects {
        Objects::Named(id) => format!("{} {id}", id.gvk.kind),
        Objects::Any(kind, Some(ns)) => format!("{}s in {ns}", kind.kind),
        Objects::Any(kind, None) => format!("{}s", kind.kind),
    }
}

/// Says each trouble once, until the watch works again.
struct Reporter {
    tx: mpsc::Sender<Event>,
    subject: String,
    last: Option<String>,
}

impl Reporter {
    /// `false` when nobody listens any more.
    async fn trouble(&mut self, what: String, delay: Duration) -> bool {
        if self.last.as_ref() != Some(&what) {
            let text = format!(
                "watching {}: {what} (tried again in {:.1}s, and said again only if it changes)",
                self.subject,
                delay.as_secs_f64()
            );
            self.last = Some(what);
            return self.tx.send(Event::Trouble(text)).await.is_ok();
        }
        true
    }

    async fn changed(&mut self) -> bool {
        self.tx.send(Event::Changed).await.is_ok()
    }

    fn working(&mut self) {
        self.last = None;
    }
}

/// Follow `objects` until the receiver is dropped: resolve the kind, read the version to start
/// from, watch, resume; every failure waits its backoff first.
async fn follow(cluster: Cluster, objects: Objects, tx: mpsc::Sender<Event>) {
    let mut report = Reporter { tx, subject: subject(&objects), last: None };
    let (id, name): (ObjectRef, Option<String>) = match &objects {
        Objects::Named(id) => (id.clone(), Some(id.name.clone())),
        Objects::Any(kind, ns) => (kind.object(ns.as_deref(), ""), None),
    };
    let mut lookup = Backoff::new(MOST_LOOKUP_DELAY);
    let mut backoff = Backoff::new(MOST_DELAY);
    let mut found_late = false;
    let api: Api<DynamicObject> = loop {
        match cluster.resolver.resolve(&id).await {
            Ok(Some((ar, scope))) => {
                break match (scope, id.namespace.as_deref()) {
                    (kube::discovery::Scope::Namespaced, Some(ns)) => {
                        Api::namespaced_with(cluster.client.clone(), ns, &ar)
                    }
                    _ => Api::all_with(cluster.client.clone(), &ar),
                };
            }
            Ok(None) => {
                // Not served yet: no trouble to report (the overview shows it as missing).
                found_late = true;
                tokio::time::sleep(lookup.delay()).await;
            }
            Err(e) => {
                let delay = backoff.delay();
                if !report.trouble(format!("discovery: {e}"), delay).await {
                    return;
                }
                tokio::time::sleep(delay).await;
            }
        }
    };
    // Its objects may exist by now, unseen by the overview's last read.
    if found_late && !report.changed().await {
        return;
    }
    let params = {
        let p = WatchParams::default().timeout(290);
        match &name {
            Some(name) => p.fields(&format!("metadata.name={name}")),
            None => p,
        }
    };
    loop {
        // Where to start. A collection: from the version its LIST saw (what is there was seen by
        // the overview's last read, or came since and is reported). One object: from now, no
        // version (its own may be older than the server keeps: 410 Gone); the server then sends
        // it as it is first, skipped when it is what the GET saw.
        let start = match &name {
            Some(name) => api.get_opt(name).await.map(|o| (String::new(), o.and_then(|o| o.metadata.resource_version))),
            None => api
                .list_metadata(&ListParams::default().limit(1))
                .await
                .map(|l| (l.metadata.resource_version.unwrap_or_default(), None)),
        };
        let (mut version, mut seen) = match start {
            Ok(start) => start,
            Err(e) => {
                let delay = backoff.delay();
                if !report.trouble(format!("reading: {}", crate::cluster::describe(&e)), delay).await {
                    return;
                }
                tokio::time::sleep(delay).await;
                continue;
            }
        };
        let Some(why) = watch_from(&api, &params, (&mut version, &mut seen), &mut backoff, &mut report).await else {
            return;
        };
        let delay = backoff.delay();
        if let Some(why) = why
            && !report.trouble(why, delay).await
        {
            return;
        }
        tokio::time::sleep(delay).await;
    }
}

/// Watch with `params` from `version`, resuming from the last version reported, until the watch
/// is refused or breaks: `Some(Some(why))`; `Some(None)` when the version expired (410 Gone: no
/// trouble, read and watch again); `None` when nobody listens any more. The first event that
/// is the object at the version `seen` (the GET's) is no change.
async fn watch_from(
    api: &Api<DynamicObject>,
    params: &WatchParams,
    (version, seen): (&mut String, &mut Option<String>),
    backoff: &mut Backoff,
    report: &mut Reporter,
) -> Option<Option<String>> {
    loop {
        let opened = std::time::Instant::now();
        let mut events = 0_usize;
        let stream = match api.watch(params, version).await {
            Ok(stream) => stream,
            Err(kube::Error::Api(s)) if s.code == 410 => return Some(None),
            Err(e) => return Some(Some(crate::cluster::describe(&e))),
        };
        let mut stream = stream.boxed();
        let mut broken = None;
        while let Some(event) = stream.next().await {
            events += 1;
            match event {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o)) => {
                    let at = o.metadata.resource_version;
                    if seen.take().is_some_and(|s| at.as_ref() == Some(&s)) {
                        // The object as the GET saw it: no change.
                        continue;
                    }
                    *version = at.unwrap_or(std::mem::take(version));
                    backoff.reset();
                    report.working();
                    if !report.changed().await {
                        return None;
                    }
                }
                Ok(WatchEvent::Bookmark(b)) => *version = b.metadata.resource_version,
                Ok(WatchEvent::Error(e)) if e.code == 410 => {
                    broken = Some(None);
                    break;
                }
                Ok(WatchEvent::Error(e)) => {
                    broken = Some(Some(format!("the watch ended: {} ({})", e.message, e.code)));
                    break;
                }
                Err(e) => {
                    broken = Some(Some(format!("the watch broke: {e}")));
                    break;
                }
            }
        }
        if let Some(why) = broken {
            return Some(why);
        }
        if events == 0 && opened.elapsed() < Duration::from_secs(1) {
            // Ended at once, with nothing: not a watch to resume at once.
            return Some(Some("the watch ended at once".to_owned()));
        }
        // The server ended the watch at its timeout: resume from the last version.
        backoff.reset();
        report.working();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_their_bound_with_jitter_and_start_over_after_success() {
        let mut b = Backoff::new(Duration::from_secs(2));
        let delays: Vec<Duration> = (0..8).map(|_| b.delay()).collect();
        // Each within the upper half of its ceiling: 250 ms, 500 ms, 1 s, then 2 s for good.
        let ceilings = [250, 500, 1000, 2000, 2000, 2000, 2000, 2000].map(Duration::from_millis);
        for (d, c) in delays.iter().zip(ceilings) {
            assert!(*d >= c / 2 && *d <= c, "{d:?} outside {:?}..={c:?}: {delays:?}", c / 2);
        }
        // Jittered: a long run of bounded delays is not one value repeated.
        let bounded: Vec<Duration> = (0..16).map(|_| b.delay()).collect();
        assert!(bounded.iter().any(|d| *d != bounded[0]), "no jitter: {bounded:?}");
        b.reset();
        assert!(b.delay() <= Duration::from_millis(250));
    }
}
