//! A kubeconfig's `proxy-url` (a corporate network's proxy between osbx and its cluster): osbx
//! reaches the real API server through an HTTP `CONNECT` proxy and through a SOCKS5 proxy on
//! loopback, and says clearly when the proxy is not there. The proxies are this test's own
//! (RFC 9110 §9.3.6 `CONNECT`; RFC 1928 SOCKS5, no authentication, `CONNECT` only): each relays
//! its tunnels byte for byte and records the address each one was asked for, which proves the
//! run went through it (TLS stays end to end: the proxy sees only the target's address).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::cluster;
use crate::support::{osbx, output_off_runtime, outputs};

/// Which protocol a proxy speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Connect,
    Socks5,
}

/// A forward proxy on 127.0.0.1 (on the test's runtime; stopped when dropped): the targets its
/// clients asked for, in order.
struct ForwardProxy {
    addr: SocketAddr,
    targets: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ForwardProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ForwardProxy {
    async fn start(kind: Kind) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let targets = Arc::new(Mutex::new(Vec::new()));
        let seen = targets.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let _ = tunnel(kind, client, &seen).await;
                });
            }
        });
        Self { addr, targets, task }
    }

    fn url(&self, kind: Kind) -> String {
        let scheme = if kind == Kind::Connect { "http" } else { "socks5" };
        format!("{scheme}://{}", self.addr)
    }

    fn targets(&self) -> Vec<String> {
        self.targets.lock().unwrap().clone()
    }
}

/// One client: its request read, the target connected, the reply sent, then bytes relayed both
/// ways until either side closes.
async fn tunnel(kind: Kind, mut client: TcpStream, seen: &Mutex<Vec<String>>) -> std::io::Result<()> {
    let target = match kind {
        Kind::Connect => {
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let byte = client.read_u8().await?;
                head.push(byte);
                if head.len() > 8192 {
                    return Ok(());
                }
            }
            let text = String::from_utf8_lossy(&head).into_owned();
            let Some(target) = text.strip_prefix("CONNECT ").and_then(|r| r.split(' ').next()).map(str::to_owned)
            else {
                client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n").await?;
                return Ok(());
            };
            target
        }
        Kind::Socks5 => {
            // Greeting: version 5, the methods; "no authentication" chosen.
            let (version, methods) = (client.read_u8().await?, client.read_u8().await?);
            let mut offered = vec![0; usize::from(methods)];
            client.read_exact(&mut offered).await?;
            if version != 5 || !offered.contains(&0) {
                client.write_all(&[5, 0xff]).await?;
                return Ok(());
            }
            client.write_all(&[5, 0]).await?;
            // Request: version, CONNECT, reserved, the address type and address, the port.
            let mut request = [0; 4];
            client.read_exact(&mut request).await?;
            let host = match request[3] {
                1 => {
                    let mut ip = [0; 4];
                    client.read_exact(&mut ip).await?;
                    std::net::Ipv4Addr::from(ip).to_string()
                }
                3 => {
                    let mut name = vec![0; usize::from(client.read_u8().await?)];
                    client.read_exact(&mut name).await?;
                    String::from_utf8_lossy(&name).into_owned()
                }
                4 => {
                    let mut ip = [0; 16];
                    client.read_exact(&mut ip).await?;
                    format!("[{}]", std::net::Ipv6Addr::from(ip))
                }
                _ => return Ok(()),
            };
            let port = client.read_u16().await?;
            if request[1] != 1 {
                client.write_all(&[5, 7, 0, 1, 0, 0, 0, 0, 0, 0]).await?;
                return Ok(());
            }
            format!("{host}:{port}")
        }
    };
    seen.lock().unwrap().push(target.clone());
    let Ok(mut upstream) = TcpStream::connect(&target).await else {
        match kind {
            Kind::Connect => client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await?,
            Kind::Socks5 => client.write_all(&[5, 5, 0, 1, 0, 0, 0, 0, 0, 0]).await?,
        }
        return Ok(());
    };
    match kind {
        Kind::Connect => client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await?,
        Kind::Socks5 => client.write_all(&[5, 0, 0, 1, 127, 0, 0, 1, 0, 0]).await?,
    }
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// A copy of `kubeconfig` in `dir` whose clusters name `proxy` as their `proxy-url`; the
/// address of the (first) server.
fn through(kubeconfig: &Path, dir: &Path, proxy: &str) -> (PathBuf, String) {
    let mut kc: Value = serde_saphyr::from_str(&std::fs::read_to_string(kubeconfig).unwrap()).unwrap();
    let mut server = String::new();
    for c in kc["clusters"].as_array_mut().unwrap() {
        c["cluster"]["proxy-url"] = Value::String(proxy.to_owned());
        c["cluster"]["server"].as_str().unwrap().trim_start_matches("https://").clone_into(&mut server);
    }
    let path = dir.join(format!("kubeconfig-{}", proxy.split(':').next().unwrap()));
    std::fs::write(&path, serde_json::to_string_pretty(&kc).unwrap()).unwrap();
    (path, server.trim_end_matches('/').to_owned())
}

/// Through an HTTP `CONNECT` proxy and through a SOCKS5 proxy, `osbx diff` reaches the API
/// server (every connection it made was a tunnel the proxy was asked for, to the server's
/// address) and lists what it would create; with the proxy gone, it exits 2 saying it could not
/// connect, naming no secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_proxy_url_is_how_osbx_reaches_its_cluster_over_http_connect_and_socks5() {
    let plane = cluster::plane();
    let dir = tempfile::tempdir().unwrap();
    crate::builder::TestProfile::new("fwp").pool("p", "runc", [0, 1, 0, 2]).write_to(dir.path());
    let diff = |kubeconfig: PathBuf| {
        let mut cmd = osbx();
        cmd.args(["diff", "--profile"]).arg(dir.path().join("profile.yaml")).arg("--kubeconfig").arg(kubeconfig);
        cmd.args(["--request-timeout", "10s"]);
        output_off_runtime(cmd)
    };
    for kind in [Kind::Connect, Kind::Socks5] {
        let proxy = ForwardProxy::start(kind).await;
        let (kubeconfig, server) = through(&plane.kubeconfig, dir.path(), &proxy.url(kind));
        let out = diff(kubeconfig.clone()).await;
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(1), "{kind:?}: differences, not an error: {stdout}{stderr}");
        assert!(stdout.contains("to create"), "{kind:?}: {stdout}");
        let targets = proxy.targets();
        assert!(!targets.is_empty(), "{kind:?}: osbx did not go through the proxy");
        assert!(targets.iter().all(|t| *t == server), "{kind:?}: tunnels to {targets:?}, not only {server}");
        // The proxy gone: a clear error, exit 2.
        drop(proxy);
        let out = diff(kubeconfig).await;
        let (_, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(2), "{kind:?}: {stderr}");
        assert!(stderr.contains("error:") && !stderr.contains("panicked"), "{kind:?}: {stderr}");
    }
}
