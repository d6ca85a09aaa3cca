//! The `secrets` section: how the Secrets osbx supplies (the OpenSandbox API key, and any Secret a
//! component reads whose value the user gives) are kept. Without it they live only in the
//! cluster, created by `osbx apply`; with `sops`, they are committed to git encrypted for age
//! recipients and Flux's kustomize-controller decrypts them with the cluster's key.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Violations;

/// Where supplied Secrets are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Secrets {
    /// Commit them to git encrypted with SOPS for these age recipients (set each value with
    /// `osbx secret set`); without it, `osbx apply` creates them from the value it is given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sops: Option<Sops>,
}

/// SOPS with age, the way Flux decrypts (`spec.decryption: {provider: sops, secretRef}`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("required" = ["age"]))]
pub struct Sops {
    /// Who can decrypt: age public keys (`age1…`), the cluster's and any operator's. Changing
    /// the list re-encrypts each file's data key on the next `osbx render` (as `sops
    /// updatekeys`), which needs an identity that opens the files now.
    pub age: Vec<String>,
    /// The Secret in the Flux namespace that holds the cluster's age identity (key
    /// `age.agekey`), named in each layer's `spec.decryption.secretRef`; `osbx apply` creates it
    /// once from the key file it is given.
    pub secret_ref: String,
}

impl Default for Sops {
    fn default() -> Self {
        Self { age: Vec::new(), secret_ref: "sops-age".into() }
    }
}

impl Secrets {
    /// The section's rules: every recipient an age key, each once; the Secret's name.
    pub(crate) fn validate(&self, v: &mut Violations) {
        let Some(sops) = &self.sops else { return };
        if sops.age.is_empty() {
            v.push("secrets.sops.age", "no recipient: name at least the cluster's age public key (age1…)");
        }
        let mut seen = BTreeMap::new();
        for (i, r) in sops.age.iter().enumerate() {
            let at = format!("secrets.sops.age[{i}]");
            if let Err(e) = crate::sops::check_recipient(r) {
                v.push(&at, e.to_string());
            } else if let Some(first) = seen.insert(r.as_str(), i) {
                v.push(&at, format!("{r} is listed twice (also secrets.sops.age[{first}])"));
            }
        }
        v.dns_label("secrets.sops.secretRef", &sops.secret_ref);
    }
}

/// The sealed (SOPS-encrypted) Secret files of a profile as its repository holds them: repository
/// path → text. Filled by the commands that have a repository ([`crate::secrets::read`]); the
/// render lists each in its layer and marks the workloads that read it with its revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sealed(pub BTreeMap<String, String>);
