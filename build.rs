//! Embeds `templates/`, `profiles/` and `starters/` into the binary so that a single `osbx` file works
//! anywhere. Generates `$OUT_DIR/embedded.rs` with one `include_str!` per file, sorted by path.

use std::fmt::Write as _;
use std::{env, fs, path::Path};

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, out);
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
}

fn table(name: &str, dir: &str) -> String {
    let manifest = env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest).join(dir);
    println!("cargo:rerun-if-changed={dir}");
    let mut files = Vec::new();
    collect(&root, &root, &mut files);
    files.sort();
    let mut code = format!("pub(crate) static {name}: &[(&str, &str)] = &[\n");
    for rel in files {
        let abs = root.join(&rel);
        println!("cargo:rerun-if-changed={}", abs.display());
        let _ = writeln!(code, "    ({rel:?}, include_str!({:?})),", abs.display().to_string());
    }
    code.push_str("];\n");
    code
}

fn main() {
    let out = Path::new(&env::var("OUT_DIR").expect("OUT_DIR")).join("embedded.rs");
    let code = table("TEMPLATES", "templates") + &table("PROFILES", "profiles") + &table("STARTERS", "starters");
    fs::write(out, code).expect("write embedded.rs");
}
