//! Secrets in git (`secrets.sops`): each Secret a component reads whose value the user supplies
//! ([`crate::components::Component::supplied`]) kept as a SOPS file in the layer that renders
//! the component, `<layer path>/<secret name>.sops.yaml`, which Flux's kustomize-controller
//! decrypts with the cluster's age key.
//!
//! A sealed file is the user's data, not render output: `osbx secret set` writes it, the render
//! lists it in its layer's `kustomization.yaml` and keeps its bytes (so `render --check` stays
//! clean and a re-render commits nothing), and re-encrypts only its data key when the profile's
//! recipients change. No plaintext value is ever written to disk or printed.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::json;

use crate::components::Supplied;
use crate::object::{KnownKind, Object, ObjectRef};
use crate::profile::{LoadedProfile, Profile};
use crate::sops::{File, Identities, SopsError};
use crate::spec::Sealed;

mod sealing;

pub(crate) use sealing::{Mismatch, mismatches, update};

/// The key of the decryption Secret that holds the age identity (Flux's convention: a key
/// ending in `.agekey`).
pub(crate) const AGE_KEY: &str = "age.agekey";

/// Why a secrets step failed. Values never appear in one.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SecretsError {
    /// A sealed file is malformed, tampered or cannot be opened.
    #[error("{path}: {source}")]
    File {
        /// Repository-relative (or given) path.
        path: String,
        /// What is wrong.
        #[source]
        source: SopsError,
    },
    /// A file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file it could not read or write.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The profile keeps no secrets in git.
    #[error("the profile has no `secrets.sops`: its Secrets are created by `osbx apply` from the value it is given")]
    NotConfigured,
    /// A value given to a run (`OSBX_API_KEY`, `--api-key-file`) while the profile keeps its
    /// Secrets in git.
    #[error(
        "the profile keeps its Secrets in git (secrets.sops): set the API key with `osbx secret set`, not with OSBX_API_KEY or --api-key-file"
    )]
    ValueInGit,
    /// No supplied Secret has that name.
    #[error("the profile supplies no Secret named `{name}` (it supplies: {known})")]
    Unknown {
        /// The name given.
        name: String,
        /// The names it supplies.
        known: String,
    },
    /// The identity given cannot be read.
    #[error("the age identity in {origin}: {source}")]
    Identity {
        /// Where it came from (a path, or `SOPS_AGE_KEY`).
        origin: String,
        /// What is wrong (never the key).
        #[source]
        source: SopsError,
    },
    /// The file given as the cluster's identity holds more than one.
    #[error(
        "{path} holds {count} age identities: the cluster's decryption Secret takes exactly one, the cluster's own (one of secrets.sops.age); write that one alone to a file of its own, never hand over a key file with others' keys"
    )]
    SeveralIdentities {
        /// The file.
        path: String,
        /// How many identities it holds.
        count: usize,
    },
    /// The identity given as the cluster's is not one of the profile's recipients.
    #[error(
        "{path} holds the identity of {recipient}, which is not one of secrets.sops.age: Flux could not decrypt with it; give the identity of the recipient that is the cluster's"
    )]
    NotARecipient {
        /// The file.
        path: String,
        /// The identity's recipient (its public key).
        recipient: String,
    },
    /// Recipients changed and no identity can re-encrypt the data key.
    #[error(
        "{path} is encrypted for other recipients than secrets.sops.age (added: {added}; removed: {removed}); re-encrypting its data key needs an identity that opens it now: set SOPS_AGE_KEY_FILE or pass --age-key-file"
    )]
    RekeyNeedsIdentity {
        /// The file.
        path: String,
        /// Recipients the profile adds.
        added: String,
        /// Recipients the profile drops.
        removed: String,
    },
}

/// Where one supplied Secret is sealed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slot {
    /// The layer that renders the component reading it.
    pub(crate) layer: String,
    /// The file, relative to the repository root.
    pub(crate) path: String,
    /// The Secret and its key.
    pub(crate) supplied: Supplied,
}

impl Slot {
    /// The Secret's name: what `osbx secret set NAME` takes.
    #[must_use]
    pub(crate) fn name(&self) -> &str {
        &self.supplied.secret.name
    }

