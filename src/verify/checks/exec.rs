//! `opensandbox.exec.<pool>`: a command runs in the pool's sandbox through execd, reached the
//! way clients reach it — the server's proxy for execd's port
//! (`/v1/sandboxes/<id>/proxy/44772/…`) — and its output comes back. It uses the sandbox the
//! Lifecycle check of the same pool creates ([`super::lifecycle`]), so one sandbox is made per
//! pool.
//!
//! execd's API (`GET /ping`; `POST /command` answering with an event stream: JSON objects
//! separated by blank lines, each maybe behind a `data:` prefix, ending in `execution_complete`
//! or `error`) and the server 0.2.2's proxy (no API key needed, 502 when nothing listens on the
//! port) are as `../shared/reference/sandbox-work.md` §1 records them.

use std::time::{Duration, Instant};

use http::Method;
use serde_json::{Value, json};

use crate::verify::endpoint::Response;
use crate::verify::{Ctx, Verdict};

/// The port execd listens on in a sandbox.
pub(super) const EXECD_PORT: u16 = 44772;

/// How long execd may take to answer `/ping` through the proxy once the sandbox is Running.
const PING_WINDOW: Duration = Duration::from_secs(20);

/// How long one `/ping` may take.
const PING_ATTEMPT: Duration = Duration::from_secs(5);

/// The command's own limit, sent to execd (milliseconds).
const COMMAND_TIMEOUT_MS: u64 = 30_000;

/// What the request for the command may take beyond the command's limit (execd holds the stream
/// open for its graceful-shutdown second after the end).
const COMMAND_SLACK: Duration = Duration::from_secs(15);

/// The id of the exec check of `pool`.
pub(super) fn id(pool: &str) -> String {
    format!("opensandbox.exec.{pool}")
}

/// The verdict when there is no sandbox to run a command in: the Lifecycle check's failure
/// (`lifecycle`), said of exec.
pub(super) fn without_sandbox(lifecycle: &Verdict) -> Verdict {
    let why = format!(
        "no sandbox to run a command in: {}{}",
        lifecycle.evidence,
        lifecycle.diagnosis.as_deref().map(|d| format!(" ({d})")).unwrap_or_default()
    );
    Verdict {
        evidence: why,
        diagnosis: Some("see the Lifecycle check of the same pool".to_owned()),
        ..lifecycle.clone()
    }
}

/// A full pool, reported as such: no sandbox could be had from it (`available` as the Pool's
/// status says; `how`: what the server answered).
pub(super) fn full(pool: &str, available: &Value, how: &str) -> Verdict {
    Verdict::fail(
        format!("Pool {pool} full: available {available}"),
        format!("{how}: every pod of the pool is taken, so no sandbox could be created from it"),
    )
    .with_fix("raise the pool's bufferMin/poolMax, or delete sandboxes that hold its pods")
}

/// The nonce a run's command prints: `osbx-<run>`.
pub(super) fn nonce(run: &str) -> String {
    format!("osbx-{run}")
}

/// The command that prints the nonce without holding it (a proxy that echoed the request back
/// would not pass).
fn command(run: &str) -> String {
    format!("printf '%s-%s\\n' osbx '{run}'")
}

