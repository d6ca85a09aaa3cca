//! Writing the sealed files: a value sealed for the profile's recipients (`osbx secret set`),
//! the files re-keyed when the recipients change, and those whose recipients differ found (a
//! render's `--check`). What a render does to them is one [`update`].

use std::collections::BTreeSet;

use base64::Engine as _;
use serde_json::{Value, json};

use super::{SecretsError, Slot, identities, slot};
use crate::profile::{LoadedProfile, Profile};
use crate::sops::{File, Identities, SopsError};

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
enum Sealing {
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
fn seal(
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
fn rekey(loaded: &LoadedProfile, ids: Option<&Identities>) -> Result<Vec<(Mismatch, String)>, SecretsError> {
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
fn check(loaded: &LoadedProfile, ids: &Identities) -> Result<(), SecretsError> {
    for (path, text) in &loaded.sealed.0 {
        let err = |source| SecretsError::File { path: path.clone(), source };
        match File::parse(text).map_err(err)?.decrypt(ids) {
            Ok(_) | Err(SopsError::NoMatchingIdentity { .. }) => {}
            Err(e) => return Err(err(e)),
        }
    }
    Ok(())
}

/// A value `osbx secret set` sealed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SealedValue {
    /// The supplied Secret's name.
    pub(crate) name: String,
    /// Its sealed file.
    pub(crate) path: String,
    /// Whether the file was written (else it already held this value for these recipients).
    pub(crate) written: bool,
    /// For how many recipients.
    pub(crate) recipients: usize,
}

/// What a render did to the profile's sealed files.
#[derive(Debug, Default)]
pub(crate) struct Update {
    /// The value it was given, sealed.
    pub(crate) set: Option<SealedValue>,
    /// The files whose data keys were re-encrypted for the profile's recipients.
    pub(crate) rekeyed: Vec<Mismatch>,
    /// With `check`: the files whose recipients differ (nothing is re-keyed then).
    pub(crate) mismatched: Vec<Mismatch>,
}

/// What a render does to `loaded`'s sealed files (`secrets.sops`), in `loaded.sealed`: with an
/// identity (`age_key_file`, else the environment's), every file it opens is checked first;
/// `set` (a supplied Secret's name and value) is sealed; then the files the profile's
/// recipients changed for are re-keyed, or with `check` only found.
///
/// # Errors
/// A value without `secrets.sops` ([`SecretsError::NotConfigured`]), an unknown name, a
/// tampered file, an identity that cannot be read, a re-key without an identity that opens
/// the file.
pub(crate) fn update(
    loaded: &mut LoadedProfile,
    set: Option<(&str, &[u8])>,
    age_key_file: Option<&std::path::Path>,
    check_only: bool,
) -> Result<Update, SecretsError> {
    let mut done = Update::default();
    let Some(sops) = &loaded.profile.secrets.sops else {
        return if set.is_some() { Err(SecretsError::NotConfigured) } else { Ok(done) };
    };
    let recipients = sops.age.len();
    let ids = identities(age_key_file)?;
    let ids = ids.as_ref();
    // With an identity, a file changed without the key stops the render (without one, only
    // its form can be checked: the render does that).
    if let Some(ids) = ids {
        check(loaded, ids)?;
    }
    if let Some((name, value)) = set {
        let slot = slot(&loaded.profile, name)?;
        let existing = loaded.sealed.0.get(&slot.path).map(String::as_str);
        let sealing = seal(&loaded.profile, &slot, value, existing, ids)?;
        let written = matches!(sealing, Sealing::Written(_));
        if let Sealing::Written(text) = sealing {
            loaded.sealed.0.insert(slot.path.clone(), text);
        }
        done.set = Some(SealedValue { name: slot.name().to_owned(), path: slot.path, written, recipients });
    }
    if check_only {
        done.mismatched = mismatches(loaded)?;
        return Ok(done);
    }
    for (m, text) in rekey(loaded, ids)? {
        loaded.sealed.0.insert(m.path.clone(), text);
        done.rekeyed.push(m);
    }
    Ok(done)
}
