//! Whether a RuntimeClass can run somewhere: the one rule `verify` (`kata.runtimeclass`) and
//! `status` (its runtime classes) judge a class by (pure). A class can run on the nodes that
//! are Ready, admitted by its `scheduling.nodeSelector` and advertise its handler in
//! `status.runtimeHandlers`; when no admitted node advertises it and some publish no handlers
//! at all (Kubernetes < 1.30, containerd < 2.0), there is no verdict.

use serde_json::Value;

fn name(v: &Value) -> String {
    v["metadata"]["name"].as_str().unwrap_or_default().to_owned()
}

/// Whether `n` is Ready.
fn ready(n: &Value) -> bool {
    n["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .is_some_and(|c| c["status"] == "True")
}

/// The handlers a node advertises in `status.runtimeHandlers` (`None`: it publishes none;
/// containerd lists its default runtime under the empty name, shown as "the default").
fn handlers(n: &Value) -> Option<Vec<&str>> {
    n["status"]["runtimeHandlers"].as_array().map(|h| {
        h.iter().filter_map(|x| x["name"].as_str()).map(|h| if h.is_empty() { "the default" } else { h }).collect()
    })
}

/// What the nodes say about one RuntimeClass's handler.
pub(crate) enum OnNodes {
    /// Ready admitted nodes that advertise it.
    Advertised(Vec<String>),
    /// No admitted Ready node advertises it; each one that publishes handlers is named with them.
    Missing(String),
    /// No admitted node that publishes handlers has it, and some publish none: no verdict.
    Unknown(String),
    /// No Ready node is admitted by the class's `scheduling.nodeSelector`.
    NoNode(String),
}

/// Where the RuntimeClass `rc` (handler `handler`) can run: the Ready nodes its
/// `scheduling.nodeSelector` admits, and which of them advertise the handler.
pub(crate) fn on_nodes(rc: &Value, handler: &str, nodes: &[Value]) -> OnNodes {
    let selector = rc["scheduling"]["nodeSelector"].as_object();
    let admits =
        |n: &Value| selector.into_iter().flatten().all(|(k, v)| n["metadata"]["labels"].get(k).is_some_and(|l| l == v));
    let admitted: Vec<&Value> = nodes.iter().filter(|n| ready(n) && admits(n)).collect();
    if admitted.is_empty() {
        let wanted = selector
            .map(|s| {
                s.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect::<Vec<_>>().join(", ")
            })
            .unwrap_or_default();
        return OnNodes::NoNode(if wanted.is_empty() {
            "no node is Ready".to_owned()
        } else {
            format!("no Ready node carries its nodeSelector {wanted}")
        });
    }
    let with: Vec<String> =
        admitted.iter().filter(|n| handlers(n).is_some_and(|h| h.contains(&handler))).map(|n| name(n)).collect();
    if !with.is_empty() {
        return OnNodes::Advertised(with);
    }
    let lacking: Vec<String> = admitted
        .iter()
        .filter_map(|n| {
            handlers(n)
                .map(|h| format!("{} has {}", name(n), if h.is_empty() { "none".to_owned() } else { h.join(", ") }))
        })
        .collect();
    let silent: Vec<String> = admitted.iter().filter(|n| handlers(n).is_none()).map(|n| name(n)).collect();
    if silent.is_empty() {
        OnNodes::Missing(format!("no Ready node it admits lists runtime handler {handler} ({})", lacking.join("; ")))
    } else {
        let (publish, have) = if silent.len() == 1 { ("publishes", "it has") } else { ("publish", "they have") };
        let why = format!(
            "{} {publish} no status.runtimeHandlers (Kubernetes < 1.30 or containerd < 2.0): whether {have} handler {handler} cannot be told",
            silent.join(", ")
        );
        OnNodes::Unknown(std::iter::once(why).chain(lacking).collect::<Vec<_>>().join("; "))
    }
}
