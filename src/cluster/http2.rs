//! The HTTP stack of a run: one TLS connection carrying every request as an HTTP/2 stream when
//! the server offers `h2` (ALPN), as kubectl does. kube's default stack speaks HTTP/1.1 only, so
//! N requests in flight open N connections, each with its own TCP and TLS handshake: 17 of them
//! for a 200-object apply. A kubeconfig with a `proxy-url` keeps kube's stack, which knows proxies.
//!
//! The layers are kube's own (base URI, credentials, extra headers, retry of 429/503/504), in
//! kube's order; the request timeout is a per-request deadline for the whole response, body
//! included (a stalled body fails the request instead of holding the run), since a socket read
//! timeout would also cut an idle, shared HTTP/2 connection. Below them, a request whose
//! connection went away before it was fully answered (the
//! server's GOAWAY, a refused stream, a reset or closed connection) is sent again on a new
//! connection: the API server sends GOAWAY to every unauthenticated HTTP/2 client (its answer, a
//! 401, can be lost with the connection: 4 runs in 40 with an expired certificate) and, with
//! `--goaway-chance`, to any client; networks reset connections. Every request osbx sends may be
//! repeated: reads, server-side applies and access reviews change nothing the second time, a
//! repeated create is refused as existing (the inventory then reads and retries; a verify run
//! takes its own namespace or probe pod, known by its run label, as created), and a repeated
//! delete finds the object gone.
//!
//! Watches are the one exception: a watch request (kube marks it) streams its body as events
//! arrive, without the request deadline (the watch's own `timeoutSeconds` ends it) and without
//! the retry (the waiter re-reads and watches again), on the same connection.

use std::time::Duration;

use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::Config;
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use tower::util::{BoxCloneService, BoxService};
use tower::{BoxError, ServiceBuilder, ServiceExt as _};

/// The boxed service both stacks produce.
pub(super) type Stack = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// A client builder for `config`: HTTP/2 over one connection when possible, HTTP/1.1 otherwise.
///
/// # Errors
/// When the credentials or TLS settings in the kubeconfig are unusable.
pub(super) fn builder(config: Config, timeout: Duration) -> Result<ClientBuilder<Stack>, kube::Error> {
    if config.proxy_url.is_some() {
        return ClientBuilder::try_from(config);
    }
    let tls = config.rustls_client_config()?;
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(config.connect_timeout);
    let https = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http();
    let https = match &config.tls_server_name {
        Some(name) => {
            let name = rustls_pki_types::ServerName::try_from(name.clone()).map_err(|e| {
                kube::Error::Service(format!("tls-server-name {name:?} is not a valid server name: {e}").into())
            })?;
            https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => https,
    };
    // The first connection's TCP and TLS handshakes end at the moment `tls` (crate::timing).
    let connector = tower::util::MapFuture::new(https.enable_all_versions().wrap_connector(tcp), |connecting| {
        Box::pin(async move {
            let connection = connecting.await;
            crate::timing::mark("tls");
            connection
        })
    });
    let hyper = hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
    let buffered = ServiceBuilder::new()
        .layer(tower::timeout::TimeoutLayer::new(timeout))
        .layer(tower::retry::RetryLayer::new(ConnectionLost { retries: 3 }))
        .service(hyper.clone().map_err(BoxError::from).and_then(read_body))
        .map_response(|res: Response<Full<Bytes>>| {
            res.map(|body| Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>)
        });
    let streaming = hyper.map_err(BoxError::from).map_response(|res: Response<hyper::body::Incoming>| {
        res.map(|body| Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>)
    });
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .service(Watches { buffered: BoxCloneService::new(buffered), streaming: BoxCloneService::new(streaming) })
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace))
}

type Inner = BoxCloneService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// Sends watch requests (which kube marks with the extension `"watch"`) to `streaming`, every
/// other request to `buffered`.
#[derive(Clone)]
struct Watches {
    buffered: Inner,
    streaming: Inner,
}

impl tower::Service<Request<Body>> for Watches {
    type Response = Response<Box<DynBody>>;
    type Error = BoxError;
    type Future = tower::util::Oneshot<Inner, Request<Body>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), BoxError>> {
        // Both inner services are cloned per request and made ready by `oneshot`.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let watch = req.extensions().get::<&'static str>().is_some_and(|kind| *kind == "watch");
        let inner = if watch { self.streaming.clone() } else { self.buffered.clone() };
        inner.oneshot(req)
    }
}

/// Read a response's whole body: osbx streams only watches, and a body
/// read inside the request's deadline and its retry is bounded by the one and retried by the
/// other when the connection goes away part-way.
async fn read_body(res: Response<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, BoxError> {
    let (parts, body) = res.into_parts();
    let bytes = http_body_util::BodyExt::collect(body).await?.to_bytes();
    Ok(Response::from_parts(parts, Full::new(bytes)))
}

/// Sends a request again (at most `retries` times) when its connection went away before it was
/// answered.
#[derive(Clone)]
struct ConnectionLost {
    retries: u8,
}

impl<Res> tower::retry::Policy<Request<Body>, Res, BoxError> for ConnectionLost {
    type Future = std::future::Ready<()>;

    fn retry(&mut self, _: &mut Request<Body>, result: &mut Result<Res, BoxError>) -> Option<Self::Future> {
        match result {
            Err(e) if self.retries > 0 && connection_lost(e.as_ref()) => {
                self.retries -= 1;
                Some(std::future::ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        let mut copy = Request::new(req.body().try_clone()?);
        *copy.method_mut() = req.method().clone();
        *copy.uri_mut() = req.uri().clone();
        *copy.version_mut() = req.version();
        *copy.headers_mut() = req.headers().clone();
        Some(copy)
    }
}

/// Whether an error says the connection went away before the request was answered: the server
/// closed it (GOAWAY, a stream it refused), or it was reset or closed under the request.
fn connection_lost(e: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind;
    let lost = |io: &std::io::Error| {
        matches!(
            io.kind(),
            ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::BrokenPipe
                | ErrorKind::UnexpectedEof
        )
    };
    let mut cur = Some(e);
    while let Some(e) = cur {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            // h2 keeps its I/O error to itself (no `source`).
            if h2.is_go_away() || h2.reason() == Some(h2::Reason::REFUSED_STREAM) || h2.get_io().is_some_and(lost) {
                return true;
            }
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && (h.is_closed() || h.is_incomplete_message() || h.is_canceled())
        {
            return true;
        }
        if e.downcast_ref::<std::io::Error>().is_some_and(lost) {
            return true;
        }
        // A new connection that failed to open (reset during the handshake, refused): the
        // request never reached the server.
        if e.downcast_ref::<hyper_util::client::legacy::Error>()
            .is_some_and(hyper_util::client::legacy::Error::is_connect)
        {
            return true;
        }
        cur = e.source();
    }
    false
}
