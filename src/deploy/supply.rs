//! The Secrets a run adds to the render before it applies or compares: the value it was given
//! for the components' Secrets, or with `secrets.sops` the sealed files opened as
//! kustomize-controller opens them; and the cluster's decryption Secret, created once from the
//! cluster's own identity when it is missing.

use std::path::Path;

use super::{Layer, add_objects, add_supplied_secrets};
use crate::cluster::{Cluster, ClusterError};
use crate::object::ObjectRef;
use crate::profile::LoadedProfile;
use crate::secrets::{self, ClusterKey, SecretsError};
use crate::sops::Identities;

/// What a run was given to supply Secrets with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Given<'a> {
    /// The value of the components' Secrets (`--api-key-file`, `OSBX_API_KEY`).
    pub(crate) value: Option<&'a str>,
    /// The identities that open the sealed files (`--age-key-file`, else the environment's).
    pub(crate) age_key_file: Option<&'a Path>,
    /// The cluster's own identity, given to create its decryption Secret.
    pub(crate) cluster: Option<&'a Identities>,
    /// Whether every sealed file must open (apply), or a run without an identity goes on
    /// without them (diff).
    pub(crate) required: bool,
}

/// Add the Secrets `given` supplies to `layers` (the render of `loaded`). Returns what the run
/// should warn of: a supplied Secret with no value in git yet, sealed Secrets not compared.
///
/// # Errors
/// A value given while the profile keeps its Secrets in git ([`SecretsError::ValueInGit`]); an
/// identity that cannot be read; a sealed file that cannot be opened when `required`.
pub(crate) fn supply(
    loaded: &LoadedProfile,
    layers: &mut [Layer],
    given: Given<'_>,
) -> Result<Vec<String>, SecretsError> {
    let profile = &loaded.profile;
    if profile.secrets.sops.is_none() {
        if let Some(value) = given.value {
            add_supplied_secrets(profile, layers, value);
        }
        return Ok(Vec::new());
    }
    if given.value.is_some() {
        return Err(SecretsError::ValueInGit);
    }
    let ids = match (secrets::identities(given.age_key_file)?, given.cluster) {
        (Some(ids), Some(cluster)) => Some(ids.and(cluster)),
        (ids, cluster) => ids.or_else(|| cluster.cloned()),
    };
    let mut warnings: Vec<String> = secrets::slots(profile)
        .into_iter()
        .filter(|slot| !loaded.sealed.0.contains_key(&slot.path))
        .map(|slot| {
            format!(
                "{} has no value in git yet ({} is missing): set it with `osbx secret set {}`",
                slot.name(),
                slot.path,
                slot.name()
            )
        })
        .collect();
    match secrets::open(loaded, ids.as_ref()) {
        Ok(opened) => add_objects(layers, opened),
        Err(e) if !given.required && ids.is_none() => {
            warnings.push(format!("the sealed Secrets are not compared: {e}"));
        }
        Err(e) => return Err(e),
    }
    Ok(warnings)
}

/// What became of the cluster's decryption Secret ([`decryption_secret`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decryption {
    /// Nothing to create or to warn of: the profile seals no Secret, or (with no key given)
    /// the Secret exists or could not be read (the apply's own review says why).
    NotNeeded,
    /// It does not exist and no identity was given to create it: Flux cannot decrypt yet.
    Missing(ObjectRef),
    /// It exists: left as it is (it is never replaced).
    Exists(ObjectRef),
    /// It does not exist: added to the render, from the cluster's identity.
    Created {
        /// The Secret.
        id: ObjectRef,
        /// Where the identity came from (the file).
        origin: String,
        /// The identity's recipient.
        recipient: String,
        /// Its place in `secrets.sops.age`.
        index: usize,
    },
}

/// With `secrets.sops`: when the cluster has no decryption Secret, add it to `layers` from the
/// cluster's identity `key` (in the first layer that holds a sealed Secret); without a key,
/// say it is missing. An existing one is never replaced.
///
/// # Errors
/// [`ClusterError::Api`] when the read fails while a key was given (without one, a refused
/// read is left to the apply's own review).
pub(crate) async fn decryption_secret(
    cluster: &Cluster,
    loaded: &LoadedProfile,
    layers: &mut [Layer],
    key: Option<&ClusterKey>,
) -> Result<Decryption, ClusterError> {
    let profile = &loaded.profile;
    let (Some(id), Some(slot)) = (secrets::decryption_secret(profile), secrets::slots(profile).into_iter().next())
    else {
        return Ok(Decryption::NotNeeded);
    };
    let api = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
        cluster.client.clone(),
        id.namespace.as_deref().unwrap_or_default(),
    );
    let Some(key) = key else {
        return Ok(match api.get_metadata_opt(&id.name).await {
            Ok(None) => Decryption::Missing(id),
            _ => Decryption::NotNeeded,
        });
    };
    let exists = api
        .get_metadata_opt(&id.name)
        .await
        .map_err(|error| ClusterError::Api { subject: id.to_string(), error })?
        .is_some();
    if exists {
        return Ok(Decryption::Exists(id));
    }
    let Some(object) = secrets::decryption_object(profile, key) else { return Ok(Decryption::NotNeeded) };
    add_objects(layers, vec![(slot.layer, object)]);
    Ok(Decryption::Created { id, origin: key.origin.clone(), recipient: key.recipient.clone(), index: key.index })
}
