//! API key format, generation, hashing and parsing.
//!
//! A key looks like `sbk_` + 32 random base62 characters + a 6-character base62 CRC-32 of
//! everything before it (42 characters in all, about 190 bits of entropy). The checksum lets a
//! secret scanner recognise a leaked Switchboard key without the database, and lets the server
//! refuse a mistyped key without a query. Only the SHA-256 of the whole key is stored, with a
//! short display prefix (`sbk_` + the first 8 random characters) for people.
//!
//! Keys from before this format ("legacy" keys) are arbitrary strings imported with
//! `admin key import-legacy`; they are hashed and looked up the same way.

use rand::Rng;
use rand::distr::Alphanumeric;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub const KEY_PREFIX: &str = "sbk_";
const RANDOM_LEN: usize = 32;
const CHECKSUM_LEN: usize = 6;
/// Total length of a current-format key.
pub const KEY_LEN: usize = KEY_PREFIX.len() + RANDOM_LEN + CHECKSUM_LEN;
const DISPLAY_RANDOM_CHARS: usize = 8;
/// The longest token we accept at all (legacy keys included).
pub const MAX_TOKEN_LEN: usize = 512;

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The SHA-256 of a key: the only form in which keys are stored.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KeyHash(pub [u8; 32]);

impl KeyHash {
    pub fn of(token: &str) -> Self {
        KeyHash(Sha256::digest(token.as_bytes()).into())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn from_slice(b: &[u8]) -> Option<Self> {
        <[u8; 32]>::try_from(b).ok().map(KeyHash)
    }

    /// Constant-time equality, for re-checking a stored hash against a presented one.
    pub fn ct_eq(&self, other: &KeyHash) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl std::fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyHash(..)")
    }
}

/// A newly generated key. `token` is shown once and never stored.
pub struct GeneratedKey {
    pub token: String,
    pub hash: KeyHash,
    pub display_prefix: String,
}

impl std::fmt::Debug for GeneratedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeneratedKey")
            .field("display_prefix", &self.display_prefix)
            .finish_non_exhaustive()
    }
}

/// Generates a new current-format key from a CSPRNG seeded by the operating system.
pub fn generate() -> GeneratedKey {
    let random: String = rand::rng()
        .sample_iter(&Alphanumeric)
        .take(RANDOM_LEN)
        .map(char::from)
        .collect();
    let body = format!("{KEY_PREFIX}{random}");
    let token = format!("{body}{}", checksum(&body));
    GeneratedKey {
        hash: KeyHash::of(&token),
        display_prefix: display_prefix(&token),
        token,
    }
}

/// The checksum part: CRC-32 (IEEE) of `body`, in base62, zero-padded to six characters.
pub fn checksum(body: &str) -> String {
    let mut n = crc32fast::hash(body.as_bytes()) as u64;
    let mut out = [b'0'; CHECKSUM_LEN];
    for slot in out.iter_mut().rev() {
        *slot = BASE62[(n % 62) as usize];
        n /= 62;
    }
    String::from_utf8(out.to_vec()).expect("base62 is ASCII")
}

/// Whether `s` has the shape and checksum of a current-format key (what a scanner checks).
pub fn is_well_formed(s: &str) -> bool {
    s.len() == KEY_LEN
        && s.starts_with(KEY_PREFIX)
        && s[KEY_PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric())
        && {
            let (body, sum) = s.split_at(KEY_LEN - CHECKSUM_LEN);
            checksum(body).as_bytes().ct_eq(sum.as_bytes()).into()
        }
}

/// The display prefix of a key: `sbk_` plus eight characters, or the start of a legacy key.
pub fn display_prefix(token: &str) -> String {
    if token.starts_with(KEY_PREFIX) {
        token
            .chars()
            .take(KEY_PREFIX.len() + DISPLAY_RANDOM_CHARS)
            .collect()
    } else {
        // Legacy keys can be short: show at most a quarter of them, and never more than 6.
        let n = (token.chars().count() / 4).clamp(1, 6);
        token.chars().take(n).collect()
    }
}

/// Why a presented token cannot be a key, decided without the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token is empty")]
    Empty,
    #[error("the token is too long")]
    TooLong,
    #[error("the token contains characters that a key never contains")]
    BadCharacters,
    #[error("the token looks like a Switchboard key but its checksum is wrong")]
    BadChecksum,
}

