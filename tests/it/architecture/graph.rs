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
    pub fn cycles(&self) -> Vec<Vec<Module>> {
        let nodes: Vec<&Module> = self.edges.keys().collect();
        let index: BTreeMap<&Module, usize> = nodes.iter().enumerate().map(|(i, m)| (*m, i)).collect();
        let succ: Vec<Vec<usize>> =
            nodes.iter().map(|m| self.edges[*m].iter().filter_map(|t| index.get(t).copied()).collect()).collect();
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
        base.extend(rest.iter().cloned());
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

    fn path(&mut self, segments: &[String]) {
        if let Some(full) = self.resolve(segments) {
            self.note(&full);
        }
    }
}

impl<'ast> Visit<'ast> for Names<'_> {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        if item_attrs(i).is_some_and(|a| is_test(a)) {
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
        self.path(&p.segments.iter().map(|s| s.ident.to_string()).collect::<Vec<_>>());
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // Paths inside macro calls (`format!`, `json!`) are tokens: `a :: b :: c` runs.
        let mut run: Vec<String> = Vec::new();
        let mut colons = 0;
        let flush = |run: &mut Vec<String>, this: &mut Self| {
            if run.len() > 1 {
                this.path(run);
            }
            run.clear();
        };
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

/// The tokens of a macro call, flattened, with a `,` where each group opens and closes (so a
/// path never runs across a bracket).
fn flat(ts: proc_macro2::TokenStream, out: &mut Vec<proc_macro2::TokenTree>) {
    let comma = || proc_macro2::TokenTree::Punct(proc_macro2::Punct::new(',', proc_macro2::Spacing::Alone));
    for t in ts {
        match t {
            proc_macro2::TokenTree::Group(g) => {
                out.push(comma());
                flat(g.stream(), out);
                out.push(comma());
            }
            t => out.push(t),
        }
    }
}

/// `pub` items (functions, types, constants, traits, modules, re-exports and the functions and
/// constants of impls) and the `pub` fields of `pub` structs of a file, test code left out.
pub fn count_pub(file: &syn::File) -> (usize, usize) {
    #[derive(Default)]
    struct Count(usize, usize);
    impl<'ast> Visit<'ast> for Count {
        fn visit_item(&mut self, i: &'ast syn::Item) {
            if item_attrs(i).is_some_and(|a| is_test(a)) {
                return;
            }
            let vis = match i {
                syn::Item::Fn(x) => Some(&x.vis),
                syn::Item::Struct(x) => Some(&x.vis),
                syn::Item::Enum(x) => Some(&x.vis),
                syn::Item::Const(x) => Some(&x.vis),
                syn::Item::Static(x) => Some(&x.vis),
                syn::Item::Type(x) => Some(&x.vis),
                syn::Item::Trait(x) => Some(&x.vis),
                syn::Item::Mod(x) => Some(&x.vis),
                syn::Item::Use(x) => Some(&x.vis),
                _ => None,
            };
            if vis.is_some_and(|v| matches!(v, syn::Visibility::Public(_))) {
                self.0 += 1;
            }
            syn::visit::visit_item(self, i);
        }
        fn visit_impl_item(&mut self, i: &'ast syn::ImplItem) {
            let vis = match i {
                syn::ImplItem::Fn(x) => Some(&x.vis),
                syn::ImplItem::Const(x) => Some(&x.vis),
                _ => None,
            };
            if vis.is_some_and(|v| matches!(v, syn::Visibility::Public(_))) {
                self.0 += 1;
            }
        }
        fn visit_item_struct(&mut self, s: &'ast syn::ItemStruct) {
            // A `pub` field of a struct that is not `pub` is only as visible as its struct.
            if matches!(s.vis, syn::Visibility::Public(_)) {
                self.1 += s.fields.iter().filter(|f| matches!(f.vis, syn::Visibility::Public(_))).count();
            }
        }
    }
    let mut c = Count::default();
    c.visit_file(file);
    (c.0, c.1)
}

