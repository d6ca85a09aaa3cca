//! Secrets in git (`secrets.sops`, `osbx secret`), without a cluster: interop both ways with the
//! real `sops` CLI (3.13.3, built from the Go module proxy by `tests/cluster/build secrets`),
//! determinism through render and git, re-keying, bad input and the lint rules.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::builder::TestProfile;
use crate::support::{git, osbx, outputs, root, tree};

/// Where the API key's sealed file goes for [`TestProfile`] profiles.
const SEALED: &str = "platform/opensandbox/api-key.sops.yaml";

/// The real `sops`, built once.
fn sops_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = std::process::Command::new(root().join("tests/cluster/build")).arg("secrets").output().unwrap();
        let (stdout, stderr) = outputs(&out);
        assert!(out.status.success(), "tests/cluster/build secrets: {stderr}");
        PathBuf::from(stdout.lines().last().unwrap_or_default().trim()).join("sops")
    })
    .clone()
}

/// An age key pair in a key file.
struct Key {
    file: PathBuf,
    secret: String,
    recipient: String,
}

impl Key {
    fn new(dir: &Path, name: &str) -> Self {
        use age::secrecy::ExposeSecret as _;
        let id = age::x25519::Identity::generate();
        let (recipient, secret) = (id.to_public().to_string(), id.to_string().expose_secret().to_owned());
        let file = dir.join(format!("{name}.agekey"));
        std::fs::write(&file, format!("# public key: {recipient}\n{secret}\n")).unwrap();
        Self { file, secret, recipient }
    }
}

/// A Flux repository (git, one commit per step) and a profile sealing for `recipients`.
struct Case {
    dir: tempfile::TempDir,
    k1: Key,
    k2: Key,
    printed: Vec<String>,
}

impl Case {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["config", "user.name", "osbx test"]);
        git(&repo, &["config", "user.email", "test@osbx.invalid"]);
        let (k1, k2) = (Key::new(dir.path(), "k1"), Key::new(dir.path(), "k2"));
        let case = Self { dir, k1, k2, printed: Vec::new() };
        case.profile(&json!([case.k1.recipient]));
        case
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    fn sealed(&self) -> String {
        std::fs::read_to_string(self.repo().join(SEALED)).unwrap()
    }

    /// Write the profile with `age` as its recipients.
    fn profile(&self, age: &Value) {
        let mut doc: Value =
            serde_saphyr::from_str(&TestProfile::new("sx").pool("pod", "runc", [1, 2, 1, 4]).yaml()).unwrap();
        doc["secrets"] = json!({"sops": {"age": age}});
        std::fs::write(self.dir.path().join("p.yaml"), serde_saphyr::to_string(&doc).unwrap()).unwrap();
    }

    /// `osbx <args> -p p.yaml` with exactly `env` (no identity, no API key otherwise).
    fn osbx(&mut self, args: &[&str], env: &[(&str, &Path)], stdin: Option<&str>) -> Output {
        let mut cmd = osbx();
        cmd.current_dir(self.dir.path())
            .env_remove("SOPS_AGE_KEY_FILE")
            .env_remove("SOPS_AGE_KEY")
            .env_remove("OSBX_API_KEY")
            .args(args)
            .args(["-p", "p.yaml"]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        if let Some(input) = stdin {
            cmd.write_stdin(input);
        }
        let out = cmd.output().unwrap();
        let (stdout, stderr) = outputs(&out);
        self.printed.push(format!("{stdout}{stderr}"));
        out
    }

    fn set(&mut self, value: &str, key: Option<&Path>) -> Output {
        let env: Vec<(&str, &Path)> = key.map(|k| ("SOPS_AGE_KEY_FILE", k)).into_iter().collect();
        self.osbx(&["secret", "set", "api-key", "--out", "repo"], &env, Some(&format!("{value}\n")))
    }

    /// `sops <args>` with the identity in `key`.
    fn sops(&self, key: &Path, args: &[&str]) -> Output {
        std::process::Command::new(sops_bin())
            .current_dir(self.dir.path())
            .env("SOPS_AGE_KEY_FILE", key)
            .env_remove("SOPS_AGE_KEY")
            .args(args)
            .output()
            .unwrap()
    }

    /// The API key the sealed file holds, as the real `sops` decrypts it.
    fn sops_value(&self, key: &Path) -> Result<String, String> {
        let path = self.repo().join(SEALED).display().to_string();
        let out = self.sops(key, &["decrypt", "--extract", "[\"data\"][\"api-key\"]", &path]);
        let (stdout, stderr) = outputs(&out);
        if !out.status.success() {
            return Err(stderr);
        }
        let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, stdout.trim()).unwrap();
        Ok(String::from_utf8(bytes).unwrap())
    }

    /// No key and no value in anything osbx printed.
    fn assert_nothing_leaked(&self, values: &[&str]) {
        let needles: Vec<&str> =
            values.iter().copied().chain([self.k1.secret.as_str(), self.k2.secret.as_str()]).collect();
        for text in &self.printed {
            for n in &needles {
                assert!(!text.contains(n), "osbx printed a secret ({}…):\n{text}", &n[..4]);
            }
        }
    }
}

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

