//! `api-key.*`: an API key that would be empty or committed to git.

use super::{Linter, Severity};

pub(super) fn api_key(l: &mut Linter<'_>) {
    let server = &l.loaded.profile.sections.opensandbox.server;
    let insecure = server.insecure();
    match server.api_key.inline.as_deref() {
        Some("") if !insecure => l.add(
            "api-key.empty",
            Severity::Warning,
            "opensandbox.server.apiKey.inline",
            "the API key is empty: servers ≥ v0.1.13 refuse to start (`Startup blocked: server.api_key is empty`) unless OPENSANDBOX_INSECURE_SERVER=YES".into(),
            "use apiKey.secretRef and create the Secret with `osbx apply` (OSBX_API_KEY or --api-key-file)",
        ),
        Some(k) if !k.is_empty() => l.add(
            "api-key.in-configmap",
            Severity::Error,
            "opensandbox.server.apiKey.inline",
            "the API key would be written into the values ConfigMap, i.e. committed to git in clear text".into(),
            "use apiKey.secretRef; the key then lives in a Secret that is never committed",
        ),
        _ => {}
    }
}
