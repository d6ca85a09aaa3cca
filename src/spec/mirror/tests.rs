//! The mirror, the pins and the chart values they write.

use super::*;

fn mirror(entries: &[(&str, &str)]) -> Mirror {
    Mirror(entries.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
}

#[test]
fn images_move_under_their_registry_s_prefix_with_tag_and_digest_kept() {
    let m = mirror(&[
        ("docker.io", "registry.corp/hub"),
        ("ghcr.io", "registry.corp:5000/ghcr"),
        ("*", "registry.corp/all"),
    ]);
    for (image, want) in [
        ("busybox:1.37", "registry.corp/hub/library/busybox:1.37"),
        ("busybox", "registry.corp/hub/library/busybox"),
        ("index.docker.io/library/docker:27-dind", "registry.corp/hub/library/docker:27-dind"),
        ("ghcr.io/spiffe/spire-agent:1.15.2", "registry.corp:5000/ghcr/spiffe/spire-agent:1.15.2"),
        (
            "cgr.dev/chainguard/bash:latest@sha256:90041f375e30f41aa7e0390075d8a69dc61900771d52fa98d63ee5d03d866a58",
            "registry.corp/all/cgr.dev/chainguard/bash:latest@sha256:90041f375e30f41aa7e0390075d8a69dc61900771d52fa98d63ee5d03d866a58",
        ),
        ("quay.io/kata-containers/kata-deploy", "registry.corp/all/quay.io/kata-containers/kata-deploy"),
        ("localhost:5000/a/b:v1", "registry.corp/all/localhost_5000/a/b:v1"),
    ] {
        let got = m.image(image).unwrap();
        assert_eq!(got, want, "{image}");
        // Idempotent, and the inverse finds the source (in its full form).
        assert_eq!(m.image(&got).unwrap(), got);
        let source = m.source(&got).unwrap();
        assert_eq!(
            ImageRef::parse(&source),
            ImageRef::parse(image).map(|mut r| {
                if DOCKER_HUB.contains(&r.registry.as_str()) {
                    r.registry = "docker.io".into();
                }
                r
            }),
            "{got} ← {source}"
        );
    }
}

#[test]
fn an_unmapped_registry_is_named_with_the_entry_to_add() {
    let m = mirror(&[("docker.io", "registry.corp/hub")]);
    let e = m.image("quay.io/kata-containers/kubectl:latest").unwrap_err();
    assert!(e.why.contains("maps no quay.io") && e.why.contains("\"*\""), "{e:?}");
    assert!(m.image("Not An Image").is_err());
    // The user's own image on the mirror's registry is pulled as named.
    assert_eq!(m.image("registry.corp/osbx:0.1.0").unwrap(), "registry.corp/osbx:0.1.0");
    // No mirror: nothing changes.
    assert_eq!(Mirror::default().image("quay.io/x:1").unwrap(), "quay.io/x:1");
}

#[test]
fn entries_are_checked() {
    let check = |entries: &[(&str, &str)]| {
        let mut v = Violations::default();
        let digests = [("busybox:1.37".to_owned(), "sha256:0123456789abcdef0123456789abcdef".to_owned())].into();
        Images { mirror: mirror(entries), pull_secrets: vec!["Bad_Name".into()], digests }.validate(&mut v);
        v.into_vec().into_iter().map(|v| format!("{}: {}", v.field, v.message)).collect::<Vec<_>>()
    };
    let found = check(&[
        ("docker.io", "registry.corp/hub"),
        ("not a host", "registry.corp/x"),
        ("ghcr.io", "no-host-here"),
        ("quay.io", "registry.corp/quay:v1"),
        ("gcr.io", "docker.io/library"),
    ]);
    let text = found.join("\n");
    for needle in [
        "images.mirror.\"not a host\"",
        "images.mirror.\"ghcr.io\"",
        "images.mirror.\"quay.io\"",
        "images.mirror.\"gcr.io\": the mirror docker.io is itself",
        "images.pullSecrets[0]",
        "images.digests.\"busybox:1.37\": name the image without its tag",
    ] {
        assert!(text.contains(needle), "{needle} in\n{text}");
    }
    assert!(!text.contains("\"docker.io\""), "{text}");
}

#[test]
fn chart_values_are_rewritten_where_the_chart_reads_them() {
    const IMAGES: &[ChartImage] = &[
        ChartImage {
            path: "image.reference",
            shape: Shape::Reference,
            default: "quay.io/kata-containers/kata-deploy",
            about: "the installer",
        },
        ChartImage {
            path: "a.b.image",
            shape: Shape::RegistryRepository,
            default: "ghcr.io/spiffe/spire-agent",
            about: "the agent",
        },
        ChartImage {
            path: "tools.busybox.image",
            shape: Shape::RegistryRepository,
            default: "busybox",
            about: "busybox",
        },
    ];
    let m = Images {
        mirror: mirror(&[("docker.io", "registry.corp/hub"), ("*", "registry.corp/all")]),
        ..Images::default()
    };
    let mut values =
        Some(serde_json::json!({"a": {"b": {"image": {"registry": "", "repository": "spiffe/other", "tag": "v1"}}}}));
    let mut v = Violations::default();
    m.chart_values(&mut values, IMAGES, "x.values", &mut v);
    assert!(v.into_vec().is_empty());
    let values = values.unwrap();
    assert_eq!(values["image"]["reference"], "registry.corp/all/quay.io/kata-containers/kata-deploy");
    assert_eq!(
        values["a"]["b"]["image"],
        serde_json::json!({"registry": "registry.corp/all/ghcr.io", "repository": "spiffe/other", "tag": "v1"})
    );
    assert_eq!(
        values["tools"]["busybox"]["image"],
        serde_json::json!({"registry": "registry.corp/hub", "repository": "library/busybox"})
    );
    // An unmapped default is named by its value path.
    let mut v = Violations::default();
    let hub_only = Images { mirror: mirror(&[("docker.io", "registry.corp/hub")]), ..Images::default() };
    hub_only.chart_values(&mut None, IMAGES, "kata.values", &mut v);
    let found = v.into_vec();
    assert!(
        found.iter().any(|f| f.field == "kata.values.image.reference" && f.message.contains("the installer")),
        "{found:?}"
    );
}

/// A digest the tests pin.
const D: &str = "sha256:90041f375e30f41aa7e0390075d8a69dc61900771d52fa98d63ee5d03d866a58";

/// A chart's images in each shape: a whole reference, a registry and a repository, a repository
/// and a tag; and a second reference the pins below leave alone.
const CHART: &[ChartImage] = &[
    ChartImage {
        path: "image.reference",
        shape: Shape::Reference,
        default: "quay.io/kata-containers/kata-deploy",
        about: "a",
    },
    ChartImage {
        path: "agent.image",
        shape: Shape::RegistryRepository,
        default: "ghcr.io/spiffe/spire-agent",
        about: "b",
    },
    ChartImage {
        path: "gateway.image",
        shape: Shape::Repository { tag: "v1.0.10" },
        default: "example.org/ingress",
        about: "c",
    },
    ChartImage {
        path: "job.dispatcherImage.reference",
        shape: Shape::Reference,
        default: "quay.io/kata-containers/kata-deploy-job-dispatcher",
        about: "d",
    },
];

/// A pinned digest follows the image wherever osbx names it: after the tag of a whole
/// reference, as the reference of a chart that takes `reference@digest`, in the tag of a
/// chart that joins `repository:tag`, as the `sha256:` tag of one that joins
/// `registry/repository@tag`. An image that names a digest keeps its own.
#[test]
fn pinned_digests_go_where_each_chart_takes_them() {
    let table: &[ChartImage] = &CHART[..3];
    let images = Images {
        mirror: mirror(&[("*", "registry.corp/all"), ("docker.io", "registry.corp/hub")]),
        digests: [
            "registry.corp/hub/library/busybox",
            "registry.corp/all/quay.io/kata-containers/kata-deploy",
            "registry.corp/all/ghcr.io/spiffe/spire-agent",
            "registry.corp/all/example.org/ingress",
        ]
        .into_iter()
        .map(|n| (n.to_owned(), D.to_owned()))
        .collect(),
        ..Images::default()
    };
    assert_eq!(images.image("busybox:1.37").unwrap(), format!("registry.corp/hub/library/busybox:1.37@{D}"));
    let own = "busybox:1.37@sha256:0123456789abcdef0123456789abcdef";
    assert_eq!(
        images.image(own).unwrap(),
        "registry.corp/hub/library/busybox:1.37@sha256:0123456789abcdef0123456789abcdef"
    );
    let mut values = None;
    let mut v = Violations::default();
    images.chart_values(&mut values, table, "x", &mut v);
    assert!(v.into_vec().is_empty());
    assert_eq!(
        values.unwrap(),
        serde_json::json!({
            "image": {"reference": format!("registry.corp/all/quay.io/kata-containers/kata-deploy@{D}")},
            "agent": {"image": {"registry": "registry.corp/all/ghcr.io", "repository": "spiffe/spire-agent", "tag": D}},
            "gateway": {"image": {"repository": "registry.corp/all/example.org/ingress", "tag": format!("v1.0.10@{D}")}},
        })
    );
    // Without a mirror or pins, no chart value is written.
    let mut values = None;
    Images::default().chart_values(&mut values, table, "x", &mut Violations::default());
    assert_eq!(values, None);
}

/// Pins without a mirror: only the pinned image's value is written. The values of the images
/// nothing changes are not there at all — a `null` would remove the chart's own default (helm's
/// rule) — and what the profile set is kept as it was.
#[test]
fn a_pin_without_a_mirror_writes_only_its_own_value() {
    let images = Images {
        digests: [("quay.io/kata-containers/kata-deploy".to_owned(), D.to_owned())].into_iter().collect(),
        ..Images::default()
    };
    let mut values = Some(serde_json::json!({"job": {"ttl": 5}, "keep": null}));
    let mut v = Violations::default();
    images.chart_values(&mut values, CHART, "x", &mut v);
    assert!(v.into_vec().is_empty());
    assert_eq!(
        values.unwrap(),
        serde_json::json!({
            "image": {"reference": format!("quay.io/kata-containers/kata-deploy@{D}")},
            "job": {"ttl": 5},
            "keep": null,
        })
    );
}
