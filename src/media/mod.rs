//! Fetching media files for providers that take uploads (WhatsApp Cloud), with the webhook URL
//! rules (CONVENTIONS "WhatsApp depth"):
//!
//! * the URL passes [`url_safety::check_url`] (https on port 443, no credentials, no
//!   non-public address or internal name; `SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS` lifts
//!   the scheme, port and address rules);
//! * the client resolves through [`SafeResolver`]: it connects only to addresses that were
//!   checked to be public, with no second look-up;
//! * redirects are followed (at most [`MAX_REDIRECTS`]) only to URLs that pass the same rules,
//!   and every hop resolves through the same resolver; no proxy;
//! * the size cap is enforced while reading: a `Content-Length` over it stops the fetch before
//!   the body, and a body (chunked or lying) stops at the first byte over it;
//! * one time limit covers the whole fetch ([`MediaFetcher::new`]'s `timeout`).
//!
//! The body is read into one buffer, never beyond the cap, and hashed (SHA-256) as it arrives;
//! that buffer is what the upload sends. Nothing here logs the URL (its query may carry a
//! token).

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::url_safety::{self, DnsFailure, Policy, SafeResolver, UnsafeTarget};

/// The most redirects followed.
pub const MAX_REDIRECTS: usize = 5;

/// A fetched file.
pub struct Fetched {
    /// The whole body.
    pub bytes: Vec<u8>,
    /// SHA-256 of the body.
    pub sha256: [u8; 32],
    /// The server's `Content-Type` (without parameters), when it gave a well-formed one.
    pub content_type: Option<String>,
}

impl std::fmt::Debug for Fetched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetched")
            .field("size", &self.bytes.len())
            .field("sha256", &hex::encode(self.sha256))
            .field("content_type", &self.content_type)
            .finish()
    }
}

/// Why a file could not be fetched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchError {
    /// The body is larger than the cap (from `Content-Length` or while reading).
    TooLarge { limit: u64 },
    /// The URL breaks the URL rules, or the file could not be fetched (look-up, connection,
    /// time limit, an answer other than 2xx, a refused redirect): why, for people.
    Unreachable(String),
}

/// The media HTTP client (shared; cheap to clone).
#[derive(Clone)]
pub struct MediaFetcher {
    client: reqwest::Client,
    policy: Policy,
    timeout: Duration,
    /// The memory media files in hand may take, in MiB (`SWITCHBOARD_MEDIA_MEMORY`): a send
    /// holds its type's limit from its fetch to the end of its upload.
    budget: Arc<tokio::sync::Semaphore>,
    budget_mib: u32,
}

/// The default of `SWITCHBOARD_MEDIA_MEMORY` (MiB).
pub const DEFAULT_MEDIA_MEMORY_MIB: u32 = 256;

impl MediaFetcher {
    /// A fetcher with these URL rules; `timeout` limits one whole fetch and one upload.
    pub fn new(policy: Policy, timeout: Duration) -> MediaFetcher {
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(SafeResolver::new(policy)))
            .redirect(reqwest::redirect::Policy::custom(move |attempt| {
                if attempt.previous().len() > MAX_REDIRECTS {
                    return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
                }
                match url_safety::check_url(attempt.url().as_str(), policy) {
                    Ok(_) => attempt.follow(),
                    Err(e) => attempt.error(format!("a redirect was refused: {e}")),
                }
            }))
            .no_proxy()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("switchboard/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("the media HTTP client builds");
        MediaFetcher {
            client,
            policy,
            timeout,
            budget: Arc::new(tokio::sync::Semaphore::new(
                DEFAULT_MEDIA_MEMORY_MIB as usize,
            )),
            budget_mib: DEFAULT_MEDIA_MEMORY_MIB,
        }
    }

    /// The same fetcher with `mib` MiB for media files in hand at once.
    pub fn with_memory(self, mib: u32) -> MediaFetcher {
        let mib = mib.max(1);
        MediaFetcher {
            budget: Arc::new(tokio::sync::Semaphore::new(mib as usize)),
            budget_mib: mib,
            ..self
        }
    }

