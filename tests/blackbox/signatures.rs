//! Signatures: the Standard Webhooks headers beside ours, verified by the official libraries
//! (Python and Node) against real deliveries; secret rotation with a grace period during which
//! both secrets sign; which secrets signed each attempt, in the ledger.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::both_backends;
use crate::receivers::{ReceivedRequest, Receiver};
use crate::support::{Backend, TestEnv};
use crate::webhooks::{Api, fast, signed_by};

const ENDPOINTS: &str = "/api/v1/integrations/webhook-endpoints";
const WAIT: Duration = Duration::from_secs(30);

both_backends!(
    official_standard_webhooks_libraries_verify_deliveries,
    rotation_signs_with_both_secrets_during_the_grace_period,
    rotation_grace_periods_are_validated,
    standard_webhooks_headers_cannot_be_overridden,
);

fn verifiers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/verifiers")
}

/// Verifies a received request with the official library of `language` (`python` or `node`).
/// Panics with a clear message when the library is not installed (`.ci/run` installs both).
fn official_library_verifies(language: &str, secret: &str, r: &ReceivedRequest) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let headers: HashMap<&str, &str> = ["webhook-id", "webhook-timestamp", "webhook-signature"]
        .into_iter()
        .map(|h| (h, r.header(h).unwrap_or_default()))
        .collect();
    let headers_file = dir.path().join("headers.json");
    let body_file = dir.path().join("body");
    std::fs::write(&headers_file, serde_json::to_vec(&headers).unwrap()).unwrap();
    std::fs::write(&body_file, &r.body).unwrap();
    let (program, script) = match language {
        "python" => ("python3", verifiers_dir().join("verify.py")),
        _ => {
            crate::support::need_program("node", "Node.js; .ci/run's machine has it");
            crate::support::need_path(
                &verifiers_dir().join("node_modules/standardwebhooks"),
                "npm ci --prefix tests/verifiers; .ci/run does",
            );
            ("node", verifiers_dir().join("verify.js"))
        }
    };
    if program == "python3" {
        crate::support::need_program("python3", "Python 3; .ci/run's machine has it");
    }
    let out = std::process::Command::new(program)
        .arg(&script)
        .arg(secret)
        .arg(&headers_file)
        .arg(&body_file)
        .current_dir(verifiers_dir())
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("ModuleNotFoundError") || stderr.contains("Cannot find module") {
        crate::support::skip(&format!(
            "the official {language} Standard Webhooks library is not installed \
             (pip install standardwebhooks; npm ci --prefix tests/verifiers; .ci/run does both)"
        ));
    }
    out.status.success() && stdout.trim() == "verified"
}

/// The non-secret id of a secret in the ledger: `sec_` + 12 hex digits of its SHA-256.
fn secret_id(secret: &str) -> String {
    format!(
        "sec_{}",
        &hex::encode(Sha256::digest(secret.as_bytes()))[..12]
    )
}

