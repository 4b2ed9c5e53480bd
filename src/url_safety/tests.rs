use super::*;

const STRICT: Policy = Policy {
    allow_private: false,
};
const DEV: Policy = Policy {
    allow_private: true,
};

#[test]
fn broker_urls_follow_the_address_rules() {
    let ok = |raw: &str, policy| check_broker_url(raw, "redis", 6379, policy);
    assert!(ok("redis://:pw@redis.example.net:6379/0", STRICT).is_ok());
    assert!(ok("redis://user:pw@redis.example.net/0", STRICT).is_ok());
    for bad in [
        "redis://127.0.0.1:6379",
        "redis://10.0.0.5",
        "redis://localhost",
        "redis://cache.internal",
        "redis://redis.example.net:7000",
    ] {
        assert!(matches!(ok(bad, STRICT), Err(UrlError::Unsafe(_))), "{bad}");
        assert!(ok(bad, DEV).is_ok(), "{bad}");
    }
    assert!(matches!(
        ok("https://redis.example.net", STRICT),
        Err(UrlError::Invalid(_))
    ));
    assert!(matches!(ok("redis:// x", DEV), Err(UrlError::Invalid(_))));
}

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
