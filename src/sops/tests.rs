//! The SOPS format against recorded files and round trips.

use super::*;

fn identity() -> (Identities, String) {
    let key = age::x25519::Identity::generate();
    let recipient = key.to_public().to_string();
    (Identities(vec![key]), recipient)
}

fn secret(value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "k", "namespace": "ns"},
           "type": "Opaque", "data": {"api-key": value}})
}

#[test]
fn a_file_decrypts_to_what_was_encrypted_and_only_data_is_encrypted() {
    let (ids, r) = identity();
    let file = File::encrypt(&secret("c2VjcmV0"), std::slice::from_ref(&r)).unwrap();
    let text = file.to_yaml().unwrap();
    assert!(!text.contains("c2VjcmV0"), "{text}");
    assert!(text.contains("name: k") && text.contains("ENC[AES256_GCM,"), "{text}");
    let parsed = File::parse(&text).unwrap();
    assert_eq!(parsed.recipients(), vec![r]);
    assert_eq!(parsed.decrypt(&ids).unwrap(), secret("c2VjcmV0"));
}

#[test]
fn a_changed_plain_value_or_a_moved_value_is_refused() {
    let (ids, r) = identity();
    let text = File::encrypt(&secret("c2VjcmV0"), &[r]).unwrap().to_yaml().unwrap();
    let renamed = text.replace("name: k", "name: other");
    assert_eq!(File::parse(&renamed).unwrap().decrypt(&ids), Err(SopsError::Mac));
    let moved = text.replace("api-key:", "token:");
    assert_eq!(File::parse(&moved).unwrap().decrypt(&ids), Err(SopsError::Value { path: "data.token".into() }));
}

#[test]
fn another_identity_is_told_whose_file_it_is() {
    let (_, r) = identity();
    let (other, _) = identity();
    let file = File::encrypt(&secret("eA=="), std::slice::from_ref(&r)).unwrap();
    assert_eq!(file.decrypt(&other), Err(SopsError::NoMatchingIdentity { recipients: r }));
}

#[test]
fn rekeying_keeps_the_values_and_the_mac() {
    let (ids, r) = identity();
    let (ids2, r2) = identity();
    let mut file = File::encrypt(&secret("eA=="), std::slice::from_ref(&r)).unwrap();
    let (mac, data) = (file.mac().to_owned(), file.document()["data"].clone());
    let (added, removed) = file.rekey(&ids, std::slice::from_ref(&r2)).unwrap();
    assert_eq!((added, removed), (vec![r2], vec![r]));
    assert_eq!((file.mac(), &file.document()["data"]), (mac.as_str(), &data));
    assert_eq!(file.decrypt(&ids2).unwrap(), secret("eA=="));
    assert!(file.decrypt(&ids).is_err());
}

#[test]
fn numbers_are_hashed_and_encrypted_as_sops_writes_them() {
    let bytes = |v: Value| String::from_utf8(plain_bytes(&v).unwrap().0).unwrap();
    // Go's FormatFloat(f, 'f', -1, 64), as sops' ToBytes: no `.0`, no exponent.
    assert_eq!(bytes(json!(1.0)), "1");
    assert_eq!(bytes(json!(1e21)), "1000000000000000000000");
    assert_eq!(bytes(json!(0.000_001_5)), "0.0000015");
    assert_eq!(bytes(json!(-2.5)), "-2.5");
    assert_eq!(bytes(json!(3)), "3");
    assert_eq!(bytes(json!(-7)), "-7");
    assert_eq!(bytes(json!(u64::MAX)), "18446744073709551615");
    assert_eq!(plain_bytes(&json!(1.0)).unwrap().1, "float");
}

#[test]
fn the_rules_are_sops_rules_one_at_most_and_none_means_the_unencrypted_suffix() {
    let meta = |m: Value| m.as_object().unwrap().clone();
    let path = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let none = meta(json!({}));
    let rules = Rules::of(&none).unwrap();
    assert!(!rules.encrypted(&path(&["data", "token_unencrypted"])));
    assert!(rules.encrypted(&path(&["data", "token"])));
    let regex = meta(json!({"encrypted_regex": "^data$"}));
    assert!(Rules::of(&regex).unwrap().encrypted(&path(&["data", "token_unencrypted"])));
    let two = meta(json!({"encrypted_regex": "^data$", "unencrypted_suffix": "_plain"}));
    assert!(matches!(Rules::of(&two), Err(SopsError::Malformed(m)) if m.contains("more than one")));
    let comments = meta(json!({"encrypted_comment_regex": "sops:enc"}));
    assert!(matches!(Rules::of(&comments), Err(SopsError::Malformed(m)) if m.contains("comments")));
}

#[test]
fn identities_and_recipients_are_checked_without_echoing_keys() {
    let err = Identities::parse("# created\nAGE-SECRET-KEY-1NOTAKEY\n").err().unwrap();
    assert!(!err.to_string().contains("NOTAKEY"), "{err}");
    assert!(check_recipient("age1nope").is_err());
    let (_, r) = identity();
    check_recipient(&r).unwrap();
}
