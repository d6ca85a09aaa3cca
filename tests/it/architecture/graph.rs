//! The import graph of `src/`, read with `syn`: which module names which.
//!
//! A module is a file (`src/cluster/ssa.rs` is `cluster::ssa`, `src/verify/mod.rs` is `verify`).
//! An edge `a → b` means code in `a` names an item of `b`: a `use`, a path in an expression, a
//! type or a pattern, or `crate::`/`super::` tokens inside a macro call. Test code
//! (`#[cfg(test)]`) is left out: it may look anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use syn::visit::Visit;

/// A module path: `["cluster", "ssa"]`; the crate root is `[]`.
pub type Module = Vec<String>;

/// Every module of `src/` and the modules each one names.
#[derive(Default)]
pub struct Graph {
    /// Module → the modules it names (never itself).
    pub edges: BTreeMap<Module, BTreeSet<Module>>,
    /// Module → its parsed file.
    pub files: BTreeMap<Module, syn::File>,
}

/// `a::b` for messages.
pub fn show(m: &[String]) -> String {
    if m.is_empty() { "crate".into() } else { m.join("::") }
}

impl Graph {
    /// Parse every file under `src/` (the library; `main.rs` is the binary and left out).
    pub fn read(src: &Path) -> Graph {
        let mut g = Graph::default();
        walk(src, src, &mut g.files);
        let known: BTreeSet<Module> = g.files.keys().cloned().collect();
        for (m, file) in &g.files {
            let mut v = Names { module: m, known: &known, aliases: BTreeMap::new(), found: BTreeSet::new() };
            // Aliases first, so a path can go through a `use` written below it.
            for item in &file.items {
                if let syn::Item::Use(u) = item
                    && !is_test(&u.attrs)
                {
                    v.aliases_of(&u.tree, Vec::new());
                }
            }
            v.visit_file(file);
            g.edges.insert(m.clone(), v.found);
        }
        g
    }

    /// The strongly connected components with more than one module, each sorted.
    pub fn cycles(&self, keep: impl Fn(&Module, &Module) -> bool) -> Vec<Vec<Module>> {
        let nodes: Vec<&Module> = self.edges.keys().collect();
        let index: BTreeMap<&Module, usize> = nodes.iter().enumerate().map(|(i, m)| (*m, i)).collect();
        let succ: Vec<Vec<usize>> = nodes
            .iter()
            .map(|m| self.edges[*m].iter().filter(|t| keep(m, t)).filter_map(|t| index.get(t).copied()).collect())
            .collect();
        tarjan(&succ)
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|c| {
                let mut c: Vec<Module> = c.into_iter().map(|i| nodes[i].clone()).collect();
                c.sort();
                c
            })
            .collect()
    }
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<Module, syn::File>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(root, &path, out);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = path.strip_prefix(root).unwrap().with_extension("");
        let mut m: Module = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        if matches!(m.last().map(String::as_str), Some("mod" | "lib")) {
            m.pop();
        }
        // The binary and test-only files are not the library.
        if m == ["main"] || m.last().is_some_and(|l| l == "tests") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        out.insert(m, file);
    }
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && a.parse_args::<syn::Meta>().is_ok_and(|m| m.path().is_ident("test")))
}

struct Names<'a> {
    module: &'a Module,
    known: &'a BTreeSet<Module>,
    /// Name brought into scope by a `use` → the full path it names.
    aliases: BTreeMap<String, Module>,
    found: BTreeSet<Module>,
}