#[track_caller]
fn assert_exit(out: &Output, want: i32) -> (String, String) {
    let (stdout, stderr) = outputs(out);
    assert_eq!(out.status.code(), Some(want), "stdout:\n{stdout}\nstderr:\n{stderr}");
    (stdout, stderr)
}

/// sops decrypts what osbx seals; osbx decrypts (keeps), rotates and re-keys what sops wrote.
#[test]
fn sops_and_osbx_read_each_others_files() {
    let mut c = Case::new();
    let k1 = c.k1.file.clone();
    assert_exit(&c.set("from-osbx", None), 0);
    assert_eq!(c.sops_value(&k1).unwrap(), "from-osbx", "sops cannot read what osbx sealed");

    // A file sops wrote with its defaults (every value encrypted, comments too) at the slot.
    let plain = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: api-key\n  namespace: sx-system\n# a comment\ntype: Opaque\ndata:\n  api-key: ZnJvbS1zb3Bz\n";
    std::fs::write(c.dir.path().join("plain.yaml"), plain).unwrap();
    let out = c.sops(
        &k1,
        &["encrypt", "--age", &c.k1.recipient, "--input-type", "yaml", "--output-type", "yaml", "plain.yaml"],
    );
    let (by_sops, stderr) = outputs(&out);
    assert!(out.status.success(), "sops encrypt: {stderr}");
    std::fs::write(c.repo().join(SEALED), &by_sops).unwrap();

    // osbx opens it: the same value is recognised and the file kept byte for byte.
    let (_, stderr) = assert_exit(&c.set("from-sops", Some(&k1)), 0);
    assert!(stderr.contains("already holds this value"), "{stderr}");
    assert_eq!(c.sealed(), by_sops);
    let (stdout, _) =
        assert_exit(&c.osbx(&["lint", "--repo", "repo", "--age-key-file", k1.to_str().unwrap()], &[], None), 0);
    assert!(stdout.contains("0 error(s), 0 warning(s)"), "{stdout}");

    // Re-keyed by a render when the recipients change (k1 → k2), values untouched.
    c.profile(&json!([c.k2.recipient]));
    let (_, stderr) = assert_exit(&c.osbx(&["render", "-o", "repo"], &[("SOPS_AGE_KEY_FILE", &k1)], None), 0);
    assert!(stderr.contains("data key is re-encrypted") && stderr.contains(&c.k2.recipient), "{stderr}");
    assert_eq!(c.sops_value(&c.k2.file.clone()).unwrap(), "from-sops");
    assert!(c.sops_value(&k1).is_err(), "the removed recipient still opens the file");
    let rekeyed = c.sealed();
    let line = |text: &str, key: &str| text.lines().map(str::trim).find(|l| l.starts_with(key)).map(str::to_owned);
    assert_eq!(line(&rekeyed, "lastmodified:"), line(&by_sops, "lastmodified:"), "re-keying changed the values' stamp");

    // Rotated by osbx: sops reads the new value.
    assert_exit(&c.set("rotated", Some(&c.k2.file.clone())), 0);
    assert_eq!(c.sops_value(&c.k2.file.clone()).unwrap(), "rotated");
    c.assert_nothing_leaked(&["from-osbx", "from-sops", "rotated", "ZnJvbS1zb3Bz"]);
}

