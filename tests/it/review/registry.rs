//! `osbx images --check` against a real OCI registry on loopback (go-containerregistry's, the one
//! the review's OCI chart source is), as the mirror of the default profile (`images.mirror`):
//! the images are pushed by the real `crane` (the same module's CLI, from the Go module proxy),
//! each a one-layer image of its own. A mirror missing some images has exactly those named,
//! with who pulls them (exit 1); the found ones carry the digests `crane digest` reads; a
//! complete mirror passes (exit 0). An image named by a digest must hold that digest. Registry
//! requests go through `HTTP_PROXY` (a loopback proxy of this test's own, which records the
//! hosts it was asked for) unless `NO_PROXY` names the registry. With the registry's
//! authentication on (the CNCF Distribution registry, htpasswd), the credentials `crane auth
//! login` wrote into a Docker config file are used, and never printed; without them, every image
//! is `denied`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::sources::{built, crane, crane_with, registry};
use crate::support::outputs;

/// Push a one-layer image of its own as `image` (its tag), and its digest.
fn push(dir: &Path, image: &str) -> String {
    push_content(dir, image, image)
}

/// Push a one-layer image holding `text` as `image`, and its digest.
fn push_content(dir: &Path, image: &str, text: &str) -> String {
    push_as(None, dir, image, text)
}

/// Push a one-layer image holding `text` as `image` with the Docker config `docker`, and its
/// digest.
fn push_as(docker: Option<&Path>, dir: &Path, image: &str, text: &str) -> String {
    let content = dir.join("content");
    std::fs::create_dir_all(&content).unwrap();
    std::fs::write(content.join("name"), text).unwrap();
    let layer = dir.join("layer.tar");
    let status = Command::new("tar").arg("-cf").arg(&layer).arg("-C").arg(&content).arg("name").status().unwrap();
    assert!(status.success());
    crane_with(docker, &["append", "-f", layer.to_str().unwrap(), "-t", image]);
    crane_with(docker, &["digest", image])
}

/// `osbx images --no-charts ARGS -p PROFILE`, with `env`: exit code and stdout as JSON.
fn images(profile: &Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, Value, String) {
    let out = images_run(profile, &[&["-o", "json"], args].concat(), env);
    let (stdout, stderr) = outputs(&out);
    (out.status.code(), serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}{stderr}")), stderr)
}

/// `osbx images --no-charts ARGS -p PROFILE` in text: exit code, stdout, stderr.
fn images_text(profile: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = images_run(profile, args, &[]);
    let (stdout, stderr) = outputs(&out);
    (out.status.code(), stdout, stderr)
}

/// The `osbx images --no-charts ARGS -p PROFILE` process, anonymous, with no proxy but `env`'s.
fn images_run(profile: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = crate::support::osbx();
    cmd.args(["images", "--no-charts"]).args(args).arg("-p").arg(profile);
    for var in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"] {
        cmd.env_remove(var);
    }
    // No Docker configuration of the user's: anonymous.
    cmd.env("DOCKER_CONFIG", profile.parent().unwrap().join("no-docker"));
    cmd.envs(env.iter().copied());
    cmd.output().unwrap()
}

/// An HTTP forward proxy on loopback for plain-HTTP targets (absolute-form requests, RFC 9112
/// §3.2.2): records the `host:port` of each connection's first request, then relays the
/// connection byte for byte (the registry, Go's server, reads absolute-form requests).
fn proxy() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().map_while(Result::ok) {
            let record = record.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(client.try_clone().unwrap());
                let mut first = String::new();
                reader.read_line(&mut first).unwrap();
                let Some(host) = first.split_whitespace().nth(1).and_then(|u| u.strip_prefix("http://")) else {
                    return;
                };
                let host = host.split('/').next().unwrap_or_default().to_owned();
                record.lock().unwrap().push(host.clone());
                let mut upstream = TcpStream::connect(&host).unwrap();
                upstream.write_all(first.as_bytes()).unwrap();
                // What the reader buffered beyond the first line, then the rest.
                upstream.write_all(reader.buffer()).unwrap();
                let mut down = upstream.try_clone().unwrap();
                let mut client_write = client.try_clone().unwrap();
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut down, &mut client_write);
                });
                let mut client_read = client;
                let _ = std::io::copy(&mut client_read, &mut upstream);
            });
        }
    });
    (url, seen)
}

