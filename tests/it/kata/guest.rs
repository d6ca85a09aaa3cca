//! `kata.guest-kernel` against a real guest kernel booted by QEMU.

use super::{assert_check, world as kata_world};
use crate::node::report;
use crate::played::kata::{Runtime, Vmm};
use crate::turns::{self, Need};

/// The Go runtime boots an initrd guest with `agent.*` kernel parameters and without
/// `systemd.unit=kata-containers.target` (the marker the check used to require: a healthy Go
/// Kata pod failed); runtime-rs adds the marker. Both pass: the guest's kernel is not the node's,
/// its CPU says it is virtual, and the Kata agent's parameters are on its command line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_guest_passes_with_or_without_the_systemd_marker() {
    let _turn = turns::take(Need::Kata).await;
    for (class, runtime, marker) in
        [("kata-qemu", Runtime::Go, "false"), ("kata-qemu-runtime-rs", Runtime::Rust, "true")]
    {
        let (world, _shim) = kata_world(class, Vmm::Qemu { shared: true }, runtime).await;
        let (code, checks) = world.verify("kata.guest-kernel").await;
        report(&checks);
        assert_check(
            &checks,
            "kata.guest-kernel",
            "PASS",
            &[
                &format!("guest {} on node vf-node", super::guest_release()),
                "hypervisor flag true",
                "agent parameters [agent.log=debug agent.cdh_api_timeout=50]",
                &format!("systemd marker {marker}"),
            ],
        );
        assert_eq!(code, Some(0), "{class}");
    }
}