    /// The file name inside the layer's directory (its `kustomization.yaml` entry).
    #[must_use]
    pub(crate) fn file_name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// The profile's slots, in layer order; none without `secrets.sops`.
#[must_use]
pub(crate) fn slots(profile: &Profile) -> Vec<Slot> {
    if profile.secrets.sops.is_none() {
        return Vec::new();
    }
    profile
        .rendered_layers()
        .filter_map(|l| {
            let supplied = (l.renders()?.supplied)(&profile.sections)?;
            Some(Slot {
                layer: l.name.clone(),
                path: format!("{}/{}.sops.yaml", l.repo_path(), supplied.secret.name),
                supplied,
            })
        })
        .collect()
}

/// The slot of the Secret named `name`.
///
/// # Errors
/// [`SecretsError::NotConfigured`], [`SecretsError::Unknown`].
pub(crate) fn slot(profile: &Profile, name: &str) -> Result<Slot, SecretsError> {
    if profile.secrets.sops.is_none() {
        return Err(SecretsError::NotConfigured);
    }
    let all = slots(profile);
    let known = all.iter().map(|s| s.name().to_owned()).collect::<Vec<_>>().join(", ");
    all.into_iter().find(|s| s.name() == name).ok_or_else(|| SecretsError::Unknown {
        name: name.to_owned(),
        known: if known.is_empty() { "none".into() } else { known },
    })
}

/// The decryption Secret the layers name (`<flux namespace>/<secrets.sops.secretRef>`).
#[must_use]
pub(crate) fn decryption_secret(profile: &Profile) -> Option<ObjectRef> {
    let sops = profile.secrets.sops.as_ref()?;
    Some(KnownKind::SECRET.object(Some(&profile.cluster.flux_namespace), &sops.secret_ref))
}

/// The decryption Secret holding the cluster's identity (its file's text).
#[must_use]
pub(crate) fn decryption_object(profile: &Profile, key: &ClusterKey) -> Option<Object> {
    let identity_text = &key.text;
    let id = decryption_secret(profile)?;
    let value = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": id.name, "namespace": id.namespace,
                     "labels": crate::mark::owned_labels()},
        "type": "Opaque",
        "data": {AGE_KEY: base64::engine::general_purpose::STANDARD.encode(identity_text)},
    });
    Object::new(value).ok()
}

/// The sealed files of the profile that exist under `root` (a Flux repository's work tree).
///
/// # Errors
/// [`SecretsError::Io`] when a file exists but cannot be read.
pub(crate) fn read(profile: &Profile, root: &Path) -> Result<Sealed, SecretsError> {
    read_with(profile, |rel| {
        let path = root.join(rel);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(SecretsError::Io { path: path.display().to_string(), source }),
        }
    })
}

/// The sealed files of the profile that `get` finds (a repository path → its text, if any):
/// from a work tree, or from a commit.
///
/// # Errors
/// What `get` returns.
pub(crate) fn read_with<E>(profile: &Profile, get: impl Fn(&str) -> Result<Option<String>, E>) -> Result<Sealed, E> {
    let mut sealed = Sealed::default();
    for slot in slots(profile) {
        if let Some(text) = get(&slot.path)? {
            sealed.0.insert(slot.path, text);
        }
    }
    Ok(sealed)
}

/// Fill `loaded.sealed` from the repository at `root`.
///
/// # Errors
/// As [`read`].
pub(crate) fn attach(loaded: &mut LoadedProfile, root: &Path) -> Result<(), SecretsError> {
    loaded.sealed = read(&loaded.profile, root)?;
    Ok(())
}

/// A sealed file's revision: a hash of its encrypted MAC, which changes with every new value
/// and says nothing about it.
///
/// # Errors
/// [`SecretsError::File`] when the file is not a SOPS file.
pub(crate) fn revision(path: &str, text: &str) -> Result<String, SecretsError> {
    let file = File::parse(text).map_err(|source| SecretsError::File { path: path.to_owned(), source })?;
    Ok(crate::hash::sha256_hex(file.mac().as_bytes())[..12].to_owned())
}

/// The identities this run was given to open sealed files: `--age-key-file`, else
/// `SOPS_AGE_KEY_FILE`, else `SOPS_AGE_KEY` (the key itself, as `sops` reads it). They open
/// files and nothing else: the cluster's decryption Secret is made only from a
/// [`ClusterKey`], given for that purpose.
///
/// # Errors
/// [`SecretsError::Io`] for an unreadable file, [`SecretsError::Identity`] for one that holds
/// no key.
pub(crate) fn identities(flag: Option<&Path>) -> Result<Option<Identities>, SecretsError> {
    let from_env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let (text, origin) =
        if let Some(path) = flag.map(Path::to_path_buf).or_else(|| from_env("SOPS_AGE_KEY_FILE").map(PathBuf::from)) {
            let text = std::fs::read_to_string(&path)
                .map_err(|source| SecretsError::Io { path: path.display().to_string(), source })?;
            (text, path.display().to_string())
        } else if let Some(key) = from_env("SOPS_AGE_KEY") {
            (key.to_string_lossy().into_owned(), "SOPS_AGE_KEY".to_owned())
        } else {
            return Ok(None);
        };
    Identities::parse(&text).map(Some).map_err(|source| SecretsError::Identity { origin, source })
}

