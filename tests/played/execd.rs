//! `osbx-played-execd`: OpenSandbox's in-sandbox daemon execd, played, because no package
//! registry serves it. It runs inside the node tier's pool containers as the real one does
//! (copied into `/opt/opensandbox` by an installer init container, started by `bootstrap.sh`),
//! so `opensandbox.exec.*` meets it behind the real server 0.2.2's proxy.
//!
//! Facts (`../shared/reference/sandbox-work.md` §1.1–1.3, execd v1.0.12–v1.0.19): port 44772
//! (`--port`); `X-EXECD-ACCESS-TOKEN` checked only when a token is set (`--access-token`, env
//! `EXECD_ACCESS_TOKEN`), else 401 `{"error": …}`; `GET /ping` → 200 with an empty body;
//! `POST /command` `{command, timeout (ms), cwd, envs}` → 200 `text/event-stream`, each event a
//! raw JSON object followed by a blank line: `init` (the command id), `stdout`/`stderr` chunks,
//! `ping` every 3 s, then `execution_complete` (`execution_time`, ms) or `error`
//! (`CommandExecError`, `evalue` the exit code), then a 1 s pause before the end; `bash -c`, or
//! `sh -c` without bash; a body without `command` → 400 `INVALID_REQUEST_BODY`.
//!
//! What it cannot show: background commands, `/command/status`, logs, interrupts, files, Jupyter,
//! `uid`/`gid`, and execd's own proxy are not played; a timeout kills the shell only (execd kills
//! its process group); HTTP/1.1 only, one request at a time per connection.
//!
//! Built statically (`tests/cluster/build node`: `cargo rustc … -C target-feature=+crt-static`),
//! as execd is, so it runs in any image.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

/// The header execd reads its access token from.
const TOKEN_HEADER: &str = "x-execd-access-token";

/// Commands run so far (their ids).
static COMMANDS: AtomicU64 = AtomicU64::new(0);

fn main() {
    let mut port = 44772_u16;
    let mut token = std::env::var("EXECD_ACCESS_TOKEN").ok().filter(|t| !t.is_empty());
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
            None => (arg.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| args.next()).unwrap_or_default();
        match flag.trim_start_matches('-') {
            "port" => port = value().parse().expect("--port: a port number"),
            "access-token" => token = Some(value()).filter(|t| !t.is_empty()),
            // Accepted and ignored, as they change nothing played here.
            "log-level" | "graceful-shutdown-timeout" | "jupyter-host" | "jupyter-token" => drop(value()),
            other => panic!("osbx-played-execd: unknown flag {other}"),
        }
    }
    let listener = TcpListener::bind(("0.0.0.0", port)).expect("bind execd's port");
    for stream in listener.incoming().flatten() {
        let token = token.clone();
        std::thread::spawn(move || serve(stream, token.as_deref()));
    }
}

/// One request read from a connection.
struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// Serve requests on one connection until it closes.
fn serve(stream: TcpStream, token: Option<&str>) {
    let Ok(read_half) = stream.try_clone() else { return };
    let mut reader = BufReader::new(read_half);
    let mut out = stream;
    while let Some(req) = read_request(&mut reader) {
        let authorised = token.is_none_or(|t| req.headers.iter().any(|(k, v)| k == TOKEN_HEADER && v == t));
        let path = req.path.split('?').next().unwrap_or_default().to_owned();
        let done = if authorised {
            match (req.method.as_str(), path.as_str()) {
                ("GET", "/ping") => respond(&mut out, 200, "", b""),
                ("POST", "/command") => command(&mut out, &req.body),
                _ => respond(&mut out, 404, "text/plain", b"404 page not found"),
            }
        } else {
            let body = json!({"error": "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"});
            respond(&mut out, 401, "application/json", body.to_string().as_bytes())
        };
        if done.is_err() {
            return;
        }
    }
}

/// The next request (`None`: the connection closed or sent something that is not HTTP/1.1).
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
    }
    let length: usize =
        headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request { method, path, headers, body })
}

