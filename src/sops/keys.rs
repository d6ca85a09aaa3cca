//! age identities and recipients: the keys a SOPS file's data key is wrapped for.

use super::SopsError;

/// age identities (`AGE-SECRET-KEY-1…`), as a key file holds them.
#[derive(Clone)]
pub(crate) struct Identities(pub(super) Vec<age::x25519::Identity>);

impl std::fmt::Debug for Identities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Identities({})", self.recipients().join(", "))
    }
}

impl Identities {
    /// The identities in a key file's text (`age-keygen` output: comments and keys). The key's
    /// text is never part of an error.
    ///
    /// # Errors
    /// [`SopsError::Identity`] when a line is not a key, or there is none.
    pub(crate) fn parse(text: &str) -> Result<Self, SopsError> {
        let mut keys = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let key: age::x25519::Identity = line.parse().map_err(|_| {
                SopsError::Identity(format!("line {} is not an age identity (AGE-SECRET-KEY-1…)", i + 1))
            })?;
            keys.push(key);
        }
        if keys.is_empty() {
            return Err(SopsError::Identity("no age identity (AGE-SECRET-KEY-1…) in it".into()));
        }
        Ok(Self(keys))
    }

    /// The recipients (public keys) of the identities.
    #[must_use]
    pub(crate) fn recipients(&self) -> Vec<String> {
        self.0.iter().map(|k| k.to_public().to_string()).collect()
    }

    /// How many identities there are.
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// These identities and `other`'s, in that order.
    #[must_use]
    pub(crate) fn and(&self, other: &Self) -> Self {
        Self(self.0.iter().chain(&other.0).cloned().collect())
    }
}

/// Check that `recipient` is an age public key (`age1…`).
///
/// # Errors
/// [`SopsError::Recipient`] naming it and why.
pub(crate) fn check_recipient(recipient: &str) -> Result<(), SopsError> {
    parse_recipient(recipient).map(|_| ())
}

pub(super) fn parse_recipient(recipient: &str) -> Result<age::x25519::Recipient, SopsError> {
    recipient
        .parse::<age::x25519::Recipient>()
        .map_err(|reason| SopsError::Recipient { recipient: recipient.to_owned(), reason: reason.to_string() })
}
