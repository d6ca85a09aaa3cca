//! A fault-injecting TCP proxy on 127.0.0.1, placed between `osbx` and the test API server.
//!
//! [`Proxy::start`] listens on a free loopback port and relays every connection it accepts to
//! the upstream address, byte for byte, on a runtime of its own (a thread), so tests of any
//! flavour can use it; dropping the [`Proxy`] stops it and closes every relayed connection.
//! [`Proxy::kubeconfig_through`] writes a copy of a kubeconfig whose server is the proxy: the
//! test plane's serving certificate is issued for `IP:127.0.0.1` and `DNS:localhost` (see
//! `tests/cluster/up`), and a certificate's names carry no port, so TLS verification keeps
//! working unchanged when only the port differs.
//!
//! A [`Script`] says which faults hit which connections (numbered from 1 in the order they are
//! accepted; one `osbx` run uses one HTTP/2 connection and opens another only after losing it).
//! A connection gets its faults when it is accepted. The faults:
//!
//! - [`Fault::ResetAfterBytes`]: once N bytes of the server→client stream (TLS records, so
//!   the handshake counts too) have been forwarded, both peers get a TCP reset (`SO_LINGER` 0).
//!   `0` resets the connection as soon as it is accepted, before any byte.
//! - [`Fault::Stall`]: once N bytes of the server→client stream have been forwarded, nothing is
//!   forwarded in either direction for a duration (both peers see an open, silent connection),
//!   then the relay continues, closes (FIN) or resets.
//! - [`Fault::Latency`]: every chunk read from either peer is held for a duration before it is
//!   forwarded (chunks are relayed one at a time, so delays add up).
//! - [`Fault::CutAtRecord`]: an approximation of "close after the Nth HTTP/2 stream". The proxy
//!   cannot decrypt TLS, so it cannot see HTTP/2 frames or stream ids; it can read the TLS record
//!   framing, which is plaintext (a 5-byte header: content type, version, length). It counts
//!   the client's records of content type 23 (application data) and, when record N begins,
//!   forwards nothing more and closes or resets both peers: the server has received exactly the
//!   client's first N−1 application-data records. Limits: under TLS 1.3 the client's own
//!   handshake end (Certificate, CertificateVerify and Finished with a client certificate, as
//!   with the plane's admin kubeconfig) is already encrypted as application data, so the first
//!   one to three records are the handshake; after that, each record is one TLS write of the
//!   client, i.e. one flush of HTTP/2 frames, which holds one request (HEADERS, DATA) or
//!   several when requests are sent together, and sometimes only control frames (SETTINGS,
//!   WINDOW_UPDATE, PING acks). Record N is therefore "about the Nth request burst", not the
//!   Nth stream; the tests place the cut as a fraction of the records a clean run sends
//!   ([`Stats::client_records`]) rather than at an exact stream.
//!
//! The proxy counts what it did ([`Stats`]: connections, bytes each way, client records,
//! faults fired) and keeps a log of every fault it fired ([`Proxy::events`]), so a test can
//! assert that its fault actually happened.

mod relay;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// Which connections a fault applies to; connections are numbered from 1 in accept order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conns {
    /// Every connection.
    All,
    /// Only the Nth.
    Nth(u64),
    /// The first N (then clean connections: a client that reconnects gets through).
    First(u64),
}

impl Conns {
    fn matches(self, n: u64) -> bool {
        match self {
            Self::All => true,
            Self::Nth(k) => n == k,
            Self::First(k) => n <= k,
        }
    }
}

/// How a fault ends a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// An orderly close (FIN) towards both peers.
    Close,
    /// An abortive close (RST) towards both peers.
    Reset,
}

/// One fault (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Reset both peers once this many bytes of the server→client stream have been forwarded.
    ResetAfterBytes(u64),
    /// Once `after_bytes` of the server→client stream have been forwarded, forward nothing for
    /// `duration`, then continue (`then: None`) or end the connection.
    Stall {
        /// Server→client bytes forwarded before the stall.
        after_bytes: u64,
        /// How long nothing is forwarded.
        duration: Duration,
        /// What follows: `None` continues the relay.
        then: Option<Cut>,
    },
    /// Hold every chunk, in either direction, this long before forwarding it.
    Latency(Duration),
    /// End the connection when the client's Nth application-data TLS record begins (the server
    /// gets the first N−1 and nothing after).
    CutAtRecord {
        /// The record (1-based) that is not forwarded.
        record: u64,
        /// How the connection ends.
        cut: Cut,
    },
}

