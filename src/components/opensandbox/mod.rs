//! The `opensandbox` component: namespaces, the chart's `GitRepository`, the values ConfigMap,
//! the `HelmRelease` and the layer README, from the `opensandbox` section.

mod config;
mod extra;
mod release;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tera::Context;

pub(crate) use self::config::*;
pub use self::extra::CHART_FACTS;
pub(crate) use self::release::*;
use super::{Component, Sections, Site, Supplied};
use crate::object::{KnownKind, ObjectRef};
use crate::spec::mirror::{ChartImage, Shape};
use crate::spec::syntax::GIT_TIMEOUT_UNITS;
use crate::spec::values::{ImageRef, Resources};
use crate::spec::{Images, Violations};

/// The table entry of this component.
pub(crate) static COMPONENT: Component = Component {
    name: "opensandbox",
    about: "namespaces, chart GitRepository, values ConfigMap, HelmRelease and README",
    section: "opensandbox",
    validate,
    view,
    pin: |_| Some("opensandbox.source.ref"),
    values: |s| s.opensandbox.values.as_ref(),
    supplied: |s| s.opensandbox.api_key_secret(),
    health: &[],
    after_others: false,
    pulled: |s| {
        let c = &s.opensandbox.server.config;
        std::iter::once((
            c.runtime.execd_image.clone(),
            "each sandbox pod (the server's [runtime] execd_image: the execd installer)",
        ))
        .chain(
            c.egress
                .as_ref()
                .map(|e| (e.image.clone(), "each sandbox pod with egress rules (the server's [egress] image)")),
        )
        .collect()
    },
    images,
};

/// The images the chart pulls that the profile has no field of its own for, by their values
/// (the umbrella chart's paths into its subcharts), with the chart's defaults.
const CHART_IMAGES: &[ChartImage] = &[
    ChartImage {
        path: "opensandbox-controller.controller.snapshot.imageCommitterImage",
        shape: Shape::Reference,
        default: "sandbox-registry.cn-zhangjiakou.cr.aliyuncs.com/opensandbox/image-committer:v0.1.1",
        about: "the controller's snapshot commit Jobs",
    },
    ChartImage {
        path: "opensandbox-server.server.gateway.image",
        shape: Shape::Repository { tag: "v1.0.10" },
        default: "sandbox-registry.cn-zhangjiakou.cr.aliyuncs.com/opensandbox/ingress",
        about: "the server's gateway",
    },
];

/// The server image's tag in the chart osbx pins (`server.image.tag`), where a pinned digest
/// goes when the profile names no tag.
const SERVER_TAG: &str = "v0.2.2";

/// The controller's and the server's images, the images in the server's configuration and the
/// chart's other images onto the mirror and their pinned digests (the profile's own fields
/// where it has them, else the chart's values); the pull Secrets to both subcharts' pods.
fn images(sections: &mut Sections, images: &Images, v: &mut Violations) {
    let o = &mut sections.opensandbox;
    if images.rewrites() {
        let controller = (format!("{REGISTRY}/controller"), "v0.2.0");
        split(images, &mut o.controller.image, &controller, "opensandbox.controller.image", v);
        let mut server = o.server.image.take().unwrap_or_default();
        split(images, &mut server, &(format!("{REGISTRY}/server"), SERVER_TAG), "opensandbox.server.image", v);
        o.server.image = (server.repository.is_some() || server.tag.is_some()).then_some(server);
        let config = &mut o.server.config;
        images.rewrite(&mut config.runtime.execd_image, "opensandbox.server.config.runtime.execdImage", v);
        if let Some(egress) = &mut config.egress {
            images.rewrite(&mut egress.image, "opensandbox.server.config.egress.image", v);
        }
        images.chart_values(&mut o.values, CHART_IMAGES, "opensandbox.values", v);
    }
    images.chart_pull_secrets(
        &mut o.values,
        &["opensandbox-controller.imagePullSecrets", "opensandbox-server.imagePullSecrets"],
    );
}

/// An image the chart names by `repository` and `tag` (`defaults`: the chart's), onto the
/// mirror, its pinned digest in the tag; a part nothing changes stays unset.
fn split(images: &Images, image: &mut ImageRef, defaults: &(String, &str), at: &str, v: &mut Violations) {
    let repository = image.repository.clone().unwrap_or_else(|| defaults.0.clone());
    let tag = image.tag.clone().unwrap_or_else(|| defaults.1.to_owned());
    match images.image(&format!("{repository}:{tag}")) {
        Ok(pulled) => {
            let (name, rest) = pulled.split_at(pulled.rfind(&format!(":{tag}")).unwrap_or(pulled.len()));
            if name != repository || image.repository.is_some() {
                image.repository = Some(name.to_owned());
            }
            if rest.len() > tag.len() + 1 {
                image.tag = Some(rest[1..].to_owned());
            }
        }
        Err(u) => v.push(format!("{at}.repository"), format!("{}: {}", u.image, u.why)),
    }
}

