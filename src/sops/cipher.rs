//! Each value's AES-256-GCM encryption as sops writes it (`ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]`),
//! bound to its key path.

use aes_gcm::aead::AeadInPlace;
use aes_gcm::aead::consts::U32;
use aes_gcm::aes::Aes256;
use aes_gcm::{AesGcm, KeyInit};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::Value;

pub(super) type Gcm = AesGcm<Aes256, U32>;

pub(super) fn random<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut out).expect("the system's random source");
    out
}

/// A value's bytes as SOPS hashes and encrypts them (`ToBytes`), and its `type:`.
pub(super) fn plain_bytes(v: &Value) -> Option<(Vec<u8>, &'static str)> {
    match v {
        Value::String(s) => Some((s.as_bytes().to_vec(), "str")),
        Value::Bool(b) => Some(((if *b { "True" } else { "False" }).as_bytes().to_vec(), "bool")),
        Value::Number(n) if n.is_i64() || n.is_u64() => Some((n.to_string().into_bytes(), "int")),
        // Rust's `Display` of an `f64` is Go's `FormatFloat(f, 'f', -1, 64)`: the shortest
        // decimal that reads back as the same number, never an exponent (`n.to_string()`, ryu's
        // `1.0` and `1e21`, is not what sops hashes).
        Value::Number(n) => Some((format!("{}", n.as_f64()?).into_bytes(), "float")),
        _ => None,
    }
}

pub(super) fn encrypt_value(key: &[u8; 32], plain: &[u8], kind: &str, aad: &str) -> String {
    if plain.is_empty() {
        return String::new();
    }
    let iv: [u8; 32] = random();
    let mut data = plain.to_vec();
    let tag = Gcm::new(key.into())
        .encrypt_in_place_detached((&iv).into(), aad.as_bytes(), &mut data)
        .expect("AES-GCM encrypts any length SOPS writes");
    format!("ENC[AES256_GCM,data:{},iv:{},tag:{},type:{kind}]", B64.encode(data), B64.encode(iv), B64.encode(tag))
}

/// The plaintext and type of an `ENC[…]` value, or `None` when it does not decrypt.
pub(super) fn decrypt_value(key: &[u8; 32], text: &str, aad: &str) -> Result<Option<Value>, ()> {
    if text.is_empty() {
        return Ok(Some(Value::String(String::new())));
    }
    let inner = text.strip_prefix("ENC[AES256_GCM,").and_then(|t| t.strip_suffix(']')).ok_or(())?;
    let mut parts = inner.split(',');
    let mut field = |name: &str| parts.next().and_then(|p| p.strip_prefix(name)).ok_or(());
    let (data, iv, tag, kind) = (field("data:")?, field("iv:")?, field("tag:")?, field("type:")?);
    let (mut data, iv, tag) =
        (B64.decode(data).map_err(|_| ())?, B64.decode(iv).map_err(|_| ())?, B64.decode(tag).map_err(|_| ())?);
    if iv.len() != 32 || tag.len() != 16 {
        return Err(());
    }
    if Gcm::new(key.into())
        .decrypt_in_place_detached(iv.as_slice().into(), aad.as_bytes(), &mut data, tag.as_slice().into())
        .is_err()
    {
        return Ok(None);
    }
    let s = String::from_utf8(data).map_err(|_| ())?;
    Ok(Some(match kind {
        "str" | "bytes" | "time" | "comment" => Value::String(s),
        "int" => s.parse::<i64>().map(Value::from).map_err(|_| ())?,
        "float" => s.parse::<f64>().ok().and_then(|f| serde_json::Number::from_f64(f).map(Value::Number)).ok_or(())?,
        "bool" => Value::Bool(s.eq_ignore_ascii_case("true")),
        _ => return Err(()),
    }))
}

/// The additional data of the value at `path` (`data:api-key:`).
pub(super) fn aad(path: &[String]) -> String {
    let mut s = path.join(":");
    s.push(':');
    s
}
