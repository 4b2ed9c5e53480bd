//! Endpoint URL safety (specification 6.4): webhook requests must reach the public internet
//! and nothing else.
//!
//! * [`check_url`]: the static rules, applied on create, on update and before every attempt:
//!   `https` only, port 443, no credentials, no IP literal that is not public (the `url` crate
//!   already turns every IPv4 spelling, such as `2130706433`, `0x7f.1` or `017700000001`, into
//!   the address it means, and IPv6 literals are classified with what they embed), and no
//!   internal host name (`localhost`, `.local`, `.internal`, single labels, ...).
//! * [`is_public`]: the address classifier.
//! * [`SafeResolver`]: the DNS resolver of the delivery HTTP client. It resolves, drops every
//!   non-public address and hands the client only the checked addresses, so the connection goes
//!   to an address that was checked, with no second look-up (DNS rebinding cannot work).
//! * [`check_resolution`]: on create and update, a host that does not resolve (yet) is
//!   accepted; one that resolves to a non-public address is refused.
//!
//! `SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS=true` ([`Policy::allow_private`]) lifts the
//! scheme, port, address and name rules for development and tests; credentials in the URL
//! stay refused.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use url::{Host, Url};

pub use switchboard_domain::webhooks::redact::redacted;

/// The longest URL accepted.
pub const MAX_URL_LEN: usize = 2048;

/// Which targets are allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Policy {
    /// Development only: `http://`, any port, loopback, private and internal targets.
    pub allow_private: bool,
}

/// Why a URL is refused: `Invalid` is a malformed value (422 `validation_failed`), `Unsafe` a
/// well-formed URL that points where webhooks may not go (422 `unsafe_url`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unsafe(String),
}

/// Parses and checks an endpoint URL against the static rules.
pub fn check_url(raw: &str, policy: Policy) -> Result<Url, UrlError> {
    if raw.trim().is_empty() {
        return Err(UrlError::Invalid("the URL must not be empty".into()));
    }
    if raw.len() > MAX_URL_LEN {
        return Err(UrlError::Invalid(format!(
            "the URL is longer than {MAX_URL_LEN} characters"
        )));
    }
    if raw.trim() != raw || raw.chars().any(|c| c.is_control() || c == ' ') {
        return Err(UrlError::Invalid(
            "the URL must not contain spaces or control characters".into(),
        ));
    }
    let url = Url::parse(raw).map_err(|e| UrlError::Invalid(format!("not a valid URL: {e}")))?;
    match url.scheme() {
        "https" => {}
        "http" if policy.allow_private => {}
        "http" => {
            return Err(UrlError::Unsafe(
                "the URL must use https (plain http is not allowed)".into(),
            ));
        }
        other => {
            return Err(UrlError::Invalid(format!(
                "the URL must use https, not `{other}`"
            )));
        }
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlError::Unsafe(
            "the URL must not contain credentials (user:password@)".into(),
        ));
    }
    let host = url
        .host()
        .ok_or_else(|| UrlError::Invalid("the URL has no host".into()))?;
    if policy.allow_private {
        return Ok(url);
    }
    if url.port_or_known_default() != Some(443) {
        return Err(UrlError::Unsafe(
            "the URL must use port 443 (the default https port)".into(),
        ));
    }
    match host {
        Host::Ipv4(ip) => check_ip(IpAddr::V4(ip))?,
        Host::Ipv6(ip) => check_ip(IpAddr::V6(ip))?,
        Host::Domain(name) => check_host_name(name)?,
    }
    Ok(url)
}

/// Parses and checks a broker target URL (`scheme` and its `default_port`, credentials
/// allowed): the address rules of HTTPS targets (no loopback, private, reserved or internal
/// host unless private targets are allowed), the broker's own port.
pub fn check_broker_url(
    raw: &str,
    scheme: &str,
    default_port: u16,
    policy: Policy,
) -> Result<Url, UrlError> {
    if raw.trim().is_empty() {
        return Err(UrlError::Invalid("the URL must not be empty".into()));
    }
    if raw.len() > MAX_URL_LEN {
        return Err(UrlError::Invalid(format!(
            "the URL is longer than {MAX_URL_LEN} characters"
        )));
    }
    if raw.trim() != raw || raw.chars().any(|c| c.is_control() || c == ' ') {
        return Err(UrlError::Invalid(
            "the URL must not contain spaces or control characters".into(),
        ));
    }
    let url = Url::parse(raw).map_err(|e| UrlError::Invalid(format!("not a valid URL: {e}")))?;
    if url.scheme() != scheme {
        return Err(UrlError::Invalid(format!(
            "the URL must use {scheme}://, not `{}`",
            url.scheme()
        )));
    }
    let host = url
        .host()
        .ok_or_else(|| UrlError::Invalid("the URL has no host".into()))?;
    if policy.allow_private {
        return Ok(url);
    }
    if url.port().is_some_and(|p| p != default_port) {
        return Err(UrlError::Unsafe(format!(
            "the URL must use the broker's own port {default_port}"
        )));
    }
    match host {
        Host::Ipv4(ip) => check_ip(IpAddr::V4(ip))?,
        Host::Ipv6(ip) => check_ip(IpAddr::V6(ip))?,
        Host::Domain(name) => check_host_name(name)?,
    }
    Ok(url)
}

