//! Signing secrets and signatures (specification 6.3, CONVENTIONS "Webhooks").
//!
//! * A signing secret is `whsec_` followed by the standard base64 of 32 random bytes (50
//!   characters), as the Standard Webhooks specification defines it. Secrets made before were
//!   `whsec_` + 64 lowercase hexadecimal characters, which are valid base64 too (48 key bytes), so
//!   they keep working for both schemes.
//! * `X-Switchboard-Signature: v1=<hex>`: the lowercase hexadecimal HMAC-SHA256 of
//!   `{timestamp}.{raw body}`, keyed with the UTF-8 bytes of the whole secret string (prefix
//!   included: receivers use the secret exactly as shown), `timestamp` being the value of
//!   `X-Switchboard-Timestamp`. With several valid secrets (a rotation's grace period), one
//!   `v1=` value per secret, separated by commas.
//! * Standard Webhooks: `webhook-id` (the delivery id), `webhook-timestamp` and
//!   `webhook-signature: v1,<base64>`: the base64 HMAC-SHA256 of `{id}.{timestamp}.{raw body}`,
//!   keyed with the base64-decoded part of the secret after `whsec_`. With several secrets, the
//!   values are separated by spaces.
//! * A secret is named in the ledger by its [`secret_id`], never by its value.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};

pub const SECRET_PREFIX: &str = "whsec_";
/// The signature scheme's version tag.
pub const SCHEME: &str = "v1";

/// A new signing secret: `whsec_` + the standard base64 of 32 random bytes.
pub fn generate_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes))
}

/// The non-secret name of a secret in the ledger: `sec_` + the first 12 hexadecimal digits of
/// the SHA-256 of the secret string.
pub fn secret_id(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    format!("sec_{}", &hex::encode(digest)[..12])
}

/// The Standard Webhooks key of a secret: the base64-decoded part after `whsec_` (`None` when it
/// is not base64).
pub fn standard_key(secret: &str) -> Option<Vec<u8>> {
    let encoded = secret.strip_prefix(SECRET_PREFIX).unwrap_or(secret);
    STANDARD.decode(encoded).ok()
}

/// One Standard Webhooks signature: `v1,` + the base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`.
pub fn standard_signature(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// The signature headers of one attempt, signed with every valid secret (the current one first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signatures {
    /// `X-Switchboard-Signature`: `v1=<hex>` per secret, comma-separated.
    pub switchboard: String,
    /// `webhook-signature`: `v1,<base64>` per secret, space-separated.
    pub standard: String,
    /// The [`secret_id`] of each secret that signed, in the same order.
    pub secret_ids: Vec<String>,
}

/// Signs `body` for delivery `id` at `timestamp` with each of `secrets`.
pub fn sign_all<S: AsRef<str>>(secrets: &[S], id: &str, timestamp: i64, body: &[u8]) -> Signatures {
    let mut ours = Vec::with_capacity(secrets.len());
    let mut standard = Vec::with_capacity(secrets.len());
    let mut secret_ids = Vec::with_capacity(secrets.len());
    for secret in secrets {
        let secret = secret.as_ref();
        ours.push(signature_header(secret, timestamp, body));
        if let Some(key) = standard_key(secret) {
            standard.push(standard_signature(&key, id, timestamp, body));
        }
        secret_ids.push(secret_id(secret));
    }
    Signatures {
        switchboard: ours.join(","),
        standard: standard.join(" "),
        secret_ids,
    }
}

/// The lowercase hex HMAC-SHA256 of `{timestamp}.{body}` keyed with the secret's UTF-8 bytes.
pub fn signature_hex(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC accepts keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// The value of `X-Switchboard-Signature`.
pub fn signature_header(secret: &str, timestamp: i64, body: &[u8]) -> String {
    format!("{SCHEME}={}", signature_hex(secret, timestamp, body))
}

/// Verifies a signature header the way receivers should (used by tests and documentation):
/// constant-time comparison, and a timestamp within `tolerance_secs` of `now`.
pub fn verify(
    secret: &str,
    header: &str,
    timestamp: i64,
    body: &[u8],
    now: i64,
    tolerance_secs: i64,
) -> bool {
    if (now - timestamp).abs() > tolerance_secs {
        return false;
    }
    let Some(given) = header.strip_prefix("v1=") else {
        return false;
    };
    let Ok(given) = hex::decode(given) else {
        return false;
    };
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC accepts keys of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(&given).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_have_the_documented_shape_and_differ() {
        let a = generate_secret();
        let b = generate_secret();
        assert_ne!(a, b);
        assert!(a.starts_with("whsec_"));
        assert_eq!(standard_key(&a).map(|k| k.len()), Some(32));
        assert_eq!(a.len(), 6 + 44);
    }

    #[test]
    fn signature_matches_a_known_vector() {
        // Computed independently:
        // python3 -c "import hmac,hashlib;print(hmac.new(b'whsec_test',b'1700000000.{\"a\":1}',hashlib.sha256).hexdigest())"
        assert_eq!(
            signature_header("whsec_test", 1_700_000_000, br#"{"a":1}"#),
            "v1=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789"
        );
    }

    #[test]
    fn verification_checks_secret_body_and_time() {
        let s = generate_secret();
        let h = signature_header(&s, 1000, b"body");
        assert!(verify(&s, &h, 1000, b"body", 1100, 300));
        assert!(!verify(&s, &h, 1000, b"body!", 1100, 300));
        assert!(!verify(&generate_secret(), &h, 1000, b"body", 1100, 300));
        assert!(!verify(&s, &h, 1000, b"body", 1000 + 301, 300));
        assert!(!verify(&s, &h, 1001, b"body", 1001, 300));
        assert!(!verify(&s, "v0=00", 1000, b"body", 1000, 300));
    }

    #[test]
    fn standard_webhooks_signature_matches_the_specification_example() {
        // The example of the Standard Webhooks specification (and of its reference libraries).
        let key = standard_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            standard_signature(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }

    #[test]
    fn old_hex_secrets_are_valid_standard_keys() {
        let hex_secret = format!("whsec_{}", "ab".repeat(32));
        assert_eq!(standard_key(&hex_secret).map(|k| k.len()), Some(48));
    }

    #[test]
    fn several_secrets_give_one_signature_each() {
        let (a, b) = (generate_secret(), generate_secret());
        let all = sign_all(&[&a, &b], "d1", 1000, b"body");
        assert_eq!(
            all.switchboard,
            format!(
                "{},{}",
                signature_header(&a, 1000, b"body"),
                signature_header(&b, 1000, b"body")
            )
        );
        assert_eq!(all.standard.split(' ').count(), 2);
        assert!(all.standard.split(' ').all(|s| s.starts_with("v1,")));
        assert_eq!(all.secret_ids, vec![secret_id(&a), secret_id(&b)]);
        assert!(all.secret_ids[0].starts_with("sec_") && all.secret_ids[0].len() == 16);
        assert!(!all.secret_ids[0].contains(&a[6..12]));
    }
}