/// Which faults hit which connections: rules in order, a later rule of the same family
/// (server→client cut, latency, record cut) replacing an earlier one for a connection.
#[derive(Debug, Clone, Default)]
pub struct Script {
    rules: Vec<(Conns, Fault)>,
}

impl Script {
    /// No faults: a transparent relay.
    pub fn clean() -> Self {
        Self::default()
    }

    /// This script, and `fault` on `conns`.
    #[must_use]
    pub fn on(mut self, conns: Conns, fault: Fault) -> Self {
        self.rules.push((conns, fault));
        self
    }

    /// The faults of connection `n`.
    fn plan(&self, n: u64) -> Plan {
        let mut plan = Plan::default();
        for (_, fault) in self.rules.iter().filter(|(conns, _)| conns.matches(n)) {
            match *fault {
                Fault::ResetAfterBytes(at) => {
                    plan.down = Some(DownCut { at, stall: Duration::ZERO, then: Some(Cut::Reset) });
                }
                Fault::Stall { after_bytes, duration, then } => {
                    plan.down = Some(DownCut { at: after_bytes, stall: duration, then });
                }
                Fault::Latency(delay) => plan.latency = delay,
                Fault::CutAtRecord { record, cut } => plan.record = Some((record, cut)),
            }
        }
        plan
    }
}

/// What happens to one connection.
#[derive(Debug, Clone, Copy, Default)]
struct Plan {
    /// Added to every chunk.
    latency: Duration,
    /// A stall (possibly of zero length) and what follows it, at a server→client offset.
    down: Option<DownCut>,
    /// The client record at which the connection ends.
    record: Option<(u64, Cut)>,
}

#[derive(Debug, Clone, Copy)]
struct DownCut {
    at: u64,
    stall: Duration,
    then: Option<Cut>,
}

/// What the proxy has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections accepted.
    pub connections: u64,
    /// Bytes forwarded client → server.
    pub bytes_up: u64,
    /// Bytes forwarded server → client.
    pub bytes_down: u64,
    /// Client TLS records of content type 23 (application data) forwarded, over all
    /// connections.
    pub client_records: u64,
    /// Faults that fired (a latency counts once per connection it slowed).
    pub faults_fired: u64,
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    client_records: AtomicU64,
    faults_fired: AtomicU64,
}

/// What the proxy thread and the handle share.
struct Shared {
    upstream: SocketAddr,
    script: Script,
    counters: Counters,
    events: Mutex<Vec<String>>,
    first_fault: Mutex<Option<Instant>>,
}

impl Shared {
    fn fired(&self, conn: u64, what: &str) {
        self.counters.faults_fired.fetch_add(1, Ordering::Relaxed);
        self.first_fault.lock().unwrap().get_or_insert_with(Instant::now);
        self.events.lock().unwrap().push(format!("connection {conn}: {what}"));
    }
}

/// A running proxy; stopped (every connection closed) when dropped.
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Where [`Proxy::kubeconfig_through`] writes its kubeconfigs.
    dir: tempfile::TempDir,
}