/// A whole response.
fn respond(out: &mut TcpStream, status: u16, content_type: &str, body: &[u8]) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {}\r\nContent-Length: {}\r\n", reason(status), body.len());
    if !content_type.is_empty() {
        head = format!("{head}Content-Type: {content_type}\r\n");
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(body)?;
    out.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        _ => "Internal Server Error",
    }
}

/// One event of the stream: the JSON object and a blank line, as one chunk.
fn event(out: &mut TcpStream, event: &Value) -> std::io::Result<()> {
    let data = format!("{event}\n\n");
    out.write_all(format!("{:x}\r\n{data}\r\n", data.len()).as_bytes())?;
    out.flush()
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or_default()
}

/// What a command's output threads send.
enum Output {
    Chunk(&'static str, String),
    Closed,
}

/// `POST /command`: run it in a shell and stream its events.
fn command(out: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    let req: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let Some(cmd) = req["command"].as_str().filter(|c| !c.is_empty()) else {
        let err = json!({"code": "INVALID_REQUEST_BODY", "message": "invalid request body: command is required"});
        return respond(out, 400, "application/json", err.to_string().as_bytes());
    };
    let shell = if std::path::Path::new("/bin/bash").exists() { "bash" } else { "sh" };
    let mut child = Command::new(shell);
    child.arg("-c").arg(cmd).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(cwd) = req["cwd"].as_str() {
        child.current_dir(cwd);
    }
    if let Some(envs) = req["envs"].as_object() {
        child.envs(envs.iter().map(|(k, v)| (k, v.as_str().unwrap_or_default())));
    }
    let started = Instant::now();
    let mut child = match child.spawn() {
        Ok(c) => c,
        Err(e) => {
            let err = json!({"code": "RUNTIME_ERROR", "message": format!("error running commands {e}")});
            return respond(out, 500, "application/json", err.to_string().as_bytes());
        }
    };
    out.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: keep-alive\r\n\
          X-Accel-Buffering: no\r\nTransfer-Encoding: chunked\r\n\r\n",
    )?;
    let id = format!("cmd-{}-{}", std::process::id(), COMMANDS.fetch_add(1, Ordering::Relaxed));
    event(out, &json!({"type": "init", "text": id, "timestamp": now_ms()}))?;
    let (tx, rx) = mpsc::channel();
    let pipes: [(&'static str, Box<dyn Read + Send>); 2] = [
        ("stdout", Box::new(child.stdout.take().expect("piped stdout"))),
        ("stderr", Box::new(child.stderr.take().expect("piped stderr"))),
    ];
    for (kind, mut pipe) in pipes {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = [0_u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let _ = tx.send(Output::Chunk(kind, String::from_utf8_lossy(&buf[..n]).into_owned()));
            }
            let _ = tx.send(Output::Closed);
        });
    }
    let deadline = req["timeout"].as_u64().filter(|t| *t > 0).map(|t| started + Duration::from_millis(t));
    let mut open = 2;
    let mut last_ping = Instant::now();
    while open > 0 {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let _ = child.kill();
        }
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(Output::Chunk(kind, text)) => event(out, &json!({"type": kind, "text": text, "timestamp": now_ms()}))?,
            Ok(Output::Closed) => open -= 1,
            Err(_) => {}
        }
        if last_ping.elapsed() >= Duration::from_secs(3) {
            event(out, &json!({"type": "ping", "text": "pong", "timestamp": now_ms()}))?;
            last_ping = Instant::now();
        }
    }
    let status = child.wait()?;
    let took = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if status.success() {
        event(out, &json!({"type": "execution_complete", "execution_time": took, "timestamp": now_ms()}))?;
    } else {
        let code = status.code().unwrap_or(-1);
        let error = json!({"ename": "CommandExecError", "evalue": code.to_string(), "traceback": [format!("exit status {code}")]});
        event(out, &json!({"type": "error", "error": error, "timestamp": now_ms()}))?;
    }
    // execd's graceful-shutdown pause before the stream ends.
    std::thread::sleep(Duration::from_secs(1));
    out.write_all(b"0\r\n\r\n")?;
    out.flush()
}
