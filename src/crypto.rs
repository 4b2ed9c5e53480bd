//! Secrets at rest: XChaCha20-Poly1305 under the master key.
//!
//! A sealed value is `[version = 1][24-byte random nonce][ciphertext + 16-byte tag]`. Every
//! value is bound to its purpose with associated data (for example `channel.provider_config`),
//! so a ciphertext copied into another column does not decrypt.
//!
//! The database keeps a *key check*: a known value sealed under the master key. At start-up
//! it is opened; if that fails, the configured master key is not the one the database was
//! created with, and the process stops with a clear message instead of reading garbage.

use std::fmt;
use std::path::Path;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;

const VERSION: u8 = 1;
const NONCE_LEN: usize = 24;
const KEY_CHECK_AAD: &[u8] = b"switchboard.master_key_check";
const KEY_CHECK_PLAINTEXT: &[u8] = b"switchboard master key check v1";

pub use switchboard_domain::sealed::{AAD_PROVIDER_CONFIG, AAD_SIGNING_SECRET};

/// The 32-byte master key.
#[derive(Clone)]
pub struct MasterKey([u8; 32]);

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MasterKey(..)")
    }
}

impl MasterKey {
    /// Parses 64 hexadecimal characters.
    pub fn from_hex(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if s.len() != 64 {
            return Err(format!(
                "expected 64 hexadecimal characters (32 bytes), got {} characters",
                s.len()
            ));
        }
        let bytes = hex::decode(s)
            .map_err(|_| "expected 64 hexadecimal characters (32 bytes)".to_owned())?;
        Ok(MasterKey(bytes.try_into().expect("length checked")))
    }

    pub fn generate() -> Self {
        let mut k = [0u8; 32];
        rand::rng().fill_bytes(&mut k);
        MasterKey(k)
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Reads the key file, or creates it (mode 0600) with a new key if it does not exist.
    /// Returns the key and whether it was created.
    pub fn load_or_create_file(path: &Path) -> Result<(Self, bool), String> {
        match std::fs::read_to_string(path) {
            Ok(text) => MasterKey::from_hex(&text)
                .map(|k| (k, false))
                .map_err(|e| format!("master key file {}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = MasterKey::generate();
                write_private_file(path, format!("{}\n", key.to_hex()).as_bytes()).map_err(
                    |e| format!("cannot create master key file {}: {e}", path.display()),
                )?;
                Ok((key, true))
            }
            Err(e) => Err(format!(
                "cannot read master key file {}: {e}",
                path.display()
            )),
        }
    }
}

/// Creates `path` (which must not exist) readable by its owner only, and writes `contents`.
pub fn write_private_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(contents)?;
    f.sync_all()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    #[error("the sealed value is malformed")]
    Malformed,
    #[error("the sealed value does not open under this master key")]
    WrongKey,
}

/// Seals and opens secrets under the master key.
#[derive(Clone)]
pub struct SecretBox {
    cipher: XChaCha20Poly1305,
    /// A key derived from the master key for signing list cursors (HMAC-SHA256 of the master
    /// key over a fixed label), so that a cursor cannot be altered or moved to another list.
    cursor_key: [u8; 32],
}

impl fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretBox(..)")
    }
}

impl SecretBox {
    pub fn new(key: &MasterKey) -> Self {
        use hmac::{Hmac, Mac};
        let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(&key.0)
            .expect("HMAC accepts keys of any length");
        mac.update(b"switchboard.cursor_signing_key.v1");
        SecretBox {
            cipher: XChaCha20Poly1305::new((&key.0).into()),
            cursor_key: mac.finalize().into_bytes().into(),
        }
    }

    /// The key list cursors are signed with (see `http::cursor`).
    pub fn cursor_key(&self) -> &[u8; 32] {
        &self.cursor_key
    }

    pub fn seal(&self, plaintext: &[u8], aad: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let ct = self
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad,
                },
            )
            .expect("XChaCha20-Poly1305 encryption cannot fail for in-memory buffers");
        let mut out = Vec::with_capacity(1 + NONCE_LEN + ct.len());
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        out
    }

    pub fn open(&self, sealed: &[u8], aad: &[u8]) -> Result<Vec<u8>, CryptoError> {
        if sealed.len() < 1 + NONCE_LEN + 16 || sealed[0] != VERSION {
            return Err(CryptoError::Malformed);
        }
        let (nonce, ct) = sealed[1..].split_at(NONCE_LEN);
        self.cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg: ct, aad })
            .map_err(|_| CryptoError::WrongKey)
    }

    /// A fresh key check value for a new database.
    pub fn key_check(&self) -> Vec<u8> {
        self.seal(KEY_CHECK_PLAINTEXT, KEY_CHECK_AAD)
    }

    /// Whether `check` was sealed under this master key.
    pub fn verify_key_check(&self, check: &[u8]) -> bool {
        matches!(self.open(check, KEY_CHECK_AAD), Ok(p) if p == KEY_CHECK_PLAINTEXT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_and_open_round_trip() {
        let b = SecretBox::new(&MasterKey::generate());
        let sealed = b.seal(b"whsec_secret", AAD_SIGNING_SECRET);
        assert_eq!(
            b.open(&sealed, AAD_SIGNING_SECRET).unwrap(),
            b"whsec_secret"
        );
        assert_ne!(b.seal(b"x", b"a"), b.seal(b"x", b"a"), "nonces must differ");
    }

    #[test]
    fn wrong_key_or_purpose_does_not_open() {
        let a = SecretBox::new(&MasterKey::generate());
        let b = SecretBox::new(&MasterKey::generate());
        let sealed = a.seal(b"token", AAD_PROVIDER_CONFIG);
        assert_eq!(
            b.open(&sealed, AAD_PROVIDER_CONFIG),
            Err(CryptoError::WrongKey)
        );
        assert_eq!(
            a.open(&sealed, AAD_SIGNING_SECRET),
            Err(CryptoError::WrongKey)
        );
        assert_eq!(
            a.open(&sealed[..10], AAD_PROVIDER_CONFIG),
            Err(CryptoError::Malformed)
        );
        assert!(a.verify_key_check(&a.key_check()));
        assert!(!b.verify_key_check(&a.key_check()));
    }

    #[test]
    fn master_key_hex() {
        let k = MasterKey::generate();
        assert_eq!(MasterKey::from_hex(&k.to_hex()).unwrap().0, k.0);
        assert!(MasterKey::from_hex("abc").is_err());
        assert!(MasterKey::from_hex(&"zz".repeat(32)).is_err());
    }

    #[test]
    fn key_file_is_created_once_with_private_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.key");
        let (k1, created) = MasterKey::load_or_create_file(&path).unwrap();
        assert!(created);
        let (k2, created) = MasterKey::load_or_create_file(&path).unwrap();
        assert!(!created);
        assert_eq!(k1.0, k2.0);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
