//! TLS for deliveries (CONVENTIONS "Destinations, filters, throttles, endpoint
//! authentication"): the client certificate of an endpoint with `auth: {"type": "mtls"}`,
//! checked when the endpoint is created or changed, and the certificate authorities of
//! `SWITCHBOARD_WEBHOOK_CA_CERTS` that every delivery trusts besides the built-in roots.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};

/// The longest certificate chain and private key accepted (PEM text).
pub const MAX_PEM_LEN: usize = 64 * 1024;
/// The largest `SWITCHBOARD_WEBHOOK_CA_CERTS` file.
pub const MAX_CA_FILE_LEN: usize = 4 * 1024 * 1024;

/// A checked client certificate and its key.
#[derive(Debug)]
pub struct ClientCertificate {
    /// The SHA-256 of the leaf certificate (DER), lower-case hex: what answers show.
    pub fingerprint: String,
    /// The certificate chain, then the key, as one PEM text (what is sealed).
    pub pem: String,
}

/// Checks a client certificate chain and its private key (PEM). Each problem is
/// `(field, issue)`, the field `certificate` or `private_key`.
pub fn check_client_certificate(
    certificate: &str,
    private_key: &str,
) -> Result<ClientCertificate, Vec<(&'static str, String)>> {
    let mut problems = Vec::new();
    let chain = match certificates(certificate, MAX_PEM_LEN) {
        Ok(chain) => Some(chain),
        Err(issue) => {
            problems.push(("certificate", issue));
            None
        }
    };
    let key = match private_key_of(private_key) {
        Ok(key) => Some(key),
        Err(issue) => {
            problems.push(("private_key", issue));
            None
        }
    };
    let (Some(chain), Some(key)) = (chain, key) else {
        return Err(problems);
    };
    let provider = rustls::crypto::ring::default_provider();
    let signing = match provider.key_provider.load_private_key(key) {
        Ok(k) => k,
        Err(_) => {
            return Err(vec![(
                "private_key",
                "is not a usable private key (RSA, ECDSA P-256/P-384 or Ed25519)".into(),
            )]);
        }
    };
    let fingerprint = hex::encode(Sha256::digest(chain[0].as_ref()));
    match rustls::sign::CertifiedKey::new(chain, signing).keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(_)) => {
            return Err(vec![(
                "private_key",
                "does not match the certificate (the first certificate's public key)".into(),
            )]);
        }
        Err(_) => {
            return Err(vec![(
                "certificate",
                "is not a valid X.509 certificate".into(),
            )]);
        }
    }
    let pem = format!("{}\n{}\n", certificate.trim_end(), private_key.trim_end());
    if reqwest::Identity::from_pem(pem.as_bytes()).is_err() {
        return Err(vec![(
            "private_key",
            "cannot be used with the certificate".into(),
        )]);
    }
    Ok(ClientCertificate { fingerprint, pem })
}

/// The certificates of a PEM text: at least one, each a valid X.509 certificate, nothing
/// else (a private key in `certificate` is refused).
fn certificates(pem: &str, max: usize) -> Result<Vec<CertificateDer<'static>>, String> {
    if pem.len() > max {
        return Err(format!("must be at most {max} bytes of PEM"));
    }
    if pem.contains("PRIVATE KEY-----") {
        return Err("must hold certificates only: the key goes in private_key".into());
    }
    let chain = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "is not valid PEM (-----BEGIN CERTIFICATE----- ...)".to_owned())?;
    if chain.is_empty() {
        return Err("must hold a PEM certificate (-----BEGIN CERTIFICATE----- ...)".into());
    }
    for cert in &chain {
        if rustls::server::ParsedCertificate::try_from(cert).is_err() {
            return Err("is not a valid X.509 certificate".into());
        }
    }
    Ok(chain)
}

