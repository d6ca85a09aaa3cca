//! Client-side request control: a QPS limit (when `--qps` asks for one), a bound on requests in
//! flight, and counters.
//!
//! kube-rs has no client-side throttle, so osbx stacks tower's rate and concurrency limits under
//! the client, and counts every request by kind so that runs can report (and tests assert) how
//! many reads, dry-runs and real writes they made (a no-op apply must make zero writes), and the
//! most that were in flight at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use http::{Method, Request};
use serde::Serialize;
use tower::{Layer, Service};

/// Counters of one client.
#[derive(Debug, Default)]
pub struct RequestStats {
    reads: AtomicU64,
    dry_runs: AtomicU64,
    writes: AtomicU64,
    reviews: AtomicU64,
    in_flight: AtomicU64,
    peak_in_flight: AtomicU64,
}

/// A snapshot of [`RequestStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RequestCounts {
    /// GET/LIST/discovery.
    pub reads: u64,
    /// Server-side dry-run writes (change nothing).
    pub dry_runs: u64,
    /// Real writes: create, patch, update, delete.
    pub writes: u64,
    /// Access reviews (`SelfSubjectAccessReview`), which change nothing.
    pub reviews: u64,
    /// The most requests that were waiting for their response at once (never more than the
    /// client's concurrency limit: they are counted below it).
    pub peak_in_flight: u64,
}

impl RequestStats {
    /// Current counts.
    #[must_use]
    pub fn snapshot(&self) -> RequestCounts {
        RequestCounts {
            reads: self.reads.load(Ordering::Relaxed),
            dry_runs: self.dry_runs.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            reviews: self.reviews.load(Ordering::Relaxed),
            peak_in_flight: self.peak_in_flight.load(Ordering::Relaxed),
        }
    }

    /// A request is sent: counted in flight until the guard drops (its response arrived).
    pub(crate) fn enter(self: &Arc<Self>) -> InFlight {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak_in_flight.fetch_max(now, Ordering::Relaxed);
        InFlight(self.clone())
    }

    pub(crate) fn record<B>(&self, req: &Request<B>) {
        let counter = if req.method() == Method::GET || req.method() == Method::HEAD {
            &self.reads
        } else if req.uri().path().starts_with("/apis/authorization.k8s.io/") {
            &self.reviews
        } else if req.uri().query().is_some_and(|q| q.split('&').any(|kv| kv.starts_with("dryRun="))) {
            &self.dry_runs
        } else {
            &self.writes
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// One request in flight (see [`RequestStats::enter`]).
pub(crate) struct InFlight(Arc<RequestStats>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Layer that counts requests into shared [`RequestStats`].
#[derive(Clone)]
pub(super) struct CountLayer(pub Arc<RequestStats>);

impl<S> Layer<S> for CountLayer {
    type Service = Count<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Count { inner, stats: self.0.clone() }
    }
}

/// See [`CountLayer`].
#[derive(Clone)]
pub(super) struct Count<S> {
    inner: S,
    stats: Arc<RequestStats>,
}

impl<S, B> Service<Request<B>> for Count<S>
where
    S: Service<Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.stats.record(&req);
        let in_flight = self.stats.enter();
        let response = self.inner.call(req);
        Box::pin(async move {
            let answer = response.await;
            drop(in_flight);
            answer
        })
    }
}