/// The cluster's own age identity, from the file given to create the decryption Secret with
/// (`osbx apply --create-decryption-secret FILE`).
pub(crate) struct ClusterKey {
    /// The identity, which also opens the sealed files.
    pub(crate) identities: Identities,
    /// Its recipient: the entry of `secrets.sops.age` that is the cluster's.
    pub(crate) recipient: String,
    /// Where that entry is (`secrets.sops.age[i]`).
    pub(crate) index: usize,
    /// The file it came from.
    pub(crate) origin: String,
    /// The file's text, which the decryption Secret holds (never printed).
    text: String,
}

/// Read the cluster's identity from `path`: the file must hold exactly one age identity (a
/// person's key file, with several, is refused: its other keys are not the cluster's to hold),
/// and its recipient must be one of `secrets.sops.age`.
///
/// # Errors
/// [`SecretsError::NotConfigured`] without `secrets.sops`; [`SecretsError::Io`],
/// [`SecretsError::Identity`] for a file that cannot be read or holds no key;
/// [`SecretsError::SeveralIdentities`], [`SecretsError::NotARecipient`].
pub(crate) fn cluster_key(profile: &Profile, path: &Path) -> Result<ClusterKey, SecretsError> {
    let sops = profile.secrets.sops.as_ref().ok_or(SecretsError::NotConfigured)?;
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| SecretsError::Io { path: origin.clone(), source })?;
    let identities =
        Identities::parse(&text).map_err(|source| SecretsError::Identity { origin: origin.clone(), source })?;
    if identities.len() != 1 {
        return Err(SecretsError::SeveralIdentities { path: origin, count: identities.len() });
    }
    let recipient = identities.recipients().remove(0);
    let Some(index) = sops.age.iter().position(|r| *r == recipient) else {
        return Err(SecretsError::NotARecipient { path: origin, recipient });
    };
    Ok(ClusterKey { identities, recipient, index, origin, text })
}

/// One supplied Secret of a profile that keeps its Secrets in git, as `osbx secret list` shows
/// it (never its value).
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Listed {
    /// The Secret's name.
    pub(crate) name: String,
    /// Its namespace.
    pub(crate) namespace: Option<String>,
    /// The key of its data the workloads read.
    pub(crate) key: String,
    /// The layer it is applied with.
    pub(crate) layer: String,
    /// Its sealed file.
    pub(crate) path: String,
    /// `not set`, `sealed`, or `sealed for other recipients`.
    pub(crate) state: &'static str,
    /// The recipients its file is encrypted for.
    pub(crate) recipients: Vec<String>,
}

/// Every supplied Secret of `loaded` (its sealed files attached) with the state of its file.
///
/// # Errors
/// [`SecretsError::File`] for a file that is not a SOPS file.
pub(crate) fn list(loaded: &LoadedProfile) -> Result<Vec<Listed>, SecretsError> {
    let mismatched = mismatches(loaded)?;
    let mut out = Vec::new();
    for slot in slots(&loaded.profile) {
        let file = loaded.sealed.0.get(&slot.path).map(|t| File::parse(t)).transpose();
        let file = file.map_err(|source| SecretsError::File { path: slot.path.clone(), source })?;
        let state = match (&file, mismatched.iter().any(|m| m.path == slot.path)) {
            (None, _) => "not set",
            (Some(_), true) => "sealed for other recipients",
            (Some(_), false) => "sealed",
        };
        out.push(Listed {
            name: slot.name().to_owned(),
            namespace: slot.supplied.secret.namespace.clone(),
            key: slot.supplied.key.clone(),
            layer: slot.layer.clone(),
            path: slot.path.clone(),
            state,
            recipients: file.as_ref().map(File::recipients).unwrap_or_default(),
        });
    }
    Ok(out)
}

/// The profile's sealed Secrets decrypted, each with its layer: what kustomize-controller
/// applies, for `osbx apply` and `osbx diff`.
///
/// # Errors
/// [`SecretsError::File`]: no identity, none that opens the file, a tampered or malformed file.
pub(crate) fn open(loaded: &LoadedProfile, ids: Option<&Identities>) -> Result<Vec<(String, Object)>, SecretsError> {
    let mut out = Vec::new();
    for slot in slots(&loaded.profile) {
        let Some(text) = loaded.sealed.0.get(&slot.path) else { continue };
        let err = |source| SecretsError::File { path: slot.path.clone(), source };
        let file = File::parse(text).map_err(err)?;
        let ids = ids.ok_or_else(|| err(SopsError::NoIdentity))?;
        let plain = file.decrypt(ids).map_err(err)?;
        let object =
            Object::new(plain).map_err(|e| err(SopsError::Malformed(format!("not a Kubernetes object: {e}"))))?;
        out.push((slot.layer.clone(), object));
    }
    Ok(out)
}