/// A sandbox as the controller holds it: created by the server (in `namespaces.sandbox`), from a
/// pool or a template. The chart installs its CRD.
pub(crate) const BATCH_SANDBOX: KnownKind = KnownKind::new("sandbox.opensandbox.io", "v1alpha1", "BatchSandbox");

/// The OpenSandbox installation.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct OpenSandbox {
    /// The namespaces the chart uses (it creates none itself).
    pub namespaces: Namespaces,
    /// The Git repository that holds the chart.
    pub source: ChartSource,
    /// The chart inside the source.
    pub chart: Chart,
    /// The Flux HelmRelease.
    pub release: Release,
    /// `opensandbox-controller` values.
    pub controller: Controller,
    /// `opensandbox-server` values and its `config.toml`.
    pub server: Server,
    /// `opensandbox-node-agent` values.
    pub node_agent: NodeAgent,
    /// Extra chart values, merged over what osbx sets (but not over the keys of [`CHART_FACTS`]).
    pub values: Option<Value>,
    /// Facts and notes for the layer README.
    pub readme: Readme,
}

impl OpenSandbox {
    /// The server's Service and Deployment name (the chart's `fullnameOverride`).
    pub const SERVER_SERVICE: &'static str = "opensandbox-server";
    /// The server Service's port.
    pub const SERVER_PORT: u16 = 80;

    /// Namespace of the HelmRelease, its values ConfigMap and the chart source.
    #[must_use]
    pub fn release_namespace(&self) -> &str {
        self.release.namespace.as_deref().unwrap_or(&self.namespaces.control_plane)
    }

    /// The Helm target namespace.
    #[must_use]
    pub fn target_namespace(&self) -> &str {
        self.release.target_namespace.as_deref().unwrap_or(&self.namespaces.control_plane)
    }

    /// The Helm release name.
    #[must_use]
    pub fn helm_name(&self) -> &str {
        self.release.release_name.as_deref().unwrap_or(&self.release.name)
    }

    /// The Secret the server's API key is read from, when the section names one
    /// (`server.apiKey.secretRef`): apply writes it from `--api-key-file`, verify reads it.
    #[must_use]
    pub fn api_key_secret(&self) -> Option<Supplied> {
        let r = self.server.api_key.secret_ref.as_ref()?;
        let secret = KnownKind::SECRET.object(Some(&self.namespaces.control_plane), &r.name);
        Some(Supplied { secret, key: r.key.clone() })
    }

    /// The server's Deployment: verify waits for it to be Available.
    #[must_use]
    pub fn server_deployment(&self) -> ObjectRef {
        KnownKind::DEPLOYMENT.object(Some(&self.namespaces.control_plane), Self::SERVER_SERVICE)
    }

    /// The server's Service: verify reaches the Lifecycle API through its proxy.
    #[must_use]
    pub fn server_service(&self) -> ObjectRef {
        KnownKind::SERVICE.object(Some(&self.namespaces.control_plane), Self::SERVER_SERVICE)
    }

    /// Every namespace the section names, each once, in this order: the control plane (where
    /// the chart installs the controller and server), the sandboxes', the HelmRelease's and
    /// Helm's target namespace. osbx renders each as a Namespace: the chart creates none.
    #[must_use]
    pub fn namespaces(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for ns in [
            self.namespaces.control_plane.as_str(),
            self.namespaces.sandbox.as_str(),
            self.release_namespace(),
            self.target_namespace(),
        ] {
            if !out.contains(&ns) {
                out.push(ns);
            }
        }
        out
    }
}

/// The control-plane and sandbox namespaces.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Namespaces {
    /// Where the chart installs the controller and server (hard-coded in the chart).
    pub control_plane: String,
    /// Where sandboxes, BatchSandboxes and Pools live (`[kubernetes].namespace`).
    pub sandbox: String,
}

impl Default for Namespaces {
    fn default() -> Self {
        Self { control_plane: "opensandbox-system".into(), sandbox: "opensandbox".into() }
    }
}

