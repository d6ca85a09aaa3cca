//! Property test of the profile loader: generated documents (mutations of the shipped profiles,
//! byte-, line- and structure-level) never panic the loader, and every rejection has a location.
//! `OSBX_FUZZ_CASES=N` runs N cases (default 5,000 in CI); the figures are printed at the end.
#![allow(clippy::print_stderr)]

use std::panic::{AssertUnwindSafe, catch_unwind};

use osbx::profile::{ProfileError, parse};
use serde_json::Value;

use crate::support::root;

/// xorshift64*: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % (n.max(1) as u64)).unwrap_or(0)
    }
}

const TOKENS: &[&str] = &[
    ":",
    "- ",
    "{",
    "}",
    "[",
    "]",
    "&a",
    "*a",
    "!!str",
    "\"",
    "'",
    "#",
    "\t",
    "\n",
    "  ",
    "-1",
    "1e999",
    "~",
    "null",
    "yes",
    "0x1F",
    "? ",
    "|",
    ">",
    "%YAML 1.2\n",
    "---\n",
    "...",
    "\u{feff}",
    "é",
    "\u{0}",
];

fn mutate_text(rng: &mut Rng, text: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    for _ in 0..=rng.below(3) {
        let i = rng.below(lines.len());
        match rng.below(6) {
            0 => {
                lines.remove(i.min(lines.len().saturating_sub(1)));
            }
            1 => {
                let l = lines[i].clone();
                lines.insert(i, l);
            }
            2 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                let line = &mut lines[i];
                let at =
                    line.char_indices().map(|(p, _)| p).nth(rng.below(line.chars().count() + 1)).unwrap_or(line.len());
                line.insert_str(at, t);
            }
            3 => {
                let j = rng.below(lines.len());
                lines.swap(i, j);
            }
            4 => {
                let line = &mut lines[i];
                let indent = rng.below(5);
                *line = format!("{}{}", " ".repeat(indent), line.trim_start());
            }
            _ => {
                let line = &mut lines[i];
                if let Some((k, _)) = line.split_once(": ") {
                    *line = format!("{k}: {}", TOKENS[rng.below(TOKENS.len())]);
                }
            }
        }
    }
    lines.join("\n")
}

/// Change the parsed document: drop a key, or replace a node with a value of another type.
fn mutate_value(rng: &mut Rng, v: &mut Value, depth: usize) {
    if depth > 0 && rng.below(4) != 0 {
        match v {
            Value::Object(m) if !m.is_empty() => {
                let k = m.keys().nth(rng.below(m.len())).cloned().unwrap_or_default();
                if rng.below(5) == 0 {
                    m.remove(&k);
                } else if let Some(child) = m.get_mut(&k) {
                    mutate_value(rng, child, depth - 1);
                }
                return;
            }
            Value::Array(a) if !a.is_empty() => {
                let i = rng.below(a.len());
                mutate_value(rng, &mut a[i], depth - 1);
                return;
            }
            _ => {}
        }
    }
    *v = match rng.below(6) {
        0 => Value::Null,
        1 => Value::from(-1_i64 - i64::try_from(rng.below(100)).unwrap_or(0)),
        2 => Value::from("x y z"),
        3 => Value::from(vec![Value::from(1)]),
        4 => serde_json::json!({"unexpected": true}),
        _ => Value::Bool(true),
    };
}

#[test]
fn generated_profiles_never_panic_and_every_rejection_has_a_location() {
    let cases: usize = std::env::var("OSBX_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(5_000);
    let seeds: Vec<String> = ["default", "homelab", "runc-only", "fresh-cluster"]
        .iter()
        .map(|p| std::fs::read_to_string(root().join(format!("profiles/{p}.yaml"))).unwrap())
        .collect();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (mut accepted, mut rejected, mut diagnostics) = (0usize, 0usize, 0usize);
    for case in 0..cases {
        let seed = &seeds[case % seeds.len()];
        let doc = if case % 2 == 0 {
            mutate_text(&mut rng, seed)
        } else {
            let mut v: Value = serde_saphyr::from_str(seed).unwrap();
            mutate_value(&mut rng, &mut v, 6);
            serde_saphyr::to_string(&v).unwrap()
        };
        let result = catch_unwind(AssertUnwindSafe(|| parse("fuzz.yaml", doc.clone())));
        let Ok(result) = result else { panic!("case {case}: the loader panicked on:\n{doc}") };
        match result {
            Ok(_) => accepted += 1,
            Err(ProfileError::Invalid(diags)) => {
                rejected += 1;
                assert!(!diags.is_empty(), "case {case}: rejection without diagnostics:\n{doc}");
                for d in &diags {
                    diagnostics += 1;
                    assert!(d.pos.line >= 1 && d.pos.column >= 1, "case {case}: no location in {d}:\n{doc}");
                    assert!(
                        d.pos.line <= doc.lines().count().max(1) + 1,
                        "case {case}: line out of range in {d}:\n{doc}"
                    );
                    assert!(!d.message.is_empty(), "case {case}: empty message");
                }
            }
            Err(e) => panic!("case {case}: unexpected error kind {e}"),
        }
    }
    eprintln!(
        "fuzz: {cases} cases, {accepted} accepted, {rejected} rejected with {diagnostics} located diagnostics, 0 panics"
    );
    assert_eq!(accepted + rejected, cases);
}
