//! The pools' images onto the mirror and by their pinned digests (`images`).

use serde_json::Value;

use crate::components::Sections;
use crate::spec::{Images, Violations};

/// Every pool's images onto the mirror: the main container's and each init container's, of
/// `defaults` and of each pool (the pull Secrets reach the Pools' pods through the template).
pub(super) fn images(s: &mut Sections, images: &Images, v: &mut Violations) {
    if !images.rewrites() {
        return;
    }
    let templates = std::iter::once((
        "pools.defaults".to_owned(),
        &mut s.pools.defaults.image,
        &mut s.pools.defaults.init_containers,
    ));
    let pools = s
        .pools
        .items
        .iter_mut()
        .enumerate()
        .map(|(i, p)| (format!("pools.items[{i}]"), &mut p.image, &mut p.init_containers));
    for (at, image, init) in templates.chain(pools) {
        if let Some(image) = image {
            images.rewrite(image, &format!("{at}.image"), v);
        }
        for (i, container) in init.iter_mut().flatten().enumerate() {
            if let Some(Value::String(image)) = container.get_mut("image") {
                images.rewrite(image, &format!("{at}.initContainers[{i}].image"), v);
            }
        }
    }
}
