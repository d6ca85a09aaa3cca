//! `kata.vmm-shared-memory` against the real QEMU process and Cloud Hypervisor's played API.

use super::{assert_check, world as kata_world};
use crate::node::report;
use crate::played::kata::{Runtime, Vmm};
use crate::turns::{self, Need};
use crate::verify::World;

/// `osbx verify --only kata.vmm-shared-memory` on `world`, its checks reported: the check ends
/// `outcome` with each of `fragments`; returns verify's exit code.
async fn vmm_shared_memory(world: &World, outcome: &str, fragments: &[&str]) -> Option<i32> {
    let (code, checks) = world.verify("kata.vmm-shared-memory").await;
    report(&checks);
    assert_check(&checks, "kata.vmm-shared-memory", outcome, fragments);
    code
}

/// QEMU (the Go runtime's layout, `/run/vc/vm/<id>/qmp.sock`): with guest RAM on a memfd backend
/// `share=on`, QMP `query-memdev` says so and the QEMU process maps it `rw-s`: PASS; with
/// `share=off`, both say otherwise: FAIL with that evidence. (The check knew only runtime-rs
/// Cloud Hypervisor: it failed every QEMU sandbox for a missing `ch-api.sock`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qemu_guest_ram_shared_or_not_as_the_real_vmm_says() {
    let _turn = turns::take(Need::Kata).await;
    let (world, _shim) = kata_world("kata-qemu", Vmm::Qemu { shared: true }, Runtime::Go).await;
    let code = vmm_shared_memory(
        &world,
        "PASS",
        &[
            "(QEMU, qemu)",
            "QMP query-memdev [mem 256 MiB share=true]",
            "256 MiB rw-s /memfd:memory-backend-memfd (deleted)",
        ],
    )
    .await;
    assert_eq!(code, Some(0));
    drop(world);

    let (world, _shim) = kata_world("kata-qemu-runtime-rs", Vmm::Qemu { shared: false }, Runtime::Rust).await;
    let code = vmm_shared_memory(
        &world,
        "FAIL",
        &["share=false", "guest RAM is not shared: virtio-fs requires shared memory"],
    )
    .await;
    assert_eq!(code, Some(1));
}

/// Cloud Hypervisor answers `vm.info` and keeps the connection open even when asked to close:
/// the check read until EOF and timed out on a healthy VM. Both layouts: the Go runtime's
/// `/run/vc/vm/<id>/clh-api.sock` and runtime-rs's `/run/kata/<id>/ch-api.sock`; guest RAM is the
/// `ch_ram` memfd mapped shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_hypervisor_kept_open_go_and_runtime_rs() {
    let _turn = turns::take(Need::Kata).await;
    for (class, runtime) in [("kata-clh", Runtime::Go), ("kata-clh-runtime-rs", Runtime::Rust)] {
        let (world, _shim) = kata_world(class, Vmm::CloudHypervisor, runtime).await;
        let code = vmm_shared_memory(
            &world,
            "PASS",
            &["(Cloud Hypervisor", "vm.info memory.shared true", "1024 MiB rw-s /memfd:ch_ram (deleted)"],
        )
        .await;
        assert_eq!(code, Some(0), "{class}");
    }
}

/// Shims whose guest shares no memory with the host are not applicable, with the reason, not a
/// false FAIL; a remote VM has no host KVM to check; a class whose shim cannot be told is
/// skipped saying how to name it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_that_do_not_apply_to_a_shim_say_why() {
    let _turn = turns::take(Need::Kata).await;
    let world = World::start().await;
    for (class, check, why) in [
        ("kata-fc", "kata.vmm-shared-memory", "Firecracker gives the guest block devices"),
        ("kata-qemu-snp", "kata.vmm-shared-memory", "qemu-snp is confidential"),
        ("kata-remote", "kata.host-kvm", "the VM runs outside the node"),
        ("my-kata", "kata.vmm-shared-memory", "set verify.kataShim"),
    ] {
        crate::verify::profile().pool_set("vm", "runtimeClassName", class).write_to(world.dir.path());
        let (_, checks) = world.verify(check).await;
        assert_check(&checks, check, "SKIP", &[why]);
    }
}
