use std::net::SocketAddr;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::super::tests::first_run;
use super::*;

/// A server on a free loopback port with `limits`, its loop alive while the returned [`Alive`]
/// lives; the sender stops it.
async fn start(limits: Limits) -> (SocketAddr, Alive, tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (loop_, alive) = Liveness::start();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let metrics = Arc::new(RwLock::new(first_run()));
    let server = tokio::spawn(serve(listener, metrics, loop_, limits, async { stopped.await.unwrap_or(()) }));
    (addr, alive, stop, server)
}

/// One request on a new connection that the client closes after it.
async fn get(addr: SocketAddr, request_line: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("{request_line} HTTP/1.1\r\nHost: osbx\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

/// Whether the server closed `stream` (a read returns 0 bytes) within `within`.
async fn closed(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0; 4096];
    let deadline = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline.into(), stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn serve_answers_metrics_health_and_strays_until_stopped() {
    let (addr, _alive, stop, server) = start(Limits::default()).await;
    let response = get(addr, "GET /metrics").await;
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains(&format!("\r\ncontent-type: {OPENMETRICS}\r\n")), "{response}");
    assert!(response.contains("\nosbx_acceptance_ready 0\n") && response.ends_with("\n# EOF\n"), "{response}");
    let response = get(addr, "GET /healthz").await;
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n") && response.ends_with("\r\n\r\nok"), "{response}");
    assert!(get(addr, "GET /nope").await.starts_with("HTTP/1.1 404 Not Found\r\n"));
    let response = get(addr, "POST /metrics").await;
    assert!(response.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{response}");
    assert!(response.contains("\r\nallow: GET\r\n"), "{response}");
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server).await.expect("serve returns after stop").unwrap();
}

#[tokio::test]
async fn healthz_follows_the_check_loop_not_the_clients() {
    let (addr, alive, _stop, _server) = start(Limits::default()).await;
    // A client that misbehaves (not HTTP, then gone) changes nothing.
    let mut rude = TcpStream::connect(addr).await.unwrap();
    rude.write_all(b"\x16\x03\x01 not http\r\n\r\n").await.unwrap();
    assert!(closed(&mut rude, Duration::from_secs(5)).await, "a malformed request ends its connection");
    drop(rude);
    let response = get(addr, "GET /healthz").await;
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    // The loop ends (returns or unwinds): /healthz says so, /metrics still answers.
    drop(alive);
    let response = get(addr, "GET /healthz").await;
    assert!(response.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{response}");
    assert!(response.ends_with("the check loop has stopped\n"), "{response}");
    assert!(get(addr, "GET /metrics").await.starts_with("HTTP/1.1 200 OK\r\n"));
}

#[tokio::test]
async fn connections_beyond_the_bound_wait_and_silent_or_idle_ones_end_by_themselves() {
    let limits = Limits { connections: 4, head: Duration::from_millis(800), lifetime: Duration::from_secs(3) };
    let (addr, _alive, _stop, _server) = start(limits).await;
    let request = b"GET /healthz HTTP/1.1\r\nHost: osbx\r\n\r\n";
    // Silent clients (connected, never a request) and idle keep-alive ones (one request answered,
    // then nothing), each time enough to fill every slot.
    for idle_after_a_request in [false, true] {
        let mut holders = Vec::new();
        for _ in 0..limits.connections {
            let mut s = TcpStream::connect(addr).await.unwrap();
            if idle_after_a_request {
                s.write_all(request).await.unwrap();
                let mut buf = [0; 512];
                let n = s.read(&mut buf).await.unwrap();
                assert!(buf[..n].starts_with(b"HTTP/1.1 200 OK\r\n"), "{}", String::from_utf8_lossy(&buf[..n]));
            }
            holders.push(s);
        }
        let started = Instant::now();
        let mut waiting = TcpStream::connect(addr).await.unwrap();
        waiting.write_all(request).await.unwrap();
        let mut buf = [0; 512];
        // No slot: the request waits (its connection in the listen backlog) ...
        let early = tokio::time::timeout(Duration::from_millis(400), waiting.read(&mut buf)).await;
        assert!(early.is_err(), "answered beyond the bound of {}: {early:?}", limits.connections);
        // ... until the holders' connections end by themselves (no head within `limits.head`).
        let n = tokio::time::timeout(Duration::from_secs(5), waiting.read(&mut buf)).await.unwrap().unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200 OK\r\n"), "{}", String::from_utf8_lossy(&buf[..n]));
        assert!(started.elapsed() < limits.lifetime, "idle={idle_after_a_request}: {:?}", started.elapsed());
        // Every holder ends by itself: the first to end let the waiting request in, the others
        // end within their own head timeout (on a loaded machine, a few milliseconds later).
        for mut h in holders {
            let within = limits.head * 2;
            assert!(
                closed(&mut h, within).await,
                "idle={idle_after_a_request}: a holder is still open after {within:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_connection_is_closed_after_its_lifetime_even_when_busy() {
    let limits = Limits { connections: 1, head: Duration::from_millis(500), lifetime: Duration::from_secs(1) };
    let (addr, _alive, _stop, _server) = start(limits).await;
    let mut busy = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    // A request every 300 ms keeps the head timeout away; the lifetime still ends it.
    let ended = loop {
        if busy.write_all(b"GET /healthz HTTP/1.1\r\nHost: osbx\r\n\r\n").await.is_err() {
            break started.elapsed();
        }
        let mut buf = [0; 512];
        match tokio::time::timeout(Duration::from_secs(3), busy.read(&mut buf)).await.unwrap() {
            Ok(0) | Err(_) => break started.elapsed(),
            Ok(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    };
    assert!(ended >= limits.lifetime && ended < limits.lifetime * 3, "{ended:?}");
    let response = get(addr, "GET /healthz").await;
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
}

/// The child's role in [`an_accept_error_backs_off_and_the_listener_goes_on`].
const CHILD: &str = "OSBX_TEST_ACCEPT_ERROR_CHILD";

/// A real `EMFILE`: the test runs itself again in a child process whose file descriptors are
/// limited (`ulimit -n 24`), serving there with the default bound of 64 connections. This
/// process opens 60 connections that send nothing; the child's `accept` fails with `EMFILE` once
/// its descriptors are used up. The listener must still be there (the child alive) and, once
/// those connections are gone, answer again, its metrics counting the errors it backed off from.
#[cfg(unix)]
#[test]
fn an_accept_error_backs_off_and_the_listener_goes_on() {
    use std::io::{BufRead, BufReader, Read, Write};
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let name =
        module_path!().split_once("::").unwrap().1.to_owned() + "::an_accept_error_backs_off_and_the_listener_goes_on";
    let mut child = std::process::Command::new("sh")
        .args(["-c", "ulimit -n 24 && exec \"$@\"", "sh"])
        .arg(std::env::current_exe().unwrap())
        .args([&name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let port: u16 = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.split_once("osbx-test-port ").map(|(_, p)| p.parse().unwrap()))
        .expect("the child's port");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let get = |path: &str| -> std::io::Result<String> {
        let mut s = std::net::TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: osbx\r\nConnection: close\r\n\r\n")?;
        let mut response = String::new();
        s.read_to_string(&mut response)?;
        Ok(response)
    };
    assert!(get("/healthz").unwrap().starts_with("HTTP/1.1 200 OK\r\n"));
    let silent: Vec<_> = (0..60).map(|_| std::net::TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(child.try_wait().unwrap().is_none(), "the server ended on EMFILE: {:?}", child.wait());
    drop(silent);
    let deadline = Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        match get("/metrics") {
            Ok(r) if r.starts_with("HTTP/1.1 200 OK\r\n") => break r,
            other => assert!(Instant::now() < deadline, "no answer after the connections went: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let errors: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("osbx_acceptance_accept_errors_total "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no accept error count: {metrics}"));
    assert!(errors > 0, "the child never hit EMFILE (its limit too high?): {metrics}");
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// Serve on a free port, say which on stdout (after libtest's `test NAME ... `), stop when stdin
/// closes.
#[cfg(unix)]
fn child() {
    use std::io::{Read, Write};
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut out = std::io::stdout();
        writeln!(out, "osbx-test-port {}", listener.local_addr().unwrap().port()).unwrap();
        out.flush().unwrap();
        let (loop_, _alive) = Liveness::start();
        let stdin_closed = async {
            let _ = tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).await;
        };
        serve(listener, Arc::new(RwLock::new(Metrics::new())), loop_, Limits::default(), stdin_closed).await;
    });
}
