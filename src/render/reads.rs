//! What each template reads of its context, so that a render with the same inputs as an earlier
//! one is not done again: the clusters of a fleet render mostly the same layer files.
//!
//! A Tera template reaches the context only through the variables its tags name (`{{ … }}` and
//! `{% … %}`): `cluster.fluxNamespace`, `layer.dependsOn`, `pools`. So a template's output is a
//! function of the values at those paths — a path stops at `[` (`a.b[x]` reads all of `a.b`, and
//! `x` is a name of its own) — and of the templates it includes, imports or extends, whose
//! names it reads too. The names are an over-approximation (keywords, filter names, loop
//! variables and macro arguments are among them): a name the context does not hold is absent
//! in every render alike, and a name too many only costs a cache hit. A template that names
//! `__tera_context` (the whole context) or a function whose result is not a function of the
//! context (`now`, `get_random`, `get_env`) is never cached.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use tera::Context;

/// Names whose value is not a function of the context: a template naming one is rendered
/// every time.
const UNCACHEABLE: [&str; 4] = ["__tera_context", "now", "get_random", "get_env"];

/// The context paths each template reads.
#[derive(Debug, Default)]
pub(super) struct Reads {
    /// Template name → the dotted paths it reads (its own and its included templates'), or
    /// `None` when it is never cached.
    paths: BTreeMap<String, Option<BTreeSet<String>>>,
    /// The first segment of every path any template reads (`None`: one reads the whole context).
    top: Option<BTreeSet<String>>,
}

impl Reads {
    /// What every template of `sources` (name → text) reads.
    pub(super) fn of(sources: &BTreeMap<String, String>) -> Self {
        let scanned: BTreeMap<&str, Scan> = sources.iter().map(|(n, t)| (n.as_str(), scan(t))).collect();
        let paths: BTreeMap<String, Option<BTreeSet<String>>> =
            scanned.keys().map(|name| ((*name).to_owned(), closure(name, &scanned))).collect();
        let top = paths
            .values()
            .map(|p| p.as_ref().map(|p| p.iter().map(|p| top_of(p).to_owned()).collect::<Vec<_>>()))
            .collect::<Option<Vec<_>>>()
            .map(|all| all.into_iter().flatten().collect());
        Self { paths, top }
    }

    /// Whether some template may read the context's `name`.
    pub(super) fn reads(&self, name: &str) -> bool {
        self.top.as_ref().is_none_or(|top| top.contains(name))
    }

    /// The cache key of rendering `template` with `ctx`: the template and the value at each path
    /// it reads (`None` when it is never cached).
    pub(super) fn key(&self, template: &str, ctx: &Context) -> Option<String> {
        let paths = self.paths.get(template)?.as_ref()?;
        let mut key = String::with_capacity(256);
        key.push_str(template);
        for path in paths {
            let mut segments = path.split('.');
            let top = segments.next().unwrap_or_default();
            let value = ctx.get(top).and_then(|v| segments.try_fold(v, step));
            key.push('\n');
            key.push_str(path);
            match value {
                // The value as JSON: one text per value (serde_json keeps a map's key order,
                // and the renders of one Renderer build their context the same way).
                Some(v) => {
                    key.push('=');
                    key.push_str(&v.to_string());
                }
                None => key.push('!'),
            }
        }
        Some(key)
    }
}

/// The context name a path starts at.
fn top_of(path: &str) -> &str {
    path.split('.').next().unwrap_or(path)
}

/// One segment of a dotted path, as Tera reads it: a key of a map, an index of a list.
fn step<'a>(v: &'a Value, segment: &str) -> Option<&'a Value> {
    match v {
        Value::Object(map) => map.get(segment),
        Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    }
}

/// The paths `name` reads with the templates it reaches (`None`: not cached).
fn closure(name: &str, scanned: &BTreeMap<&str, Scan>) -> Option<BTreeSet<String>> {
    let mut paths = BTreeSet::new();
    let mut seen = BTreeSet::new();
    let mut todo = vec![name];
    while let Some(next) = todo.pop() {
        if !seen.insert(next) {
            continue;
        }
        // A template that is not among the sources is not rendered (`ignore missing`), or Tera
        // refused the set at load.
        let Some(scan) = scanned.get(next) else { continue };
        if scan.paths.iter().any(|p| UNCACHEABLE.contains(&top_of(p))) {
            return None;
        }
        paths.extend(scan.paths.iter().cloned());
        todo.extend(scan.templates.iter().map(String::as_str));
    }
    Some(paths)
}

/// What one template's own text names.
#[derive(Debug, Default, PartialEq)]
struct Scan {
    /// Dotted paths in its tags.
    paths: BTreeSet<String>,
    /// The string literals of its `include`, `import` and `extends` tags.
    templates: BTreeSet<String>,
}

