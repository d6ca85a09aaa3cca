//! `opensandbox.values`: extra chart values, merged over what osbx sets, except the values osbx
//! relies on to find the controller and server again.

use serde_json::Value;

use super::OpenSandbox;
use crate::spec::Violations;

/// Chart values osbx relies on, by their path in the umbrella chart's values: where each must
/// stand (given the section) so that the controller and server land where verify, rbac, diff and
/// apply look for them. `opensandbox.values` may not move them.
pub const CHART_FACTS: &[(&str, &str)] = &[
    ("opensandbox-controller.namespaceOverride", "the controller"),
    ("opensandbox-server.namespaceOverride", "the server"),
    ("opensandbox-server.fullnameOverride", "the server's Service and Deployment"),
    ("opensandbox-server.configToml", "the server's config.toml"),
    ("opensandbox-server.server.gateway.dataplaneNamespace", "the ingress gateway's sandbox namespace"),
];

/// `opensandbox.values` may add chart values but not move what osbx relies on ([`CHART_FACTS`]).
pub(super) fn check(o: &OpenSandbox, values: &Value, v: &mut Violations) {
    if !values.is_object() {
        v.push("opensandbox.values", "must be a mapping of chart values");
        return;
    }
    let (control_plane, sandbox) = (&o.namespaces.control_plane, &o.namespaces.sandbox);
    for (path, what) in CHART_FACTS {
        let Some(set) = path.split('.').try_fold(values, |at, k| at.get(k)) else { continue };
        let problem = match *path {
            "opensandbox-server.configToml" => {
                Some(format!("{what} is written by osbx from `opensandbox.server.config`: set it there"))
            }
            "opensandbox-server.fullnameOverride" => (set.as_str() != Some(OpenSandbox::SERVER_SERVICE)).then(|| {
                format!(
                    "{set} would rename {what}, which osbx's verify and rbac look up as {:?}: leave this key out",
                    OpenSandbox::SERVER_SERVICE
                )
            }),
            "opensandbox-server.server.gateway.dataplaneNamespace" => {
                (set.as_str() != Some(sandbox.as_str())).then(|| {
                    format!(
                        "{set} is not the sandbox namespace {sandbox:?}: the gateway would route to no sandbox; set \
                         `opensandbox.namespaces.sandbox` instead"
                    )
                })
            }
            _ => (set.as_str() != Some(control_plane.as_str())).then(|| {
                format!(
                    "{set} would install {what} outside the control-plane namespace {control_plane:?}, where osbx's \
                     verify, rbac, diff and apply look for it: set `opensandbox.namespaces.controlPlane` instead"
                )
            }),
        };
        if let Some(problem) = problem {
            v.push(format!("opensandbox.values.{path}"), problem);
        }
    }
    // Enabled, the gateway watches the chart's default `opensandbox` unless told otherwise.
    let gateway = &values["opensandbox-server"]["server"]["gateway"];
    if gateway["enabled"] == true && gateway["dataplaneNamespace"].is_null() && sandbox != "opensandbox" {
        v.push(
            "opensandbox.values.opensandbox-server.server.gateway.enabled",
            format!(
                "the ingress gateway would watch the chart's default namespace `opensandbox`, not the sandbox \
                 namespace {sandbox:?}: also set `opensandbox-server.server.gateway.dataplaneNamespace: {sandbox}`"
            ),
        );
    }
}
