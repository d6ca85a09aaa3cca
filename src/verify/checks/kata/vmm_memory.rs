//! `kata.vmm-shared-memory`: how the VMM of a running Kata sandbox backs guest RAM.

use futures::future::BoxFuture;
use serde_json::Value;

use super::{if_kata, kata_shim, stuck_verdict};
use crate::cluster::operation::Operation;
use crate::components::kata::shim::{Shim, Vmm};
use crate::profile::Profile;
use crate::verify::probe::{self, ProbeEnd};
use crate::verify::{Check, Ctx, Reach, Verdict, scripts};

pub(in crate::verify::checks) struct VmmSharedMemory;

impl Check for VmmSharedMemory {
    fn ids(&self) -> Vec<String> {
        vec!["kata.vmm-shared-memory".into()]
    }

    /// A target pod and a host probe pod.
    /// Its host probe (or, for a build pool, its privileged probe) uses the node.
    fn uses_the_node(&self, _: &Profile) -> bool {
        true
    }

    /// The guest it measures runs the probe image; the host probe reads the VMM.
    fn images(&self, profile: &Profile) -> Vec<String> {
        vec![profile.verify.probe_image.clone(), profile.verify.host_probe_image.clone()]
    }

    fn operations(&self, profile: &Profile, _: &Reach) -> Vec<Operation> {
        if_kata(profile, || vec![Operation::Probe(None)])
    }

    fn run<'a>(&'a self, ctx: &'a Ctx) -> BoxFuture<'a, Vec<Verdict>> {
        Box::pin(async move {
            if ctx.profile.sections.pools.kata_classes().is_empty() {
                return vec![Verdict::skip("no Kata pool in the profile")];
            }
            let (class, shim) = match kata_shim(&ctx.profile) {
                Ok(s) => s,
                Err(why) => return vec![Verdict::skip(why)],
            };
            if let Some(why) = shim.shared_memory_not_applicable() {
                return vec![Verdict::skip(format!("not applicable: {why}"))];
            }
            let v = &ctx.profile.verify;
            let target = probe::pod(
                &ctx.run,
                "kata-target",
                "kata-target",
                &scripts::kata_target(&ctx.run, &v.probe_image, &class),
            );
            let (ns, name) = match probe::create_pod(&ctx.cluster, &target).await {
                Ok(created) => created,
                Err(e) => return vec![Verdict::error("creating the Kata target pod", e.to_string())],
            };
            let pod = match probe::wait_running(&ctx.cluster, &ns, &name, ctx.run.wait_limit()).await {
                Err(e) => return vec![Verdict::error("reading the Kata target pod", e.to_string())],
                Ok(Err(diagnosis)) => return vec![stuck_verdict("the Kata target pod", &diagnosis)],
                Ok(Ok(pod)) => pod,
            };
            let (node, cid) = crate::verify::probe::node_and_container(&pod);
            let run_dir = v.kata_run_dir.clone().unwrap_or_else(|| shim.run_dir().to_owned());
            let target = scripts::VmmTarget {
                container_id: &cid,
                task_dir: &v.containerd_task_dir,
                run_dir: &run_dir,
                vmm: match shim.vmm {
                    Vmm::Qemu => "qemu",
                    Vmm::CloudHypervisor => "clh",
                    _ => "dragonball",
                },
                api_socket: shim.api_socket(),
            };
            let spec = scripts::vmm_memory(&ctx.run, &node, &v.host_probe_image, &target);
            let probe_pod = probe::pod(&ctx.run, "vm-info", "vm-info", &spec);
            let end = match probe::run_pod(&ctx.cluster, &probe_pod, ctx.run.wait_limit()).await {
                Ok(e) => e,
                Err(e) => return vec![Verdict::error("creating the host probe", e.to_string())],
            };
            vec![match end {
                ProbeEnd::Stuck { diagnosis } => stuck_verdict("the VMM memory host probe", &diagnosis),
                ProbeEnd::Terminated { message, .. } => match probe::json_line(&message) {
                    None => Verdict::error("no result line", message),
                    Some(r) => memory_verdict(&r, shim, &node),
                },
            }]
        })
    }
}

