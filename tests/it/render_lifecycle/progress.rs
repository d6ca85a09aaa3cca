//! A large fleet's render shows where it is: a bar per step on a terminal, a line when each step
//! starts and ends otherwise, nothing with `-q`.

use std::path::Path;

use serde_json::json;

use crate::builder::TestFleet;
use crate::support::{osbx, outputs};

const CLUSTERS: usize = 60;

fn large_fleet(dir: &Path) -> std::path::PathBuf {
    let fleet = (0..CLUSTERS).fold(TestFleet::new("large", "fresh-cluster"), |f, i| {
        // Every third cluster its own trust domain: layer variants to place too.
        let overrides =
            if i % 3 == 0 { json!({"spire": {"trustDomain": format!("c{i}.example.org")}}) } else { json!(null) };
        f.cluster(&format!("c{i:02}"), overrides)
    });
    let path = dir.join("fleet.yaml");
    std::fs::write(&path, fleet.yaml()).unwrap();
    path
}

#[test]
fn plain_lines_without_a_terminal_and_nothing_when_quiet() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = large_fleet(dir.path());
    let out = osbx().args(["render", "--fleet"]).arg(&fleet).arg("--out").arg(dir.path().join("a")).output().unwrap();
    let (_, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for task in ["loading clusters", "rendering and checking clusters"] {
        assert!(stderr.contains(&format!("► {task}: 0/{CLUSTERS}\n")), "{task}: {stderr}");
        assert!(stderr.contains(&format!("✔ {task}: {CLUSTERS}/{CLUSTERS}\n")), "{task}: {stderr}");
    }
    let files = stderr.lines().filter(|l| l.ends_with(" created")).count();
    assert!(stderr.contains(&format!("✔ writing files: {files}/{files}\n")), "{stderr}");
    // No bar drawing without a terminal.
    assert!(!stderr.contains('\r') && !stderr.contains("\x1b["), "{stderr:?}");

    let out =
        osbx().args(["-q", "render", "--fleet"]).arg(&fleet).arg("--out").arg(dir.path().join("b")).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    // No progress with -q; lint's warnings stay (the fleet's Kata layers: kata.advisory).
    let quiet = outputs(&out).1;
    let progress: Vec<&str> = quiet.lines().filter(|l| !l.contains(": warning[")).collect();
    assert!(progress.is_empty(), "nothing but warnings with -q: {quiet}");
}

#[test]
fn a_bar_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = large_fleet(dir.path());
    // `script` gives the render a pseudo-terminal (util-linux, on every Linux machine).
    let command = format!(
        "{} render --fleet {} --out {}",
        env!("CARGO_BIN_EXE_osbx"),
        fleet.display(),
        dir.path().join("repo").display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("TERM", "xterm")
        .env_remove("NO_COLOR")
        .env_remove("OSBX_COLOR")
        .output()
        .expect("script(1) from util-linux");
    let (screen, _) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{screen}");
    // indicatif redraws the bar in place: a carriage return, the task, the bar, the count.
    for task in ["rendering and checking clusters", "writing files"] {
        let drawn = screen.split('\r').any(|frame| frame.contains(task) && frame.contains("] ") && frame.contains('='));
        assert!(drawn, "{task}: {screen:?}");
    }
    assert!(screen.contains(&format!("{CLUSTERS}/{CLUSTERS}")), "{screen:?}");
    assert!(
        !screen.contains(&format!("► rendering and checking clusters: 0/{CLUSTERS}")),
        "no plain lines on a terminal"
    );
}