fn check_ip(ip: IpAddr) -> Result<(), UrlError> {
    if is_public(ip) {
        Ok(())
    } else {
        Err(UrlError::Unsafe(format!(
            "the URL's address {ip} is not a public internet address"
        )))
    }
}

/// Top-level names and suffixes that never name a public host.
const INTERNAL_SUFFIXES: &[&str] = &[
    "localhost",
    "local",
    "internal",
    "intranet",
    "lan",
    "home",
    "corp",
    "private",
    "localdomain",
    "home.arpa",
    "arpa",
    "test",
    "invalid",
    "example",
    "onion",
    "alt",
];

/// Checks a host name (already lower-cased and IDNA-encoded by the URL parser).
pub fn check_host_name(name: &str) -> Result<(), UrlError> {
    let name = name.strip_suffix('.').unwrap_or(name);
    let unsafe_name = |why: &str| Err(UrlError::Unsafe(format!("`{name}` {why}")));
    if name.is_empty() {
        return Err(UrlError::Invalid("the URL has no host".into()));
    }
    if !name.contains('.') {
        return unsafe_name("is not a public host name (a single label names an internal host)");
    }
    for suffix in INTERNAL_SUFFIXES {
        if name == *suffix || name.ends_with(&format!(".{suffix}")) {
            return unsafe_name("is an internal or reserved host name");
        }
    }
    // A name made only of digits, dots and hex markers that the URL parser did not read as an
    // address is not a host name either.
    let last = name.rsplit('.').next().unwrap_or_default();
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return unsafe_name("is not a valid public host name");
    }
    Ok(())
}

/// Whether an address is a public internet address (globally routable unicast).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

/// IPv4 ranges that are not public (IANA special-purpose registry and friends).
const V4_NOT_PUBLIC: &[([u8; 4], u32)] = &[
    ([0, 0, 0, 0], 8),       // "this network"
    ([10, 0, 0, 0], 8),      // private
    ([100, 64, 0, 0], 10),   // shared address space (carrier-grade NAT)
    ([127, 0, 0, 0], 8),     // loopback
    ([169, 254, 0, 0], 16),  // link-local (cloud metadata services)
    ([172, 16, 0, 0], 12),   // private
    ([192, 0, 0, 0], 24),    // IETF protocol assignments
    ([192, 0, 2, 0], 24),    // documentation (TEST-NET-1)
    ([192, 31, 196, 0], 24), // AS112
    ([192, 52, 193, 0], 24), // AMT
    ([192, 88, 99, 0], 24),  // 6to4 relay anycast (deprecated)
    ([192, 168, 0, 0], 16),  // private
    ([192, 175, 48, 0], 24), // direct delegation AS112
    ([198, 18, 0, 0], 15),   // benchmarking
    ([198, 51, 100, 0], 24), // documentation (TEST-NET-2)
    ([203, 0, 113, 0], 24),  // documentation (TEST-NET-3)
    ([224, 0, 0, 0], 4),     // multicast
    ([240, 0, 0, 0], 4),     // reserved, and the broadcast address
];

fn is_public_v4(ip: Ipv4Addr) -> bool {
    !V4_NOT_PUBLIC
        .iter()
        .any(|(net, prefix)| in_v4(ip, *net, *prefix))
}

