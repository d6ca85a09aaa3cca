//! What profile sections are made of, below the components that own them: syntax rules (names,
//! durations, repository paths), shared value types (resources, images), the rules'
//! [`Violations`], field locations, and the `cluster` section every component may read.

mod cluster;
mod locate;
pub(crate) mod mirror;
pub(crate) mod secrets;
pub(crate) mod syntax;
pub(crate) mod values;
mod violations;

pub use cluster::TargetCluster;
pub(crate) use cluster::{FLUX_HEALTH_EXPRS, KUBERNETES_VERSION};
pub use locate::{Locations, Pos};
pub use mirror::{Images, Mirror};
pub use secrets::{Sealed, Secrets, Sops};
pub use violations::{Violation, Violations};