/// `opensandbox-controller.controller` values.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Controller {
    /// Controller image, pinned: the chart's default tag moves with the chart, and the flags the
    /// chart passes must be ones this controller defines.
    pub image: ImageRef,
    /// `--zap-log-level`.
    pub log_level: Option<String>,
    /// Replica count.
    pub replicas: Option<i64>,
    /// Metrics endpoint.
    pub metrics: Option<Metrics>,
    /// The controller container's requests and limits.
    pub resources: Option<Resources>,
    /// The host's containerd socket for snapshots (`controller.snapshot.containerdSocketPath`).
    /// Empty, the chart passes no `--containerd-socket-path`: controller v0.2.0 does not define
    /// that flag and exits (the 0.2.x charts before 0.2.2 default to a path).
    pub containerd_socket_path: String,
}

impl Default for Controller {
    fn default() -> Self {
        Self {
            image: ImageRef { repository: None, tag: Some("v0.2.0".into()) },
            log_level: None,
            replicas: None,
            metrics: None,
            resources: None,
            containerd_socket_path: String::new(),
        }
    }
}

/// Controller metrics endpoint.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Metrics {
    /// Serve metrics.
    pub enabled: bool,
    /// Serve them over HTTPS.
    pub secure: bool,
    /// Port the metrics are served on.
    pub port: i64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self { enabled: false, secure: false, port: 8080 }
    }
}

/// `opensandbox-server` values.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Server {
    /// Server image.
    pub image: Option<ImageRef>,
    /// Replica count.
    pub replicas: Option<i64>,
    /// Resources (the chart asks for 1 CPU / 4Gi per replica by default).
    pub resources: Option<Resources>,
    /// Where the server's API key comes from (default: the key `api-key` of the Secret
    /// `opensandbox-api-key`, which `osbx apply` can create).
    pub api_key: ApiKeySource,
    /// Extra container env (Kubernetes `EnvVar` objects).
    pub env: Vec<Value>,
    /// The `config.toml` tables (the chart adds `[ingress]` itself).
    pub config: ServerConfig,
}

impl Server {
    /// Whether the server env sets `OPENSANDBOX_INSECURE_SERVER=YES` (start without an API key).
    #[must_use]
    pub fn insecure(&self) -> bool {
        self.env.iter().any(|e| e["name"] == "OPENSANDBOX_INSECURE_SERVER" && e["value"] == "YES")
    }
}

/// Where the OpenSandbox API key comes from: one of `inline` and `secretRef`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiKeySource {
    /// Written into `config.toml`, i.e. the values ConfigMap, in clear text.
    #[serde(default)]
    pub inline: Option<String>,
    /// Read from a Secret in the control-plane namespace through `OPENSANDBOX_SERVER_API_KEY`.
    #[serde(default)]
    pub secret_ref: Option<SecretKeyRef>,
}

impl Default for ApiKeySource {
    fn default() -> Self {
        Self {
            inline: None,
            secret_ref: Some(SecretKeyRef { name: "opensandbox-api-key".into(), ..SecretKeyRef::default() }),
        }
    }
}

/// A key of a Secret.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Key inside the Secret.
    pub key: String,
}

impl Default for SecretKeyRef {
    fn default() -> Self {
        Self { name: String::new(), key: "api-key".into() }
    }
}

/// `opensandbox-node-agent` values.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeAgent {
    /// Deploy the node agent DaemonSet (not needed for pools).
    #[serde(default)]
    pub enabled: bool,
}

/// Facts for the OpenSandbox layer README that are not in the objects.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Readme {
    /// The commit the chart ref resolved to when it was pinned (documentation only).
    #[serde(default)]
    pub chart_commit: Option<String>,
    /// Text appended to the paragraph about the chart.
    #[serde(default)]
    pub chart_note: Option<String>,
    /// Text appended to the paragraph about the pools.
    #[serde(default)]
    pub pools_note: Option<String>,
    /// Paragraphs placed between the pools paragraph and the smoke-test paragraph.
    #[serde(default)]
    pub notes: Vec<String>,
}

