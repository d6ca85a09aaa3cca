//! Writing `images.digests` into a profile file as a person would: the rest of the text — its
//! comments, order, quoting and blank lines — is left exactly as it was.
//!
//! The edit is made on the text of a block-style document (the style of every profile osbx
//! writes and documents): the `digests:` block under the top-level `images:` is replaced, or
//! added to it, or `images:` is added at the end. The result is then parsed again and must mean
//! what the original meant with only `images.digests` changed; anything else (a flow-style
//! `images`, anchors, several documents) is refused, and the pins are to be put in by hand.

use std::collections::BTreeMap;

use serde_json::Value;

/// Why the pins could not be written into the text.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PinsError {
    /// The text is not a profile document (it does not parse as YAML).
    #[error("{origin}: does not parse as YAML: {why}")]
    Parse {
        /// The profile's name in messages.
        origin: String,
        /// The parser's words.
        why: String,
    },
    /// The edit would have changed more than `images.digests` (a layout this editor does not
    /// take, e.g. flow style).
    #[error(
        "{origin}: its `images` section is not in block style (or the document uses anchors or several documents), so osbx cannot write the pins into it without changing what it says; put them in by hand"
    )]
    Layout {
        /// The profile's name in messages.
        origin: String,
    },
}

/// `text` with `images.digests` set to `pins` (an empty map removes nothing: it is written
/// as it is).
///
/// # Errors
/// [`PinsError`] when the text does not parse, or when the edit would mean anything but the
/// new pins.
pub(crate) fn with_digests(origin: &str, text: &str, pins: &BTreeMap<String, String>) -> Result<String, PinsError> {
    let parse = |t: &str| {
        serde_saphyr::from_str::<Value>(t)
            .map_err(|e| PinsError::Parse { origin: origin.to_owned(), why: e.to_string() })
    };
    let before = parse(text)?;
    let edited = edit(text, pins);
    let mut want = before;
    if !want.is_object() {
        return Err(PinsError::Layout { origin: origin.to_owned() });
    }
    if !want["images"].is_object() {
        want["images"] = Value::Object(serde_json::Map::new());
    }
    want["images"]["digests"] = pins.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
    match parse(&edited) {
        Ok(after) if after == want => Ok(edited),
        _ => Err(PinsError::Layout { origin: origin.to_owned() }),
    }
}

/// The text edit itself (checked by the caller).
fn edit(text: &str, pins: &BTreeMap<String, String>) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let Some(images) = lines.iter().position(|l| key_of(l, 0) == Some("images")) else {
        let mut out = text.to_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("images:\n");
        out.push_str(&block(2, pins));
        return out;
    };
    // The section: up to the next line at column 0 that is not a comment.
    let end = (images + 1..lines.len()).find(|&i| indent(lines[i]) == Some(0)).unwrap_or(lines.len());
    let child = (images + 1..end).find_map(|i| indent(lines[i])).unwrap_or(2);
    let mut out: Vec<String> = lines[..=images].iter().map(|l| (*l).to_owned()).collect();
    let section = &lines[images + 1..end];
    // The lines the new block replaces: the old block, up to the next line at the section's
    // indentation or less (comments and blank lines at its end belong to what follows); or
    // none, after the section's last line of content.
    let (from, to) = if let Some(at) = section.iter().position(|l| key_of(l, child) == Some("digests")) {
        let mut to =
            (at + 1..section.len()).find(|&i| indent(section[i]).is_some_and(|n| n <= child)).unwrap_or(section.len());
        while to > at + 1 && indent(section[to - 1]).is_none() {
            to -= 1;
        }
        (at, to)
    } else {
        let last = section.iter().rposition(|l| indent(l).is_some()).map_or(0, |i| i + 1);
        (last, last)
    };
    out.extend(section[..from].iter().map(|l| (*l).to_owned()));
    out.push(block(child, pins).trim_end().to_owned());
    out.extend(section[to..].iter().map(|l| (*l).to_owned()));
    out.extend(lines[end..].iter().map(|l| (*l).to_owned()));
    let mut joined = out.join("\n");
    if text.ends_with('\n') {
        joined.push('\n');
    }
    joined
}

/// `digests:` at `indent`, each pin a line below it.
fn block(indent: usize, pins: &BTreeMap<String, String>) -> String {
    let pad = " ".repeat(indent);
    if pins.is_empty() {
        return format!("{pad}digests: {{}}\n");
    }
    let entries = pins.iter().map(|(name, digest)| format!("{pad}  {}: {}\n", scalar(name), scalar(digest)));
    format!("{pad}digests:\n{}", entries.collect::<String>())
}

