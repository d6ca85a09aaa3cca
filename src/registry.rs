//! Asking registries about images, without pulling them: a `HEAD` of each image's manifest (a
//! `GET` only when the registry sends no digest header), through `oci-client`, with the user's
//! Docker credentials as `crane` reads them (`$DOCKER_CONFIG/config.json`, else
//! `~/.docker/config.json`, credential helpers included, via `docker_credential`), anonymous
//! where there are none; an identity token is refused ([`auth_of`]). A credential is sent to its
//! registry (and the token service it names) only and never printed.
//!
//! Loopback registries (`localhost`, `127.0.0.0/8`, `[::1]`) are asked over plain HTTP, as
//! Docker and containerd treat them; every other over HTTPS. `HTTPS_PROXY`, `HTTP_PROXY` and
//! `NO_PROXY` (or their lower-case forms) are honoured.

use std::collections::{BTreeMap, BTreeSet};

use oci_client::errors::OciDistributionError;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, client::ClientConfig, client::ClientProtocol};

use crate::spec::syntax::ImageRef;

/// What a registry says of an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The manifest exists: its digest.
    Found(String),
    /// The registry has no such manifest (or, for a digest, a different one).
    Missing(String),
    /// The registry refused the credentials it was given (or wants some and has none).
    Denied(String),
    /// The registry could not be asked (unreachable, TLS, an answer that is not a registry's).
    Unreachable(String),
}

/// A client for the registries of a set of images.
pub(crate) struct Registries {
    client: Client,
}

impl Registries {
    /// A client for `images`' registries (those on loopback over plain HTTP), with the proxies
    /// the environment names.
    #[must_use]
    pub(crate) fn new<'a>(images: impl IntoIterator<Item = &'a str>) -> Self {
        let plain: BTreeSet<String> = images
            .into_iter()
            .filter_map(|i| ImageRef::parse(i).ok())
            .map(|r| r.registry)
            .filter(|h| loopback(h))
            .collect();
        let env = |names: [&str; 2]| names.iter().find_map(|n| std::env::var(n).ok().filter(|v| !v.is_empty()));
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(plain.into_iter().collect()),
            https_proxy: env(["HTTPS_PROXY", "https_proxy"]),
            http_proxy: env(["HTTP_PROXY", "http_proxy"]),
            no_proxy: env(["NO_PROXY", "no_proxy"]),
            connect_timeout: Some(std::time::Duration::from_secs(10)),
            read_timeout: Some(std::time::Duration::from_secs(30)),
            ..ClientConfig::default()
        };
        Self { client: Client::new(config) }
    }

    /// Ask the registry of `image` for its manifest.
    pub(crate) async fn manifest(&self, image: &str) -> Answer {
        let reference: Reference = match image.parse() {
            Ok(r) => r,
            Err(e) => return Answer::Missing(format!("not an image reference: {e}")),
        };
        let auth = match credentials(reference.registry()) {
            Ok(auth) => auth,
            Err(why) => return Answer::Denied(why),
        };
        match self.client.fetch_manifest_digest(&reference, &auth).await {
            Ok(digest) => found(digest),
            Err(e) => classify(&e),
        }
    }

    /// Ask for every image, a few at a time; each image once.
    pub(crate) async fn manifests<'a>(&self, images: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, Answer> {
        use futures::StreamExt as _;
        let unique: BTreeSet<&str> = images.into_iter().collect();
        futures::stream::iter(unique)
            .map(|image| async move { (image.to_owned(), self.manifest(image).await) })
            .buffer_unordered(8)
            .collect()
            .await
    }
}

