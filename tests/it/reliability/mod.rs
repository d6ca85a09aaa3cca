//! What real use brings besides a dead server: two applies at once, a bad network, a
//! least-privilege CI account, long fuzzing, and verify under load.

mod faults;
mod forward_proxy;
mod fuzz;
mod inventory;
mod load;
mod proxy;
pub(crate) mod rbac;
