//! `kata.host-kvm` against this machine's real `/dev/kvm`, and the diagnoses of pods that never
//! ran, with the messages seen from real nodes.

use super::{assert_check, world as kata_world};
use crate::e2e::SERIAL;
use crate::node::report;
use crate::played::kata::{Runtime, Vmm};
use crate::verify::World;

/// `/dev/kvm` here is `kvm_pvm` (Pagetable-based VM inside a Firecracker guest):
/// `KVM_CREATE_VM` works, yet a stock guest kernel dies in `KVM_RUN`. The check passed on that;
/// it must fail naming the module.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_kvm_check_says_this_hosts_kvm_is_pvm() {
    let _turn = SERIAL.lock().await;
    assert!(std::path::Path::new("/sys/module/kvm_pvm").is_dir(), "this test describes a PVM host");
    let (world, _shim) = kata_world("kata-qemu", Vmm::Qemu { shared: true }, Runtime::Go).await;
    let (code, checks) = world.verify("kata.host-kvm").await;
    report(&checks);
    assert_check(
        &checks,
        "kata.host-kvm",
        "FAIL",
        &["vf-node: /dev/kvm is kvm_pvm", "a stock guest kernel dies in KVM_RUN", "hardware virtualisation"],
    );
    assert_eq!(code, Some(1));
}

/// A host probe that never ran says nothing about KVM: no verdict, the event quoted, no
/// "enable VT-x". Kata pods that never got a sandbox are diagnosed from the messages containerd
/// and the Kata shim write: the shim binary missing, the agent never answering over the hybrid
/// vsock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_never_ran_are_diagnosed_from_their_sandbox_events() {
    let _turn = SERIAL.lock().await;
    let world = World::start().await;
    let cni = "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox \
               \"3f1c\": plugin type=\"bridge\" failed (add): failed to allocate for range 0: no IP addresses available";
    world.set(|s| s.sandbox_failure = Some(("FailedCreatePodSandBox".into(), cni.into())));
    let (_, checks) = world.verify("kata.host-kvm").await;
    report(&checks);
    assert_check(
        &checks,
        "kata.host-kvm",
        "ERROR",
        &["the host probe did not run", "event FailedCreatePodSandBox", "no IP addresses available"],
    );
    let c = crate::node::check(&checks, "kata.host-kvm");
    assert!(!c["fix"].as_str().unwrap_or_default().contains("VT-x"), "{c}");

    let shim = "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to start sandbox \"3f1c\": failed to \
                create containerd task: failed to create shim task: binary not installed \"containerd-shim-kata-clh-v2\"";
    world.set(|s| s.sandbox_failure = Some(("FailedCreatePodSandBox".into(), shim.into())));
    let (_, checks) = world.verify("kata.guest-kernel").await;
    report(&checks);
    assert_check(
        &checks,
        "kata.guest-kernel",
        "FAIL",
        &["the Kata shim binary is not installed", "binary not installed"],
    );

    let hvsock = "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to start sandbox \"3f1c\": \
                  Failed to Check if grpc server is working: timed out connecting to hybrid vsocket \
                  hvsock:/run/vc/vm/3f1c/clh.sock";
    world.set(|s| s.sandbox_failure = Some(("FailedCreatePodSandBox".into(), hvsock.into())));
    let (_, checks) = world.verify("kata.guest-kernel").await;
    report(&checks);
    assert_check(&checks, "kata.guest-kernel", "FAIL", &["its agent never answered over the hybrid vsock", "clh.sock"]);
}
