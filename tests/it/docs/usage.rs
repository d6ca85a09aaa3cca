//! The usage lines in README.md's command table and in each command's doc name exactly the
//! command's flags, as clap defines them: no flag that does not exist, none left out.
//! `[cluster access]` stands for the cluster flags and `[verify flags]` for verify's (its
//! in-cluster flags aside).

use std::collections::BTreeSet;

use clap::CommandFactory;

use crate::support::root;

/// The long and short names of a command's flags (`--out`, `-p`), global flags and
/// `--help`/`--version` left out.
fn flags(cmd: &clap::Command) -> BTreeSet<String> {
    cmd.get_arguments()
        .filter(|a| !a.is_global_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .flat_map(|a| a.get_long().map(|l| format!("--{l}")).into_iter().chain(a.get_short().map(|s| format!("-{s}"))))
        .collect()
}

/// The flags `[cluster access]` stands for.
fn cluster_access() -> BTreeSet<String> {
    ["--kubeconfig", "--context", "--qps", "--concurrency", "--request-timeout"].map(str::to_owned).into()
}

/// The flags in a usage text, with the placeholders expanded.
fn written(usage: &str) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = usage
        .split(|c: char| c.is_whitespace() || "[]|`,()".contains(c))
        .filter(|w| w.starts_with('-') && w.len() > 1 && !w.starts_with("---"))
        .map(|w| w.trim_end_matches(['.', ':']).to_owned())
        .collect();
    if usage.contains("[cluster access]") {
        out.extend(cluster_access());
    }
    if usage.contains("[verify flags]") {
        // The in-cluster flags are verify's own: `apply --verify` runs from outside.
        let in_cluster =
            flags(&<osbx::cli::InClusterFlags as clap::Args>::augment_args(clap::Command::new("in-cluster")));
        out.extend(flags(&sub("verify")).difference(&cluster_access()).filter(|f| !in_cluster.contains(*f)).cloned());
        out.extend(["-p", "--profile", "--templates"].map(str::to_owned));
    }
    out
}

/// The command `name` names: `render`, or a subcommand such as `secret set`.
fn sub(name: &str) -> clap::Command {
    let mut cmd = osbx::cli::Cli::command();
    for word in name.split(' ') {
        cmd = cmd.find_subcommand(word).unwrap_or_else(|| panic!("no command {name}")).clone();
    }
    cmd
}

/// The command a usage text starts with (after `osbx `): one word, or two when the first has
/// subcommands (`secret set`).
fn command_of(rest: &str) -> String {
    let first: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
    let second: String = rest[first.len()..]
        .trim_start_matches(['`', ']', ')', ' '])
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect();
    let top = osbx::cli::Cli::command().find_subcommand(&first).cloned();
    match top {
        Some(c) if !second.is_empty() && c.find_subcommand(&second).is_some() => format!("{first} {second}"),
        _ => first,
    }
}

/// A usage text: where it is, the command, and the text.
struct Usage {
    at: String,
    command: String,
    text: String,
}

/// Every usage text: the README table's second cells, and each doc's ```` ``` ```` blocks that
/// start with `osbx <command> [` (continuation lines included).
fn usages() -> Vec<Usage> {
    let mut out = Vec::new();
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    for (i, line) in readme.lines().enumerate() {
        let Some(rest) = line.strip_prefix("| [`osbx ").or_else(|| line.strip_prefix("| `osbx ")) else { continue };
        let command = command_of(rest);
        let cell = rest.split(" | ").next().unwrap_or_default();
        out.push(Usage { at: format!("README.md:{}", i + 1), command, text: cell.replace("\\|", "|") });
    }
    for entry in std::fs::read_dir(root().join("docs")).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(rest) = line.strip_prefix("osbx ") else { continue };
            if i == 0 || lines[i - 1] != "```" || !rest.contains(" [") {
                continue;
            }
            let command = command_of(rest);
            let mut usage = (*line).to_owned();
            for next in &lines[i + 1..] {
                if !next.starts_with(' ') {
                    break;
                }
                usage.push(' ');
                usage.push_str(next.trim());
            }
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            out.push(Usage { at: format!("docs/{name}:{}", i + 1), command, text: usage });
        }
    }
    out
}

#[test]
fn usage_lines_name_exactly_the_flags_of_their_command() {
    let usages = usages();
    assert!(usages.len() >= 14, "usage lines not found: {}", usages.len());
    let mut wrong = Vec::new();
    for u in &usages {
        let defined = flags(&sub(&u.command));
        let written = written(&u.text);
        for f in written.difference(&defined) {
            wrong.push(format!("{}: osbx {} has no flag {f}", u.at, u.command));
        }
        for f in defined.difference(&written) {
            // A short flag may stand for its long one and the other way round.
            let alias = sub(&u.command)
                .get_arguments()
                .find(|a| {
                    a.get_long().is_some_and(|l| format!("--{l}") == *f)
                        || a.get_short().is_some_and(|s| format!("-{s}") == *f)
                })
                .is_some_and(|a| {
                    a.get_long().is_some_and(|l| written.contains(&format!("--{l}")))
                        || a.get_short().is_some_and(|s| written.contains(&format!("-{s}")))
                });
            if !alias {
                wrong.push(format!("{}: the usage of osbx {} leaves out {f}", u.at, u.command));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_command_has_a_usage_line_in_the_readme() {
    let documented: BTreeSet<String> = usages()
        .into_iter()
        .filter(|u| u.at.starts_with("README"))
        .map(|u| u.command.split(' ').next().unwrap_or_default().to_owned())
        .collect();
    let commands: BTreeSet<String> =
        osbx::cli::Cli::command().get_subcommands().map(|c| c.get_name().to_owned()).filter(|c| c != "help").collect();
    assert_eq!(documented, commands);
}
