//! SOPS-encrypted YAML files with age recipients: the format Flux's kustomize-controller
//! decrypts (`spec.decryption.provider: sops`), written and read here without the `sops` CLI.
//!
//! The format, as `getsops/sops` v3 writes it (facts from its `sops.go`, `aes/cipher.go`,
//! `stores/stores.go`, `age/keysource.go` and `cmd/sops/common`; proven against the real `sops`
//! 3.13.3 both ways by `tests/it/secrets/`):
//! - Each value the rules select (`encrypted_regex`, `unencrypted_regex`, `encrypted_suffix`,
//!   `unencrypted_suffix`, matched against every key on its path) becomes
//!   `ENC[AES256_GCM,data:…,iv:…,tag:…,type:str|int|float|bool]`: AES-256-GCM under the file's
//!   32-byte data key, a random 32-byte IV, and the value's path as additional data
//!   (`data:api-key:`). An empty string stays empty. A file names at most one rule; one that
//!   names none leaves the keys ending in `_unencrypted` in plain text (`stores.go`).
//! - A value's bytes (what is hashed and encrypted, `ToBytes`) are its text for a string,
//!   `True`/`False` for a bool, the decimal for an int, and for a float the shortest decimal
//!   that reads back as the same number, without an exponent (Go's `FormatFloat(f, 'f', -1,
//!   64)`: `1.0` is `1`, `1e21` is `1000000000000000000000`).
//! - The MAC is SHA-512 over every value's plaintext in document order (only the encrypted ones
//!   with `mac_only_encrypted`, after a fixed prefix), upper-case hex, encrypted like a value with
//!   `lastmodified` (RFC 3339) as additional data. A file whose MAC does not match was changed
//!   by something that did not hold the key: it is refused, never used.
//! - The data key is age-encrypted, ASCII-armored, once per recipient (`sops.age[]`).
//!
//! What this module does not do: other key services (KMS, PGP, Vault: their entries are kept as
//! they are but cannot decrypt), key groups with Shamir's threshold, comments (dropped when a
//! file is written again; SOPS leaves them out of the MAC).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

mod cipher;
mod keys;

use cipher::{aad, decrypt_value, encrypt_value, plain_bytes, random};
use keys::parse_recipient;
pub(crate) use keys::{Identities, check_recipient};

/// The rule osbx writes: only a Secret's `data` and `stringData` are encrypted (Flux's guide
/// writes the same), so the file still says which Secret it is.
pub(crate) const ENCRYPTED_REGEX: &str = "^(data|stringData)$";

/// The SOPS release whose format osbx writes, recorded in `sops.version` (and tested against).
pub(crate) const FORMAT_VERSION: &str = "3.13.3";

/// The prefix of the MAC with `mac_only_encrypted` (`sops.go`: `MACOnlyEncryptedInitialization`).
const MAC_ONLY_ENCRYPTED_INIT: [u8; 32] = [
    0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe, 0x0b, 0x0b, 0x97, 0x5b,
    0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69,
];

/// The metadata keys of the encryption rules; a file names at most one (`stores.go`).
const RULES: [&str; 6] = [
    "encrypted_suffix",
    "unencrypted_suffix",
    "encrypted_regex",
    "unencrypted_regex",
    "encrypted_comment_regex",
    "unencrypted_comment_regex",
];

/// The suffix of the keys left in plain text when a file names no rule (`sops.go`:
/// `DefaultUnencryptedSuffix`).
const DEFAULT_UNENCRYPTED_SUFFIX: &str = "_unencrypted";

/// Why a SOPS file cannot be written or read. No variant carries a secret value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum SopsError {
    /// The text is not YAML, or not a SOPS file.
    #[error("{0}")]
    Malformed(String),
    /// A recipient is not an age public key.
    #[error("`{recipient}` is not an age recipient (age1…): {reason}")]
    Recipient {
        /// The string given.
        recipient: String,
        /// The parser's reason.
        reason: String,
    },
    /// An identity file holds no age key, or a line that is not one.
    #[error("{0}")]
    Identity(String),
    /// None of the identities given opens the data key.
    #[error("no age identity given matches a recipient of the file ({recipients}); it was encrypted for others")]
    NoMatchingIdentity {
        /// The file's recipients.
        recipients: String,
    },
    /// No identity was given at all.
    #[error("no age identity: set SOPS_AGE_KEY_FILE (or pass --age-key-file) to a file holding the key")]
    NoIdentity,
    /// A value does not decrypt under the data key (tampered, or moved to another path).
    #[error("the value at `{path}` does not decrypt: the file was changed without the key")]
    Value {
        /// The value's path (`data.api-key`).
        path: String,
    },
    /// The MAC does not match the values: something changed them without the key.
    #[error("the MAC does not match the file's values: it was changed without the key (tampered or truncated)")]
    Mac,
}

