//! The integration test binary: one target so that shared setup happens once.

mod cli;
mod examples;
mod profile_rules;
mod reference;
mod support;