/// What the real `sops` writes with its other rules opens and re-keys in osbx, numbers
/// included: `mac_only_encrypted`, `encrypted_suffix` and `unencrypted_regex`, each over ints and
/// floats (`1.0`, `1e21`) both encrypted and in plain text, which sops hashes as Go formats them.
#[test]
fn files_sops_writes_with_its_rules_and_numbers_open_and_rekey() {
    let plain = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: api-key\n  namespace: sx-system\ntype: Opaque\nstringData:\n  api-key: from-sops-7c1d\nnumbersData:\n  ratio: 1.0\n  big: 1e21\n  half: 0.5\n  count: 3\n  neg: -7\nplain:\n  ratio: 2.0\n  big: 1e22\n  count: 4\n";
    // Each as a `.sops.yaml` creation rule (`mac_only_encrypted` has no command-line flag).
    let variants = [
        "mac_only_encrypted: true\n    encrypted_regex: ^(stringData|numbersData)$",
        "encrypted_suffix: Data",
        "unencrypted_regex: ^(apiVersion|kind|metadata|type|plain)$",
    ];
    for rules in variants {
        let mut c = Case::new();
        let (k1, k2) = (c.k1.file.clone(), c.k2.file.clone());
        assert_exit(&c.osbx(&["render", "-o", "repo"], &[], None), 0);
        std::fs::write(c.dir.path().join("plain.yaml"), plain).unwrap();
        let config = format!("creation_rules:\n  - age: {}\n    {rules}\n", c.k1.recipient);
        std::fs::write(c.dir.path().join("sops-config.yaml"), config).unwrap();
        let args =
            ["--config", "sops-config.yaml", "encrypt", "--input-type", "yaml", "--output-type", "yaml", "plain.yaml"];
        let out = c.sops(&k1, &args);
        let (by_sops, stderr) = outputs(&out);
        assert!(out.status.success(), "sops encrypt {rules:?}: {stderr}");
        assert!(by_sops.contains("type:float") && by_sops.contains("type:int"), "{rules:?}: {by_sops}");
        let rule = rules.split(':').next().unwrap();
        assert!(by_sops.contains(&format!("{rule}:")), "sops did not write {rule}: {by_sops}");
        std::fs::write(c.repo().join(SEALED), &by_sops).unwrap();

        // Opened: every value decrypts and the MAC matches.
        let lint = ["lint", "--repo", "repo", "--age-key-file", k1.to_str().unwrap()];
        let (stdout, _) = assert_exit(&c.osbx(&lint, &[], None), 0);
        assert!(stdout.contains("0 error(s)"), "{rules:?}: {stdout}");

        // Re-keyed by a render (k1 → k2): sops opens the result with k2, MAC and values intact.
        c.profile(&json!([c.k2.recipient]));
        let (_, stderr) = assert_exit(&c.osbx(&["render", "-o", "repo"], &[("SOPS_AGE_KEY_FILE", &k1)], None), 0);
        assert!(stderr.contains("data key is re-encrypted"), "{rules:?}: {stderr}");
        let path = c.repo().join(SEALED).display().to_string();
        let out = c.sops(&k2, &["decrypt", &path]);
        let (decrypted, stderr) = outputs(&out);
        assert!(out.status.success(), "sops cannot open what osbx re-keyed ({rules:?}): {stderr}");
        let doc: Value = serde_saphyr::from_str(&decrypted).unwrap();
        assert_eq!(doc["stringData"]["api-key"], "from-sops-7c1d", "{rules:?}");
        assert_eq!(doc["numbersData"]["count"], 3, "{rules:?}");
        assert_eq!(doc["numbersData"]["half"], 0.5, "{rules:?}");
        assert_eq!(doc["plain"]["count"], 4, "{rules:?}");
        let lint = ["lint", "--repo", "repo", "--age-key-file", k2.to_str().unwrap()];
        let (stdout, _) = assert_exit(&c.osbx(&lint, &[], None), 0);
        assert!(stdout.contains("0 error(s), 0 warning(s)"), "{rules:?}: {stdout}");
        c.assert_nothing_leaked(&["from-sops-7c1d"]);
    }
}

