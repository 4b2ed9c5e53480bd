//! Issue 35: mTLS to https endpoints (CONVENTIONS "Destinations, filters, throttles, endpoint
//! authentication"): a local TLS receiver that demands a client certificate signed by a test
//! CA (all certificates made here with rcgen), trusted through `SWITCHBOARD_WEBHOOK_CA_CERTS`,
//! on both backends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::Sha256;

use crate::both_backends;
use crate::receivers::ReceivedRequest;
use crate::support::{Backend, Resp, Server, TestEnv};
use crate::webhooks::{Api, fast, signed_by};

const ENDPOINTS: &str = "/api/v1/integrations/webhook-endpoints";

both_backends!(
    mtls_client_certificates_authenticate_deliveries,
    mtls_certificates_are_validated_and_never_read_back,
    a_bad_webhook_ca_file_stops_serve,
);

/// A test PKI: a CA, a server certificate for 127.0.0.1 and localhost, two client
/// certificates (PEM).
struct Pki {
    ca_pem: String,
    ca_der: Vec<u8>,
    server: (Vec<u8>, Vec<u8>),
    clients: Vec<(String, String)>,
    /// A client certificate signed by another CA (the receiver refuses it).
    stranger: (String, String),
}

fn ca(name: &str) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    (params.self_signed(&key).unwrap(), key)
}

fn client_cert(name: &str, ca: &rcgen::Certificate, ca_key: &KeyPair) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, ca, ca_key).unwrap();
    (cert.pem(), key.serialize_pem())
}

fn pki() -> Pki {
    let (ca_cert, ca_key) = ca("Switchboard test CA");
    let server_key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server = params.signed_by(&server_key, &ca_cert, &ca_key).unwrap();
    let clients = vec![
        client_cert("switchboard-one", &ca_cert, &ca_key),
        client_cert("switchboard-two", &ca_cert, &ca_key),
    ];
    let (other_ca, other_key) = ca("Another CA");
    Pki {
        ca_pem: ca_cert.pem(),
        ca_der: ca_cert.der().to_vec(),
        server: (server.der().to_vec(), server_key.serialize_der()),
        clients,
        stranger: client_cert("stranger", &other_ca, &other_key),
    }
}

/// What the TLS receiver saw: requests (with the client certificate's DER as the header
/// `x-test-client-cert`, hex) and refused handshakes.
#[derive(Clone, Default)]
struct Seen {
    requests: Arc<Mutex<Vec<ReceivedRequest>>>,
    refused: Arc<Mutex<u32>>,
}

impl Seen {
    fn on(&self, path: &str) -> Vec<ReceivedRequest> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }
}

/// An HTTPS receiver on 127.0.0.1 that demands a client certificate signed by the test CA;
/// answers 200 to every request. Returns its base URL.
async fn tls_receiver(pki: &Pki) -> (String, Seen) {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(pki.ca_der.clone())).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from(pki.server.0.clone())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pki.server.1.clone())),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let seen = s.clone();
            tokio::spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(t) => t,
                    Err(_) => {
                        *seen.refused.lock().unwrap() += 1;
                        return;
                    }
                };
                let peer = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|c| hex::encode(c.as_ref()))
                    .unwrap_or_default();
                let service = hyper::service::service_fn(move |req| {
                    let seen = seen.clone();
                    let peer = peer.clone();
                    async move { record(req, &seen, peer).await }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
            });
        }
    });
    (format!("https://127.0.0.1:{}", addr.port()), seen)
}

async fn record(
    req: hyper::Request<hyper::body::Incoming>,
    seen: &Seen,
    peer: String,
) -> Result<hyper::Response<String>, hyper::Error> {
    use http_body_util::BodyExt;
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes().to_vec();
    let mut headers: HashMap<String, String> = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                v.to_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    headers.insert("x-test-client-cert".into(), peer);
    seen.requests.lock().unwrap().push(ReceivedRequest {
        path: parts.uri.path().to_owned(),
        method: parts.method.to_string(),
        headers,
        body,
        at: SystemTime::now(),
        instant: Instant::now(),
    });
    Ok(hyper::Response::new("ok".to_owned()))
}