/// The functions of a file that derive a permission: build a `Need { … }` or call one of its
/// constructors (`Need::on(…)`). Permissions are derived in one place only.
pub fn count_permission_fns(file: &syn::File) -> usize {
    /// Whether the code below builds a `Need`.
    #[derive(Default)]
    struct Builds(bool);
    impl<'ast> Visit<'ast> for Builds {
        fn visit_expr_struct(&mut self, e: &'ast syn::ExprStruct) {
            self.0 |= e.path.segments.last().is_some_and(|s| s.ident == "Need");
            syn::visit::visit_expr_struct(self, e);
        }
        fn visit_expr_call(&mut self, e: &'ast syn::ExprCall) {
            if let syn::Expr::Path(p) = &*e.func {
                let segs: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
                self.0 |= segs.len() >= 2 && segs[segs.len() - 2] == "Need" && segs[segs.len() - 1] != "plural";
            }
            syn::visit::visit_expr_call(self, e);
        }
    }
    #[derive(Default)]
    struct Count(usize);
    impl<'ast> Visit<'ast> for Count {
        fn visit_item(&mut self, i: &'ast syn::Item) {
            if item_attrs(i).is_some_and(|a| is_test(a)) {
                return;
            }
            if let syn::Item::Fn(f) = i {
                let mut b = Builds::default();
                b.visit_block(&f.block);
                self.0 += usize::from(b.0);
                return;
            }
            syn::visit::visit_item(self, i);
        }
        fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
            let mut b = Builds::default();
            b.visit_block(&f.block);
            self.0 += usize::from(b.0);
        }
    }
    let mut c = Count::default();
    c.visit_file(file);
    c.0
}

/// The doc comments of a file that say only their item's name (`/// Namespace.` on
/// `namespace`, `/// The verdict.` on `verdict`): name and text.
pub fn name_only_docs(file: &syn::File) -> Vec<(String, String)> {
    fn doc(attrs: &[syn::Attribute]) -> Option<String> {
        let lines: Vec<String> = attrs
            .iter()
            .filter(|a| a.path().is_ident("doc"))
            .filter_map(|a| match &a.meta {
                syn::Meta::NameValue(nv) => match &nv.value {
                    syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value().trim().to_owned()),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        (!lines.is_empty()).then(|| lines.join(" "))
    }
    fn squash(s: &str) -> String {
        s.chars().filter(char::is_ascii_alphanumeric).collect::<String>().to_ascii_lowercase()
    }
    fn only_name(ident: &str, text: &str) -> bool {
        let t = text.trim().trim_end_matches('.').replace('`', "");
        let t = ["The ", "the ", "A ", "An "].iter().find_map(|p| t.strip_prefix(p)).unwrap_or(&t);
        !t.is_empty() && squash(t) == squash(ident)
    }
    #[derive(Default)]
    struct Find(Vec<(String, String)>);
    impl Find {
        fn check(&mut self, ident: &syn::Ident, attrs: &[syn::Attribute]) {
            if let Some(text) = doc(attrs)
                && only_name(&ident.to_string(), &text)
            {
                self.0.push((ident.to_string(), text));
            }
        }
    }
    impl<'ast> Visit<'ast> for Find {
        fn visit_item(&mut self, i: &'ast syn::Item) {
            if item_attrs(i).is_some_and(|a| is_test(a)) {
                return;
            }
            let named = match i {
                syn::Item::Fn(x) => Some((&x.sig.ident, &x.attrs)),
                syn::Item::Struct(x) => Some((&x.ident, &x.attrs)),
                syn::Item::Enum(x) => Some((&x.ident, &x.attrs)),
                syn::Item::Const(x) => Some((&x.ident, &x.attrs)),
                syn::Item::Static(x) => Some((&x.ident, &x.attrs)),
                syn::Item::Type(x) => Some((&x.ident, &x.attrs)),
                syn::Item::Trait(x) => Some((&x.ident, &x.attrs)),
                _ => None,
            };
            if let Some((ident, attrs)) = named {
                self.check(ident, attrs);
            }
            syn::visit::visit_item(self, i);
        }
        fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
            self.check(&f.sig.ident, &f.attrs);
        }
        fn visit_field(&mut self, f: &'ast syn::Field) {
            if let Some(ident) = &f.ident {
                self.check(ident, &f.attrs);
            }
        }
        fn visit_variant(&mut self, v: &'ast syn::Variant) {
            self.check(&v.ident, &v.attrs);
            syn::visit::visit_variant(self, v);
        }
    }
    let mut f = Find::default();
    f.visit_file(file);
    f.0
}

fn item_attrs(i: &syn::Item) -> Option<&Vec<syn::Attribute>> {
    match i {
        syn::Item::Mod(m) => Some(&m.attrs),
        syn::Item::Fn(f) => Some(&f.attrs),
        syn::Item::Impl(x) => Some(&x.attrs),
        syn::Item::Use(u) => Some(&u.attrs),
        syn::Item::Const(c) => Some(&c.attrs),
        syn::Item::Static(s) => Some(&s.attrs),
        syn::Item::Struct(s) => Some(&s.attrs),
        syn::Item::Enum(e) => Some(&e.attrs),
        _ => None,
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