/// A Secret with SOPS metadata whose `data` is not encrypted (sops with a rule that selects
/// other keys writes one) is a plaintext Secret: in a layer's directory, and at the sealed
/// file's own place.
#[test]
fn lint_flags_a_sops_secret_whose_data_is_not_encrypted() {
    let mut c = Case::new();
    let k1 = c.k1.file.clone();
    assert_exit(&c.set("kept-sealed-51aa", None), 0);
    let plain = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: leak\n  namespace: sx-system\ntype: Opaque\ndata:\n  token: bGVha2VkLXZhbHVl\nnote_secret: only this is encrypted\n";
    std::fs::write(c.dir.path().join("plain.yaml"), plain).unwrap();
    let out = c.sops(&k1, &["encrypt", "--age", &c.k1.recipient, "--encrypted-suffix", "_secret", "plain.yaml"]);
    let (by_sops, stderr) = outputs(&out);
    assert!(out.status.success(), "sops encrypt: {stderr}");
    assert!(by_sops.contains("token: bGVha2VkLXZhbHVl") && by_sops.contains("sops:"), "{by_sops}");
    std::fs::write(c.repo().join("platform/opensandbox-pools/leak.yaml"), &by_sops).unwrap();

    let (stdout, _) = assert_exit(&c.osbx(&["lint", "--repo", "repo", "-o", "json"], &[], None), 1);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let plaintext: Vec<&Value> =
        report["findings"].as_array().unwrap().iter().filter(|f| f["id"] == "secret.plaintext").collect();
    assert_eq!(plaintext.len(), 1, "{report}");
    let line = by_sops.lines().position(|l| l.trim_start().starts_with("token:")).unwrap() + 1;
    assert_eq!(
        (plaintext[0]["file"].as_str(), plaintext[0]["line"].as_u64(), plaintext[0]["severity"].as_str()),
        (Some("platform/opensandbox-pools/leak.yaml"), Some(line as u64), Some("error")),
        "{report}"
    );
    assert!(plaintext[0]["message"].as_str().unwrap().contains("`data.token` is not encrypted"), "{report}");

    // The same file at the sealed Secret's place: its form is sops', its data plain text.
    std::fs::remove_file(c.repo().join("platform/opensandbox-pools/leak.yaml")).unwrap();
    std::fs::write(c.repo().join(SEALED), by_sops.replace("name: leak", "name: api-key")).unwrap();
    let (stdout, _) = assert_exit(&c.osbx(&["lint", "--repo", "repo"], &[], None), 1);
    assert!(stdout.contains(&format!("{SEALED}:{line}:")) && stdout.contains("error[secret.plaintext]"), "{stdout}");
    c.assert_nothing_leaked(&["kept-sealed-51aa"]);
}

/// The render lists the sealed file, names the decryption Secret and marks the server with the
/// key's revision; re-rendering keeps every byte and commits nothing; the same value set again
/// (with the key) is recognised and kept; a new value changes the revision.
#[test]
fn a_sealed_value_survives_renders_byte_for_byte_and_only_a_new_value_changes_it() {
    let mut c = Case::new();
    let k1 = c.k1.file.clone();
    let (_, stderr) = assert_exit(&c.osbx(&["render", "-o", "repo", "--commit"], &[], None), 0);
    assert!(stderr.contains("api-key has no value in git yet"), "the render does not say the key is missing: {stderr}");
    let app = std::fs::read_to_string(c.repo().join("clusters/sx/apps/opensandbox.yaml")).unwrap();
    assert!(app.contains("decryption:\n    provider: sops\n    secretRef:\n      name: sops-age"), "{app}");
    let pools_app = std::fs::read_to_string(c.repo().join("clusters/sx/apps/opensandbox-pools.yaml")).unwrap();
    assert!(!pools_app.contains("decryption"), "a layer without Secrets needs no decryption: {pools_app}");

    assert_exit(
        &c.osbx(&["secret", "set", "api-key", "--out", "repo", "--commit"], &[], Some("first-value-08d1\n")),
        0,
    );
    let kustomization = std::fs::read_to_string(c.repo().join("platform/opensandbox/kustomization.yaml")).unwrap();
    assert!(kustomization.contains("  - api-key.sops.yaml"), "{kustomization}");
    let values = std::fs::read_to_string(c.repo().join("platform/opensandbox/values.yaml")).unwrap();
    let revision =
        |v: &str| v.lines().find_map(|l| l.trim().strip_prefix("osbx.io/api-key-revision: ")).map(str::to_owned);
    let first = revision(&values).expect("the server's pods carry the key's revision");
    assert_eq!(git(&c.repo(), &["status", "--porcelain"]), "", "secret set --commit left changes");

    let before = tree(&c.repo());
    let head = git(&c.repo(), &["rev-parse", "HEAD"]);
    let (_, stderr) =
        assert_exit(&c.osbx(&["render", "-o", "repo", "--commit"], &[("SOPS_AGE_KEY_FILE", &k1)], None), 0);
    assert!(stderr.contains("nothing to commit"), "{stderr}");
    assert_exit(&c.osbx(&["render", "-o", "repo", "--check"], &[], None), 0);
    assert_exit(&c.set("first-value-08d1", Some(&k1)), 0);
    assert_eq!(tree(&c.repo()), before, "a render or the same value changed the tree");
    assert_eq!(git(&c.repo(), &["rev-parse", "HEAD"]), head);

    // Without the key osbx cannot compare, so the value is sealed afresh (new ciphertext).
    assert_exit(&c.set("first-value-08d1", None), 0);
    assert_ne!(c.sealed(), before[SEALED]);
    assert_exit(&c.set("second-value-77ab", Some(&k1)), 0);
    let values = std::fs::read_to_string(c.repo().join("platform/opensandbox/values.yaml")).unwrap();
    assert_ne!(revision(&values).unwrap(), first, "a new value must roll the server");

    // --check says when the recipients changed (and writes nothing).
    c.profile(&json!([c.k1.recipient, c.k2.recipient]));
    let before = tree(&c.repo());
    let (_, stderr) = assert_exit(&c.osbx(&["render", "-o", "repo", "--check"], &[], None), 1);
    assert!(stderr.contains("encrypted for other recipients") && stderr.contains(&c.k2.recipient), "{stderr}");
    assert_eq!(tree(&c.repo()), before);
    let (stdout, _) = assert_exit(&c.osbx(&["secret", "list", "--out", "repo", "-o", "json"], &[], None), 0);
    let listed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(listed["secrets"][0]["state"], "sealed for other recipients", "{listed}");
    c.assert_nothing_leaked(&["first-value-08d1", "second-value-77ab"]);
}