/// The verdict on what the VMM-memory probe read: the VMM's API (where it has one) must say
/// guest RAM is shared, and the VMM's own memory maps must show it mapped shared.
fn memory_verdict(r: &Value, shim: &Shim, node: &str) -> Verdict {
    let sid = r["sandbox_id"].as_str().unwrap_or("?");
    let at = format!("sandbox {sid} on {node} ({}, {})", shim.vmm, shim.name);
    if let Some(err) = r["error"].as_str() {
        let why = if err.contains("missing") {
            format!("{err}: the VM is gone, or the shim keeps its sockets elsewhere (set verify.kataRunDir)")
        } else if err.contains("shared memory or huge pages") {
            "virtio-fs without shared memory (Cloud Hypervisor refuses vhost-user devices)".to_owned()
        } else {
            err.to_owned()
        };
        return Verdict::fail(at, why);
    }
    let mib = |b: &Value| b.as_u64().map_or_else(|| "?".to_owned(), |b| format!("{} MiB", b / (1 << 20)));
    let (api_says, api_shared, api_size) = match shim.vmm {
        Vmm::CloudHypervisor => {
            let a = &r["api"];
            let fs: Vec<&str> = a["fs_tags"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            if a["state"] != "Running" {
                return Verdict::fail(format!("{at}: vm.info state {}", a["state"]), "the VM is not Running");
            }
            if !fs.contains(&"kataShared") {
                return Verdict::fail(
                    format!("{at}: vm.info fs [{}]", fs.join(", ")),
                    "no kataShared virtio-fs device",
                );
            }
            let shared = a["shared"] == true || a["hugepages"] == true;
            let said = format!(
                "vm.info memory.shared {}, hugepages {}, size {}, fs kataShared",
                a["shared"],
                a["hugepages"],
                mib(&a["size"])
            );
            (Some(said), shared, a["size"].as_u64())
        }
        Vmm::Qemu => {
            let devs = r["api"]["memdevs"].as_array().cloned().unwrap_or_default();
            let said: Vec<String> = devs
                .iter()
                .map(|d| {
                    let kind = d["type"].as_str().map(|t| format!(" {t}")).unwrap_or_default();
                    format!("{}{kind} {} share={}", d["id"].as_str().unwrap_or("?"), mib(&d["size"]), d["share"])
                })
                .collect();
            let shared: Vec<&Value> = devs.iter().filter(|d| d["share"] == true).collect();
            let size = shared.iter().filter_map(|d| d["size"].as_u64()).sum::<u64>();
            (Some(format!("QMP query-memdev [{}]", said.join("; "))), !shared.is_empty(), Some(size))
        }
        _ => (None, true, None),
    };
    let maps = &r["maps_shared"];
    let pid = r["vmm_pid"].as_u64();
    let mapped = maps["size"].as_u64().unwrap_or(0);
    let maps_said = match pid {
        None => "no VMM process with the sandbox id in its command line".to_owned(),
        Some(pid) if maps.is_null() => format!("/proc/{pid}/maps: nothing mapped shared"),
        Some(pid) => format!(
            "/proc/{pid}/maps: {} {} {}",
            mib(&maps["size"]),
            maps["perms"].as_str().unwrap_or(""),
            maps["name"].as_str().unwrap_or("")
        ),
    };
    let evidence = format!("{at}: {}{maps_said}", api_says.as_ref().map(|a| format!("{a}; ")).unwrap_or_default());
    // Guest RAM is the VMM's largest mapping: at least half of it mapped shared (or 64 MiB when
    // the VMM has no API that says its size).
    let enough = api_size.filter(|s| *s > 0).map_or(64 << 20, |s| s / 2);
    if !api_shared {
        Verdict::fail(evidence, "guest RAM is not shared: virtio-fs requires shared memory (Cloud Hypervisor memory.shared, a QEMU memory backend with share=on)")
            .with_fix("check shared_fs, enable_hugepages and the drop-ins of the Kata configuration")
    } else if pid.is_none() {
        Verdict::fail(evidence, "the VMM process was not found on the node")
    } else if mapped < enough {
        Verdict::fail(evidence, "the VMM's guest RAM is mapped private, not shared")
            .with_fix("check shared_fs, enable_hugepages and the drop-ins of the Kata configuration")
    } else {
        Verdict::pass(evidence)
    }
}
