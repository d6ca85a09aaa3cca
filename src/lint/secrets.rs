//! `api-key.*`: an API key that would be empty or committed to git.

use super::{Linter, Severity};
use crate::profile::Pos;

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

/// `secret.*`: the Secrets of the profile's layers in the Flux repository at `repo`. A plaintext
/// Secret in a layer's directory is an error wherever it is; with `secrets.sops`, a sealed file
/// that is malformed, or (with `identities`) does not open or whose MAC does not match, is an
/// error, one encrypted for other recipients than the profile's a warning, and a Secret with no
/// sealed value yet a warning.
pub(super) fn in_git(l: &mut Linter<'_>, repo: &std::path::Path, identities: Option<&crate::sops::Identities>) {
    let sealed = l.loaded.sealed.clone();
    let dirs: Vec<String> = l.loaded.profile.rendered_layers().map(crate::profile::LayerSpec::repo_path).collect();
    for dir in dirs {
        plaintext(l, repo, &dir, &sealed);
    }
    let slots = crate::secrets::slots(&l.loaded.profile);
    let mismatched = crate::secrets::mismatches(l.loaded).unwrap_or_default();
    for slot in slots {
        let Some(text) = sealed.0.get(&slot.path) else {
            l.add(
                "secret.unset",
                Severity::Warning,
                "secrets.sops",
                format!("{} has no value in git yet ({} is missing): Flux cannot create it", slot.name(), slot.path),
                &format!("pipe the value into `osbx secret set {}`", slot.name()),
            );
            continue;
        };
        let file = match crate::sops::File::parse(text) {
            Ok(file) => file,
            Err(e) => {
                l.add_at(
                    "secret.malformed",
                    Severity::Error,
                    slot.path.clone(),
                    pos_of(text, "sops:"),
                    "sops",
                    e.to_string(),
                    "restore the file from git history, or set the value again with `osbx secret set`",
                );
                continue;
            }
        };
        if let Some(m) = mismatched.iter().find(|m| m.path == slot.path) {
            l.add_at(
                "secret.recipients",
                Severity::Warning,
                slot.path.clone(),
                pos_of(text, "age:"),
                "sops.age",
                m.to_string(),
                "run `osbx render` with an age identity that opens it (it re-encrypts the data key)",
            );
        }
        if let Some(ids) = identities
            && let Err(e) = file.decrypt(ids)
        {
            let (id, at) = match e {
                crate::sops::SopsError::NoMatchingIdentity { .. } => ("secret.undecryptable", "age:"),
                _ => ("secret.tampered", "mac:"),
            };
            l.add_at(
                id,
                Severity::Error,
                slot.path.clone(),
                pos_of(text, at),
                "sops",
                e.to_string(),
                "restore the file from git history, or set the value again with `osbx secret set`",
            );
        }
    }
}

/// Every YAML document of kind Secret in `dir` (and below) of `repo` that someone with the
/// repository can read: one without SOPS metadata, and one with it whose `data` or
/// `stringData` holds a value that is not encrypted (whatever its rules say). A sealed file
/// that is not a SOPS file at all is left to `secret.malformed`.
fn plaintext(l: &mut Linter<'_>, repo: &std::path::Path, dir: &str, sealed: &crate::spec::Sealed) {
    let mut stack = vec![repo.join(dir)];
    let mut files = Vec::new();
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                files.push(path);
            }
        }
    }
    files.sort();
    for path in files {
        let rel = path.strip_prefix(repo).unwrap_or(&path).to_string_lossy().replace('\\', "/");
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        if !text.contains("Secret") || (sealed.0.contains_key(&rel) && crate::sops::File::parse(&text).is_err()) {
            continue;
        }
        // The documents, each with the line it starts on (0-based).
        let mut docs: Vec<(usize, String)> = vec![(0, String::new())];
        for (i, line) in text.lines().enumerate() {
            if line.starts_with("---") {
                docs.push((i + 1, String::new()));
            } else if let Some((_, doc)) = docs.last_mut() {
                doc.push_str(line);
                doc.push('\n');
            }
        }
        for (start, doc) in docs {
            let Ok(v) = serde_saphyr::from_str::<serde_json::Value>(&doc) else { continue };
            if v["kind"] != "Secret" {
                continue;
            }
            let name = v["metadata"]["name"].as_str().unwrap_or("?");
            if v.get("sops").is_some() {
                if let Some((section, key)) = unencrypted_value(&v) {
                    let at = value_line(&doc, &section, &key);
                    l.add_at(
                        "secret.plaintext",
                        Severity::Error,
                        rel.clone(),
                        Pos { line: start + at.0 + 1, column: at.1 + 1 },
                        &format!("{section}.{key}"),
                        format!(
                            "Secret {name} has SOPS metadata, but `{section}.{key}` is not encrypted: anyone with the repository can read it"
                        ),
                        "remove the value (and from git history) and seal it with `osbx secret set` or `sops encrypt` with rules that encrypt data and stringData",
                    );
                }
                continue;
            }
            let at = doc.lines().position(|t| t.starts_with("kind:")).unwrap_or(0);
            l.add_at(
                "secret.plaintext",
                Severity::Error,
                rel.clone(),
                Pos { line: start + at + 1, column: 1 },
                "kind",
                format!(
                    "Secret {name} is in git in plain text (no SOPS metadata): anyone with the repository can read it"
                ),
                "remove it (and from git history); with secrets.sops, set its value with `osbx secret set`",
            );
        }
    }
}

/// The first value of a Secret's `data` or `stringData` that is not encrypted (an empty string
/// holds nothing), as (section, key).
fn unencrypted_value(secret: &serde_json::Value) -> Option<(String, String)> {
    ["data", "stringData"].into_iter().find_map(|section| {
        let map = secret.get(section)?.as_object()?;
        map.iter()
            .find(|(_, v)| match v {
                serde_json::Value::String(s) => !s.is_empty() && !s.starts_with("ENC[AES256_GCM,"),
                serde_json::Value::Null => false,
                _ => true,
            })
            .map(|(k, _)| (section.to_owned(), k.clone()))
    })
}

/// The line and column (0-based) of `key` under the top-level `section` of a document's text;
/// the section's own line when the key is not found there as written.
fn value_line(doc: &str, section: &str, key: &str) -> (usize, usize) {
    let lines: Vec<&str> = doc.lines().collect();
    let Some(top) = lines.iter().position(|t| t.strip_prefix(section).is_some_and(|r| r.trim_start().starts_with(':')))
    else {
        return (0, 0);
    };
    lines[top + 1..]
        .iter()
        .take_while(|t| t.is_empty() || t.starts_with(' ') || t.starts_with('#'))
        .position(|t| {
            let t = t.trim_start();
            t.strip_prefix(key)
                .or_else(|| t.strip_prefix(&format!("\"{key}\"")))
                .is_some_and(|r| r.trim_start().starts_with(':'))
        })
        .map_or((top, 0), |i| {
            let t = lines[top + 1 + i];
            (top + 1 + i, t.len() - t.trim_start().len())
        })
}

/// The position of the first line starting (after indentation) with `key` in `text`.
fn pos_of(text: &str, key: &str) -> Pos {
    text.lines()
        .enumerate()
        .find_map(|(i, t)| {
            t.trim_start().strip_prefix(key).map(|_| Pos { line: i + 1, column: t.len() - t.trim_start().len() + 1 })
        })
        .unwrap_or(Pos { line: 1, column: 1 })
}