    /// Waits until a file of up to `limit` bytes may be held (its share of the memory budget,
    /// at most the whole budget), and holds it until the permit is dropped.
    pub async fn reserve(&self, limit: u64) -> tokio::sync::OwnedSemaphorePermit {
        let mib = limit
            .div_ceil(1024 * 1024)
            .clamp(1, u64::from(self.budget_mib)) as u32;
        let started = std::time::Instant::now();
        let permit = self
            .budget
            .clone()
            .acquire_many_owned(mib)
            .await
            .expect("the media budget is never closed");
        metrics::histogram!("switchboard_media_memory_wait_seconds")
            .record(started.elapsed().as_secs_f64());
        permit
    }

    /// The time limit of one fetch (and of the upload that follows it).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Fetches `raw_url`, reading at most `limit` bytes.
    pub async fn fetch(&self, raw_url: &str, limit: u64) -> Result<Fetched, FetchError> {
        let url = url_safety::check_url(raw_url, self.policy).map_err(|e| {
            FetchError::Unreachable(format!(
                "the media URL is refused by the URL rules (public https addresses only): {e}"
            ))
        })?;
        let mut resp = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| FetchError::Unreachable(describe(&e)))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(FetchError::Unreachable(format!(
                "the media URL answered HTTP {}",
                status.as_u16()
            )));
        }
        if resp.content_length().is_some_and(|n| n > limit) {
            return Err(FetchError::TooLarge { limit });
        }
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|v| v.trim().to_ascii_lowercase())
            .filter(|v| is_mime(v));
        let cap = usize::try_from(limit).unwrap_or(usize::MAX);
        // Reserve what the server announced (within the cap); a body without a length grows
        // the buffer, never past the cap.
        let mut bytes: Vec<u8> = Vec::with_capacity(
            resp.content_length()
                .map_or(64 * 1024, |n| n as usize)
                .min(cap),
        );
        let mut hasher = Sha256::new();
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| FetchError::Unreachable(describe(&e)))?
        {
            if bytes.len() + chunk.len() > cap {
                return Err(FetchError::TooLarge { limit });
            }
            if bytes.capacity() - bytes.len() < chunk.len() {
                let want = (bytes.capacity() * 2)
                    .max(bytes.len() + chunk.len())
                    .min(cap);
                bytes.reserve_exact(want - bytes.len());
            }
            hasher.update(&chunk);
            bytes.extend_from_slice(&chunk);
        }
        Ok(Fetched {
            bytes,
            sha256: hasher.finalize().into(),
            content_type,
        })
    }
}

/// Whether a `Content-Type` value is a plain `type/subtype`.
fn is_mime(v: &str) -> bool {
    let ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 100
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    matches!(v.split_once('/'), Some((t, s)) if ok(t) && ok(s))
}

/// A fetch failure in a sentence, without the URL.
fn describe(e: &reqwest::Error) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<UnsafeTarget>().is_some() {
            return "the media URL's host resolves only to non-public addresses".into();
        }
        if s.downcast_ref::<DnsFailure>().is_some() {
            return "the media URL's host name does not resolve".into();
        }
        source = s.source();
    }
    if e.is_redirect() {
        let why = std::error::Error::source(e)
            .map(ToString::to_string)
            .unwrap_or_else(|| "a redirect was refused".into());
        return format!("the media URL redirects where media may not be fetched from ({why})");
    }
    if e.is_timeout() {
        "fetching the media timed out".into()
    } else if e.is_connect() {
        "the connection to the media URL's host failed".into()
    } else {
        "the media could not be read".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_are_plain_mime_types() {
        assert!(is_mime("application/pdf"));
        assert!(is_mime(
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
        ));
        assert!(!is_mime("pdf"));
        assert!(!is_mime("text/"));
        assert!(!is_mime("text/plain\r\nx: y"));
    }

    #[tokio::test]
    async fn urls_that_break_the_rules_are_not_fetched() {
        let fetcher = MediaFetcher::new(Policy::default(), Duration::from_secs(5));
        for url in [
            "http://example.com/a.png",
            "https://127.0.0.1/a.png",
            "https://10.0.0.7/a.png",
            "https://localhost/a.png",
            "https://example.com:8443/a.png",
            "https://[::1]/a.png",
        ] {
            let err = fetcher.fetch(url, 1024).await.unwrap_err();
            assert!(
                matches!(&err, FetchError::Unreachable(m) if m.contains("URL rules")),
                "{url}: {err:?}"
            );
        }
    }
}
