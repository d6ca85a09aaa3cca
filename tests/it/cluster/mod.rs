//! A real control plane for the tests: etcd + kube-apiserver on 127.0.0.1.
//!
//! When `OSBX_TEST_KUBECONFIG` is set (the README's test command, `tests/run`, starts one plane
//! for the whole run and stops it afterwards), every test attaches to it. Otherwise the first
//! test that needs a cluster starts one with `tests/cluster/up --watch-pid <this process>`: the
//! detached watchdog stops it as soon as the test binary exits, however it exits (statics are
//! never dropped, so no destructor could do it).

mod server;
pub mod standin;

pub use server::RealServer;

use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::Value;

use crate::support::{root, shared};

/// The running plane.
pub struct Plane {
    /// Its kubeconfig (admin, `system:masters`).
    pub kubeconfig: PathBuf,
}

static PLANE: OnceLock<Plane> = OnceLock::new();

/// The shared plane, started on first use.
pub fn plane() -> &'static Plane {
    PLANE.get_or_init(|| {
        if let Some(k) = std::env::var_os("OSBX_TEST_KUBECONFIG").filter(|k| !k.is_empty()) {
            return Plane { kubeconfig: PathBuf::from(k) };
        }
        let dir = std::env::temp_dir().join(format!("osbx-test-plane-{}", std::process::id()));
        let out = std::process::Command::new(root().join("tests/cluster/up"))
            .arg("--watch-pid")
            .arg(std::process::id().to_string())
            .arg(&dir)
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("run tests/cluster/up");
        assert!(out.status.success(), "tests/cluster/up failed (see stderr above)");
        Plane { kubeconfig: dir.join("kubeconfig") }
    })
}

/// A control plane of one test's own, for tests that need an empty cluster (no CRDs). Stopped
/// when dropped, and by its watchdog if the test binary dies first.
pub struct OwnPlane {
    dir: tempfile::TempDir,
    /// Its kubeconfig.
    pub kubeconfig: PathBuf,
}

impl OwnPlane {
    /// Start one (blocking, about 3 s).
    pub fn start() -> Self {
        let dir = up_in_new_dir(".tmp", &[]);
        let kubeconfig = dir.path().join("kubeconfig");
        Self { dir, kubeconfig }
    }
}

/// `tests/cluster/up [EXTRA…] --watch-pid <this process> DIR`, DIR a new temporary directory
/// named `<prefix>…`, for a plane of a test's own. `up` picks free loopback ports, then starts its
/// processes on them: another plane starting at the same moment (the heavy tests run side by
/// side, `crate::turns`) or any outgoing connection can take one first, and that process exits
/// with `address already in use`. Such a start is stopped and made again in a new directory, at
/// most three times in all; any other failure fails the test at once (`up` says why on stderr).
pub fn up_in_new_dir(prefix: &str, extra: &[&str]) -> tempfile::TempDir {
    for attempt in 1..=3 {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
        let out = std::process::Command::new(root().join("tests/cluster/up"))
            .args(extra)
            .arg("--watch-pid")
            .arg(std::process::id().to_string())
            .arg(dir.path())
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("run tests/cluster/up");
        if out.status.success() {
            return dir;
        }
        let raced = std::fs::read_dir(dir.path()).into_iter().flatten().flatten().any(|e| {
            e.path().extension().is_some_and(|x| x == "log")
                && std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains("address already in use"))
        });
        crate::support::stop_in_drop(std::process::Command::new(root().join("tests/cluster/down")).arg(dir.path()));
        assert!(raced && attempt < 3, "tests/cluster/up failed (see stderr above)");
    }
    unreachable!("the third failed start fails the test")
}

impl Drop for OwnPlane {
    fn drop(&mut self) {
        crate::support::stop_in_drop(
            std::process::Command::new(root().join("tests/cluster/down")).arg(self.dir.path()),
        );
    }
}

/// A client for the shared plane (one per test: a client belongs to the runtime that created it).
pub async fn client() -> Client {
    client_for(&plane().kubeconfig).await
}

/// A client for the plane of `kubeconfig`.
pub async fn client_for(kubeconfig: &std::path::Path) -> Client {
    crate::played::client(kubeconfig).await.unwrap_or_else(|e| panic!("client: {e}"))
}

/// The names of every namespace.
pub async fn namespace_names(client: &Client) -> Vec<String> {
    let list = Api::<Namespace>::all(client.clone()).list(&ListParams::default()).await.expect("list namespaces");
    list.into_iter().filter_map(|n| n.metadata.name).collect()
}

