//! The docs, held to the code: the defaults docs/profile.md states are the schema's, every usage
//! line names exactly its command's flags, and every path the docs name exists.

mod defaults;
mod paths;
mod usage;
