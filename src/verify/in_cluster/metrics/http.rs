//! The HTTP side of `osbx verify --serve`: `GET /metrics` and `GET /healthz` for the scraper and
//! the kubelet, made to stay up: an `accept` error that is not the client's (`EMFILE`, `ENFILE`,
//! `ENOBUFS`, `ENOMEM`) is backed off from, never the end of the listener; the open connections
//! are bounded, and each ends by itself (a request's head must arrive within [`Limits::head`], and
//! a connection lives at most [`Limits::lifetime`]); `/healthz` says whether the check loop is
//! alive ([`Liveness`]), not whether a client behaved.

use std::convert::Infallible;
use std::future::Future;
use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use http::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::{Metrics, OPENMETRICS};

/// At most this many connections are served at once. A Prometheus or vmalert scraper holds one,
/// the kubelet's probe one at a time: 64 leaves room for several of each while bounding what a
/// flood of clients can hold (one file descriptor and one task each) in a pod with small limits.
/// A connection beyond it waits in the listen backlog until a slot frees.
pub(crate) const MAX_CONNECTIONS: usize = 64;

/// The first delay after an `accept` error that is not the client's; it doubles up to
/// [`ACCEPT_BACKOFF_MAX`] and starts again after an accepted connection.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
/// The longest delay between two `accept`s that failed: about when a file descriptor or buffer
/// frees once the connections that hold them end.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How long a connection may hold one of the [`MAX_CONNECTIONS`] slots.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// How many connections are served at once.
    pub connections: usize,
    /// A request's head must arrive within this (hyper's header read timeout, which also ends a
    /// connection that never sends one, and an idle keep-alive connection).
    pub head: Duration,
    /// A connection is asked to close after this (the request in flight finishes), and dropped
    /// [`Limits::head`] later: a client that never reads its answer cannot pin a slot.
    pub lifetime: Duration,
}

impl Default for Limits {
    /// 64 connections; a head within 10 s (a scraper sends its request at once; the kubelet's
    /// probe times out after 1 s); a connection for at most 60 s (a scraper reconnects).
    fn default() -> Self {
        Self { connections: MAX_CONNECTIONS, head: Duration::from_secs(10), lifetime: Duration::from_secs(60) }
    }
}

/// Whether the check loop is alive: `/healthz` answers 200 while it is, 503 once it stopped.
#[derive(Debug, Clone)]
pub(crate) struct Liveness(Arc<AtomicBool>);

/// Held by the check loop: dropping it (the loop ended or panicked) makes `/healthz` answer 503.
#[derive(Debug)]
pub(crate) struct Alive(Arc<AtomicBool>);

impl Liveness {
    /// A loop alive until the returned [`Alive`] is dropped.
    #[must_use]
    pub(crate) fn start() -> (Self, Alive) {
        let flag = Arc::new(AtomicBool::new(true));
        (Self(Arc::clone(&flag)), Alive(flag))
    }

    fn alive(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Serve `GET /metrics` (the exposition of `metrics`) and `GET /healthz` (200 `ok` while `loop_`
/// is alive, 503 once it stopped) on `listener` until `stop` resolves, then drop the open
/// connections. Other paths answer 404 and other methods 405 (every answer says `Allow: GET`).
/// HTTP/1.1 only, one task per connection, at most `limits.connections` at once. An `accept` error
/// is counted in the metrics (`osbx_acceptance_accept_errors_total`) and backed off from; it
/// never ends the listener.
pub(crate) async fn serve(
    listener: TcpListener,
    metrics: Arc<RwLock<Metrics>>,
    loop_: Liveness,
    limits: Limits,
    stop: impl Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    let slots = Arc::new(Semaphore::new(limits.connections));
    let mut connections = JoinSet::new();
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        // A slot first: a connection beyond the bound waits in the backlog, not in a task.
        let slot = tokio::select! {
            () = &mut stop => return,
            slot = Arc::clone(&slots).acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let stream = tokio::select! {
            () = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) if clients(&e) => continue,
                Err(_) => {
                    metrics.write().unwrap_or_else(PoisonError::into_inner).accept_error();
                    drop(slot);
                    tokio::select! {
                        () = &mut stop => return,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    continue;
                }
            },
        };
        backoff = ACCEPT_BACKOFF_MIN;
        while connections.try_join_next().is_some() {}
        let (metrics, loop_) = (Arc::clone(&metrics), loop_.clone());
        connections.spawn(async move {
            let _slot = slot;
            let service = service_fn(move |request| {
                let response = respond(&request, &metrics, &loop_);
                async move { Ok::<_, Infallible>(response) }
            });
            let mut builder = http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(limits.head);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            // A connection that fails (a client that hangs up, a malformed request, no head in
            // time) is its own end.
            tokio::select! {
                _ = connection.as_mut() => return,
                () = tokio::time::sleep(limits.lifetime) => connection.as_mut().graceful_shutdown(),
            }
            let _ = tokio::time::timeout(limits.head, connection).await;
        });
    }
}

/// Whether an `accept` error is the client's (it gave up between its connect and our accept, or
/// a signal interrupted the call): the next `accept` may go on at once.
fn clients(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::Interrupted)
}

fn respond(request: &Request<Incoming>, metrics: &RwLock<Metrics>, loop_: &Liveness) -> Response<Full<Bytes>> {
    let text = "text/plain; charset=utf-8";
    let (status, content_type, body) = match request.uri().path() {
        "/metrics" | "/healthz" if request.method() != Method::GET => {
            (StatusCode::METHOD_NOT_ALLOWED, text, "method not allowed\n".to_owned())
        }
        "/metrics" => (StatusCode::OK, OPENMETRICS, metrics.read().unwrap_or_else(PoisonError::into_inner).encode()),
        "/healthz" if loop_.alive() => (StatusCode::OK, text, "ok".to_owned()),
        "/healthz" => (StatusCode::SERVICE_UNAVAILABLE, text, "the check loop has stopped\n".to_owned()),
        _ => (StatusCode::NOT_FOUND, text, "not found\n".to_owned()),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response.headers_mut().insert(ALLOW, HeaderValue::from_static("GET"));
    response
}

#[cfg(test)]
mod tests;