/// Checks a presented bearer token and returns its hash for the lookup.
///
/// A token that starts with `sbk_` must be a well-formed current-format key; anything else is
/// looked up as a possible legacy key.
pub fn check_presented(token: &str) -> Result<KeyHash, TokenError> {
    if token.is_empty() {
        return Err(TokenError::Empty);
    }
    if token.len() > MAX_TOKEN_LEN {
        return Err(TokenError::TooLong);
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(TokenError::BadCharacters);
    }
    if token.starts_with(KEY_PREFIX) && !is_well_formed(token) {
        return Err(TokenError::BadChecksum);
    }
    Ok(KeyHash::of(token))
}

/// Validates a legacy plaintext key before import.
pub fn check_legacy(token: &str) -> Result<(), String> {
    if token.is_empty() {
        return Err("the legacy key is empty".into());
    }
    if token.len() > MAX_TOKEN_LEN {
        return Err(format!(
            "the legacy key is longer than {MAX_TOKEN_LEN} characters"
        ));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the legacy key must be printable ASCII without spaces".into());
    }
    if token.starts_with(KEY_PREFIX) {
        return Err(format!(
            "the legacy key starts with `{KEY_PREFIX}`, the prefix of current keys; it cannot be imported as legacy"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_well_formed_and_distinct() {
        let a = generate();
        let b = generate();
        assert_ne!(a.token, b.token);
        assert_eq!(a.token.len(), KEY_LEN);
        assert!(is_well_formed(&a.token));
        assert!(a.token.starts_with("sbk_"));
        assert_eq!(a.display_prefix.len(), 12);
        assert!(a.token.starts_with(&a.display_prefix));
        assert_eq!(a.hash, KeyHash::of(&a.token));
        assert_eq!(check_presented(&a.token).unwrap(), a.hash);
    }

    #[test]
    fn a_changed_character_breaks_the_checksum() {
        let k = generate().token;
        let mut bytes = k.clone().into_bytes();
        bytes[10] = if bytes[10] == b'a' { b'b' } else { b'a' };
        let tampered = String::from_utf8(bytes).unwrap();
        assert!(!is_well_formed(&tampered));
        assert_eq!(check_presented(&tampered), Err(TokenError::BadChecksum));
        assert_eq!(check_presented(&k[..20]), Err(TokenError::BadChecksum));
    }

    #[test]
    fn hash_is_sha256_of_the_whole_token() {
        // SHA-256("abc"), FIPS 180-2 test vector.
        assert_eq!(
            hex::encode(KeyHash::of("abc").0),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn checksum_is_stable() {
        // CRC-32 of "sbk_" is 0x9B2A4E2F... whatever it is, it must not change between releases.
        let c = checksum("sbk_00000000000000000000000000000000");
        assert_eq!(c.len(), 6);
        assert_eq!(c, checksum("sbk_00000000000000000000000000000000"));
        assert!(c.bytes().all(|b| b.is_ascii_alphanumeric()));
    }

    #[test]
    fn presented_tokens_are_screened() {
        assert_eq!(check_presented(""), Err(TokenError::Empty));
        assert_eq!(check_presented("has space"), Err(TokenError::BadCharacters));
        assert_eq!(check_presented("tab\there"), Err(TokenError::BadCharacters));
        assert_eq!(check_presented(&"x".repeat(600)), Err(TokenError::TooLong));
        assert!(check_presented("some-legacy-key-123").is_ok());
    }

    #[test]
    fn legacy_keys_are_checked() {
        assert!(check_legacy("legacy-plaintext-0001").is_ok());
        assert!(check_legacy("").is_err());
        assert!(check_legacy("with space").is_err());
        assert!(check_legacy(&generate().token).is_err());
    }

    #[test]
    fn legacy_display_prefix_reveals_little() {
        assert_eq!(display_prefix("abcdefgh"), "ab");
        assert_eq!(display_prefix("abc"), "a");
        assert_eq!(display_prefix("legacy-plaintext-key-000000001"), "legacy");
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn screening_never_panics(s in "\\PC{0,600}") {
                let _ = check_presented(&s);
                let _ = check_legacy(&s);
                let _ = display_prefix(&s);
            }

            #[test]
            fn any_changed_character_of_a_key_is_caught(pos in 4usize..KEY_LEN, c in "[0-9A-Za-z]") {
                let key = generate().token;
                let mut chars: Vec<char> = key.chars().collect();
                let replacement = c.chars().next().unwrap();
                prop_assume!(chars[pos] != replacement);
                chars[pos] = replacement;
                let tampered: String = chars.into_iter().collect();
                prop_assert!(!is_well_formed(&tampered));
            }
        }
    }
}