/// The Standard Webhooks signature (`webhook-signature`: `v1,` + base64 HMAC-SHA256 of
/// `{webhook-id}.{webhook-timestamp}.{body}`, keyed with the secret's base64 after `whsec_`).
fn standard_signed(secret: &str, r: &ReceivedRequest) -> bool {
    let b64 = base64::engine::general_purpose::STANDARD;
    let key = b64.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(r.header("webhook-id").unwrap().as_bytes());
    mac.update(b".");
    mac.update(r.header("webhook-timestamp").unwrap().as_bytes());
    mac.update(b".");
    mac.update(&r.body);
    let expected = format!("v1,{}", b64.encode(mac.finalize().into_bytes()));
    r.header("webhook-signature")
        .unwrap()
        .split(' ')
        .any(|s| s == expected)
}

/// The DER (hex) of a PEM certificate, as the receiver records it.
fn der_hex(pem: &str) -> String {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    hex::encode(
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .as_ref(),
    )
}

/// The SHA-256 of a PEM certificate's DER, as answers show it.
fn fingerprint(pem: &str) -> String {
    use sha2::Digest;
    hex::encode(Sha256::digest(hex::decode(der_hex(pem)).unwrap()))
}

/// A line from the middle of a PEM private key: what must never be answered or stored.
fn key_line(key_pem: &str) -> String {
    let line = key_pem.lines().nth(1).unwrap().to_owned();
    assert!(line.len() >= 40, "{line}");
    line
}

fn fields(r: &Resp) -> Vec<String> {
    let mut f: Vec<String> = r.body["error"]["details"]["fields"]
        .as_array()
        .expect("details.fields")
        .iter()
        .map(|f| {
            assert!(f["issue"].as_str().is_some_and(|i| !i.is_empty()), "{f}");
            f["field"].as_str().unwrap().to_owned()
        })
        .collect();
    f.sort();
    f
}

async fn finished(api: &Api<'_>, id: &str) -> Value {
    api.wait_delivery(id, "finished", |d| {
        ["delivered", "failed", "retries_exhausted"].contains(&d["status"].as_str().unwrap_or(""))
    })
    .await
}

