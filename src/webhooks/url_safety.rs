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
mod tests {
    use super::*;

    const STRICT: Policy = Policy {
        allow_private: false,
    };
    const DEV: Policy = Policy {
        allow_private: true,
    };

    fn unsafe_(raw: &str) -> bool {
        matches!(check_url(raw, STRICT), Err(UrlError::Unsafe(_)))
    }

    #[test]
    fn public_https_urls_pass() {
        for ok in [
            "https://example.com/hook",
            "https://hooks.example.com:443/a/b?token=x#frag",
            "https://EXAMPLE.com./x",
            "https://8.8.8.8/hook",
            "https://[2606:4700:4700::1111]/hook",
            "https://[::ffff:8.8.8.8]/",
            "https://[64:ff9b::808:808]/",
            "https://[2002:808:808::1]/",
            "https://xn--bcher-kva.ch/",
            "https://bücher.example.com/",
        ] {
            assert!(
                check_url(ok, STRICT).is_ok(),
                "{ok}: {:?}",
                check_url(ok, STRICT)
            );
        }
    }

    #[test]
    fn scheme_port_and_credentials() {
        assert!(unsafe_("http://example.com/hook"));
        assert!(unsafe_("https://example.com:8443/hook"));
        assert!(unsafe_("https://example.com:80/hook"));
        assert!(unsafe_("https://user:pw@example.com/hook"));
        assert!(unsafe_("https://user@example.com/hook"));
        assert!(unsafe_("https://:pw@example.com/hook"));
        for invalid in [
            "",
            "example.com",
            "ftp://example.com/",
            "file:///etc/passwd",
            "javascript:alert(1)",
            "https://",
            "https:// example.com",
            " https://example.com",
            "https://exa mple.com/",
            "https://example.com/\n",
            "gopher://example.com",
        ] {
            assert!(
                matches!(check_url(invalid, STRICT), Err(UrlError::Invalid(_))),
                "{invalid:?}: {:?}",
                check_url(invalid, STRICT)
            );
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_LEN));
        assert!(matches!(
            check_url(&long, STRICT),
            Err(UrlError::Invalid(_))
        ));
    }

    #[test]
    fn every_spelling_of_a_private_ipv4_address_is_refused() {
        for raw in [
            "https://127.0.0.1/",
            "https://127.1/",
            "https://127.0.1/",
            "https://2130706433/",
            "https://0x7f000001/",
            "https://0x7f.0x0.0x0.0x1/",
            "https://0x7f.1/",
            "https://017700000001/",
            "https://0177.0.0.01/",
            "https://0177.1/",
            "https://0/",
            "https://0.0.0.0/",
            "https://10.0.0.1/",
            "https://167772161/",
            "https://012.0.0.1/",
            "https://172.16.0.1/",
            "https://172.31.255.255/",
            "https://192.168.1.1/",
            "https://3232235777/",
            "https://0xc0a80101/",
            "https://169.254.169.254/latest/meta-data",
            "https://2852039166/",
            "https://100.64.0.1/",
            "https://198.18.0.1/",
            "https://192.0.0.1/",
            "https://192.0.2.1/",
            "https://198.51.100.1/",
            "https://203.0.113.1/",
            "https://224.0.0.1/",
            "https://239.255.255.250/",
            "https://240.0.0.1/",
            "https://255.255.255.255/",
            "https://4294967295/",
            "https://%31%32%37.0.0.1/",
            "https://127.0.0.1.:443/",
            "https://127。0。0。1/",
        ] {
            assert!(
                unsafe_(raw),
                "{raw} must be refused: {:?}",
                check_url(raw, STRICT)
            );
        }
    }

    #[test]
    fn ipv6_literals_and_embedded_ipv4_are_classified() {
        for raw in [
            "https://[::1]/",
            "https://[::]/",
            "https://[0:0:0:0:0:0:0:1]/",
            "https://[::ffff:127.0.0.1]/",
            "https://[::ffff:7f00:1]/",
            "https://[::ffff:10.0.0.1]/",
            "https://[::ffff:169.254.169.254]/",
            "https://[::127.0.0.1]/",
            "https://[::10.0.0.1]/",
            "https://[::ffff:0:127.0.0.1]/",
            "https://[64:ff9b::127.0.0.1]/",
            "https://[64:ff9b::a00:1]/",
            "https://[64:ff9b:1::1]/",
            "https://[2002:7f00:1::1]/",
            "https://[2002:a00:1::]/",
            "https://[2002:c0a8:101::1]/",
            "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
            "https://[2001:db8::1]/",
            "https://[3fff::1]/",
            "https://[fc00::1]/",
            "https://[fd12:3456::1]/",
            "https://[fe80::1]/",
            "https://[fe80::1%25eth0]/",
            "https://[fec0::1]/",
            "https://[ff02::1]/",
            "https://[100::1]/",
            "https://[5f00::1]/",
            "https://[fd00:ec2::254]/",
        ] {
            assert!(check_url(raw, STRICT).is_err(), "{raw} must be refused");
        }
    }

    #[test]
    fn internal_names_are_refused() {
        for raw in [
            "https://localhost/",
            "https://LOCALHOST/",
            "https://localhost./",
            "https://api.localhost/",
            "https://printer.local/",
            "https://metadata.google.internal/",
            "https://db.internal/",
            "https://intranet/",
            "https://metadata/",
            "https://router.lan/",
            "https://nas.home.arpa/",
            "https://1.0.0.127.in-addr.arpa/",
            "https://host.localdomain/",
            "https://x.test/",
            "https://x.invalid/",
            "https://x.example/",
            "https://abc.onion/",
            "https://corp.corp/",
        ] {
            assert!(
                unsafe_(raw),
                "{raw} must be refused: {:?}",
                check_url(raw, STRICT)
            );
        }
    }

    #[test]
    fn the_development_flag_lifts_the_rules_but_not_credentials() {
        for ok in [
            "http://127.0.0.1:8080/hook",
            "http://localhost:3000/",
            "https://10.0.0.1:8443/",
            "http://[::1]:9000/",
        ] {
            assert!(check_url(ok, DEV).is_ok(), "{ok}");
        }
        assert!(check_url("http://u:p@127.0.0.1/", DEV).is_err());
        assert!(check_url("ftp://127.0.0.1/", DEV).is_err());
    }

    #[test]
    fn classifier_edges() {
        assert!(is_public("1.1.1.1".parse().unwrap()));
        assert!(is_public("100.63.255.255".parse().unwrap()));
        assert!(!is_public("100.64.0.0".parse().unwrap()));
        assert!(is_public("100.128.0.0".parse().unwrap()));
        assert!(is_public("172.15.255.255".parse().unwrap()));
        assert!(!is_public("172.16.0.0".parse().unwrap()));
        assert!(is_public("172.32.0.0".parse().unwrap()));
        assert!(is_public("223.255.255.255".parse().unwrap()));
        assert!(is_public("2a00:1450:4001::1".parse().unwrap()));
        assert!(is_public("::ffff:1.1.1.1".parse().unwrap()));
        assert!(!is_public("::ffff:192.168.0.1".parse().unwrap()));
        assert!(!is_public("::2".parse().unwrap()));
    }

    fn fixed(addrs: &'static [&'static str]) -> Lookup {
        Arc::new(move |_host: String| {
            Box::pin(async move {
                Ok(addrs
                    .iter()
                    .map(|a| SocketAddr::new(a.parse().unwrap(), 0))
                    .collect())
            })
        })
    }

    fn failing() -> Lookup {
        Arc::new(|_host: String| {
            Box::pin(async {
                Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such host",
                ))
            })
        })
    }

    #[tokio::test]
    async fn the_resolver_keeps_only_public_addresses() {
        let r = SafeResolver::with_lookup(STRICT, fixed(&["10.0.0.1", "93.184.216.34", "::1"]));
        let got = r.resolve_checked("mixed.example.com").await.unwrap();
        assert_eq!(
            got,
            vec![SocketAddr::new("93.184.216.34".parse().unwrap(), 0)]
        );

        let r = SafeResolver::with_lookup(STRICT, fixed(&["127.0.0.1", "::ffff:10.1.2.3"]));
        let err = r.resolve_checked("rebind.example.com").await.unwrap_err();
        assert!(err.downcast_ref::<UnsafeTarget>().is_some(), "{err}");

        let r = SafeResolver::with_lookup(DEV, fixed(&["127.0.0.1"]));
        assert_eq!(r.resolve_checked("localhost").await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn creation_refuses_names_that_resolve_to_private_addresses() {
        let url = check_url("https://rebind.example.com/x", STRICT).unwrap();
        let t = Duration::from_secs(1);
        let err = check_resolution(&url, STRICT, &fixed(&["93.184.216.34", "192.168.0.10"]), t)
            .await
            .unwrap_err();
        assert!(matches!(err, UrlError::Unsafe(m) if m.contains("192.168.0.10")));
        assert!(
            check_resolution(&url, STRICT, &fixed(&["93.184.216.34"]), t)
                .await
                .is_ok()
        );
        assert!(
            check_resolution(&url, STRICT, &failing(), t).await.is_ok(),
            "unresolvable names are accepted"
        );
        assert!(
            check_resolution(&url, DEV, &fixed(&["127.0.0.1"]), t)
                .await
                .is_ok()
        );
    }

    mod properties {
        use std::net::{Ipv4Addr, Ipv6Addr};

        use proptest::prelude::*;

        use super::*;

        /// Addresses from the ranges that are never public, plus arbitrary ones.
        fn ipv4() -> impl Strategy<Value = u32> {
            prop_oneof![
                (0u32..1 << 24),                               // 0.0.0.0/8
                (0u32..1 << 24).prop_map(|x| 10 << 24 | x),    // 10.0.0.0/8
                (0u32..1 << 24).prop_map(|x| 127 << 24 | x),   // loopback
                (0u32..1 << 20).prop_map(|x| 0xAC10_0000 | x), // 172.16.0.0/12
                (0u32..1 << 16).prop_map(|x| 0xC0A8_0000 | x), // 192.168.0.0/16
                (0u32..1 << 16).prop_map(|x| 0xA9FE_0000 | x), // link-local
                (0u32..1 << 22).prop_map(|x| 0x6440_0000 | x), // shared 100.64.0.0/10
                (0u32..1 << 28).prop_map(|x| 0xE000_0000 | x), // multicast
                (0u32..1 << 28).prop_map(|x| 0xF000_0000 | x), // reserved, broadcast
                any::<u32>(),
            ]
        }

        proptest! {
            /// Nothing a client sends as a URL makes the checks panic, under either policy.
            #[test]
            fn arbitrary_urls_never_panic(raw in ".{0,300}", tail in "[ -~]{0,200}") {
                for policy in [STRICT, Policy { allow_private: true }] {
                    let _ = check_url(&raw, policy);
                    let _ = check_url(&format!("https://{tail}"), policy);
                    let _ = check_url(&format!("https://{raw}/x"), policy);
                }
                let _ = redacted(&raw);
            }

            /// Every spelling of an IPv4 address (dotted, one decimal number, hexadecimal,
            /// octal, IPv4-mapped IPv6 in both notations) gets the same verdict, and that
            /// verdict is the address's own: refused unless it is public.
            #[test]
            fn every_ipv4_spelling_gets_the_same_verdict(n in ipv4()) {
                let ip = Ipv4Addr::from(n);
                let [a, b, c, d] = ip.octets();
                let mapped = ip.to_ipv6_mapped().segments();
                let spellings = [
                    format!("https://{ip}/hook"),
                    format!("https://{n}/hook"),
                    format!("https://0x{n:x}/hook"),
                    format!("https://0{a:o}.0{b:o}.0{c:o}.0{d:o}/hook"),
                    format!("https://0x{a:x}.0x{b:x}.0x{c:x}.0x{d:x}/hook"),
                    format!("https://[::ffff:{ip}]/hook"),
                    format!("https://[::ffff:{:x}:{:x}]/hook", mapped[6], mapped[7]),
                    format!("https://{ip}:443/hook"),
                ];
                let public = is_public(IpAddr::V4(ip));
                for url in &spellings {
                    let verdict = check_url(url, STRICT);
                    prop_assert_eq!(verdict.is_ok(), public, "{} -> {:?}", url, verdict);
                    if !public {
                        prop_assert!(matches!(verdict, Err(UrlError::Unsafe(_))), "{} -> {:?}", url, verdict);
                    }
                }
                // Development mode lifts the address rules, not the parsing.
                let dev = check_url(&format!("http://{ip}:8080/hook"), Policy { allow_private: true });
                prop_assert!(dev.is_ok(), "{:?}", dev);
                let plain = check_url(&format!("http://{ip}/hook"), STRICT);
                prop_assert!(plain.is_err(), "{:?}", plain);
            }

            /// An IPv6 literal is accepted exactly when the address is public.
            #[test]
            fn ipv6_literals_follow_is_public(segments in any::<[u16; 8]>()) {
                let ip = Ipv6Addr::from(segments);
                let verdict = check_url(&format!("https://[{ip}]/hook"), STRICT);
                prop_assert_eq!(verdict.is_ok(), is_public(IpAddr::V6(ip)), "{} -> {:?}", ip, verdict);
            }

            /// Any port but 443, and any credentials, are refused on any host.
            #[test]
            fn other_ports_and_credentials_are_refused(port in 1u16.., user in "[a-z]{1,8}", host in "[a-z]{1,12}\\.(com|org|net)") {
                prop_assume!(port != 443);
                let verdict = check_url(&format!("https://{host}:{port}/hook"), STRICT);
                prop_assert!(matches!(verdict, Err(UrlError::Unsafe(_))), "{:?}", verdict);
                let verdict = check_url(&format!("https://{user}:pw@{host}/hook"), STRICT);
                prop_assert!(matches!(verdict, Err(UrlError::Unsafe(_))), "{:?}", verdict);
                let verdict = check_url(&format!("https://{user}@{host}/hook"), STRICT);
                prop_assert!(matches!(verdict, Err(UrlError::Unsafe(_))), "{:?}", verdict);
            }

            /// Internal names are refused whatever their case or trailing dot.
            #[test]
            fn internal_names_are_refused(label in "[a-zA-Z0-9-]{1,20}", suffix in prop::sample::select(INTERNAL_SUFFIXES), dot in any::<bool>()) {
                let host = format!("{label}.{suffix}{}", if dot { "." } else { "" });
                let verdict = check_url(&format!("https://{host}/hook"), STRICT);
                prop_assert!(verdict.is_err(), "{} -> {:?}", host, verdict);
            }
        }
    }
}
