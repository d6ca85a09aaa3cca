//! Digests as text, stated once: SHA-256 in lower-case hex (cache keys, revisions) and bytes in
//! hex of either case (SOPS writes its MAC in upper case).

use std::fmt::Write as _;

/// `bytes` in hex, lower or upper case.
#[must_use]
pub(crate) fn hex(bytes: &[u8], upper: bool) -> String {
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = if upper { write!(s, "{b:02X}") } else { write!(s, "{b:02x}") };
        s
    })
}

/// The SHA-256 of `bytes` in lower-case hex.
#[must_use]
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref(), false)
}