async fn official_standard_webhooks_libraries_verify_deliveries(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let ep = api.create(&rx.url("/ep"), &["*"]).await;
    assert!(
        ep.secret.starts_with("whsec_") && ep.secret.len() == 50,
        "whsec_ + base64 of 32 bytes: {}",
        ep.secret
    );
    let (delivery_id, _) = api.test(&ep.uuid).await;
    // And a real event: a send's message.sent.
    server
        .post_with(
            "/api/v1/integrations/messages",
            &seed.key,
            &json!({"phone": "+4915123456789", "message": "hello"}),
            &[("Idempotency-Key", "sig-1")],
        )
        .await
        .expect(201);
    let got = rx.wait_for("/ep", 2, WAIT).await;
    for r in &got {
        assert_eq!(r.header("webhook-id"), Some(r.delivery().as_str()));
        assert_eq!(
            r.header("webhook-timestamp"),
            r.header("x-switchboard-timestamp")
        );
        assert!(r.header("webhook-signature").unwrap().starts_with("v1,"));
        assert!(signed_by(&ep.secret, r), "our own signature is still there");
        for language in ["python", "node"] {
            assert!(
                official_library_verifies(language, &ep.secret, r),
                "the official {language} library verifies a delivery of {}",
                r.event()
            );
            assert!(
                !official_library_verifies(language, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", r),
                "and refuses it with another secret"
            );
        }
    }
    // A tampered body is refused.
    let mut tampered = got[0].clone();
    tampered.body.extend_from_slice(b" ");
    assert!(!official_library_verifies("python", &ep.secret, &tampered));
    // The ledger names the secret that signed, never the secret itself.
    let d = api.delivery(&delivery_id).await;
    assert_eq!(
        d["attempt_log"][0]["signed_with"],
        json!([secret_id(&ep.secret)])
    );
    assert!(!d.to_string().contains(&ep.secret[6..]));
}

async fn rotation_signs_with_both_secrets_during_the_grace_period(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let ep = api.create(&rx.url("/ep"), &["integration.test"]).await;

    let grace = Duration::from_secs(3);
    let rotated_at = std::time::Instant::now();
    let r = server
        .post(
            &format!("{ENDPOINTS}/{}/rotate-secret", ep.uuid),
            &seed.key,
            &json!({"grace_period": "3s"}),
        )
        .await
        .expect(200);
    let new = r.body["signing_secret"].as_str().unwrap().to_owned();

    // During the grace period: one signature per secret, the new one first, in both headers;
    // a receiver that still has the old secret and one that already has the new accept it.
    let (during_id, _) = api.test(&ep.uuid).await;
    let during = rx.wait_for("/ep", 1, WAIT).await.remove(0);
    assert!(
        rotated_at.elapsed() < grace,
        "the delivery was made within the grace period (the machine is very slow otherwise)"
    );
    let ours = during.header("x-switchboard-signature").unwrap();
    assert_eq!(ours.split(',').count(), 2, "{ours}");
    assert_eq!(
        during
            .header("webhook-signature")
            .unwrap()
            .split(' ')
            .count(),
        2
    );
    assert!(signed_by(&new, &during) && signed_by(&ep.secret, &during));
    for secret in [&new, &ep.secret] {
        assert!(official_library_verifies("python", secret, &during));
        assert!(official_library_verifies("node", secret, &during));
    }
    let d = api.delivery(&during_id).await;
    assert_eq!(
        d["attempt_log"][0]["signed_with"],
        json!([secret_id(&new), secret_id(&ep.secret)])
    );

    // After it: the new secret only; the old one is never used again.
    tokio::time::sleep(grace.saturating_sub(rotated_at.elapsed()) + Duration::from_millis(200))
        .await;
    let (after_id, _) = api.test(&ep.uuid).await;
    let after = rx.wait_for("/ep", 2, WAIT).await.remove(1);
    assert_eq!(
        after
            .header("x-switchboard-signature")
            .unwrap()
            .split(',')
            .count(),
        1
    );
    assert!(signed_by(&new, &after) && !signed_by(&ep.secret, &after));
    assert!(official_library_verifies("python", &new, &after));
    assert!(!official_library_verifies("python", &ep.secret, &after));
    let d = api.delivery(&after_id).await;
    assert_eq!(d["attempt_log"][0]["signed_with"], json!([secret_id(&new)]));

    // Without a body, the default grace period (24 h) applies: the previous secret signs too.
    let r = server
        .call(
            reqwest::Method::POST,
            &format!("{ENDPOINTS}/{}/rotate-secret", ep.uuid),
            Some(&seed.key),
            None,
        )
        .await
        .expect(200);
    let newest = r.body["signing_secret"].as_str().unwrap().to_owned();
    api.test(&ep.uuid).await;
    let third = rx.wait_for("/ep", 3, WAIT).await.remove(2);
    assert!(signed_by(&newest, &third) && signed_by(&new, &third));
    assert!(!signed_by(&ep.secret, &third));
    assert!(!server.logs().contains(&newest[6..]) && !server.logs().contains(&new[6..]));
}

async fn rotation_grace_periods_are_validated(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let ep = api.create(&rx.url("/ep"), &["integration.test"]).await;
    let path = format!("{ENDPOINTS}/{}/rotate-secret", ep.uuid);
    for bad in [
        json!({"grace_period": "8d"}),
        json!({"grace_period": "soon"}),
    ] {
        let r = server
            .post(&path, &seed.key, &bad)
            .await
            .expect_error(422, "validation_failed");
        assert_eq!(
            r.body["error"]["details"]["fields"][0]["field"],
            "grace_period"
        );
    }
    server
        .post(&path, &seed.key, &json!({"grace_period": 5}))
        .await
        .expect_error(422, "validation_failed");
    // Nothing was rotated by the refusals: the original secret still signs alone.
    api.test(&ep.uuid).await;
    let got = rx.wait_for("/ep", 1, WAIT).await;
    assert!(signed_by(&ep.secret, &got[0]));
    assert_eq!(
        got[0]
            .header("x-switchboard-signature")
            .unwrap()
            .split(',')
            .count(),
        1
    );
    server
        .post(&path, &seed.key, &json!({"grace_period": "7d"}))
        .await
        .expect(200);
}

async fn standard_webhooks_headers_cannot_be_overridden(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let rx = Receiver::start().await;
    for name in ["webhook-id", "Webhook-Signature", "webhook-timestamp"] {
        let r = server
            .post(
                ENDPOINTS,
                &seed.key,
                &json!({"url": rx.url("/ep"), "events": ["*"], "headers": {name: "x"}}),
            )
            .await
            .expect_error(422, "validation_failed");
        assert!(r.text.contains("webhook-"), "{}", r.text);
    }
}