/// Each bad input: a clear error, exit 2, nothing written.
#[test]
fn bad_input_is_refused_with_exit_2_and_nothing_written() {
    let mut c = Case::new();
    let k1 = c.k1.file.clone();
    assert_exit(&c.set("good-api-key-41c7", None), 0);
    let sealed = c.sealed();

    let refused = |c: &mut Case, args: &[&str], env: &[(&str, &Path)], stdin: Option<&str>, says: &[&str]| {
        let before = tree(&c.repo());
        let out = c.osbx(args, env, stdin);
        let (stdout, stderr) = outputs(&out);
        assert_eq!(code(&out), Some(2), "{args:?}: {stdout}{stderr}");
        for s in says {
            assert!(stderr.contains(s), "{args:?} does not say {s:?}:\n{stderr}");
        }
        assert_eq!(tree(&c.repo()), before, "{args:?} wrote something");
    };
    let apply = ["apply", "--repo", "repo", "--kubeconfig", "/nonexistent/kubeconfig"];

    // A recipient that is not an age key: located in the profile.
    c.profile(&json!(["age1notakey"]));
    refused(&mut c, &["render", "-o", "repo"], &[], None, &["p.yaml:", "secrets.sops.age[0]", "not an age recipient"]);
    c.profile(&json!([c.k1.recipient]));

    // No key where one is needed: apply, and a render that must re-key.
    refused(&mut c, &apply, &[], None, &[SEALED, "SOPS_AGE_KEY_FILE"]);
    c.profile(&json!([c.k2.recipient]));
    let r2 = c.k2.recipient.clone();
    refused(&mut c, &["render", "-o", "repo"], &[], None, &[SEALED, "needs an identity", &r2]);
    // A wrong key: it cannot re-key, nor open the file for apply.
    let k2 = c.k2.file.clone();
    refused(&mut c, &["render", "-o", "repo"], &[("SOPS_AGE_KEY_FILE", &k2)], None, &[SEALED, "needs an identity"]);
    c.profile(&json!([c.k1.recipient]));
    refused(&mut c, &apply, &[("SOPS_AGE_KEY_FILE", &k2)], None, &[SEALED, "no age identity given matches"]);
    // A key file that holds no key.
    let bogus = c.dir.path().join("bogus.agekey");
    std::fs::write(&bogus, "AGE-SECRET-KEY-1NOTAKEY\n").unwrap();
    refused(&mut c, &apply, &[("SOPS_AGE_KEY_FILE", &bogus)], None, &["bogus.agekey", "not an age identity"]);
    // The cluster's decryption Secret: only from a file holding exactly one identity, one of
    // the profile's recipients (checked before the cluster is reached).
    let both = c.dir.path().join("person.agekey");
    let both_text = [&c.k1.file, &c.k2.file].map(|f| std::fs::read_to_string(f).unwrap()).concat();
    std::fs::write(&both, both_text).unwrap();
    let both_arg = both.display().to_string();
    let k2_arg = k2.display().to_string();
    let mut args = apply.to_vec();
    args.extend(["--create-decryption-secret", &both_arg]);
    refused(&mut c, &args, &[("SOPS_AGE_KEY_FILE", &k1)], None, &["person.agekey", "holds 2 age identities"]);
    let mut args = apply.to_vec();
    args.extend(["--create-decryption-secret", &k2_arg]);
    refused(&mut c, &args, &[("SOPS_AGE_KEY_FILE", &k1)], None, &["k2.agekey", "not one of secrets.sops.age"]);

    // Without secrets.sops there is no decryption Secret to make.
    let plain_profile = c.dir.path().join("p.yaml");
    let kept_profile = std::fs::read_to_string(&plain_profile).unwrap();
    let mut doc: Value = serde_saphyr::from_str(&kept_profile).unwrap();
    doc.as_object_mut().unwrap().remove("secrets");
    std::fs::write(&plain_profile, serde_saphyr::to_string(&doc).unwrap()).unwrap();
    let k1_arg = k1.display().to_string();
    let mut args = apply.to_vec();
    args.extend(["--create-decryption-secret", &k1_arg]);
    refused(&mut c, &args, &[], None, &["--create-decryption-secret", "no `secrets.sops`"]);
    std::fs::write(&plain_profile, kept_profile).unwrap();

    // The API key given as well as kept in git.
    let mut cmd_env = vec![("SOPS_AGE_KEY_FILE", k1.as_path())];
    let key_file = c.dir.path().join("api.key");
    std::fs::write(&key_file, "other-api-key-9f2e\n").unwrap();
    cmd_env.truncate(1);
    let mut args = apply.to_vec();
    let key_arg = key_file.display().to_string();
    args.extend(["--api-key-file", &key_arg]);
    refused(&mut c, &args, &cmd_env, None, &["secrets.sops", "osbx secret set"]);

    // A truncated file.
    std::fs::write(c.repo().join(SEALED), &sealed[..sealed.len() / 2]).unwrap();
    refused(&mut c, &["render", "-o", "repo"], &[], None, &[SEALED]);
    // A tampered value: found by any command holding the key, and lint says where.
    let enc = sealed.find("data:").map(|i| i + "data:".len()).unwrap();
    let data_at = sealed[enc..].find("ENC[AES256_GCM,data:").map(|i| enc + i + "ENC[AES256_GCM,data:".len()).unwrap();
    let mut tampered = sealed.clone().into_bytes();
    tampered[data_at] = if tampered[data_at] == b'A' { b'B' } else { b'A' };
    std::fs::write(c.repo().join(SEALED), &tampered).unwrap();
    refused(&mut c, &["render", "-o", "repo"], &[("SOPS_AGE_KEY_FILE", &k1)], None, &[SEALED, "does not decrypt"]);
    refused(&mut c, &apply, &[("SOPS_AGE_KEY_FILE", &k1)], None, &[SEALED, "does not decrypt"]);
    let (stdout, _) = assert_exit(&c.osbx(&["lint", "--repo", "repo"], &[("SOPS_AGE_KEY_FILE", &k1)], None), 1);
    assert!(stdout.contains(&format!("{SEALED}:")) && stdout.contains("error[secret.tampered]"), "{stdout}");
    std::fs::write(c.repo().join(SEALED), &sealed).unwrap();

    // No value, an unknown name, a value on a terminal's behalf as an argument: refused.
    refused(&mut c, &["secret", "set", "api-key", "--out", "repo"], &[], Some("\n"), &["empty"]);
    refused(
        &mut c,
        &["secret", "set", "nope", "--out", "repo"],
        &[],
        Some("x"),
        &["no Secret named `nope`", "api-key"],
    );
    c.assert_nothing_leaked(&["good-api-key-41c7", "other-api-key-9f2e"]);
}

