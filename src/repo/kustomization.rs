//! Add entries to (and remove osbx's own from) a kustomize `kustomization.yaml` that osbx does not
//! own.
//!
//! The file may hold entries, order and comments that people wrote by hand, so it is edited as
//! text: the `resources` sequence is located with the YAML parser, new entries are inserted as
//! lines after its last item with the indentation the file already uses, and removed entries lose
//! their line. Nothing else changes.

use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle, StrInput, StructureStyle};

/// Why an existing kustomization cannot be merged into.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MergeError {
    /// The file does not parse as YAML.
    #[error("{0}")]
    Parse(String),
    /// The layout is one osbx will not edit by text.
    #[error("{0}")]
    Unsupported(String),
}

/// The `resources` sequence found in a document.
struct Resources {
    /// Each item and its line (1-based).
    items: Vec<(String, usize)>,
    /// Line (1-based) of the last item, and the column (0-based) of its dash.
    last: Option<(usize, usize)>,
    /// Line of the `resources:` key.
    key_line: usize,
    key_col: usize,
}

fn find_resources(text: &str) -> Result<Option<Resources>, MergeError> {
    // Frames: `Some(expect_key)` for a mapping, `None` for a sequence.
    let mut stack: Vec<Option<bool>> = Vec::new();
    let mut key: Option<(String, usize, usize)> = None;
    let mut events = Parser::new_from_str(text);
    while let Some(item) = events.next() {
        let (event, span) = item.map_err(|e| MergeError::Parse(e.to_string()))?;
        let top_level = stack.len() == 1;
        // Is this event the start of the value of the top-level `resources` key?
        let is_resources_value =
            top_level && stack.last() == Some(&Some(false)) && key.as_ref().is_some_and(|(k, ..)| k == "resources");
        match event {
            Event::SequenceStart(style, ..) if is_resources_value => {
                let (_, key_line, key_col) = key.take().unwrap_or_default();
                if style == StructureStyle::Flow {
                    return Err(MergeError::Unsupported(
                        "`resources` is a flow sequence ([...]); rewrite it as a block list (- item) so that osbx can add entries"
                            .into(),
                    ));
                }
                return collect_items(&mut events, key_line, key_col).map(Some);
            }
            Event::Scalar(v, ..) if is_resources_value => {
                let (_, key_line, key_col) = key.take().unwrap_or_default();
                if !matches!(v.as_ref(), "" | "~" | "null") {
                    return Err(MergeError::Unsupported("`resources` is not a list".into()));
                }
                return Ok(Some(Resources { items: Vec::new(), last: None, key_line, key_col }));
            }
            Event::MappingStart(..) if is_resources_value => {
                return Err(MergeError::Unsupported("`resources` is not a list".into()));
            }
            Event::Scalar(v, style, ..) => {
                if let Some(Some(expect_key)) = stack.last_mut() {
                    if *expect_key && top_level && style == ScalarStyle::Plain {
                        key = Some((v.into_owned(), span.start.line(), span.start.col()));
                    }
                    *expect_key = !*expect_key;
                }
            }
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                if let Some(Some(expect_key)) = stack.last_mut() {
                    *expect_key = !*expect_key;
                }
                stack.push(if matches!(event, Event::MappingStart(..)) { Some(true) } else { None });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                stack.pop();
            }
            _ => {}
        }
    }
    Ok(None)
}

/// Read the items of a block sequence whose start event was just consumed.
fn collect_items<'a>(
    events: &mut Parser<'a, StrInput<'a>>,
    key_line: usize,
    key_col: usize,
) -> Result<Resources, MergeError> {
    let mut res = Resources { items: Vec::new(), last: None, key_line, key_col };
    let mut depth = 1usize;
    for item in events.by_ref() {
        let (event, span) = item.map_err(|e| MergeError::Parse(e.to_string()))?;
        match event {
            Event::SequenceEnd | Event::MappingEnd => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            Event::SequenceStart(..) | Event::MappingStart(..) => depth += 1,
            Event::Scalar(v, ..) if depth == 1 => {
                res.items.push((v.into_owned(), span.start.line()));
                // A block item's dash sits two columns before its scalar.
                res.last = Some((span.end.line(), span.start.col().saturating_sub(2)));
            }
            _ => {}
        }
    }
    Ok(res)
}