#[test]
fn check_names_exactly_the_images_the_mirror_lacks_and_passes_a_complete_one() {
    let (_registry, port) = registry();
    let host = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let (_, text) = osbx::profile::embedded_text("default").unwrap();
    let text = format!(
        "{text}\n# Our mirror.\nimages:\n  mirror:\n    docker.io: {host}/hub  # Docker Hub\n    \"*\": {host}/all\n\n# The end.\n"
    );
    let path = dir.path().join("profile.yaml");
    std::fs::write(&path, &text).unwrap();

    // Every image the profile pulls, on the mirror.
    let (code, listed, stderr) = images(&path, &[], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let all: Vec<String> = listed.as_object().unwrap().keys().cloned().collect();
    assert!(all.len() >= 5, "{all:?}");
    assert!(all.iter().all(|i| i.starts_with(&format!("{host}/"))), "{all:?}");

    // All but two pushed (an image named by a digest is pushed by its tag: the registry then
    // holds another digest than the one named).
    let (held, lacking) = all.split_at(all.len() - 2);
    let mut digests = BTreeMap::new();
    for image in held {
        let tagged = image.split('@').next().unwrap();
        digests.insert(image.clone(), push(dir.path(), tagged));
    }
    let by_digest: BTreeSet<&String> = held.iter().filter(|i| i.contains('@')).collect();
    let (proxy, seen) = proxy();
    let (code, report, stderr) = images(&path, &["--check"], &[("HTTP_PROXY", &proxy)]);
    assert_eq!(code, Some(1), "{report:#}{stderr}");
    let state = |image: &str| report[image]["state"].as_str().unwrap_or_default().to_owned();
    let missing: BTreeSet<&String> = all.iter().filter(|i| state(i) == "missing").collect();
    let want: BTreeSet<&String> = lacking.iter().chain(by_digest.iter().copied()).collect();
    assert_eq!(missing, want, "{report:#}");
    for image in lacking {
        assert!(!report[image]["pulledBy"].as_array().unwrap().is_empty(), "who pulls {image}: {report:#}");
    }
    for (image, digest) in digests.iter().filter(|(i, _)| !i.contains('@')) {
        assert_eq!(report[image]["digest"], json!(digest), "{image}");
    }
    assert!(seen.lock().unwrap().contains(&host), "the requests went through HTTP_PROXY: {seen:?}");

    // The rest pushed: a complete mirror passes; NO_PROXY keeps the registry off the proxy.
    for image in lacking {
        push(dir.path(), image.split('@').next().unwrap());
    }
    let before = seen.lock().unwrap().len();
    let (code, report, stderr) = images(&path, &["--check"], &[("HTTP_PROXY", &proxy), ("NO_PROXY", "127.0.0.1")]);
    let complete = by_digest.is_empty();
    assert_eq!(code, Some(i32::from(!complete)), "{report:#}{stderr}");
    assert!(all.iter().filter(|i| !i.contains('@')).all(|i| state_of(&report, i) == "found"), "{report:#}");
    assert_eq!(seen.lock().unwrap().len(), before, "NO_PROXY names the registry: nothing through the proxy");

    // --resolve: the pins of every image, the digests the registry holds.
    let (code, resolved, stderr) = images(&path, &["--resolve"], &[]);
    assert_eq!(code, Some(0), "{resolved:#}{stderr}");
    let pins = resolved["images"]["digests"].clone();
    let name = |image: &str| {
        let unpinned = image.split('@').next().unwrap();
        unpinned.rsplit_once(':').filter(|(_, t)| !t.contains('/')).map_or(unpinned, |(n, _)| n).to_owned()
    };
    for image in all.iter().filter(|i| !i.contains('@')) {
        let digest = crane(&["digest", image]);
        assert_eq!(pins[name(image)], json!(digest), "{image}: {pins:#}");
    }
    // Written into the profile (--write): the pins under `images`, the rest of the file as it
    // was; every image is then pulled by its digest, and each is there.
    let (code, _, stderr) = images_text(&path, &["--resolve", "--write"]);
    assert_eq!(code, Some(0), "{stderr}");
    let written = std::fs::read_to_string(&path).unwrap();
    let (head, tail) = written.split_once("    \"*\": ").unwrap();
    assert!(text.starts_with(head), "{written}");
    assert!(tail.ends_with("\n\n# The end.\n"), "{written}");
    let doc: Value = serde_saphyr::from_str(&written).unwrap();
    assert_eq!(doc["images"]["digests"], pins, "{written}");
    let mut without: Value = doc.clone();
    without["images"].as_object_mut().unwrap().remove("digests");
    assert_eq!(without, serde_saphyr::from_str::<Value>(&text).unwrap(), "only the pins changed");
    let (code, _, stderr) = images_text(&path, &["--resolve", "--write"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), written, "the same pins again: the file as it was");
    let (code, listed, stderr) = images(&path, &[], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let pinned: Vec<&String> = listed.as_object().unwrap().keys().collect();
    assert!(pinned.iter().all(|i| i.contains("@sha256:")), "{pinned:?}");
    let (code, report, stderr) = images(&path, &["--check"], &[]);
    assert_eq!(code, Some(0), "{report:#}{stderr}");
    a_pin_the_registry_lacks_is_missing(&path, &doc);
    std::fs::write(&path, &written).unwrap();
    // A tag that moves: the pin stays until asked to refresh.
    let moved = all.iter().find(|i| !i.contains('@')).unwrap();
    let new_digest = push_content(dir.path(), moved, "a new build");
    let old_digest = pins[name(moved)].as_str().unwrap().to_owned();
    let (_, kept, _) = images(&path, &["--resolve"], &[]);
    assert_eq!(kept["images"]["digests"][name(moved)], json!(old_digest), "kept without --refresh");
    let (code, refreshed, stderr) = images(&path, &["--resolve", "--refresh"], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(refreshed["images"]["digests"][name(moved)], json!(new_digest), "read again with --refresh");
    assert_ne!(old_digest, new_digest);
    // A missing image: nothing written (exit 1).
    let (code, _, stderr) = images_text(&path, &["--resolve", "--refresh", "--write"]);
    assert_eq!(code, Some(0), "{stderr}");
    let refreshed_text = std::fs::read_to_string(&path).unwrap();
    assert!(refreshed_text.contains(&new_digest) && !refreshed_text.contains(&old_digest), "{refreshed_text}");
    let unpinned =
        refreshed_text.replace(&format!("{host}/hub  # Docker Hub"), &format!("{host}/elsewhere  # Docker Hub"));
    std::fs::write(&path, &unpinned).unwrap();
    let (code, _, stderr) = images_text(&path, &["--resolve", "--refresh", "--write"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("left as it was"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), unpinned);
}

/// A pin the registry does not hold (its tag is there, that digest is not): that image alone is
/// missing. `doc` is the profile at `path` with every image pinned; the file is left mispinned.
fn a_pin_the_registry_lacks_is_missing(path: &Path, doc: &Value) {
    let (first, _) = doc["images"]["digests"].as_object().unwrap().iter().next().unwrap();
    let wrong = format!("sha256:{}", "0".repeat(64));
    let mut mispinned = doc.clone();
    mispinned["images"]["digests"][first] = json!(wrong);
    std::fs::write(path, serde_saphyr::to_string(&mispinned).unwrap()).unwrap();
    let (code, report, stderr) = images(path, &["--check"], &[]);
    assert_eq!(code, Some(1), "{report:#}{stderr}");
    for (image, answer) in report.as_object().unwrap() {
        let ours = image.starts_with(&format!("{first}@")) || image.starts_with(&format!("{first}:"));
        assert_eq!(answer["state"] == "missing", ours, "{image}: {report:#}");
        assert_eq!(image.ends_with(&wrong), ours, "{image}");
    }
}

/// The Distribution registry with htpasswd authentication (`user`:`password`, bcrypt by
/// `htpasswd`) on a free loopback port, in memory: its child and its `host:port`.
fn authenticating_registry(dir: &Path, user: &str, password: &str) -> (super::sources::Server, String) {
    let out = Command::new("htpasswd").args(["-Bbn", user, password]).output().unwrap();
    assert!(out.status.success(), "htpasswd: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(dir.join("htpasswd"), &out.stdout).unwrap();
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let host = format!("127.0.0.1:{port}");
    let config = format!(
        "version: 0.1\nlog: {{level: warn}}\nstorage: {{inmemory: {{}}}}\nhttp: {{addr: \"{host}\"}}\nauth:\n  htpasswd: {{realm: osbx-test, path: {}}}\n",
        dir.join("htpasswd").display()
    );
    std::fs::write(dir.join("config.yml"), config).unwrap();
    let child = Command::new(built("distribution"))
        .arg("serve")
        .arg(dir.join("config.yml"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let server = super::sources::Server::from(child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while TcpStream::connect(&host).is_err() {
        assert!(std::time::Instant::now() < deadline, "the Distribution registry did not listen on {host} in 30 s");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    (server, host)
}

#[test]
fn check_uses_the_docker_config_s_credentials_and_never_prints_them() {
    let dir = tempfile::tempdir().unwrap();
    let password = "s3cret-0f-the-mirror-7d1";
    let (_registry, host) = authenticating_registry(dir.path(), "osbx", password);
    let (_, text) = osbx::profile::embedded_text("runc-only").unwrap();
    let mut profile: Value = serde_saphyr::from_str(&text).unwrap();
    profile["images"] = json!({"mirror": {"*": format!("{host}/all"), "docker.io": format!("{host}/hub")}});
    let path = dir.path().join("profile.yaml");
    std::fs::write(&path, serde_json::to_string_pretty(&profile).unwrap()).unwrap();
    let (code, listed, stderr) = images(&path, &[], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let all: Vec<String> = listed.as_object().unwrap().keys().cloned().collect();

    // crane logs in (writing the Docker config file) and pushes every image.
    let docker = dir.path().join("docker");
    crane_with(Some(&docker), &["auth", "login", &host, "-u", "osbx", "-p", password]);
    assert!(std::fs::read_to_string(docker.join("config.json")).unwrap().contains("auths"));
    for image in &all {
        push_as(Some(&docker), dir.path(), image.split('@').next().unwrap(), image);
    }

    // With the user's Docker config: every image found; the password nowhere in the output.
    let mut cmd = crate::support::osbx();
    cmd.args(["images", "--no-charts", "--check", "-p"]).arg(&path).env("DOCKER_CONFIG", &docker);
    let out = cmd.output().unwrap();
    let (stdout, stderr) = outputs(&out);
    let complete = all.iter().all(|i| !i.contains('@'));
    assert_eq!(out.status.code(), Some(i32::from(!complete)), "{stdout}{stderr}");
    assert!(stdout.lines().filter(|l| !l.contains('@')).all(|l| !l.starts_with("denied")), "{stdout}");
    assert!(!stdout.contains(password) && !stderr.contains(password), "the password was printed:\n{stdout}{stderr}");
    // Without credentials: denied, every one.
    let (code, report, stderr) = images(&path, &["--check"], &[]);
    assert_eq!(code, Some(1), "{report:#}{stderr}");
    assert!(all.iter().all(|i| state_of(&report, i) == "denied"), "{report:#}");
}

fn state_of(report: &Value, image: &str) -> String {
    report[image]["state"].as_str().unwrap_or_default().to_owned()
}
