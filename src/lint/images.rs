//! `image.unpinned`: images without a tag or digest.

use super::{Linter, Severity};

/// Whether an image reference names a tag or a digest.
#[must_use]
pub(super) fn pinned(image: &str) -> bool {
    if image.contains('@') {
        return true;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    last.split_once(':').is_some_and(|(_, tag)| !tag.is_empty() && tag != "latest")
}

pub(super) fn images(l: &mut Linter<'_>) {
    let p = &l.loaded.profile;
    let mut seen: Vec<(String, String)> = Vec::new();
    if let Some(img) = &p.sections.pools.defaults.image {
        seen.push(("pools.defaults.image".into(), img.clone()));
    }
    for (i, c) in p.sections.pools.defaults.init_containers.iter().flatten().enumerate() {
        seen.push((
            format!("pools.defaults.initContainers[{i}].image"),
            c["image"].as_str().unwrap_or_default().to_owned(),
        ));
    }
    for (i, pool) in p.sections.pools.items.iter().enumerate() {
        if let Some(img) = &pool.image {
            seen.push((format!("pools.items[{i}].image"), img.clone()));
        }
        for (j, c) in pool.init_containers.iter().flatten().enumerate() {
            seen.push((
                format!("pools.items[{i}].initContainers[{j}].image"),
                c["image"].as_str().unwrap_or_default().to_owned(),
            ));
        }
    }
    let cfg = &p.sections.opensandbox.server.config;
    seen.push(("opensandbox.server.config.runtime.execdImage".into(), cfg.runtime.execd_image.clone()));
    if let Some(e) = &cfg.egress {
        seen.push(("opensandbox.server.config.egress.image".into(), e.image.clone()));
    }
    seen.push(("verify.probeImage".into(), p.verify.probe_image.clone()));
    seen.push(("verify.hostProbeImage".into(), p.verify.host_probe_image.clone()));
    seen.push(("verify.workload.dockerImage".into(), p.verify.workload.docker_image.clone()));
    if let Some(image) = &p.verify.workload.kind_node_image {
        seen.push(("verify.workload.kindNodeImage".into(), image.clone()));
    }
    for (field, image) in seen {
        if !image.is_empty() && !pinned(&image) {
            l.add(
                "image.unpinned",
                Severity::Warning,
                &field,
                format!("image {image:?} has no tag or digest: every node may run something different"),
                "pin a tag, or better a digest (image@sha256:…)",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::pinned;

    #[test]
    fn image_pins() {
        assert!(pinned("busybox:1.37"));
        assert!(pinned("registry:5000/x/y:v1"));
        assert!(pinned("x@sha256:abc"));
        assert!(!pinned("busybox"));
        assert!(!pinned("registry:5000/x/y"));
        assert!(!pinned("busybox:latest"));
    }
}
