//! Render speed in process: the homelab profile, and fleets of 10, 100, 1,000 and 10,000
//! generated clusters (load + render, every tenth cluster with its own pool size), and the
//! process's peak memory after the largest. Run by `bench/run` (`cargo bench --bench render`);
//! prints one line per measurement.
#![allow(clippy::print_stdout)]

use std::fmt::Write as _;
use std::time::Instant;

use osbx::profile::{ProfileSource, load};
use osbx::render::Renderer;

fn main() {
    let n = 50u32;
    let start = Instant::now();
    let renderers: Vec<Renderer> = (0..n).map(|_| osbx::commands::renderer(None).expect("templates")).collect();
    let compile = start.elapsed().as_secs_f64() * 1000.0 / f64::from(n);
    let homelab = load(&ProfileSource::Embedded("homelab".into())).expect("homelab");
    // A fresh renderer each time: nothing of an earlier render is reused.
    let start = Instant::now();
    for renderer in &renderers {
        renderer.render(&homelab).expect("render");
    }
    let per = start.elapsed().as_secs_f64() * 1000.0 / f64::from(n);
    println!(
        "render homelab: {per:.2} ms per render (target < 5 ms); compiling the templates once per run: {compile:.1} ms"
    );
    let renderer = osbx::commands::renderer(None).expect("templates");

    let dir = tempfile::tempdir().expect("tempdir");
    let mut previous: Option<(usize, f64)> = None;
    for clusters in [10usize, 100, 1000, 10_000] {
        let mut fleet = String::from(
            "apiVersion: osbx.dev/v1alpha1\nkind: Fleet\nmetadata: {name: bench}\nbase: homelab\nclusters:\n",
        );
        for i in 0..clusters {
            let _ = writeln!(fleet, "  - name: c-{i}");
            if i % 10 == 0 {
                let _ = writeln!(
                    fleet,
                    "    overrides: {{pools: {{items: [{{name: ci-pod, capacity: {{poolMax: {}}}}}]}}}}",
                    4 + i % 7
                );
            }
        }
        let path = dir.path().join(format!("fleet-{clusters}.yaml"));
        std::fs::write(&path, fleet).expect("write fleet");
        let start = Instant::now();
        let loaded = osbx::fleet::load(&path, &osbx::progress::Silent).expect("fleet");
        let rendered = osbx::fleet::render(&loaded, &renderer).expect("render fleet");
        let ms = start.elapsed().as_secs_f64() * 1000.0;
        let growth =
            previous.map(|(c, t)| format!(", ×{:.1} time for ×{} clusters", ms / t, clusters / c)).unwrap_or_default();
        println!(
            "render fleet of {clusters}: {ms:.0} ms, {} files{growth}{}",
            rendered.files.len(),
            match clusters {
                1000 => " (target < 2 s)",
                10_000 => " (target < 10 s, linear)",
                _ => "",
            }
        );
        previous = Some((clusters, ms));
    }
    // The most this process held at once: the largest fleet, loaded and rendered.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let peak = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).map_or("unknown".into(), |v| v.trim().to_owned());
    println!("render fleet memory: peak RSS {peak} (the process, at 10,000 clusters)");
}