/// The tags of `text`: the paths they name and the templates they include.
fn scan(text: &str) -> Scan {
    let mut out = Scan::default();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.as_bytes().first() {
            Some(b'#') => {
                // A comment: to its end.
                rest = after.find("#}").map_or("", |end| &after[end + 2..]);
            }
            Some(b'{' | b'%') => {
                let statement = after.starts_with('%');
                let (tag, next) = tag(&after[1..], if statement { "%}" } else { "}}" });
                let (words, strings) = tokens(tag);
                rest = next;
                if statement && matches!(words.first().map(String::as_str), Some("include" | "import" | "extends")) {
                    out.templates.extend(strings);
                }
                if statement && words.first().map(String::as_str) == Some("raw") {
                    // Raw text up to `{% endraw %}` is not tags.
                    rest = rest.find("endraw").map_or("", |end| &rest[end..]);
                    rest = rest.find("%}").map_or("", |end| &rest[end + 2..]);
                }
                out.paths.extend(words);
            }
            _ => rest = after,
        }
    }
    out
}

/// The tag's text up to `close` (outside string literals), and the text after it.
fn tag<'a>(text: &'a str, close: &str) -> (&'a str, &'a str) {
    let mut quote = None;
    for (i, c) in text.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            None if matches!(c, '"' | '\'' | '`') => quote = Some(c),
            None if text[i..].starts_with(close) => return (&text[..i], &text[i + close.len()..]),
            _ => {}
        }
    }
    (text, "")
}

/// The dotted paths (outside string literals) and the string literals of a tag, in order.
fn tokens(tag: &str) -> (Vec<String>, Vec<String>) {
    let (mut words, mut strings) = (Vec::new(), Vec::new());
    let mut quote: Option<(char, usize)> = None;
    let mut current = String::new();
    let mut previous = ' ';
    let mut chars = tag.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if let Some((q, start)) = quote {
            if c == q {
                strings.push(tag[start..i].to_owned());
                quote = None;
            }
        } else {
            let starts = current.is_empty() && (c.is_ascii_alphabetic() || c == '_') && !is_ident(previous);
            let continues = !current.is_empty()
                && (is_ident(c)
                    || (c == '.' && chars.peek().is_some_and(|(_, n)| is_ident(*n)) && !current.ends_with('.')));
            if starts || continues {
                current.push(c);
            } else {
                if !current.is_empty() {
                    words.push(std::mem::take(&mut current));
                }
                if matches!(c, '"' | '\'' | '`') {
                    quote = Some((c, i + 1));
                }
            }
        }
        previous = c;
    }
    if !current.is_empty() {
        words.push(current);
    }
    (words, strings)
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_paths_of_expressions_and_statements_and_not_of_text_strings_or_comments() {
        let s = scan(
            "kind: cluster {{ layer.name }} {# profile.x #}\n{%- if layer.dependsOn and not x.y %}\
             {{ \"cluster.name }}\" ~ a.b[c.d].e | default(value=z) }}{% endif -%}",
        );
        assert_eq!(
            s.paths,
            set(&[
                "layer.name",
                "if",
                "layer.dependsOn",
                "and",
                "not",
                "x.y",
                "a.b",
                "c.d",
                "e",
                "default",
                "value",
                "z",
                "endif"
            ])
        );
        assert!(s.templates.is_empty());
    }

    #[test]
    fn included_templates_are_followed_and_raw_text_is_skipped() {
        let s = scan("{% include \"opensandbox/_config.toml\" %}{% raw %}{{ secret.x }}{% endraw %}{{ y }}");
        assert_eq!(s.templates, set(&["opensandbox/_config.toml"]));
        assert_eq!(s.paths, set(&["include", "raw", "y"]));
        let sources: BTreeMap<String, String> = [
            ("a".to_owned(), "{{ a.x }}{% include \"b\" %}".to_owned()),
            ("b".to_owned(), "{{ b.y }}{% import \"c\" as m %}".to_owned()),
            ("c".to_owned(), "{% macro f() %}{{ c }}{% endmacro %}".to_owned()),
            ("d".to_owned(), "{{ now() }}".to_owned()),
            ("e".to_owned(), "{% include \"d\" %}".to_owned()),
        ]
        .into_iter()
        .collect();
        let reads = Reads::of(&sources);
        let a = reads.paths["a"].as_ref().unwrap();
        assert!(a.contains("a.x") && a.contains("b.y") && a.contains("c"), "{a:?}");
        assert_eq!(reads.paths["d"], None);
        assert_eq!(reads.paths["e"], None, "includes an uncacheable template");
        assert!(reads.top.is_none() && reads.reads("anything"));
    }

    #[test]
    fn the_key_holds_the_values_at_the_paths_read_and_nothing_else() {
        let sources: BTreeMap<String, String> =
            [("t".to_owned(), "{{ cluster.fluxNamespace }} {{ layers.0.name }} {{ missing.x }}".to_owned())]
                .into_iter()
                .collect();
        let reads = Reads::of(&sources);
        let ctx = |name: &str, ns: &str| {
            let mut c = Context::new();
            c.insert("cluster", &serde_json::json!({"name": name, "fluxNamespace": ns}));
            c.insert("layers", &serde_json::json!([{"name": "opensandbox"}]));
            c
        };
        let key = reads.key("t", &ctx("a", "flux-system")).unwrap();
        assert_eq!(key, reads.key("t", &ctx("b", "flux-system")).unwrap(), "cluster.name is not read");
        assert_ne!(key, reads.key("t", &ctx("a", "flux")).unwrap());
        assert!(key.contains("layers.0.name=\"opensandbox\"") && key.contains("missing.x!"), "{key}");
        assert!(reads.reads("cluster") && !reads.reads("profile"));
    }
}
