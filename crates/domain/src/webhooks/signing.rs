//! Signing secrets and signatures (specification 6.3).
//!
//! * A signing secret is `whsec_` followed by 32 random bytes in lowercase hexadecimal (70
//!   characters). The HMAC key is the UTF-8 bytes of the whole string, prefix included: receivers
//!   use the secret exactly as shown, without decoding anything.
//! * `X-Switchboard-Signature: v1=<hex>` where `<hex>` is the lowercase hexadecimal
//!   HMAC-SHA256 of `{timestamp}.{raw body}`, `timestamp` being the value of
//!   `X-Switchboard-Timestamp` (Unix seconds of this attempt).

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

pub const SECRET_PREFIX: &str = "whsec_";
/// The signature scheme's version tag.
pub const SCHEME: &str = "v1";

/// A new signing secret: `whsec_` + 32 random bytes as 64 lowercase hex characters.
pub fn generate_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{SECRET_PREFIX}{}", hex::encode(bytes))
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
        assert_eq!(a.len(), 6 + 64);
        assert!(a.starts_with("whsec_"));
        assert!(
            a[6..]
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
        );
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
}