/// A fresh namespace, unique in this run.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = format!("it-{prefix}-{}-{n}", std::process::id());
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("create namespace");
    name
}

/// Server-side apply the CRDs of `../shared/crds/<dir>` and wait until every one is Established.
pub async fn install_crds(client: &Client, dir: &str) {
    install_crds_except(client, dir, &[]).await;
}

/// [`install_crds`] without the files named in `skip` (e.g. `source.toolkit.fluxcd.io_ocirepositories.yaml`).
pub async fn install_crds_except(client: &Client, dir: &str, skip: &[&str]) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    let path = shared().join("crds").join(dir);
    let mut files: Vec<_> =
        std::fs::read_dir(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).flatten().collect();
    files.sort_by_key(std::fs::DirEntry::path);
    let wanted = |f: &std::fs::DirEntry| {
        f.path().extension().is_some_and(|e| e == "yaml") && !skip.iter().any(|s| f.file_name() == *s)
    };
    for file in files.into_iter().filter(wanted) {
        let text = std::fs::read_to_string(file.path()).unwrap();
        let crd: Value = serde_saphyr::from_str(&text).unwrap();
        let name = crd["metadata"]["name"].as_str().unwrap().to_owned();
        api.patch(&name, &PatchParams::apply("osbx-test").force(), &Patch::Apply(&crd)).await.expect("apply CRD");
        names.push(name);
    }
    for name in names {
        wait_for(&format!("CRD {name} Established"), Duration::from_secs(30), || {
            let api = api.clone();
            let name = name.clone();
            async move {
                let crd = api.get(&name).await.ok()?;
                let established =
                    crd.status?.conditions?.iter().any(|c| c.type_ == "Established" && c.status == "True");
                established.then_some(())
            }
        })
        .await;
    }
}

/// Install every real CRD the tests use (Flux, OpenSandbox, SPIRE), once per test binary.
pub async fn install_all_crds() {
    static DONE: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    DONE.get_or_init(|| async {
        let client = self::client().await;
        for dir in ["flux", "opensandbox", "spire"] {
            install_crds(&client, dir).await;
        }
    })
    .await;
}

/// Poll `probe` every 100 ms until it returns `Some`, or panic after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A dynamic API for an object's kind, found by discovery.
pub async fn api_for(client: &Client, object: &Value) -> (Api<DynamicObject>, String) {
    let (group, version) = match object["apiVersion"].as_str().unwrap().split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), object["apiVersion"].as_str().unwrap().to_owned()),
    };
    let gvk = kube::core::GroupVersionKind::gvk(&group, &version, object["kind"].as_str().unwrap());
    let (ar, caps) =
        kube::discovery::pinned_kind(client, &gvk).await.unwrap_or_else(|e| panic!("discover {gvk:?}: {e}"));
    let name = object["metadata"]["name"].as_str().unwrap().to_owned();
    let api = match (caps.scope, object["metadata"]["namespace"].as_str()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
        _ => Api::all_with(client.clone(), &ar),
    };
    (api, name)
}

/// A kubeconfig for another user of the plane of `kubeconfig` (a client certificate signed by
/// the plane's client CA, no groups): RBAC applies to it, unlike the admin.
pub fn user_kubeconfig(kubeconfig: &std::path::Path, user: &str, out_dir: &std::path::Path) -> PathBuf {
    let plane = kubeconfig.parent().unwrap();
    let (key, csr, crt) =
        (out_dir.join(format!("{user}.key")), out_dir.join(format!("{user}.csr")), out_dir.join(format!("{user}.crt")));
    let ext = out_dir.join(format!("{user}.ext"));
    std::fs::write(&ext, "extendedKeyUsage=clientAuth\n").unwrap();
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl").args(args).output().expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let p = |p: &std::path::Path| p.display().to_string();
    openssl(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", &p(&key)]);
    openssl(&["req", "-new", "-key", &p(&key), "-subj", &format!("/CN={user}"), "-out", &p(&csr)]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &p(&csr),
        "-CA",
        &p(&plane.join("client-ca.crt")),
        "-CAkey",
        &p(&plane.join("client-ca.key")),
        "-CAcreateserial",
        "-CAserial",
        &p(&out_dir.join("ca.srl")),
        "-days",
        "1",
        "-out",
        &p(&crt),
        "-extfile",
        &p(&ext),
    ]);
    let b64 = |path: &std::path::Path| {
        let out = std::process::Command::new("base64").arg("-w0").arg(path).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let mut kc: Value = serde_saphyr::from_str(&std::fs::read_to_string(kubeconfig).unwrap()).unwrap();
    kc["users"][0]["user"] = serde_json::json!({"client-certificate-data": b64(&crt), "client-key-data": b64(&key)});
    let path = out_dir.join(format!("{user}.kubeconfig"));
    std::fs::write(&path, serde_json::to_string(&kc).unwrap()).unwrap();
    path
}

/// A kubeconfig beside `kubeconfig` (same server and CA) that authenticates as the
/// ServiceAccount `namespace/name` with a bound token (TokenRequest, one hour), as a pod of that
/// ServiceAccount would; written to `out_dir`.
pub async fn service_account_kubeconfig(
    client: &Client,
    kubeconfig: &std::path::Path,
    (namespace, name): (&str, &str),
    out_dir: &std::path::Path,
) -> PathBuf {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec { expiration_seconds: Some(3600), ..TokenRequestSpec::default() }),
        ..TokenRequest::default()
    };
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let issued = sas.create_token_request(name, &kube::api::PostParams::default(), &request).await.unwrap();
    let token = issued.status.expect("a token").token;
    let mut kc: Value = serde_saphyr::from_str(&std::fs::read_to_string(kubeconfig).unwrap()).unwrap();
    kc["users"][0]["user"] = serde_json::json!({"token": token});
    let path = out_dir.join(format!("{namespace}.{name}.kubeconfig"));
    std::fs::write(&path, serde_json::to_string(&kc).unwrap()).unwrap();
    path
}

