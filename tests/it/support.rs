//! Helpers shared by the integration tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use assert_cmd::Command;

/// The project root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `../shared/`, read at test time and never copied into the repository.
pub fn shared() -> PathBuf {
    root().join("../shared")
}

/// The names of the shipped profiles (`profiles/*.yaml`), sorted.
pub fn shipped_profiles() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root().join("profiles"))
        .expect("profiles/")
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".yaml")).map(str::to_owned))
        .collect();
    names.sort();
    names
}

/// Say that `what` was not proven on this machine (a branch it cannot reach), never silently:
/// under `tests/run` (which sets `OSBX_TEST_NOTES`) the line goes to that file and `tests/run`
/// prints it after cargo's summary; without it, the test fails saying so.
///
/// # Panics
/// When `OSBX_TEST_NOTES` is not set, or its file cannot be written.
pub fn not_proven(what: &str) {
    use std::io::Write as _;
    let Some(notes) = std::env::var_os("OSBX_TEST_NOTES") else {
        panic!("not proven on this machine: {what} (tests/run lists this after its summary instead of failing)")
    };
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&notes)
        .unwrap_or_else(|e| panic!("OSBX_TEST_NOTES {}: {e}", Path::new(&notes).display()));
    writeln!(file, "{what}").unwrap_or_else(|e| panic!("OSBX_TEST_NOTES {}: {e}", Path::new(&notes).display()));
}

/// [`not_proven`] said before a test spends its run on what it can prove: without `tests/run`
/// (no `OSBX_TEST_NOTES`) the test would fail at its end anyway, so it fails now, saying the same;
/// under `tests/run` it does nothing (the test says it at its end).
///
/// # Panics
/// When `OSBX_TEST_NOTES` is not set.
pub fn not_provable_here_unless_noted(what: &str) {
    if std::env::var_os("OSBX_TEST_NOTES").is_none() {
        not_proven(what);
    }
}

/// Run a stop script from a `Drop` and check it: its failure fails the test, unless the test is
/// already panicking (then it is printed: a panic inside that unwinding would abort the binary).
///
/// # Panics
/// When the command cannot run or exits non-zero, and the thread is not already panicking.
#[allow(clippy::print_stderr, reason = "the one way to say it while unwinding")]
pub fn stop_in_drop(cmd: &mut std::process::Command) {
    let why = match cmd.output() {
        Ok(out) if out.status.success() => return,
        Ok(out) => format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr)),
        Err(e) => e.to_string(),
    };
    if std::thread::panicking() {
        eprintln!("{cmd:?} failed: {why}");
    } else {
        panic!("{cmd:?} failed: {why}");
    }
}

/// Remove the directory `path` with what it holds; one that is not there is fine.
///
/// # Panics
/// When it is there and cannot be removed.
pub fn remove_dir_if_there(path: &Path) {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => panic!("removing {}: {e}", path.display()),
        _ => {}
    }
}

/// The `osbx` binary under test, without colour and with a clean environment.
pub fn osbx() -> Command {
    let mut cmd = Command::cargo_bin("osbx").expect("osbx binary");
    cmd.env_remove("OSBX_PROFILE").env_remove("OSBX_TEMPLATES").env_remove("OSBX_FAILPOINT").env("OSBX_COLOR", "never");
    cmd
}

/// The output of `cmd` (an `osbx` command, as [`osbx`] makes it), waited for off the async
/// runtime, which meanwhile goes on serving what the test runs on it.
pub async fn output_off_runtime(mut cmd: Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap()
}

/// Every file under `dir` (relative path → content), skipping `.git`. Contents are read byte
/// for byte (no newline or encoding translation; a file that is not UTF-8 fails the test rather
/// than compare as a placeholder), so two trees are equal exactly when their bytes are.
pub fn tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.file_name().is_some_and(|n| n == ".git") {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
                let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                out.insert(rel, text);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Write `content` to `dir/rel`, creating parents.
pub fn write(dir: &Path, rel: &str, content: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// Run git with `args` in `dir` (no prompts, a fixed identity, `main` for a new repository's
/// branch), failing the test with its output when it fails; returns its stdout as it is.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .args(["-c", "user.name=osbx e2e", "-c", "user.email=e2e@osbx.invalid", "-c", "init.defaultBranch=main"])
        .args(args)
        .output()
        .expect("run git");
    let (stdout, stderr) = outputs(&out);
    assert!(out.status.success(), "git {args:?} in {}: {stdout}{stderr}", dir.display());
    stdout
}

/// Stdout and stderr of a finished command, as text.
pub fn outputs(out: &std::process::Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Compare `actual` with the golden file `tests/golden/<name>`; with `OSBX_UPDATE_EXAMPLES=1`
/// (the same switch that refreshes `examples/`) rewrite it instead.
#[track_caller]
pub fn assert_golden(name: &str, actual: &str) {
    let path = root().join("tests/golden").join(name);
    if std::env::var_os("OSBX_UPDATE_EXAMPLES").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == actual,
        "tests/golden/{name} differs from the output; if the change is intended, refresh it with OSBX_UPDATE_EXAMPLES=1 tests/run\n{}",
        similar::TextDiff::from_lines(&expected, actual).unified_diff().header("golden", "actual")
    );
}
