//! `osbx rbac --for status` is enough for `osbx status` and holds nothing it does not use: as a
//! user holding only those roles (not even the default discovery bindings), status reads the
//! platform (exit 0 or 1, never a refused read); without any one permission it stops with exit
//! 2, saying what was forbidden.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_status_role_is_enough_and_each_permission_is_needed() {
    const USER: &str = "st-ci";
    let plane = tokio::task::spawn_blocking(OwnPlane::start).await.unwrap();
    let client = cluster::client_for(&plane.kubeconfig).await;
    for crds in ["flux", "opensandbox"] {
        cluster::install_crds(&client, crds).await;
    }
    let dir = tempfile::tempdir().unwrap();
    TestProfile::new("st").pool("pod", "runc", [1, 2, 1, 4]).pool("vm", "kata", [1, 1, 0, 2]).write_to(dir.path());
    let profile = dir.path().join("profile.yaml");
    let out = osbx().args(["rbac", "--for", "status", "--user", USER, "--profile"]).arg(&profile).output().unwrap();
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let objects: Vec<Value> = stdout.split("\n---\n").skip(1).map(|d| serde_saphyr::from_str(d).unwrap()).collect();
    for ns in ["st-flux", "st-system", "st-sbx"] {
        apply(&client, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).await;
    }
    for obj in &objects {
        apply(&client, obj).await;
    }
    for name in DEFAULT_BINDINGS {
        Api::<ClusterRoleBinding>::all(client.clone()).delete(name, &DeleteParams::default()).await.unwrap();
    }
    let atoms = atoms(&objects);
    for atom in &atoms {
        settle(&client, USER, &objects[atom.role], atom, true).await;
    }
    let user = cluster::user_kubeconfig(&plane.kubeconfig, USER, dir.path());
    let status = || {
        let (profile, user) = (profile.clone(), user.clone());
        async move {
            tokio::task::spawn_blocking(move || {
                osbx()
                    .args(["status", "-o", "json", "--profile"])
                    .arg(profile)
                    .arg("--kubeconfig")
                    .arg(user)
                    .output()
                    .unwrap()
            })
            .await
            .unwrap()
        }
    };
    // Nothing is deployed: not Ready, but every read allowed.
    let out = status().await;
    let (stdout, stderr) = outputs(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["layers"][0]["message"], "no such Kustomization", "{doc:#}");
    assert!(atoms.len() >= 8, "{atoms:?}");
    for atom in &atoms {
        let role = &objects[atom.role];
        apply(&client, &without(role, atom)).await;
        settle(&client, USER, role, atom, false).await;
        let out = status().await;
        let (stdout, stderr) = outputs(&out);
        assert_eq!(out.status.code(), Some(2), "without {atom:?} status still ran: {stdout}{stderr}");
        // A refused read says so; a refused discovery is explained by connecting's own review
        // (which names what it could check).
        assert!(stderr.contains("forbidden") || stderr.contains("may not"), "without {atom:?}: {stderr}");
        apply(&client, role).await;
        settle(&client, USER, role, atom, true).await;
    }
}