/// Starts a server that trusts the test CA (a file in the test's directory).
async fn start(env: &TestEnv, pki: &Pki) -> Server {
    let ca_file = env.dir.path().join("webhook-ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    let ca_file = ca_file.to_string_lossy().into_owned();
    let mut settings = fast();
    settings.push(("SWITCHBOARD_WEBHOOK_CA_CERTS", ca_file.leak()));
    env.start(&settings).await
}

async fn mtls_client_certificates_authenticate_deliveries(backend: Backend) {
    let pki = pki();
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = start(&env, &pki).await;
    let api = Api::new(&server, &seed.key);
    let (base, seen) = tls_receiver(&pki).await;
    let (cert, key) = &pki.clients[0];

    let e = server
        .post(
            ENDPOINTS,
            &seed.key,
            &json!({"url": format!("{base}/mtls"), "events": ["message.sent"],
                    "auth": {"type": "mtls", "certificate": cert, "private_key": key}}),
        )
        .await
        .expect(201)
        .body;
    assert_eq!(
        e["auth"],
        json!({"type": "mtls", "certificate_sha256": fingerprint(cert)})
    );
    let uuid = e["uuid"].as_str().unwrap().to_owned();
    let secret = e["signing_secret"].as_str().unwrap().to_owned();
    // The same receiver without a client certificate: the handshake is refused.
    let bare = api.create(&format!("{base}/bare"), &["message.sent"]).await;

    let (id, _) = api.test(&uuid).await;
    let d = finished(&api, &id).await;
    assert_eq!(d["status"], "delivered", "{d:#}");
    assert_eq!(d["attempts"], 1);
    let got = seen.on("/mtls");
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].header("x-test-client-cert"),
        Some(der_hex(cert).as_str())
    );
    assert_eq!(got[0].header("webhook-id"), Some(id.as_str()));
    assert!(
        standard_signed(&secret, &got[0]),
        "Standard Webhooks signature"
    );
    assert!(signed_by(&secret, &got[0]), "X-Switchboard-Signature");

    let (bare_id, _) = api.test(&bare.uuid).await;
    let d = finished(&api, &bare_id).await;
    assert_eq!(d["status"], "retries_exhausted", "{d:#}");
    assert_eq!(d["attempts"], 4, "failed, then retried");
    for a in d["attempt_log"].as_array().unwrap() {
        assert_eq!(a["response_status"], Value::Null, "{a:#}");
        assert!(
            ["connection_failed", "connection_closed"].contains(&a["error_code"].as_str().unwrap()),
            "{a:#}"
        );
    }
    assert!(
        seen.on("/bare").is_empty(),
        "no request without a certificate"
    );
    assert!(
        *seen.refused.lock().unwrap() >= 1,
        "handshakes were refused"
    );

    // Several deliveries reuse the endpoint's client (and its connection).
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(api.test(&uuid).await.0);
    }
    for id in &ids {
        let d = finished(&api, id).await;
        assert_eq!(d["status"], "delivered", "{d:#}");
        assert_eq!(d["attempts"], 1, "{d:#}");
    }
    assert_eq!(seen.on("/mtls").len(), 4);

    // PUT replaces the certificate: the next delivery presents the new one.
    let (cert2, key2) = &pki.clients[1];
    let r = api
        .put(
            &uuid,
            json!({"auth": {"type": "mtls", "certificate": cert2, "private_key": key2}}),
        )
        .await
        .expect(200);
    assert_eq!(r.body["auth"]["certificate_sha256"], fingerprint(cert2));
    let (id, _) = api.test(&uuid).await;
    assert_eq!(finished(&api, &id).await["status"], "delivered");
    let got = seen.on("/mtls");
    assert_eq!(got.len(), 5);
    assert_eq!(
        got[4].header("x-test-client-cert"),
        Some(der_hex(cert2).as_str())
    );

    // A certificate of another CA is refused by the receiver; the attempt fails.
    let (cert3, key3) = &pki.stranger;
    api.put(
        &uuid,
        json!({"auth": {"type": "mtls", "certificate": cert3, "private_key": key3}}),
    )
    .await
    .expect(200);
    let (id, _) = api.test(&uuid).await;
    assert_eq!(finished(&api, &id).await["status"], "retries_exhausted");
    // Without auth: no certificate, refused too.
    let r = api.put(&uuid, json!({"auth": null})).await.expect(200);
    assert_eq!(r.body["auth"], Value::Null);
    let (id, _) = api.test(&uuid).await;
    assert_eq!(finished(&api, &id).await["status"], "retries_exhausted");
    assert_eq!(seen.on("/mtls").len(), 5);
}