/// A plain scalar where YAML reads it back as the same string, else a double-quoted one.
fn scalar(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "._/:@-".contains(c))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && !s.ends_with(':');
    if plain { s.to_owned() } else { Value::String(s.to_owned()).to_string() }
}

/// The indentation of a line of content; `None` for a blank or comment-only line.
fn indent(line: &str) -> Option<usize> {
    let trimmed = line.trim_start_matches(' ');
    (!trimmed.is_empty() && !trimmed.starts_with('#')).then(|| line.len() - trimmed.len())
}

/// The key of a block mapping entry a line opens at exactly `at` columns (`images:`,
/// `  digests:  # pins`, `  digests: {}`).
fn key_of(line: &str, at: usize) -> Option<&str> {
    if indent(line) != Some(at) {
        return None;
    }
    let (key, rest) = line[at..].split_once(':')?;
    (rest.is_empty() || rest.starts_with(' ')).then_some(key).filter(|k| !k.contains([' ', '"', '\'', '{', '[']))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pins(list: &[(&str, &str)]) -> BTreeMap<String, String> {
        list.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    const A: &str = "sha256:aaaa";
    const B: &str = "sha256:bbbb";

    #[test]
    fn adds_the_section_at_the_end_of_a_profile_without_one() {
        let text = "# mine\ncluster:\n  name: a # the name\n";
        let out = with_digests("p", text, &pins(&[("reg.corp/x", A)])).unwrap();
        assert_eq!(out, "# mine\ncluster:\n  name: a # the name\nimages:\n  digests:\n    reg.corp/x: sha256:aaaa\n");
    }

    #[test]
    fn adds_digests_under_images_keeping_its_comments_and_what_follows() {
        let text = "cluster:\n  name: a\n\n# the mirror\nimages:\n    mirror:   # ours\n      docker.io: reg.corp/hub\n\n# later\nverify: {}\n";
        let out = with_digests("p", text, &pins(&[("reg.corp/hub/library/busybox", A)])).unwrap();
        assert_eq!(
            out,
            "cluster:\n  name: a\n\n# the mirror\nimages:\n    mirror:   # ours\n      docker.io: reg.corp/hub\n    digests:\n      reg.corp/hub/library/busybox: sha256:aaaa\n\n# later\nverify: {}\n"
        );
    }

    #[test]
    fn replaces_the_old_pins_and_nothing_else() {
        let text = "images:\n  digests: # pinned\n    old/x: sha256:0000\n    old/y: sha256:1111\n  # pull secrets\n  pullSecrets: [corp]\ncluster: {name: a}\n";
        let out = with_digests("p", text, &pins(&[("new/x", A), ("new/y", B)])).unwrap();
        assert_eq!(
            out,
            "images:\n  digests:\n    new/x: sha256:aaaa\n    new/y: sha256:bbbb\n  # pull secrets\n  pullSecrets: [corp]\ncluster: {name: a}\n"
        );
        // At the end of the document, and as a flow map on one line.
        let text = "images:\n  digests: {old/x: sha256:0000}\n";
        assert_eq!(with_digests("p", text, &pins(&[("x", A)])).unwrap(), "images:\n  digests:\n    x: sha256:aaaa\n");
    }

    #[test]
    fn writing_the_same_pins_again_changes_nothing() {
        let text = "images:\n  digests:\n    x: sha256:aaaa\n";
        assert_eq!(with_digests("p", text, &pins(&[("x", A)])).unwrap(), text);
    }

    #[test]
    fn quotes_a_name_yaml_would_read_otherwise() {
        let out = with_digests("p", "a: 1\n", &pins(&[("x #y", A)])).unwrap();
        assert!(out.contains("\"x #y\": sha256:aaaa"), "{out}");
    }

    #[test]
    fn refuses_a_layout_it_cannot_edit_without_changing_its_meaning() {
        for text in ["images: {mirror: {docker.io: r/h}}\n", "{\"images\": {}, \"a\": 1}\n", "- a\n"] {
            let e = with_digests("p.yaml", text, &pins(&[("x", A)])).unwrap_err();
            assert!(matches!(e, PinsError::Layout { .. }), "{text}: {e}");
            assert!(e.to_string().contains("put them in by hand"), "{e}");
        }
        assert!(matches!(with_digests("p", "a: [\n", &pins(&[])), Err(PinsError::Parse { .. })));
    }
}