/// A SOPS file, parsed: the document (values still encrypted) and its `sops` metadata.
#[derive(Debug, Clone)]
pub(crate) struct File {
    /// The document without the `sops` key, values as the file holds them.
    doc: Map<String, Value>,
    /// The `sops` metadata.
    meta: Map<String, Value>,
}

/// The rules that select the values SOPS encrypts.
struct Rules<'a> {
    encrypted_regex: Option<regex::Regex>,
    unencrypted_regex: Option<regex::Regex>,
    encrypted_suffix: Option<&'a str>,
    unencrypted_suffix: Option<&'a str>,
    mac_only_encrypted: bool,
}

impl<'a> Rules<'a> {
    fn of(meta: &'a Map<String, Value>) -> Result<Self, SopsError> {
        let text = |k: &str| meta.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
        let named: Vec<&str> = RULES.iter().copied().filter(|k| text(k).is_some()).collect();
        if named.len() > 1 {
            return Err(SopsError::Malformed(format!(
                "sops names more than one encryption rule ({}): sops itself refuses such a file",
                named.join(", ")
            )));
        }
        if let Some(rule) = named.iter().find(|k| k.ends_with("_comment_regex")) {
            return Err(SopsError::Malformed(format!(
                "sops.{rule}: rules on comments are not supported (osbx keeps no comments)"
            )));
        }
        let regex = |k: &str| {
            text(k)
                .map(|r| {
                    regex::Regex::new(r).map_err(|e| SopsError::Malformed(format!("sops.{k} is not a regex: {e}")))
                })
                .transpose()
        };
        Ok(Self {
            encrypted_regex: regex("encrypted_regex")?,
            unencrypted_regex: regex("unencrypted_regex")?,
            encrypted_suffix: text("encrypted_suffix"),
            unencrypted_suffix: if named.is_empty() {
                Some(DEFAULT_UNENCRYPTED_SUFFIX)
            } else {
                text("unencrypted_suffix")
            },
            mac_only_encrypted: meta.get("mac_only_encrypted").and_then(Value::as_bool).unwrap_or(false),
        })
    }

    /// `sops.go`'s `shouldBeEncrypted`, for values (osbx keeps no comments).
    fn encrypted(&self, path: &[String]) -> bool {
        let mut encrypted = true;
        if let Some(s) = self.unencrypted_suffix
            && path.iter().any(|p| p.ends_with(s))
        {
            encrypted = false;
        }
        if let Some(s) = self.encrypted_suffix {
            encrypted = path.iter().any(|p| p.ends_with(s));
        }
        if let Some(r) = &self.unencrypted_regex
            && path.iter().any(|p| r.is_match(p))
        {
            encrypted = false;
        }
        if let Some(r) = &self.encrypted_regex {
            encrypted = path.iter().any(|p| r.is_match(p));
        }
        encrypted
    }
}

/// What [`walk`] does with each leaf and its path.
type Leaf<'a, E> = dyn FnMut(&mut Value, &[String]) -> Result<(), E> + 'a;

/// Walk the leaves of `v` in document order with their key paths (sequence items share their
/// parent's path, as in SOPS), replacing each with what `f` returns.
fn walk<E>(v: &mut Value, path: &mut Vec<String>, f: &mut Leaf<'_, E>) -> Result<(), E> {
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                path.push(k.clone());
                walk(child, path, f)?;
                path.pop();
            }
        }
        Value::Array(items) => {
            for item in items {
                walk(item, path, f)?;
            }
        }
        Value::Null => {}
        leaf => f(leaf, path)?,
    }
    Ok(())
}