fn validate(s: &Sections, _: &Site<'_>, v: &mut Violations) {
    let o = &s.opensandbox;
    v.dns_label("opensandbox.namespaces.controlPlane", &o.namespaces.control_plane);
    v.dns_label("opensandbox.namespaces.sandbox", &o.namespaces.sandbox);
    v.dns_label("opensandbox.source.name", &o.source.name);
    if o.source.url.is_empty() {
        v.missing("opensandbox.source.url");
    } else if !["http://", "https://", "ssh://"].iter().any(|s| o.source.url.starts_with(s)) {
        v.push("opensandbox.source.url", format!("{:?} must start with http://, https:// or ssh://", o.source.url));
    } else {
        v.shape("opensandbox.source.url", &o.source.url, |u| crate::refs::url(u, &["http://", "https://", "ssh://"]));
    }
    if !o.source.git_ref.is_set() {
        v.push("opensandbox.source.ref", "set one of branch, tag, semver, name or commit (pin the chart)");
    }
    let r = &o.source.git_ref;
    for (field, value, check) in [
        ("branch", &r.branch, crate::refs::git_ref as fn(&str) -> Result<(), String>),
        ("tag", &r.tag, crate::refs::git_ref),
        ("semver", &r.semver, crate::refs::version),
        ("name", &r.name, crate::refs::git_ref),
        ("commit", &r.commit, crate::refs::commit),
    ] {
        if let Some(value) = value {
            v.shape(&format!("opensandbox.source.ref.{field}"), value, check);
        }
    }
    v.duration("opensandbox.source.interval", &o.source.interval);
    if let Some(t) = &o.source.timeout {
        v.duration_in("opensandbox.source.timeout", t, GIT_TIMEOUT_UNITS);
    }
    if o.chart.path.trim().is_empty() {
        v.push("opensandbox.chart.path", "must not be empty");
    } else {
        v.shape("opensandbox.chart.path", &o.chart.path, |p| crate::refs::repo_path(p).map(drop));
    }
    v.opt_duration("opensandbox.chart.interval", o.chart.interval.as_deref());
    let rel = &o.release;
    v.dns_label("opensandbox.release.name", &rel.name);
    let helm_name = o.helm_name();
    if helm_name.len() > 53 {
        v.push("opensandbox.release.releaseName", format!("{helm_name:?} is longer than Helm's 53 characters"));
    }
    for (field, ns) in [("namespace", &rel.namespace), ("targetNamespace", &rel.target_namespace)] {
        if let Some(ns) = ns {
            v.dns_label(&format!("opensandbox.release.{field}"), ns);
        }
    }
    v.duration("opensandbox.release.interval", &rel.interval);
    v.opt_duration("opensandbox.release.timeout", rel.timeout.as_deref());
    for (field, s) in [("install", &rel.install), ("upgrade", &rel.upgrade)] {
        let Some(s) = s else { continue };
        if let Some(ri) = &s.retry_interval {
            let at = format!("opensandbox.release.{field}.retryInterval");
            if s.strategy == StrategyName::RetryOnFailure {
                v.duration(&at, ri);
            } else {
                v.push(at, "retryInterval is allowed only with strategy RetryOnFailure");
            }
        }
    }
    v.dns_subdomain("opensandbox.release.valuesConfigMap", &rel.values_config_map);
    api_key(&o.server.api_key, v);
    for (field, n) in [("controller.replicas", o.controller.replicas), ("server.replicas", o.server.replicas)] {
        if n.is_some_and(|n| n < 0) {
            v.push(format!("opensandbox.{field}"), "must not be negative");
        }
    }
    if o.server.config.runtime.execd_image.trim().is_empty() {
        v.push("opensandbox.server.config.runtime.execdImage", "must not be empty");
    }
    if let Some(values) = &o.values {
        extra::check(o, values, v);
    }
}

fn api_key(k: &ApiKeySource, v: &mut Violations) {
    match (&k.inline, &k.secret_ref) {
        (Some(_), Some(_)) => v.push("opensandbox.server.apiKey", "set either `inline` or `secretRef`, not both"),
        (None, None) => {
            v.push(
                "opensandbox.server.apiKey",
                "set `secretRef` (a Secret in the control-plane namespace) or `inline`",
            );
        }
        (None, Some(s)) => {
            v.dns_subdomain("opensandbox.server.apiKey.secretRef.name", &s.name);
            if s.key.is_empty() {
                v.push("opensandbox.server.apiKey.secretRef.key", "must not be empty");
            }
        }
        (Some(_), None) => {}
    }
}

/// `opensandbox`: the section with the values templates should not compute.
fn view(s: &Sections, _: &Site<'_>, ctx: &mut Context) {
    let o = &s.opensandbox;
    let mut v = serde_json::to_value(o).unwrap_or(Value::Null);
    v["releaseNamespace"] = json!(o.release_namespace());
    v["targetNamespace"] = json!(o.target_namespace());
    v["releaseName"] = json!(o.helm_name());
    v["namespaceList"] = json!(o.namespaces());
    ctx.insert("opensandbox", &v);
}