/// The one private key of a PEM text (PKCS#8, PKCS#1 RSA or SEC1 EC).
fn private_key_of(pem: &str) -> Result<PrivateKeyDer<'static>, String> {
    if pem.len() > MAX_PEM_LEN {
        return Err(format!("must be at most {MAX_PEM_LEN} bytes of PEM"));
    }
    let keys = pem.matches("PRIVATE KEY-----").count();
    if keys != 2 {
        return Err(
            "must hold exactly one PEM private key (-----BEGIN PRIVATE KEY----- ...)".into(),
        );
    }
    PrivateKeyDer::from_pem_slice(pem.as_bytes())
        .map_err(|_| "is not a valid PEM private key (PKCS#8, RSA or EC)".to_owned())
}

/// The client identity of a sealed-then-opened [`ClientCertificate::pem`].
pub fn identity(pem: &[u8]) -> Result<reqwest::Identity, String> {
    reqwest::Identity::from_pem(pem).map_err(|e| e.to_string())
}

/// The certificate authorities of `SWITCHBOARD_WEBHOOK_CA_CERTS`: a PEM file of one or more
/// certificates (nothing else). An error names the file and what is wrong with it.
pub fn load_ca_certs(path: &Path) -> Result<Vec<reqwest::Certificate>, String> {
    let name = crate::config::env_name("webhook_ca_certs");
    let text =
        std::fs::read(path).map_err(|e| format!("{name}: cannot read {}: {e}", path.display()))?;
    let text = String::from_utf8(text)
        .map_err(|_| format!("{name}: {} is not a PEM text file", path.display()))?;
    let chain = certificates(&text, MAX_CA_FILE_LEN)
        .map_err(|issue| format!("{name}: {} {issue}", path.display()))?;
    Ok(chain
        .iter()
        .filter_map(|der| reqwest::Certificate::from_der(der.as_ref()).ok())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "switchboard");
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn fields(r: Result<ClientCertificate, Vec<(&'static str, String)>>) -> Vec<&'static str> {
        r.unwrap_err().into_iter().map(|(f, _)| f).collect()
    }

    #[test]
    fn client_certificates_are_checked() {
        let (cert, key) = client();
        let (other_cert, other_key) = client();
        let ok = check_client_certificate(&cert, &key).unwrap();
        assert_eq!(ok.fingerprint.len(), 64);
        assert!(ok.pem.contains(cert.trim()) && ok.pem.contains(key.trim()));
        assert!(identity(ok.pem.as_bytes()).is_ok());
        assert_ne!(
            ok.fingerprint,
            check_client_certificate(&other_cert, &other_key)
                .unwrap()
                .fingerprint
        );
        assert_eq!(
            fields(check_client_certificate(&cert, &other_key)),
            ["private_key"]
        );
        assert_eq!(
            fields(check_client_certificate("x", "y")),
            ["certificate", "private_key"]
        );
        assert_eq!(
            fields(check_client_certificate(&key, &key)),
            ["certificate"]
        );
        assert_eq!(
            fields(check_client_certificate(&cert, &cert)),
            ["private_key"]
        );
        let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert_eq!(
            fields(check_client_certificate(garbage, &key)),
            ["certificate"]
        );
        let two_keys = format!("{key}{other_key}");
        assert_eq!(
            fields(check_client_certificate(&cert, &two_keys)),
            ["private_key"]
        );
        let huge = format!("{cert}{}", " ".repeat(MAX_PEM_LEN));
        assert_eq!(
            fields(check_client_certificate(&huge, &key)),
            ["certificate"]
        );
    }

    #[test]
    fn ca_files_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let (a, _) = client();
        let (b, key) = client();
        let bundle = dir.path().join("bundle.pem");
        std::fs::write(&bundle, format!("{a}{b}")).unwrap();
        assert_eq!(load_ca_certs(&bundle).unwrap().len(), 2);
        let with_key = dir.path().join("key.pem");
        std::fs::write(&with_key, format!("{a}{key}")).unwrap();
        let e = load_ca_certs(&with_key).unwrap_err();
        assert!(
            e.contains("SWITCHBOARD_WEBHOOK_CA_CERTS") && e.contains("key.pem"),
            "{e}"
        );
        let e = load_ca_certs(&dir.path().join("missing.pem")).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        assert!(load_ca_certs(&empty).is_err());
    }
}
