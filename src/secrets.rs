//! Secrets in git (`secrets.sops`): each Secret a component reads whose value the user supplies
//! ([`crate::components::Component::supplied`]) kept as a SOPS file in the layer that renders
//! the component, `<layer path>/<secret name>.sops.yaml`, which Flux's kustomize-controller
//! decrypts with the cluster's age key.
//!
//! A sealed file is the user's data, not render output: `osbx secret set` writes it, the render
//! lists it in its layer's `kustomization.yaml` and keeps its bytes (so `render --check` stays
//! clean and a re-render commits nothing), and re-encrypts only its data key when the profile's
//! recipients change. No plaintext value is ever written to disk or printed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::components::Supplied;
use crate::object::{KnownKind, Object, ObjectRef};
use crate::profile::{LoadedProfile, Profile};
use crate::sops::{File, Identities, SopsError};
use crate::spec::Sealed;

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

/// The Secret of `slot` holding `value`, as committed (before encryption).
fn secret_document(slot: &Slot, value: &[u8]) -> Value {
    let id = &slot.supplied.secret;
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": id.name, "namespace": id.namespace},
        "type": "Opaque",
        "data": {slot.supplied.key.clone(): base64::engine::general_purpose::STANDARD.encode(value)},
    })
}

/// What sealing a value did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sealing {
    /// The file already holds this value for these recipients: nothing to write.
    Unchanged,
    /// The new file text.
    Written(String),
}

/// Seal `value` into `slot` for the profile's recipients. When the existing file opens with
/// `ids` and already holds this value for these recipients, it is kept byte for byte.
///
/// # Errors
/// [`SecretsError::NotConfigured`]; [`SecretsError::File`] when the existing file is tampered.
pub(crate) fn seal(
    profile: &Profile,
    slot: &Slot,
    value: &[u8],
    existing: Option<&str>,
    ids: Option<&Identities>,
) -> Result<Sealing, SecretsError> {
    let sops = profile.secrets.sops.as_ref().ok_or(SecretsError::NotConfigured)?;
    let doc = secret_document(slot, value);
    let err = |source| SecretsError::File { path: slot.path.clone(), source };
    if let (Some(text), Some(ids)) = (existing, ids) {
        let file = File::parse(text).map_err(err)?;
        match file.decrypt(ids) {
            Ok(plain) if plain == doc && same_set(&file.recipients(), &sops.age) => return Ok(Sealing::Unchanged),
            Ok(_) | Err(SopsError::NoMatchingIdentity { .. }) => {}
            Err(e) => return Err(err(e)),
        }
    }
    Ok(Sealing::Written(File::encrypt(&doc, &sops.age).map_err(err)?.to_yaml().map_err(err)?))
}

fn same_set(a: &[String], b: &[String]) -> bool {
    a.iter().collect::<BTreeSet<_>>() == b.iter().collect::<BTreeSet<_>>()
}

/// A sealed file encrypted for other recipients than the profile's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mismatch {
    /// The file.
    pub(crate) path: String,
    /// Recipients the profile adds.
    pub(crate) added: Vec<String>,
    /// Recipients the profile drops.
    pub(crate) removed: Vec<String>,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[String]| if v.is_empty() { "none".to_owned() } else { v.join(", ") };
        write!(
            f,
            "{} is encrypted for other recipients than secrets.sops.age (added: {}; removed: {})",
            self.path,
            list(&self.added),
            list(&self.removed)
        )
    }
}

/// The sealed files whose recipients differ from `secrets.sops.age`.
///
/// # Errors
/// [`SecretsError::File`] for a file that is not a SOPS file.
pub(crate) fn mismatches(loaded: &LoadedProfile) -> Result<Vec<Mismatch>, SecretsError> {
    let Some(sops) = &loaded.profile.secrets.sops else { return Ok(Vec::new()) };
    let want: BTreeSet<&String> = sops.age.iter().collect();
    let mut out = Vec::new();
    for (path, text) in &loaded.sealed.0 {
        let file = File::parse(text).map_err(|source| SecretsError::File { path: path.clone(), source })?;
        let now = file.recipients();
        let now: BTreeSet<&String> = now.iter().collect();
        if now != want {
            out.push(Mismatch {
                path: path.clone(),
                added: want.difference(&now).map(|s| (*s).clone()).collect(),
                removed: now.difference(&want).map(|s| (*s).clone()).collect(),
            });
        }
    }
    Ok(out)
}

/// The sealed files of [`mismatches`], their data keys re-encrypted with `ids` for the
/// profile's recipients (values, MAC and `lastmodified` unchanged): each with its new text.
///
/// # Errors
/// [`SecretsError::RekeyNeedsIdentity`] when there is no identity, or none that opens the file;
/// [`SecretsError::File`] for a malformed or tampered file.
pub(crate) fn rekey(loaded: &LoadedProfile, ids: Option<&Identities>) -> Result<Vec<(Mismatch, String)>, SecretsError> {
    let Some(sops) = &loaded.profile.secrets.sops else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for m in mismatches(loaded)? {
        let needs = || {
            let list = |v: &[String]| if v.is_empty() { "none".to_owned() } else { v.join(", ") };
            SecretsError::RekeyNeedsIdentity { path: m.path.clone(), added: list(&m.added), removed: list(&m.removed) }
        };
        let err = |source| SecretsError::File { path: m.path.clone(), source };
        let mut file = File::parse(&loaded.sealed.0[&m.path]).map_err(err)?;
        let Some(ids) = ids else { return Err(needs()) };
        match file.rekey(ids, &sops.age) {
            Ok(_) => {}
            Err(SopsError::NoMatchingIdentity { .. }) => return Err(needs()),
            Err(e) => return Err(err(e)),
        }
        let text = file.to_yaml().map_err(err)?;
        out.push((m, text));
    }
    Ok(out)
}

/// Check every sealed file that `ids` opens: its values decrypt and its MAC matches. A file
/// encrypted only for others is not checked (nothing here can).
///
/// # Errors
/// [`SecretsError::File`] naming a malformed or tampered file.
pub(crate) fn check(loaded: &LoadedProfile, ids: &Identities) -> Result<(), SecretsError> {
    for (path, text) in &loaded.sealed.0 {
        let err = |source| SecretsError::File { path: path.clone(), source };
        match File::parse(text).map_err(err)?.decrypt(ids) {
            Ok(_) | Err(SopsError::NoMatchingIdentity { .. }) => {}
            Err(e) => return Err(err(e)),
        }
    }
    Ok(())
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