/// Run the nonce's command in sandbox `id` of `pool` through the server's proxy for execd.
pub(super) async fn exec(ctx: &Ctx, pool: &str, id: &str) -> Verdict {
    let base = format!("/v1/sandboxes/{id}/proxy/{EXECD_PORT}");
    let ping = format!("{base}/ping");
    let start = Instant::now();
    // The last 502 or 404, retried until the window closes; each attempt has its own limit, so
    // that one slow answer does not hide what the others said.
    let mut last = None;
    let mut attempts = 0;
    loop {
        let left = PING_WINDOW.saturating_sub(start.elapsed()).min(PING_ATTEMPT);
        attempts += 1;
        match tokio::time::timeout(left, ctx.endpoint.request(Method::GET, &ping, None, true)).await {
            Err(_) => {}
            Ok(Err(e)) => return Verdict::error(format!("GET {ping}"), e),
            Ok(Ok(r)) if r.status == 200 => break,
            // Not listening yet (502), or the proxy does not know the sandbox's address yet (404).
            Ok(Ok(r)) if matches!(r.status, 502 | 404) => last = Some(r),
            Ok(Ok(r)) => return unreachable(pool, &format!("GET {ping}"), &r, start.elapsed()),
        }
        if start.elapsed() + Duration::from_secs(1) >= PING_WINDOW {
            let request = format!("GET {ping} ({attempts} attempts)");
            return match last {
                Some(r) => unreachable(pool, &request, &r, start.elapsed()),
                None => Verdict::fail(
                    format!("{request}: no answer within {}s", PING_WINDOW.as_secs()),
                    format!("execd in pool {pool}'s sandbox did not answer through the server's proxy"),
                ),
            };
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let path = format!("{base}/command");
    let body = json!({"command": command(&ctx.run.id), "timeout": COMMAND_TIMEOUT_MS});
    let limit = Duration::from_millis(COMMAND_TIMEOUT_MS) + COMMAND_SLACK;
    let sent = Instant::now();
    match tokio::time::timeout(limit, ctx.endpoint.request(Method::POST, &path, Some(&body), true)).await {
        Err(_) => Verdict::fail(
            format!("POST {path}: no end of the stream within {}s", limit.as_secs()),
            format!("execd in pool {pool}'s sandbox did not finish `{}`", command(&ctx.run.id)),
        ),
        Ok(Err(e)) => Verdict::error(format!("POST {path}"), e),
        Ok(Ok(r)) if r.status != 200 => unreachable(pool, &format!("POST {path}"), &r, sent.elapsed()),
        Ok(Ok(r)) => outcome(pool, &nonce(&ctx.run.id), &r.text, sent.elapsed()),
    }
}

/// The verdict on an answer that is not execd's: by status.
fn unreachable(pool: &str, request: &str, r: &Response, after: Duration) -> Verdict {
    let body = r.text.chars().take(200).collect::<String>();
    let evidence = format!("{request} → {} after {:.1}s: {body}", r.status, after.as_secs_f64());
    match r.status {
        502 => Verdict::fail(
            evidence,
            format!(
                "the Pool template does not start execd (OpenSandbox #1692): nothing listens on port {EXECD_PORT} in pool {pool}'s sandbox, although it is Running"
            ),
        )
        .with_fix(
            "start execd in the pool's main container: the execd installer init container into /opt/opensandbox and the command /opt/opensandbox/bootstrap.sh <long-running command>, with a readinessProbe on /ping port 44772",
        ),
        401 if r.json.get("error").is_some() => Verdict::fail(
            evidence,
            format!(
                "execd in pool {pool}'s sandbox wants an access token (X-EXECD-ACCESS-TOKEN), which the server never sends: the Pool template sets EXECD_ACCESS_TOKEN"
            ),
        )
        .with_fix("drop EXECD_ACCESS_TOKEN from the Pool template"),
        401 | 403 => Verdict::fail(evidence, "the server refused the proxy request: the API key was not accepted"),
        404 => Verdict::fail(evidence, format!("the server does not know pool {pool}'s sandbox or its address")),
        _ => Verdict::fail(evidence, format!("the server's proxy to execd in pool {pool}'s sandbox failed")),
    }
}

/// The events of an execd stream: the blocks between blank lines, each a JSON object, maybe
/// behind `data:` prefixes (standard server-sent events). A block that is not JSON is kept as
/// an `Err` with its text.
fn events(stream: &str) -> Vec<Result<Value, String>> {
    let stream = stream.replace("\r\n", "\n");
    stream
        .split("\n\n")
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .map(|block| {
            let data: Vec<&str> = block.lines().filter_map(|l| l.strip_prefix("data:").map(str::trim_start)).collect();
            let json = if data.is_empty() { block.to_owned() } else { data.join("\n") };
            serde_json::from_str::<Value>(&json).map_err(|_| block.to_owned())
        })
        .collect()
}

/// The verdict on the stream of the command that prints `nonce`.
fn outcome(pool: &str, nonce: &str, stream: &str, took: Duration) -> Verdict {
    let events = events(stream);
    let mut stdout = String::new();
    let mut stderr = String::new();
    let mut end = None;
    for event in &events {
        let Ok(event) = event else { continue };
        match event["type"].as_str() {
            Some("stdout") => stdout.push_str(event["text"].as_str().unwrap_or_default()),
            Some("stderr") => stderr.push_str(event["text"].as_str().unwrap_or_default()),
            Some("execution_complete" | "error") => {
                end = Some(event);
                break;
            }
            _ => {}
        }
    }
    let seen = format!("{} event(s) in {:.1}s", events.len(), took.as_secs_f64());
    let quoted = |s: &str| s.trim().chars().take(120).collect::<String>();
    match end {
        None => Verdict::fail(
            format!("the command's stream ended without execution_complete or error ({seen}): {}", quoted(stream)),
            format!("execd in pool {pool}'s sandbox did not finish the command, or something between cut its stream"),
        ),
        Some(e) if e["type"] == "error" => {
            let err = &e["error"];
            let code = err["evalue"].as_str().unwrap_or_default();
            let what = if err["ename"] == "CommandExecError" && code.parse::<i64>().is_ok() {
                format!("the command exited with code {code}")
            } else {
                format!("the command did not run: {} {code}", err["ename"].as_str().unwrap_or_default())
            };
            Verdict::fail(
                format!("{what} ({seen}); stderr: {:?}", quoted(&stderr)),
                format!("execd in pool {pool}'s sandbox could not run a shell command (is there an sh in the image?)"),
            )
        }
        Some(e) if !stdout.contains(nonce) => Verdict::fail(
            format!(
                "execution_complete in {} ms, but stdout {:?} lacks {nonce} ({seen})",
                e["execution_time"],
                quoted(&stdout)
            ),
            format!("what ran in pool {pool}'s sandbox is not the command sent"),
        ),
        Some(e) => Verdict::pass(format!(
            "execd through the server's proxy (port {EXECD_PORT}): stdout {nonce}, execution_complete in {} ms ({seen})",
            e["execution_time"]
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::Outcome;

    const NONCE: &str = "osbx-1700000000-42";

    fn said(v: &Verdict) -> String {
        format!("{} | {} | {}", v.evidence, v.diagnosis.as_deref().unwrap_or(""), v.fix.as_deref().unwrap_or(""))
    }

    #[test]
    fn the_command_prints_the_nonce_without_holding_it() {
        let cmd = command("1700000000-42");
        assert!(!cmd.contains(NONCE), "{cmd}");
        assert_eq!(cmd, "printf '%s-%s\\n' osbx '1700000000-42'");
    }

    #[test]
    fn raw_json_events_separated_by_blank_lines_pass() {
        let stream = "{\"type\":\"init\",\"text\":\"c1\"}\n\n{\"type\":\"stdout\",\"text\":\"osbx-1700000000-42\\n\"}\n\n\
                      {\"type\":\"execution_complete\",\"execution_time\":3}\n\n";
        let v = outcome("pod", NONCE, stream, Duration::from_millis(1100));
        assert_eq!(v.outcome, Outcome::Pass, "{}", said(&v));
        assert!(
            v.evidence.contains("stdout osbx-1700000000-42, execution_complete in 3 ms (3 event(s)"),
            "{}",
            said(&v)
        );
    }

    #[test]
    fn data_prefixed_events_and_crlf_pass_and_chunks_join() {
        let stream = "data: {\"type\":\"init\",\"text\":\"c1\"}\r\n\r\ndata: {\"type\":\"stdout\",\"text\":\"osbx-17000\"}\r\n\r\n\
                      data:{\"type\":\"ping\",\"text\":\"pong\"}\r\n\r\ndata: {\"type\":\"stdout\",\"text\":\"00000-42\\n\"}\r\n\r\n\
                      data: {\"type\":\"execution_complete\",\"execution_time\":7}\r\n\r\n";
        let v = outcome("pod", NONCE, stream, Duration::from_secs(1));
        assert_eq!(v.outcome, Outcome::Pass, "{}", said(&v));
    }

    #[test]
    fn a_non_zero_exit_fails_with_its_code() {
        let stream = "{\"type\":\"init\",\"text\":\"c1\"}\n\n{\"type\":\"stderr\",\"text\":\"sh: printf: not found\\n\"}\n\n\
                      {\"type\":\"error\",\"error\":{\"ename\":\"CommandExecError\",\"evalue\":\"127\",\"traceback\":[\"exit status 127\"]}}\n\n";
        let v = outcome("pod", NONCE, stream, Duration::from_secs(1));
        assert_eq!(v.outcome, Outcome::Fail);
        assert!(said(&v).contains("exited with code 127") && said(&v).contains("printf: not found"), "{}", said(&v));
    }

    #[test]
    fn a_stream_without_a_terminal_event_fails() {
        let stream =
            "{\"type\":\"init\",\"text\":\"c1\"}\n\n{\"type\":\"stdout\",\"text\":\"osbx-1700000000-42\\n\"}\n\n";
        let v = outcome("pod", NONCE, stream, Duration::from_secs(1));
        assert_eq!(v.outcome, Outcome::Fail);
        assert!(said(&v).contains("ended without execution_complete or error (2 event(s)"), "{}", said(&v));
    }

    #[test]
    fn a_complete_stream_without_the_nonce_fails() {
        let stream = "{\"type\":\"init\",\"text\":\"c1\"}\n\n{\"type\":\"stdout\",\"text\":\"osbx-\\n\"}\n\n\
                      {\"type\":\"execution_complete\",\"execution_time\":1}\n\n";
        let v = outcome("pod", NONCE, stream, Duration::from_secs(1));
        assert_eq!(v.outcome, Outcome::Fail);
        assert!(said(&v).contains("lacks osbx-1700000000-42"), "{}", said(&v));
    }

    fn response(status: u16, text: &str) -> Response {
        Response { status, json: serde_json::from_str(text).unwrap_or(Value::Null), text: text.to_owned() }
    }

    #[test]
    fn a_502_from_the_proxy_names_1692_and_the_pool() {
        let r = response(
            502,
            r#"{"code":"GENERAL::UNKNOWN_ERROR","message":"Could not connect to the backend sandbox 198.18.0.5:44772"}"#,
        );
        let v = unreachable("pod", "GET /v1/sandboxes/s1/proxy/44772/ping", &r, Duration::from_secs(20));
        assert_eq!(v.outcome, Outcome::Fail);
        let text = said(&v);
        assert!(text.contains("the Pool template does not start execd (OpenSandbox #1692)"), "{text}");
        assert!(text.contains("pool pod") && text.contains("→ 502") && text.contains("bootstrap.sh"), "{text}");
    }

    #[test]
    fn execds_401_names_the_token_and_the_servers_the_key() {
        let execd = response(401, r#"{"error":"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}"#);
        let v = unreachable("pod", "GET …/ping", &execd, Duration::ZERO);
        assert!(said(&v).contains("EXECD_ACCESS_TOKEN"), "{}", said(&v));
        let server = response(401, r#"{"code":"AUTH::INVALID","message":"no"}"#);
        let v = unreachable("pod", "GET …/ping", &server, Duration::ZERO);
        assert_eq!(v.outcome, Outcome::Fail);
        assert!(said(&v).contains("API key") && !said(&v).contains("EXECD_ACCESS_TOKEN"), "{}", said(&v));
    }

    #[test]
    fn a_full_pool_is_reported_as_full() {
        let v = full("pod", &json!(0), "POST /v1/sandboxes → 429");
        assert_eq!(v.outcome, Outcome::Fail);
        assert!(said(&v).contains("Pool pod full: available 0") && said(&v).contains("429"), "{}", said(&v));
    }
}
