//! The integration test binary: one target so that shared setup happens once.

mod apply;
mod architecture;
mod bench_smoke;
mod builder;
mod charts;
mod cli;
mod cluster;
mod docs;
mod e2e;
mod examples;
mod fleet;
mod kata;
mod leftovers;
mod lint;
mod node;
mod opensandbox_controller;
mod plane;
#[path = "../played/mod.rs"]
mod played;
mod profile_rules;
mod reference;
mod reliability;
mod render_lifecycle;
mod review;
mod rollout_first_run;
mod rollout_plan;
mod secrets;
mod support;
mod turns;
mod verify;