/// lint --repo: a plaintext Secret in a layer is an error at its file:line:column, a file for
/// other recipients a warning naming the difference, a malformed file an error.
#[test]
fn lint_finds_plaintext_foreign_recipients_and_malformed_files() {
    let mut c = Case::new();
    assert_exit(&c.set("v", None), 0);
    std::fs::write(
        c.repo().join("platform/opensandbox-pools/extra.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: leak\nstringData:\n  a: b\n---\nkind: Secret\nmetadata:\n  name: half-sealed\ndata:\n  sealed: ENC[AES256_GCM,data:eA==,iv:eA==,tag:eA==,type:str]\n  plain: cGxhaW4=\nsops:\n  mac: ENC[AES256_GCM,data:eA==,iv:eA==,tag:eA==,type:str]\n  lastmodified: \"2026-01-01T00:00:00Z\"\n  encrypted_regex: ^sealed$\n",
    )
    .unwrap();
    c.profile(&json!([c.k2.recipient]));
    let (stdout, _) = assert_exit(&c.osbx(&["lint", "--repo", "repo", "-o", "json"], &[], None), 1);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let find = |id: &str| report["findings"].as_array().unwrap().iter().find(|f| f["id"] == id).cloned();
    let plain = find("secret.plaintext").expect("the plaintext Secret");
    assert_eq!(
        (plain["file"].as_str(), plain["line"].as_u64(), plain["severity"].as_str()),
        (Some("platform/opensandbox-pools/extra.yaml"), Some(7), Some("error"))
    );
    // SOPS metadata does not make a Secret sealed: its `data.plain` is in plain text.
    let half = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "secret.plaintext" && f["line"] == 18)
        .unwrap_or_else(|| panic!("the Secret with SOPS metadata and a plain value: {report}"));
    assert_eq!((half["column"].as_u64(), half["field"].as_str()), (Some(3), Some("data.plain")), "{half}");
    let rec = find("secret.recipients").expect("the recipients warning");
    assert_eq!(rec["severity"], "warning");
    let msg = rec["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("added: {}", c.k2.recipient)) && msg.contains(&format!("removed: {}", c.k1.recipient)),
        "{msg}"
    );

    std::fs::remove_file(c.repo().join("platform/opensandbox-pools/extra.yaml")).unwrap();
    std::fs::write(c.repo().join(SEALED), "apiVersion: v1\nkind: Secret\nsops:\n  age: []\n").unwrap();
    let (stdout, _) = assert_exit(&c.osbx(&["lint", "--repo", "repo"], &[], None), 1);
    assert!(stdout.contains(&format!("{SEALED}:")) && stdout.contains("error[secret.malformed]"), "{stdout}");
}

