//! Client-side request control: a QPS limit, a bound on requests in flight, and counters.
//!
//! kube-rs has no client-side throttle, so osbx stacks tower's rate and concurrency limits under
//! the client, and counts every request by kind so that runs can report (and tests assert) how
//! many reads, dry-runs and real writes they made: a no-op apply must make zero writes.

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
        }
    }

    fn record<B>(&self, req: &Request<B>) {
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
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        self.stats.record(&req);
        self.inner.call(req)
    }
}
