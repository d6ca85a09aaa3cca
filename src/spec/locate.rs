//! Source locations of profile fields.
//!
//! serde gives the deserialized values but forgets where they came from; validation rules that
//! span several fields (`bufferMin > bufferMax`, a duplicate pool name) still have to point at a
//! line and column. [`Locations`] walks the YAML event stream once and records, for every node,
//! its field path (`pools.items[1].capacity.bufferMin`) and where its key and value start.

use std::collections::HashMap;

use serde_saphyr::granit_parser::{Event, Parser};

/// A 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Pos {
    /// Line, from 1.
    pub line: usize,
    /// Column, from 1.
    pub column: usize,
}

/// Field path → position of the node (the key for mapping entries).
#[derive(Debug, Default)]
pub struct Locations {
    by_path: HashMap<String, Pos>,
    /// Every node start (keys and values) → its path, for errors that only carry a position.
    by_pos: HashMap<Pos, String>,
}

enum Frame {
    Map { path: String, key: Option<(String, Pos)> },
    Seq { path: String, next: usize },
}

impl Locations {
    /// Index a YAML document; a document that does not parse yields an empty index (the
    /// deserializer reports the syntax error with its own location).
    #[must_use]
    pub fn index(source: &str) -> Self {
        let mut by_path = HashMap::new();
        let mut by_pos = HashMap::new();
        let mut stack: Vec<Frame> = Vec::new();
        for item in Parser::new_from_str(source) {
            let Ok((event, span)) = item else { break };
            let pos = Pos { line: span.start.line(), column: span.start.col() + 1 };
            match event {
                Event::Scalar(text, ..) => {
                    if let Some(Frame::Map { key: key @ None, path }) = stack.last_mut() {
                        let child = join_key(path, &text);
                        by_path.entry(child.clone()).or_insert(pos);
                        by_pos.insert(pos, child.clone());
                        *key = Some((child, pos));
                    } else {
                        let child = Self::child_path(&mut stack, pos, &mut by_path);
                        by_path.entry(child.clone()).or_insert(pos);
                        by_pos.entry(pos).or_insert(child);
                    }
                }
                Event::MappingStart(..) => {
                    let path = Self::child_path(&mut stack, pos, &mut by_path);
                    by_pos.entry(pos).or_insert_with(|| path.clone());
                    stack.push(Frame::Map { path, key: None });
                }
                Event::SequenceStart(..) => {
                    let path = Self::child_path(&mut stack, pos, &mut by_path);
                    stack.push(Frame::Seq { path, next: 0 });
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    stack.pop();
                    if let Some(Frame::Map { key, .. }) = stack.last_mut() {
                        *key = None;
                    }
                }
                Event::Alias(_) => {
                    let child = Self::child_path(&mut stack, pos, &mut by_path);
                    by_path.entry(child).or_insert(pos);
                }
                _ => {}
            }
        }
        Self { by_path, by_pos }
    }

    /// The path of the next value node under the top frame; consumes a pending mapping key.
    fn child_path(stack: &mut [Frame], pos: Pos, by_path: &mut HashMap<String, Pos>) -> String {
        match stack.last_mut() {
            None => String::new(),
            Some(Frame::Map { key, .. }) => match key.take() {
                Some((path, _)) => path,
                // A complex (non-scalar) key: give it no path.
                None => String::from("?"),
            },
            Some(Frame::Seq { path, next }) => {
                let child = format!("{path}[{next}]");
                *next += 1;
                by_path.entry(child.clone()).or_insert(pos);
                child
            }
        }
    }

    /// Position of a field path, or of its nearest indexed parent.
    #[must_use]
    pub fn find(&self, path: &str) -> Pos {
        let mut probe = path;
        loop {
            if let Some(pos) = self.by_path.get(probe) {
                return *pos;
            }
            match probe.rfind(['.', '[']) {
                Some(cut) => probe = &probe[..cut],
                None => return self.by_path.get("").copied().unwrap_or(Pos { line: 1, column: 1 }),
            }
        }
    }

    /// Position of exactly this field path, if the document has it.
    #[must_use]
    pub fn get(&self, path: &str) -> Option<Pos> {
        self.by_path.get(path).copied()
    }

    /// The field path of the node that starts at `pos`, if any (used to name the field of a
    /// deserializer error, which only carries a position).
    #[must_use]
    pub fn path_at(&self, pos: Pos) -> Option<&str> {
        self.by_pos.get(&pos).map(String::as_str)
    }
}

fn join_key(parent: &str, key: &str) -> String {
    if parent.is_empty() { key.to_owned() } else { format!("{parent}.{key}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_nested_keys_and_indices() {
        let src = "a:\n  b: 1\nlist:\n  - name: x\n  - name: y\n    n: [1, 2]\n";
        let loc = Locations::index(src);
        assert_eq!(loc.find("a.b"), Pos { line: 2, column: 3 });
        assert_eq!(loc.find("list[1].name"), Pos { line: 5, column: 5 });
        assert_eq!(loc.find("list[1].n[1]"), Pos { line: 6, column: 12 });
        // Unknown children fall back to the nearest parent.
        assert_eq!(loc.find("list[1].missing"), Pos { line: 5, column: 5 });
        assert_eq!(loc.path_at(Pos { line: 2, column: 3 }), Some("a.b"));
    }
}
