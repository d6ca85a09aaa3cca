//! A profile over time: `osbx render` removes what it no longer produces and survives a kill;
//! `osbx schema` and `osbx init` help people write profiles; minimal profiles work; large fleets
//! show progress.

mod owned;
mod progress;
mod schema;
mod starters;