impl Proxy {
    /// Listen on a free port of 127.0.0.1 and relay every connection to `upstream` as
    /// `script` says.
    pub fn start(upstream: SocketAddr, script: Script) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        listener.set_nonblocking(true).expect("non-blocking listener");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared {
            upstream,
            script,
            counters: Counters::default(),
            events: Mutex::new(Vec::new()),
            first_fault: Mutex::new(None),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("proxy-{}", addr.port()))
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("proxy runtime");
                    rt.block_on(async move {
                        let listener = TcpListener::from_std(listener).expect("proxy listener");
                        tokio::select! {
                            () = relay::accept(listener, shared) => {}
                            _ = stopped => {}
                        }
                    });
                    // Dropping the runtime drops every relay task, closing its sockets.
                })
                .expect("proxy thread")
        };
        Self { addr, shared, stop: Some(stop), thread: Some(thread), dir: tempfile::tempdir().expect("proxy dir") }
    }

    /// A proxy in front of the API server of `kubeconfig`, and a kubeconfig that goes through it.
    pub fn in_front_of(kubeconfig: &Path, script: Script) -> (Self, PathBuf) {
        let proxy = Self::start(server_addr(kubeconfig), script);
        let through = proxy.kubeconfig_through(kubeconfig);
        (proxy, through)
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        let c = &self.shared.counters;
        Stats {
            connections: c.connections.load(Ordering::Relaxed),
            bytes_up: c.bytes_up.load(Ordering::Relaxed),
            bytes_down: c.bytes_down.load(Ordering::Relaxed),
            client_records: c.client_records.load(Ordering::Relaxed),
            faults_fired: c.faults_fired.load(Ordering::Relaxed),
        }
    }

    /// Every fault fired so far, in words (`connection 1: reset after 12000 bytes`).
    pub fn events(&self) -> Vec<String> {
        self.shared.events.lock().unwrap().clone()
    }

    /// When the first fault fired (`None`: none yet).
    pub fn first_fault(&self) -> Option<Instant> {
        *self.shared.first_fault.lock().unwrap()
    }

    /// A copy of `kubeconfig` (in a directory the proxy owns) whose clusters' servers point at
    /// the proxy: same scheme and path, host `127.0.0.1`, the proxy's port. Credentials and the
    /// certificate authority are kept, so TLS is verified as before.
    ///
    /// # Panics
    /// When the kubeconfig cannot be read, or a server of it is not the proxy's upstream (a proxy
    /// in front of one server must not route another's traffic).
    pub fn kubeconfig_through(&self, kubeconfig: &Path) -> PathBuf {
        let text = std::fs::read_to_string(kubeconfig).expect("read the kubeconfig");
        let mut kc: Value = serde_saphyr::from_str(&text).expect("parse the kubeconfig");
        for cluster in kc["clusters"].as_array_mut().expect("kubeconfig clusters") {
            let server = cluster["cluster"]["server"].as_str().expect("cluster server").to_owned();
            let (scheme, rest) = server.split_once("://").expect("server URL with a scheme");
            let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
            assert_eq!(
                socket_addr(authority),
                self.shared.upstream,
                "{} names {server}, not the proxy's upstream",
                kubeconfig.display()
            );
            let through =
                format!("{scheme}://127.0.0.1:{}{}{path}", self.addr.port(), if path.is_empty() { "" } else { "/" });
            cluster["cluster"]["server"] = Value::String(through);
        }
        let n = std::fs::read_dir(self.dir.path()).map_or(0, Iterator::count);
        let path = self.dir.path().join(format!("kubeconfig-{n}"));
        std::fs::write(&path, serde_json::to_string_pretty(&kc).unwrap()).expect("write the kubeconfig");
        path
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // When dropped: a proxy thread that already stopped has no receiver.
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            // A proxy thread that panicked fails the test (unless it is already failing).
            if let Err(panic) = thread.join()
                && !std::thread::panicking()
            {
                std::panic::resume_unwind(panic);
            }
        }
    }
}

/// The address of the (first) API server a kubeconfig names.
///
/// # Panics
/// When the kubeconfig cannot be read or its server is not `scheme://ip:port`.
pub fn server_addr(kubeconfig: &Path) -> SocketAddr {
    let text = std::fs::read_to_string(kubeconfig).expect("read the kubeconfig");
    let kc: Value = serde_saphyr::from_str(&text).expect("parse the kubeconfig");
    let server = kc["clusters"][0]["cluster"]["server"].as_str().expect("cluster server");
    let rest = server.split_once("://").map_or(server, |(_, r)| r);
    socket_addr(rest.split('/').next().unwrap_or(rest))
}

fn socket_addr(authority: &str) -> SocketAddr {
    let authority = authority.replace("localhost", "127.0.0.1");
    authority.parse().unwrap_or_else(|e| panic!("{authority}: not an ip:port ({e})"))
}