fn in_v6(ip: Ipv6Addr, net: [u16; 8], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    (u128::from(ip) & mask) == (u128::from(Ipv6Addr::from(net)) & mask)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let bits = u128::from(ip);
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    // Forms that carry an IPv4 address: judged by the IPv4 address they lead to.
    if in_v6(ip, [0, 0, 0, 0, 0, 0xffff, 0, 0], 96) {
        return is_public_v4(low32); // IPv4-mapped ::ffff:a.b.c.d
    }
    if in_v6(ip, [0, 0, 0, 0, 0, 0, 0, 0], 96) {
        // ::, ::1 and the deprecated IPv4-compatible ::a.b.c.d
        return bits > 0xffff && is_public_v4(low32);
    }
    if in_v6(ip, [0, 0, 0, 0, 0xffff, 0, 0, 0], 96) {
        return false; // IPv4-translated ::ffff:0:a.b.c.d (SIIT)
    }
    if in_v6(ip, [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96) {
        return is_public_v4(low32); // NAT64 well-known prefix
    }
    if in_v6(ip, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16) {
        // 6to4: 2002:AABB:CCDD::/48 embeds AA.BB.CC.DD
        let v4 = Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32);
        return is_public_v4(v4);
    }
    const V6_NOT_PUBLIC: &[([u16; 8], u32)] = &[
        ([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48),  // local-use NAT64
        ([0x100, 0, 0, 0, 0, 0, 0, 0], 64),      // discard-only
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23), // IETF protocol assignments, incl. Teredo 2001::/32
        ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), // documentation
        ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), // documentation
        ([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16), // segment routing (SRv6) SIDs
    ];
    if V6_NOT_PUBLIC
        .iter()
        .any(|(net, prefix)| in_v6(ip, *net, *prefix))
    {
        return false;
    }
    // Everything else outside global unicast 2000::/3 (ULA fc00::/7, link-local fe80::/10,
    // site-local fec0::/10, multicast ff00::/8, ...) is not public.
    in_v6(ip, [0x2000, 0, 0, 0, 0, 0, 0, 0], 3)
}

/// The error of a look-up whose every address was refused.
#[derive(Debug, thiserror::Error)]
#[error("{host} resolves only to non-public addresses")]
pub struct UnsafeTarget {
    pub host: String,
}

/// The error of a look-up that found no address.
#[derive(Debug, thiserror::Error)]
#[error("{host} does not resolve: {reason}")]
pub struct DnsFailure {
    pub host: String,
    pub reason: String,
}

/// The DNS look-up used by [`SafeResolver`] (replaceable in tests).
pub type Lookup = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send>>
        + Send
        + Sync,
>;

/// The system resolver (`getaddrinfo`, through tokio).
pub fn system_lookup() -> Lookup {
    Arc::new(|host: String| {
        Box::pin(async move { Ok(tokio::net::lookup_host((host.as_str(), 0)).await?.collect()) })
    })
}

/// A resolver that keeps only public addresses, for the delivery HTTP client.
#[derive(Clone)]
pub struct SafeResolver {
    policy: Policy,
    lookup: Lookup,
}

impl SafeResolver {
    pub fn new(policy: Policy) -> Self {
        SafeResolver {
            policy,
            lookup: system_lookup(),
        }
    }

    pub fn with_lookup(policy: Policy, lookup: Lookup) -> Self {
        SafeResolver { policy, lookup }
    }

    /// Resolves `host` and returns the addresses a connection may use.
    pub async fn resolve_checked(&self, host: &str) -> Result<Vec<SocketAddr>, BoxError> {
        let addrs = (self.lookup)(host.to_owned())
            .await
            .map_err(|e| DnsFailure {
                host: host.to_owned(),
                reason: e.to_string(),
            })?;
        if addrs.is_empty() {
            return Err(Box::new(DnsFailure {
                host: host.to_owned(),
                reason: "no addresses".into(),
            }));
        }
        if self.policy.allow_private {
            return Ok(addrs);
        }
        let public: Vec<SocketAddr> = addrs.into_iter().filter(|a| is_public(a.ip())).collect();
        if public.is_empty() {
            return Err(Box::new(UnsafeTarget {
                host: host.to_owned(),
            }));
        }
        Ok(public)
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl reqwest::dns::Resolve for SafeResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let this = self.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = this.resolve_checked(&host).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// On create and update: refuses a host name that resolves to a non-public address. A name
/// that does not resolve (or not within `timeout`) is accepted: it is checked again at every
/// attempt.
pub async fn check_resolution(
    url: &Url,
    policy: Policy,
    lookup: &Lookup,
    timeout: Duration,
) -> Result<(), UrlError> {
    if policy.allow_private {
        return Ok(());
    }
    let Some(Host::Domain(name)) = url.host() else {
        return Ok(());
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_owned();
    let Ok(Ok(addrs)) = tokio::time::timeout(timeout, lookup(name.clone())).await else {
        return Ok(());
    };
    match addrs.iter().find(|a| !is_public(a.ip())) {
        Some(bad) => Err(UrlError::Unsafe(format!(
            "`{name}` resolves to {}, which is not a public internet address",
            bad.ip()
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