/// The Pools of a namespace.
pub async fn pool_api_in(client: &Client, ns: &str) -> Api<DynamicObject> {
    let gvk = kube::core::GroupVersionKind::gvk("sandbox.opensandbox.io", "v1alpha1", "Pool");
    let (ar, _) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
    Api::namespaced_with(client.clone(), ns, &ar)
}

impl OwnPlane {
    /// The plane's directory.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Kill the API server (SIGKILL) and return its command line, to restart it later.
    pub fn kill_apiserver(&self) -> Vec<String> {
        let pid = std::fs::read_to_string(self.dir.path().join("apiserver.pid")).unwrap().trim().to_owned();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        let argv: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        std::process::Command::new("kill").args(["-KILL", &pid]).status().unwrap();
        argv
    }
}

/// Start a killed API server again with `argv` (same etcd, same certificates) and wait for it.
pub fn restart_apiserver_in(dir: &std::path::Path, kubeconfig: &std::path::Path, argv: &[String]) {
    use std::os::unix::process::CommandExt as _;
    {
        let log = std::fs::File::create(dir.join("apiserver-restart.log")).unwrap();
        // Leading its own process group, as `up` starts it: `down` signals the group.
        let child = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        // `down` stops what the pid file names.
        std::fs::write(dir.join("apiserver.pid"), child.id().to_string()).unwrap();
        std::mem::forget(child);
        let kc = kubeconfig.to_path_buf();
        let start = std::time::Instant::now();
        loop {
            let ok = std::process::Command::new("curl")
                .args(["-sk", "--max-time", "2", "--cacert"])
                .arg(dir.join("serving-ca.crt"))
                .arg("--cert")
                .arg(dir.join("admin.crt"))
                .arg("--key")
                .arg(dir.join("admin.key"))
                .arg(format!("{}/readyz", server_of(&kc)))
                .output()
                .is_ok_and(|o| o.stdout == b"ok");
            if ok {
                return;
            }
            // A plane's first start takes up to 83 s on CI's busy machine (its log, 2026-12-07).
            assert!(start.elapsed() < Duration::from_secs(180), "the API server did not come back in 180 s");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn server_of(kubeconfig: &std::path::Path) -> String {
    let kc: Value = serde_saphyr::from_str(&std::fs::read_to_string(kubeconfig).unwrap()).unwrap();
    kc["clusters"][0]["cluster"]["server"].as_str().unwrap().to_owned()
}

/// Create (server-side apply) every namespace the rendered objects live in, so that their
/// namespaced server-side dry-runs can run.
pub async fn ensure_namespaces(client: &Client, objects: &[osbx::render::RenderedObject]) {
    let namespaces: std::collections::BTreeSet<&str> =
        objects.iter().filter_map(|o| o.object.value["metadata"]["namespace"].as_str()).collect();
    for ns in namespaces {
        let obj = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        let (api, name) = api_for(client, &obj).await;
        api.patch(&name, &PatchParams::apply("osbx-test"), &Patch::Apply(&obj)).await.unwrap();
    }
}