/// The current UTC time as RFC 3339 with whole seconds (Go's `time.RFC3339` of a UTC time).
fn now_rfc3339() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now).strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl File {
    /// Encrypt `doc` (a YAML mapping: a Secret) for `recipients` with a new data key.
    ///
    /// # Errors
    /// [`SopsError::Recipient`] for a recipient that is not an age key; [`SopsError::Malformed`]
    /// when `doc` is not a mapping.
    pub(crate) fn encrypt(doc: &Value, recipients: &[String]) -> Result<Self, SopsError> {
        let Value::Object(doc) = doc.clone() else {
            return Err(SopsError::Malformed("a SOPS document must be a mapping".into()));
        };
        let key: [u8; 32] = random();
        let mut meta = Map::new();
        meta.insert("age".into(), Value::Array(Self::wrap_key(&key, recipients)?));
        meta.insert("lastmodified".into(), now_rfc3339().into());
        meta.insert("mac".into(), "".into());
        meta.insert("encrypted_regex".into(), ENCRYPTED_REGEX.into());
        meta.insert("version".into(), FORMAT_VERSION.into());
        let mut file = Self { doc, meta };
        let rules = Rules::of(&file.meta)?;
        let mut hash = ring::digest::Context::new(&ring::digest::SHA512);
        if rules.mac_only_encrypted {
            hash.update(&MAC_ONLY_ENCRYPTED_INIT);
        }
        let mut root = Value::Object(std::mem::take(&mut file.doc));
        walk(&mut root, &mut Vec::new(), &mut |v, path| {
            let Some((bytes, kind)) = plain_bytes(v) else { return Ok(()) };
            let encrypted = rules.encrypted(path);
            if !rules.mac_only_encrypted || encrypted {
                hash.update(&bytes);
            }
            if encrypted {
                *v = Value::String(encrypt_value(&key, &bytes, kind, &aad(path)));
            }
            Ok::<_, SopsError>(())
        })?;
        let Value::Object(doc) = root else { unreachable!("the root stays a mapping") };
        file.doc = doc;
        let mac = crate::hash::hex(hash.finish().as_ref(), true);
        let stamp = file.meta["lastmodified"].as_str().unwrap_or_default().to_owned();
        file.meta.insert("mac".into(), encrypt_value(&key, mac.as_bytes(), "str", &stamp).into());
        Ok(file)
    }

    fn wrap_key(key: &[u8; 32], recipients: &[String]) -> Result<Vec<Value>, SopsError> {
        recipients
            .iter()
            .map(|r| {
                let parsed = parse_recipient(r)?;
                let enc = age::encrypt_and_armor(&parsed, key)
                    .map_err(|e| SopsError::Malformed(format!("age encryption failed: {e}")))?;
                Ok(json!({"recipient": r, "enc": enc}))
            })
            .collect()
    }

    /// Parse a SOPS YAML file (values stay encrypted).
    ///
    /// # Errors
    /// [`SopsError::Malformed`]: not YAML, not a mapping, no `sops` metadata, no MAC.
    pub(crate) fn parse(text: &str) -> Result<Self, SopsError> {
        let value: Value =
            serde_saphyr::from_str(text).map_err(|e| SopsError::Malformed(format!("not a YAML document: {e}")))?;
        let Value::Object(mut doc) = value else {
            return Err(SopsError::Malformed("not a YAML mapping".into()));
        };
        let Some(Value::Object(meta)) = doc.shift_remove("sops") else {
            return Err(SopsError::Malformed("no `sops` metadata: the file is not SOPS-encrypted".into()));
        };
        if meta.get("mac").and_then(Value::as_str).is_none_or(str::is_empty) {
            return Err(SopsError::Malformed("`sops.mac` is missing: the file is incomplete".into()));
        }
        if meta.get("lastmodified").and_then(Value::as_str).is_none() {
            return Err(SopsError::Malformed("`sops.lastmodified` is missing: the file is incomplete".into()));
        }
        let file = Self { doc, meta };
        let mut bad = None;
        let mut root = Value::Object(file.doc.clone());
        let rules = Rules::of(&file.meta)?;
        walk(&mut root, &mut Vec::new(), &mut |v, path| {
            if rules.encrypted(path)
                && let Value::String(s) = v
                && !s.is_empty()
                && !s.starts_with("ENC[AES256_GCM,")
            {
                bad.get_or_insert_with(|| path.join("."));
            }
            Ok::<_, SopsError>(())
        })?;
        if let Some(path) = bad {
            return Err(SopsError::Malformed(format!("`{path}` should be encrypted but holds plain text")));
        }
        Ok(file)
    }

    /// The age recipients the data key is encrypted for, in file order.
    #[must_use]
    pub(crate) fn recipients(&self) -> Vec<String> {
        self.age_entries().filter_map(|e| e["recipient"].as_str().map(str::to_owned)).collect()
    }

    fn age_entries(&self) -> impl Iterator<Item = &Value> {
        self.meta.get("age").and_then(Value::as_array).into_iter().flatten()
    }

    /// The document as the file holds it (values encrypted), without the `sops` metadata.
    #[cfg(test)]
    #[must_use]
    pub(crate) fn document(&self) -> &Map<String, Value> {
        &self.doc
    }

    /// The file's MAC as written (encrypted): it changes whenever a value or `lastmodified`
    /// does, so it names the content's revision without revealing it.
    #[must_use]
    pub(crate) fn mac(&self) -> &str {
        self.meta.get("mac").and_then(Value::as_str).unwrap_or_default()
    }

    fn data_key(&self, identities: &Identities) -> Result<[u8; 32], SopsError> {
        for entry in self.age_entries() {
            let Some(enc) = entry["enc"].as_str() else { continue };
            for identity in &identities.0 {
                if let Ok(key) = age::decrypt(identity, enc.as_bytes()) {
                    return <[u8; 32]>::try_from(key.as_slice())
                        .map_err(|_| SopsError::Malformed("the data key is not 32 bytes".into()));
                }
            }
        }
        Err(SopsError::NoMatchingIdentity { recipients: self.recipients().join(", ") })
    }

    /// The document with every value decrypted, after checking the MAC.
    ///
    /// # Errors
    /// [`SopsError::NoMatchingIdentity`], [`SopsError::Value`], [`SopsError::Mac`].
    pub(crate) fn decrypt(&self, identities: &Identities) -> Result<Value, SopsError> {
        self.open(identities).map(|(_, plain)| plain)
    }

    /// The data key and the decrypted document, the MAC checked.
    fn open(&self, identities: &Identities) -> Result<([u8; 32], Value), SopsError> {
        let key = self.data_key(identities)?;
        let rules = Rules::of(&self.meta)?;
        let mut hash = ring::digest::Context::new(&ring::digest::SHA512);
        if rules.mac_only_encrypted {
            hash.update(&MAC_ONLY_ENCRYPTED_INIT);
        }
        let mut root = Value::Object(self.doc.clone());
        walk(&mut root, &mut Vec::new(), &mut |v, path| {
            let encrypted = rules.encrypted(path);
            if encrypted {
                let bad = || SopsError::Value { path: path.join(".") };
                let Value::String(s) = v else { return Err(bad()) };
                *v = decrypt_value(&key, s, &aad(path)).map_err(|()| bad())?.ok_or_else(bad)?;
            }
            if (!rules.mac_only_encrypted || encrypted)
                && let Some((bytes, _)) = plain_bytes(v)
            {
                hash.update(&bytes);
            }
            Ok(())
        })?;
        let stamp = self.meta["lastmodified"].as_str().unwrap_or_default();
        let mac = decrypt_value(&key, self.mac(), stamp).map_err(|()| SopsError::Mac)?.ok_or(SopsError::Mac)?;
        if mac.as_str() != Some(crate::hash::hex(hash.finish().as_ref(), true).as_str()) {
            return Err(SopsError::Mac);
        }
        Ok((key, root))
    }

    /// Encrypt the data key for `recipients` instead (`sops updatekeys`): values, MAC and
    /// `lastmodified` stay as they are. Returns the recipients added and removed.
    ///
    /// # Errors
    /// As [`File::decrypt`] (the file is checked before it is re-keyed), and
    /// [`SopsError::Recipient`].
    pub(crate) fn rekey(
        &mut self,
        identities: &Identities,
        recipients: &[String],
    ) -> Result<(Vec<String>, Vec<String>), SopsError> {
        let (key, _) = self.open(identities)?;
        let before: BTreeSet<String> = self.recipients().into_iter().collect();
        let after: BTreeSet<String> = recipients.iter().cloned().collect();
        self.meta.insert("age".into(), Value::Array(Self::wrap_key(&key, recipients)?));
        Ok((after.difference(&before).cloned().collect(), before.difference(&after).cloned().collect()))
    }

    /// The file's YAML text: the document, then `sops`. It is never empty: a text that would
    /// not read back as this very file is an error, never written.
    ///
    /// # Errors
    /// [`SopsError::Malformed`] when the document cannot be written as YAML that reads back.
    pub(crate) fn to_yaml(&self) -> Result<String, SopsError> {
        let mut all = self.doc.clone();
        all.insert("sops".into(), Value::Object(self.meta.clone()));
        let all = Value::Object(all);
        let text = serde_saphyr::to_string(&all)
            .map_err(|e| SopsError::Malformed(format!("the file cannot be written as YAML: {e}")))?;
        match serde_saphyr::from_str::<Value>(&text) {
            Ok(back) if back == all && !text.trim().is_empty() => Ok(text),
            _ => Err(SopsError::Malformed("the file's YAML would not read back as written: nothing is written".into())),
        }
    }
}

#[cfg(test)]
mod tests;
