//! `osbx apply` with `secrets.sops`, as a CI user holding only what `osbx rbac --for apply`
//! prints: the sealed API key decrypted and applied as kustomize-controller would, the cluster's
//! decryption Secret created once, only when asked, from a file holding the cluster's one
//! identity (never from a person's key file, never replaced, never pruned), and no value in any
//! output.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde_json::{Value, json};

use super::*;
use crate::builder::TestProfile;

/// An age identity in a key file: (file, its text, the recipient).
fn age_key(dir: &Path, name: &str) -> (std::path::PathBuf, String, String) {
    use age::secrecy::ExposeSecret as _;
    let id = age::x25519::Identity::generate();
    let recipient = id.to_public().to_string();
    let text = format!("# public key: {recipient}\n{}\n", id.to_string().expose_secret());
    let file = dir.join(format!("{name}.agekey"));
    std::fs::write(&file, &text).unwrap();
    (file, text, recipient)
}

/// Bind the CI user `sa-ci` to exactly the roles `osbx rbac --for apply <extra>` prints for the
/// profile in `dir` (applied over the ones bound before, which they replace); whether they
/// grant creating the decryption Secret (they always grant reading it).
async fn bind_printed_roles(client: &kube::Client, dir: &Path, extra: &[&str]) -> bool {
    let out = osbx()
        .current_dir(dir)
        .args(["rbac", "--for", "apply", "--user", "sa-ci", "-p", "profile.yaml"])
        .args(extra)
        .output()
        .unwrap();
    let (roles, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let docs: Vec<Value> = roles.split("\n---\n").skip(1).map(|d| serde_saphyr::from_str(d).unwrap()).collect();
    let flux_role = docs
        .iter()
        .find(|d| d["kind"] == "Role" && d["metadata"]["namespace"] == "sa-flux")
        .unwrap_or_else(|| panic!("no Role in sa-flux:\n{roles}"));
    let rules = flux_role["rules"].as_array().unwrap();
    let secrets_rule = |verb: &str| {
        rules.iter().any(|r| {
            r["resources"].as_array().unwrap().iter().any(|x| x == "secrets")
                && r["verbs"].as_array().unwrap().iter().any(|v| v == verb)
        })
    };
    assert!(secrets_rule("get"), "reading the decryption Secret is not granted:\n{roles}");
    for d in &docs {
        let (api, name) = cluster::api_for(client, d).await;
        api.patch(&name, &kube::api::PatchParams::apply("test").force(), &kube::api::Patch::Apply(d)).await.unwrap();
    }
    secrets_rule("create")
}

/// Write `profile.yaml` in `dir`, sealing for `recipient`, and seal `value` into `dir/flux`.
fn seal_for(dir: &Path, recipient: &str, value: &str) {
    let mut doc: Value =
        serde_saphyr::from_str(&TestProfile::new("sa").pool("pod", "runc", [0, 1, 0, 2]).yaml()).unwrap();
    doc["secrets"] = json!({"sops": {"age": [recipient]}});
    std::fs::write(dir.join("profile.yaml"), serde_saphyr::to_string(&doc).unwrap()).unwrap();
    let out = osbx()
        .current_dir(dir)
        .env_remove("SOPS_AGE_KEY_FILE")
        .args(["secret", "set", "api-key", "-p", "profile.yaml", "--out", "flux"])
        .write_stdin(value)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", outputs(&out).1);
}

fn secret_data(s: &Secret, key: &str) -> String {
    String::from_utf8(s.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_decrypts_the_sealed_key_and_creates_the_decryption_secret_once_with_the_printed_roles() {
    let (plane, client) = flux_installed(&["flux", "opensandbox"], "sa-flux").await;
    let dir = tempfile::tempdir().unwrap();
    let (k1, k1_text, r1) = age_key(dir.path(), "k1");
    let (k2, _, _) = age_key(dir.path(), "k2");
    let value = "sa-sealed-key-5d2e";
    seal_for(dir.path(), &r1, value);

    // The CI user holds exactly the printed roles: first those of an apply that is not asked to
    // create the decryption Secret, which do not grant creating it.
    let user = cluster::user_kubeconfig(&plane.kubeconfig, "sa-ci", dir.path());
    assert!(!bind_printed_roles(&client, dir.path(), &[]).await, "creating the decryption Secret is granted unasked");

    let run_as = |key: &Path, extra: &[&str]| {
        let mut cmd = osbx();
        cmd.current_dir(dir.path())
            .env_remove("OSBX_API_KEY")
            .env_remove("SOPS_AGE_KEY")
            .env("SOPS_AGE_KEY_FILE", key)
            .args(["apply", "--no-wait", "--repo", "flux", "-p", "profile.yaml"])
            .args(extra)
            .arg("--kubeconfig")
            .arg(&user);
        output_off_runtime(cmd)
    };
    let flux_secrets = Api::<Secret>::namespaced(client.clone(), "sa-flux");
    let system_secrets = Api::<Secret>::namespaced(client.clone(), "sa-system");
    let mut printed = Vec::new();

    // A person's key file (the cluster's key and their own) opens the sealed file, and that is
    // all it does: no decryption Secret is made from it.
    let person = dir.path().join("person.agekey");
    std::fs::write(
        &person,
        format!("{}{}", std::fs::read_to_string(&k1).unwrap(), std::fs::read_to_string(&k2).unwrap()),
    )
    .unwrap();
    let out = run_as(&person, &[]).await;
    let (stdout, stderr) = outputs(&out);
    printed.push(format!("{stdout}{stderr}"));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stderr.contains("Secret/sa-flux/sops-age does not exist: Flux cannot decrypt"), "{stderr}");
    assert!(
        flux_secrets.get_opt("sops-age").await.unwrap().is_none(),
        "a decryption Secret made from a person's key file"
    );
    assert_eq!(secret_data(&system_secrets.get("api-key").await.unwrap(), "api-key"), value);
    // Nor when it is asked for explicitly: a file with several identities is refused.
    let person_arg = person.display().to_string();
    let out = run_as(&person, &["--create-decryption-secret", &person_arg]).await;
    let (stdout, stderr) = outputs(&out);
    printed.push(format!("{stdout}{stderr}"));
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("holds 2 age identities"), "{stderr}");
    assert!(flux_secrets.get_opt("sops-age").await.unwrap().is_none(), "created from a file of two identities");

    // The cluster's own identity, asked for (with the roles for it): the Secret holds exactly
    // that file.
    assert!(
        bind_printed_roles(&client, dir.path(), &["--create-decryption-secret"]).await,
        "creating it is not granted"
    );
    let k1_arg = k1.display().to_string();
    let out = run_as(&person, &["--create-decryption-secret", &k1_arg]).await;
    let (stdout, stderr) = outputs(&out);
    printed.push(format!("{stdout}{stderr}"));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stderr.contains(&format!("Secret/sa-flux/sops-age does not exist: creating it from {k1_arg} (the identity of {r1}, secrets.sops.age[0]")),
        "{stderr}"
    );
    assert_eq!(secret_data(&flux_secrets.get("sops-age").await.unwrap(), "age.agekey"), k1_text);

    // Another key file later: the cluster's key is left as it is (and k2 cannot open the file).
    let out = run_as(&k2, &[]).await;
    let (stdout, stderr) = outputs(&out);
    printed.push(format!("{stdout}{stderr}"));
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no age identity given matches"), "{stderr}");
    let out = run_as(&k1, &["--prune", "--create-decryption-secret", &k1_arg]).await;
    let (stdout, stderr) = outputs(&out);
    printed.push(format!("{stdout}{stderr}"));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(!stderr.contains("does not exist"), "{stderr}");
    assert!(stderr.contains("Secret/sa-flux/sops-age exists: left as it is"), "{stderr}");
    assert_eq!(secret_data(&flux_secrets.get("sops-age").await.unwrap(), "age.agekey"), k1_text, "replaced or pruned");
    for text in &printed {
        assert!(!text.contains(value) && !text.contains("AGE-SECRET-KEY"), "{text}");
    }
}
