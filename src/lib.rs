//! osbx renders, applies and verifies an OpenSandbox platform on Kubernetes with Flux.
//!
//! Data flows one way:
//!
//! ```text
//! cli → commands (settings) → profile (load + validate; components own their sections)
//!     → render (Tera → objects + files) ─┬→ repo (stage, atomic write, git)
//!                                        ├→ deploy (plan → preflight → execute) → cluster
//!                                        │  (ssa, diff, wait, inventory)
//!                                        └→ review (a git ref's tree vs the render, charts
//!                                           expanded; deploy's comparison of two renders)
//! verify: checks over the cluster;  every command → printer
//! ```
//!
//! Domain modules return values and errors; only [`printer`] writes to the terminal.

#![warn(missing_docs, unreachable_pub)]

mod changeset;
mod chart;
pub mod cli;
pub mod cluster;
pub mod commands;
pub mod components;
pub mod deploy;
mod embedded;
pub mod fleet;
mod flux;
mod hash;
mod images;
mod init;
mod lint;
mod mark;
mod merge;
mod object;
mod overview;
pub mod printer;
pub mod profile;
pub mod progress;
pub mod rbac;
mod readiness;
mod refs;
mod registry;
pub mod render;
mod repo;
mod review;
mod rollout;
mod secrets;
mod sops;
mod spec;
pub mod timing;
pub mod verify;

pub use commands::run;