/// Add the missing `entries` to the `resources` of `text`; returns the new text (equal to `text`
/// when every entry is present).
///
/// # Errors
/// [`MergeError`] when the file does not parse or uses a layout osbx does not edit.
pub(super) fn merge(text: &str, entries: &[String]) -> Result<String, MergeError> {
    let found = find_resources(text)?;
    let present: Vec<&str> =
        found.as_ref().map(|r| r.items.iter().map(|(i, _)| i.as_str()).collect()).unwrap_or_default();
    let missing: Vec<&String> = entries.iter().filter(|e| !present.contains(&e.as_str())).collect();
    if missing.is_empty() {
        return Ok(text.to_owned());
    }
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    match found {
        Some(Resources { last: Some((line, dash_col)), .. }) => {
            let pad = " ".repeat(dash_col);
            let at = line.min(lines.len());
            for (i, e) in missing.iter().enumerate() {
                lines.insert(at + i, format!("{pad}- {e}"));
            }
        }
        Some(Resources { last: None, key_line, key_col, .. }) => {
            // `resources:` (null) or `resources: []` handled above; rewrite the key line.
            let at = key_line.saturating_sub(1);
            let pad = " ".repeat(key_col);
            lines[at] = format!("{pad}resources:");
            for (i, e) in missing.iter().enumerate() {
                lines.insert(at + 1 + i, format!("{pad}  - {e}"));
            }
        }
        None => {
            lines.push("resources:".to_owned());
            lines.extend(missing.iter().map(|e| format!("  - {e}")));
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    Ok(out)
}

/// The items of the `resources` of `text`.
///
/// # Errors
/// [`MergeError`] when the file does not parse or uses a layout osbx does not edit.
pub(super) fn items(text: &str) -> Result<Vec<String>, MergeError> {
    Ok(find_resources(text)?.map(|r| r.items.into_iter().map(|(i, _)| i).collect()).unwrap_or_default())
}

/// Whether the `resources` of `text` list `entry`.
///
/// # Errors
/// [`MergeError`] when the file does not parse or uses a layout osbx does not edit.
pub(super) fn lists(text: &str, entry: &str) -> Result<bool, MergeError> {
    Ok(find_resources(text)?.is_some_and(|r| r.items.iter().any(|(i, _)| i == entry)))
}

/// Remove `entries` from the `resources` of `text` (their lines; a comment on such a line goes
/// with it); returns the new text.
///
/// # Errors
/// [`MergeError`] when the file does not parse or uses a layout osbx does not edit.
pub(super) fn remove(text: &str, entries: &[String]) -> Result<String, MergeError> {
    let Some(found) = find_resources(text)? else { return Ok(text.to_owned()) };
    let drop: Vec<usize> = found.items.iter().filter(|(i, _)| entries.contains(i)).map(|(_, line)| *line).collect();
    if drop.is_empty() {
        return Ok(text.to_owned());
    }
    let mut out: String = text
        .lines()
        .enumerate()
        .filter(|(i, _)| !drop.contains(&(i + 1)))
        .map(|(_, l)| l)
        .collect::<Vec<_>>()
        .join("\n");
    out.push('\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<String> {
        vec!["apps/opensandbox.yaml".into(), "apps/opensandbox-pools.yaml".into()]
    }

    #[test]
    fn appends_after_last_item_keeping_comments_and_indent() {
        let text = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n# the apps\nresources:\n    - flux-system   # bootstrap\n    - apps/kata.yaml\n# trailing comment\n";
        let out = merge(text, &entries()).unwrap();
        assert_eq!(
            out,
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n# the apps\nresources:\n    - flux-system   # bootstrap\n    - apps/kata.yaml\n    - apps/opensandbox.yaml\n    - apps/opensandbox-pools.yaml\n# trailing comment\n"
        );
    }

    #[test]
    fn unindented_sequence_and_existing_entries() {
        let text = "resources:\n- apps/opensandbox.yaml\n- other.yaml\n";
        let out = merge(text, &entries()).unwrap();
        assert_eq!(out, "resources:\n- apps/opensandbox.yaml\n- other.yaml\n- apps/opensandbox-pools.yaml\n");
        assert_eq!(merge(&out, &entries()).unwrap(), out, "second merge is a no-op");
    }

    #[test]
    fn removes_only_the_named_entries() {
        let text = "resources:\n  - flux-system   # bootstrap\n  - apps/opensandbox.yaml\n  - mine.yaml # mine\n  - apps/opensandbox-pools.yaml\n";
        let out = remove(text, &entries()).unwrap();
        assert_eq!(out, "resources:\n  - flux-system   # bootstrap\n  - mine.yaml # mine\n");
        assert_eq!(remove(&out, &entries()).unwrap(), out);
        assert!(lists(text, "mine.yaml").unwrap() && !lists(&out, "apps/opensandbox.yaml").unwrap());
    }

    #[test]
    fn missing_or_empty_resources() {
        assert_eq!(
            merge("kind: Kustomization\n", &entries()[..1]).unwrap(),
            "kind: Kustomization\nresources:\n  - apps/opensandbox.yaml\n"
        );
        assert_eq!(
            merge("resources:\nkind: K\n", &entries()[..1]).unwrap(),
            "resources:\n  - apps/opensandbox.yaml\nkind: K\n"
        );
        assert!(matches!(merge("resources: [a]\n", &entries()), Err(MergeError::Unsupported(_))));
        assert!(matches!(merge("kind: \"unterminated\n", &entries()), Err(MergeError::Parse(_))));
    }
}