/// Whether `host` (`host[:port]`) is a loopback address or `localhost`.
fn loopback(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or(v6, |(a, _)| a),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name == "localhost" || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The user's credentials for `registry` from their Docker configuration, else anonymous.
///
/// # Errors
/// Why osbx cannot use what the configuration holds: an identity token.
fn credentials(registry: &str) -> Result<RegistryAuth, String> {
    // Docker Hub's entry is keyed by its v1 URL.
    let keys: Vec<String> = if matches!(registry, "docker.io" | "index.docker.io" | "registry-1.docker.io") {
        vec!["https://index.docker.io/v1/".into(), "docker.io".into(), "index.docker.io".into()]
    } else {
        vec![registry.to_owned(), format!("https://{registry}")]
    };
    for key in keys {
        if let Ok(credential) = docker_credential::get_credential(&key) {
            return auth_of(registry, credential);
        }
    }
    Ok(RegistryAuth::Anonymous)
}

/// What osbx sends for a credential of the Docker configuration. An identity token (what
/// `az acr login` and some OIDC logins write) is an OAuth2 refresh token, to be exchanged at the
/// registry's token service for an access token; `oci-client` sends only a password or an access
/// token, and a refresh token sent as an access token would go to every request of the registry's
/// API. So it is refused, with the login that works instead.
fn auth_of(registry: &str, credential: docker_credential::DockerCredential) -> Result<RegistryAuth, String> {
    match credential {
        docker_credential::DockerCredential::UsernamePassword(user, password) => {
            Ok(RegistryAuth::Basic(user, password))
        }
        docker_credential::DockerCredential::IdentityToken(_) => Err(format!(
            "the Docker configuration holds an identity token (an OAuth2 refresh token) for {registry}, which osbx cannot exchange; log in with a user name and a password or access token instead (`docker login {registry}`; for Azure Container Registry, `az acr login --name <registry> --expose-token` and `docker login {registry} -u 00000000-0000-0000-0000-000000000000 --password-stdin` with that token)"
        )),
    }
}

/// A client error as an answer: what the registry said, never what was sent to it.
fn classify(e: &OciDistributionError) -> Answer {
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => Answer::Missing("no such manifest".into()),
        OciDistributionError::DigestError(_) => Answer::Missing("the registry holds another digest for it".into()),
        OciDistributionError::AuthenticationFailure(why) => Answer::Denied(why.clone()),
        OciDistributionError::UnauthorizedError { .. } => Answer::Denied("unauthorized".into()),
        OciDistributionError::ServerError { code, message, .. } => match code {
            401 | 403 => Answer::Denied(format!("{code} {message}")),
            404 => Answer::Missing("no such manifest".into()),
            _ => Answer::Unreachable(format!("{code} {message}")),
        },
        OciDistributionError::RegistryError { envelope, .. } => {
            let codes: Vec<String> = envelope.errors.iter().map(|e| format!("{:?}", e.code)).collect();
            let text = codes.join(", ");
            if text.contains("Unknown") {
                Answer::Missing(text)
            } else if text.contains("Unauthorized") || text.contains("Denied") {
                Answer::Denied(text)
            } else {
                Answer::Unreachable(text)
            }
        }
        OciDistributionError::RequestError(r) => {
            // reqwest's own message names only the URL: its causes say what went wrong.
            let mut text = r.to_string();
            let mut source = std::error::Error::source(r);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            Answer::Unreachable(text)
        }
        other => Answer::Unreachable(other.to_string()),
    }
}

/// A digest the registry sent, if it is one: it is printed, pinned and written into the
/// profile, and a registry (one a chart names, say) may send anything in its header.
fn found(digest: String) -> Answer {
    match crate::spec::syntax::check_image_digest(&digest) {
        Ok(()) => Answer::Found(digest),
        Err(why) => Answer::Unreachable(format!("the registry's answer is not a digest: {why}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_digest_is_taken_from_a_registry() {
        let digest = format!("sha256:{}", "0a".repeat(32));
        assert_eq!(found(digest.clone()), Answer::Found(digest));
        for sent in ["", "sha256:abc", "sha256:zz $(id)", "latest", "sha256:0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a\n  x: y"]
        {
            assert!(
                matches!(found(sent.to_owned()), Answer::Unreachable(why) if why.contains("not a digest")),
                "{sent:?}"
            );
        }
    }

    /// A user name and password are sent as Basic credentials; an identity token (a refresh
    /// token) is never sent as an access token: the image is denied, naming the login that works,
    /// and the token is not in the message.
    #[test]
    fn an_identity_token_is_refused_not_sent_as_an_access_token() {
        use docker_credential::DockerCredential;
        let basic = auth_of("registry.corp", DockerCredential::UsernamePassword("ci".into(), "s3cret".into()));
        assert!(matches!(basic, Ok(RegistryAuth::Basic(u, p)) if u == "ci" && p == "s3cret"));
        let token = auth_of("corp.azurecr.io", DockerCredential::IdentityToken("eyJ-refresh".into()));
        let why = token.expect_err("an identity token is refused");
        assert!(why.contains("identity token") && why.contains("corp.azurecr.io"), "{why}");
        assert!(why.contains("docker login corp.azurecr.io"), "{why}");
        assert!(!why.contains("eyJ-refresh"), "the token is never printed: {why}");
    }

    #[test]
    fn loopback_registries_are_asked_over_plain_http() {
        for host in ["localhost:5000", "127.0.0.1:41234", "[::1]:5000", "localhost"] {
            assert!(loopback(host), "{host}");
        }
        for host in ["registry.corp", "10.0.0.1:5000", "ghcr.io", "localhost.example:5000"] {
            assert!(!loopback(host), "{host}");
        }
    }
}
