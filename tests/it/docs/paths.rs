//! Every path CONTRIBUTING.md, README.md and the docs name exists: the recipes, the layout and
//! the pointers into the code cannot drift from the tree. A path with a placeholder
//! (`src/components/<name>.rs`) must have an existing directory before the placeholder.

use crate::support::root;

/// The top-level directories whose paths the docs name.
const ROOTS: &[&str] =
    &["src/", "tests/", "docs/", "templates/", "profiles/", "examples/", "bench/", "benches/", "starters/", ".ci/"];

/// Every path-like word in `text` (inside backticks, or at the start of a line of a code block),
/// with its line number.
fn paths(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let words = line.split(|c: char| c.is_whitespace() || "`()[],;:".contains(c));
        for w in words {
            let w = w.split('#').next().unwrap_or_default().trim_end_matches(['.', '\'']);
            if ROOTS.iter().any(|r| w.starts_with(r)) && !w.contains("://") && !w.contains('*') {
                out.push((i + 1, w.to_owned()));
            }
        }
    }
    out
}

#[test]
fn the_paths_the_docs_name_exist() {
    let mut files = vec!["CONTRIBUTING.md".to_owned(), "README.md".to_owned(), "RELIABILITY.md".to_owned()];
    for e in std::fs::read_dir(root().join("docs")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if std::path::Path::new(&name).extension().is_some_and(|e| e.eq_ignore_ascii_case("md")) {
            files.push(format!("docs/{name}"));
        }
    }
    let mut missing = Vec::new();
    let mut seen = 0;
    for file in &files {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        for (line, path) in paths(&text) {
            seen += 1;
            let (existing, placeholder) = match path.find('<') {
                Some(cut) => (path[..cut].rsplit_once('/').map_or("", |(dir, _)| dir).to_owned(), true),
                None => (path.trim_end_matches('/').to_owned(), false),
            };
            // Paths relative to a doc (`docs/…` links are written from the root).
            if !root().join(&existing).exists() {
                missing.push(format!("{file}:{line}: {path}{}", if placeholder { " (its directory)" } else { "" }));
            }
        }
    }
    assert!(seen > 50, "too few paths found ({seen}): the scan is broken");
    assert!(missing.is_empty(), "paths that do not exist:\n{}", missing.join("\n"));
}