async fn mtls_certificates_are_validated_and_never_read_back(backend: Backend) {
    let pki = pki();
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let (cert, key) = &pki.clients[0];
    let (other_cert, other_key) = &pki.clients[1];
    let garbage_cert = "-----BEGIN CERTIFICATE-----\nAAAAAAAA\n-----END CERTIFICATE-----\n";
    let url = "https://127.0.0.1:9/hook";
    for (auth, expected) in [
        (
            json!({"type": "mtls", "certificate": "not a certificate", "private_key": key}),
            vec!["auth.certificate"],
        ),
        (
            json!({"type": "mtls", "certificate": garbage_cert, "private_key": key}),
            vec!["auth.certificate"],
        ),
        (
            json!({"type": "mtls", "certificate": key, "private_key": key}),
            vec!["auth.certificate"],
        ),
        (
            json!({"type": "mtls", "certificate": cert, "private_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}),
            vec!["auth.private_key"],
        ),
        (
            json!({"type": "mtls", "certificate": cert, "private_key": other_key}),
            vec!["auth.private_key"],
        ),
        (
            json!({"type": "mtls", "certificate": cert}),
            vec!["auth.private_key"],
        ),
        (
            json!({"type": "mtls", "certificate": "x", "private_key": "y", "password": "z"}),
            vec!["auth.password"],
        ),
        (
            json!({"type": "mtls", "certificate": 1, "private_key": key}),
            vec!["auth.certificate"],
        ),
        (
            json!({"type": "mtls", "certificate": "x", "private_key": other_cert}),
            vec!["auth.certificate", "auth.private_key"],
        ),
    ] {
        let r = server
            .post(
                ENDPOINTS,
                &seed.key,
                &json!({"url": url, "events": ["*"], "auth": auth}),
            )
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(fields(&r), expected, "{auth}");
        assert!(!r.body.to_string().contains(&key_line(key)));
    }
    // Only on https endpoints.
    let r = server
        .post(
            ENDPOINTS,
            &seed.key,
            &json!({"type": "redis_stream", "events": ["*"],
                    "target": {"url": "redis://127.0.0.1:6379", "stream": "s"},
                    "auth": {"type": "mtls", "certificate": cert, "private_key": key}}),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), vec!["auth"]);

    // Created: the private key is in no answer (create, read, list, PUT, the log), nor in
    // the database in clear.
    let created = server
        .post(
            ENDPOINTS,
            &seed.key,
            &json!({"url": url, "events": ["*"],
                    "auth": {"type": "mtls", "certificate": cert, "private_key": key}}),
        )
        .await
        .expect(201)
        .body;
    let uuid = created["uuid"].as_str().unwrap().to_owned();
    let r = api
        .put(
            &uuid,
            json!({"auth": {"type": "mtls", "certificate": cert, "private_key": "nope"}}),
        )
        .await
        .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), vec!["auth.private_key"]);
    let updated = api
        .put(
            &uuid,
            json!({"name": "renamed", "auth": {"type": "mtls", "certificate": other_cert, "private_key": other_key}}),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(
        updated["auth"]["certificate_sha256"],
        fingerprint(other_cert)
    );
    let answers = [
        created.to_string(),
        updated.to_string(),
        api.get_endpoint(&uuid).await.to_string(),
        server
            .get(ENDPOINTS, &seed.key)
            .await
            .expect(200)
            .body
            .to_string(),
        server
            .get("/api/v1/integrations/events", &seed.key)
            .await
            .expect(200)
            .body
            .to_string(),
    ];
    for text in &answers {
        for k in [key, other_key] {
            assert!(!text.contains(&key_line(k)), "a private key in {text}");
            assert!(!text.contains("PRIVATE KEY"), "{text}");
        }
    }
    let doc = server
        .call(Method::GET, "/api/v1/integrations/openapi.json", None, None)
        .await
        .expect(200)
        .body
        .to_string();
    assert!(doc.contains("mtls"), "the OpenAPI document describes mtls");
    for k in [key, other_key] {
        crate::destinations::assert_not_in_clear(&env, &key_line(k)).await;
    }
}

async fn a_bad_webhook_ca_file_stops_serve(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let missing = env.dir.path().join("missing.pem");
    let garbage = env.dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let key_only = env.dir.path().join("key.pem");
    std::fs::write(&key_only, KeyPair::generate().unwrap().serialize_pem()).unwrap();
    for (path, says) in [
        (&missing, "cannot read"),
        (&garbage, "PEM certificate"),
        (&key_only, "certificates only"),
    ] {
        let p = path.to_string_lossy().into_owned();
        let out = tokio::time::timeout(
            Duration::from_secs(60),
            env.run(&["serve"], &[("SWITCHBOARD_WEBHOOK_CA_CERTS", p.as_str())]),
        )
        .await
        .expect("serve stops at once");
        assert!(!out.success, "serve refused to start");
        assert!(
            out.stderr.contains("SWITCHBOARD_WEBHOOK_CA_CERTS") && out.stderr.contains(&p),
            "{}",
            out.stderr
        );
        assert!(out.stderr.contains(says), "{says}: {}", out.stderr);
    }
    // `switchboard config` shows the setting.
    let good = env.dir.path().join("ca.pem");
    std::fs::write(&good, pki().ca_pem).unwrap();
    let g = good.to_string_lossy().into_owned();
    let out = env
        .run(&["config"], &[("SWITCHBOARD_WEBHOOK_CA_CERTS", g.as_str())])
        .await;
    assert!(out.success, "{}", out.stderr);
    assert!(
        out.stdout.contains("SWITCHBOARD_WEBHOOK_CA_CERTS") && out.stdout.contains(&g),
        "{}",
        out.stdout
    );
}