impl Names<'_> {
    /// Record the names a `use` tree brings into scope, and the modules it names.
    fn aliases_of(&mut self, tree: &syn::UseTree, prefix: Vec<String>) {
        match tree {
            syn::UseTree::Path(p) => {
                let mut next = prefix;
                next.push(p.ident.to_string());
                self.aliases_of(&p.tree, next);
            }
            syn::UseTree::Name(n) => self.alias(&prefix, &n.ident.to_string(), &n.ident.to_string()),
            syn::UseTree::Rename(r) => self.alias(&prefix, &r.ident.to_string(), &r.rename.to_string()),
            syn::UseTree::Glob(_) => {
                if let Some(full) = self.resolve(&prefix) {
                    self.note(&full);
                }
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.aliases_of(t, prefix.clone());
                }
            }
        }
    }

    fn alias(&mut self, prefix: &[String], name: &str, alias: &str) {
        let mut path = prefix.to_vec();
        if name != "self" {
            path.push(name.to_owned());
        }
        if let Some(full) = self.resolve(&path) {
            self.note(&full);
            let key = if name == "self" { prefix.last().cloned().unwrap_or_default() } else { alias.to_owned() };
            self.aliases.insert(key, full);
        }
    }

    /// The crate path a path written in this module names, if it is one of ours.
    fn resolve(&self, path: &[String]) -> Option<Module> {
        let (first, rest) = path.split_first()?;
        let mut base: Module = match first.as_str() {
            "crate" => Vec::new(),
            "self" => self.module.clone(),
            "super" => {
                let mut m = self.module.clone();
                m.pop();
                let mut rest = rest;
                while rest.first().is_some_and(|s| s == "super") {
                    m.pop();
                    rest = &rest[1..];
                }
                m.extend(rest.iter().cloned());
                return Some(m);
            }
            name => {
                if let Some(full) = self.aliases.get(name) {
                    full.clone()
                } else {
                    let mut child = self.module.clone();
                    child.push(name.to_owned());
                    if !self.known.iter().any(|k| k.starts_with(&child)) {
                        return None;
                    }
                    child
                }
            }
        };
        if first == "crate" || first == "self" {
            base.extend(rest.iter().cloned());
        } else if self.aliases.contains_key(first.as_str()) || base.len() > self.module.len() {
            base.extend(rest.iter().cloned());
        }
        Some(base)
    }

    /// Record an edge to the module that holds `path`.
    fn note(&mut self, path: &[String]) {
        let holder = (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|m| self.known.contains(m));
        if let Some(h) = holder
            && &h != self.module
        {
            self.found.insert(h);
        }
    }

    fn path(&mut self, segments: Vec<String>) {
        if let Some(full) = self.resolve(&segments) {
            self.note(&full);
        }
    }
}

impl<'ast> Visit<'ast> for Names<'_> {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        let attrs = match i {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(x) => &x.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            _ => return syn::visit::visit_item(self, i),
        };
        if is_test(attrs) {
            return;
        }
        if let syn::Item::Use(u) = i {
            self.aliases_of(&u.tree, Vec::new());
        } else {
            syn::visit::visit_item(self, i);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.path(p.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // Paths inside macro calls (`format!`, `json!`) are tokens: `a :: b :: c` runs.
        let mut run: Vec<String> = Vec::new();
        let mut colons = 0;
        let flush = |run: &mut Vec<String>, this: &mut Self| {
            if run.len() > 1 {
                this.path(std::mem::take(run));
            }
            run.clear();
        };
        fn flat(ts: proc_macro2::TokenStream, out: &mut Vec<proc_macro2::TokenTree>) {
            for t in ts {
                match t {
                    proc_macro2::TokenTree::Group(g) => {
                        out.push(proc_macro2::TokenTree::Punct(proc_macro2::Punct::new(
                            ',',
                            proc_macro2::Spacing::Alone,
                        )));
                        flat(g.stream(), out);
                        out.push(proc_macro2::TokenTree::Punct(proc_macro2::Punct::new(
                            ',',
                            proc_macro2::Spacing::Alone,
                        )));
                    }
                    t => out.push(t),
                }
            }
        }
        let mut tokens = Vec::new();
        flat(m.tokens.clone(), &mut tokens);
        for t in tokens {
            match t {
                proc_macro2::TokenTree::Ident(i) if run.is_empty() || colons == 2 => {
                    run.push(i.to_string());
                    colons = 0;
                }
                proc_macro2::TokenTree::Punct(p) if p.as_char() == ':' && !run.is_empty() && colons < 2 => colons += 1,
                _ => {
                    flush(&mut run, self);
                    colons = 0;
                    if let proc_macro2::TokenTree::Ident(i) = t {
                        run.push(i.to_string());
                    }
                }
            }
        }
        flush(&mut run, self);
        syn::visit::visit_macro(self, m);
    }
}

/// Tarjan's strongly connected components over `succ` (node → successors).
fn tarjan(succ: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct S<'a> {
        succ: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut S<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on[v] = true;
        for &w in &s.succ[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on[w] = false;
                comp.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(comp);
        }
    }
    let n = succ.len();
    let mut s = S {
        succ,
        index: vec![None; n],
        low: vec![0; n],
        on: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}