/// `osbx diff --base` on a rotation: the sealed Secret changes (values masked, never shown) and
/// the server's pods get the new revision; the review decrypts nothing and needs no key.
#[test]
fn a_review_shows_a_rotation_without_the_value() {
    let mut c = Case::new();
    assert_exit(&c.osbx(&["secret", "set", "api-key", "--out", "repo", "--commit"], &[], Some("before-4e1f\n")), 0);
    std::fs::copy(c.dir.path().join("p.yaml"), c.repo().join("p.yaml")).unwrap();
    git(&c.repo(), &["add", "p.yaml"]);
    git(&c.repo(), &["commit", "-q", "-m", "profile"]);
    let mut cmd = osbx();
    let out = cmd
        .current_dir(c.repo())
        .env_remove("SOPS_AGE_KEY_FILE")
        .args(["diff", "--base", "HEAD", "--no-charts", "-p", "p.yaml"])
        .output()
        .unwrap();
    assert_exit(&out, 0);

    let out = c.osbx(&["secret", "set", "api-key", "--out", "repo"], &[], Some("after-93c0\n"));
    assert_exit(&out, 0);
    let out = osbx()
        .current_dir(c.repo())
        .env_remove("SOPS_AGE_KEY_FILE")
        .args(["diff", "--base", "HEAD", "--no-charts", "-p", "p.yaml"])
        .output()
        .unwrap();
    let (stdout, stderr) = assert_exit(&out, 1);
    assert!(stdout.contains("Secret/sx-system/api-key configured"), "{stdout}{stderr}");
    assert!(stdout.contains("osbx.io/api-key-revision"), "the revision change is not shown: {stdout}");
    c.printed.push(format!("{stdout}{stderr}"));
    c.assert_nothing_leaked(&["before-4e1f", "after-93c0"]);
}
