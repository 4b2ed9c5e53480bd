//! `Idempotency-Key` beyond the sends (CONVENTIONS "Idempotency"): honoured on every other v1
//! POST, PUT and DELETE; a refusal before execution is not stored (the corrected request may
//! reuse the key); a stored response carrying a secret is sealed, and its replay returns the
//! same secret. And duplicates racing on a sandbox send, whose key is written with its record
//! (no claim before it), on two instances: one message, and every answer the first one or
//! "in progress".

use serde_json::json;

use crate::both_backends;
use crate::support::{Backend, TestEnv};
use crate::webhooks::fast;

const ENDPOINTS: &str = "/api/v1/integrations/webhook-endpoints";
const MESSAGES: &str = "/api/v1/integrations/messages";

both_backends!(
    idempotency_keys_are_honoured_on_every_v1_write,
    refusals_before_execution_are_not_stored,
    duplicates_racing_on_a_sandbox_send_write_one_message,
);

async fn idempotency_keys_are_honoured_on_every_v1_write(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let body =
        json!({"name": "crm", "url": "http://127.0.0.1:9/hooks", "events": ["message.sent"]});
    let key = [("Idempotency-Key", "create-endpoint-1")];
    let a = server
        .post_with(ENDPOINTS, &seed.key, &body, &key)
        .await
        .expect(201);
    let b = server
        .post_with(ENDPOINTS, &seed.key, &body, &key)
        .await
        .expect(201);
    assert_eq!(b.header("idempotency-replayed"), Some("true"));
    assert_eq!(a.body["uuid"], b.body["uuid"]);
    let secret = a.body["signing_secret"].as_str().unwrap().to_owned();
    assert_eq!(
        b.body["signing_secret"],
        secret.as_str(),
        "the replay returns the same secret"
    );
    let list = server.get(ENDPOINTS, &seed.key).await.expect(200).body;
    assert_eq!(
        list["data"].as_array().unwrap().len(),
        1,
        "one endpoint, not two"
    );
    // Another body with the key: a conflict.
    let other =
        json!({"name": "erp", "url": "http://127.0.0.1:9/hooks", "events": ["message.sent"]});
    server
        .post_with(ENDPOINTS, &seed.key, &other, &key)
        .await
        .expect_error(409, "idempotency_conflict");
    // A malformed key is refused as on the sends.
    let long = "k".repeat(121);
    server
        .post_with(
            ENDPOINTS,
            &seed.key,
            &other,
            &[("Idempotency-Key", long.as_str())],
        )
        .await
        .expect_error(400, "idempotency_key_invalid");

    // rotate-secret: one rotation, the same new secret on replay.
    let uuid = a.body["uuid"].as_str().unwrap().to_owned();
    let rotate = format!("{ENDPOINTS}/{uuid}/rotate-secret");
    let r1 = server
        .post_with(
            &rotate,
            &seed.key,
            &json!({}),
            &[("Idempotency-Key", "rotate-1")],
        )
        .await
        .expect(200);
    let r2 = server
        .post_with(
            &rotate,
            &seed.key,
            &json!({}),
            &[("Idempotency-Key", "rotate-1")],
        )
        .await
        .expect(200);
    let rotated = r1.body["signing_secret"].as_str().unwrap().to_owned();
    assert_ne!(rotated, secret);
    assert_eq!(r2.body["signing_secret"], rotated.as_str());
    assert_eq!(r2.header("idempotency-replayed"), Some("true"));

    // The stored responses hold neither secret in clear.
    let stored = stored_bodies(&env).await;
    assert!(stored.len() >= 2, "{} stored responses", stored.len());
    for body in &stored {
        for s in [&secret, &rotated] {
            let needle = &s["whsec_".len()..];
            assert!(
                !body.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "a signing secret is in clear in a stored response"
            );
        }
    }

    // PUT and DELETE too: a replayed DELETE answers as the first did, not 404.
    let path = format!("{ENDPOINTS}/{uuid}");
    let del = |k: &'static str| {
        let server = &server;
        let key = seed.key.clone();
        let path = path.clone();
        async move {
            let resp = server
                .client
                .delete(server.url(&path))
                .bearer_auth(key)
                .header("Idempotency-Key", k)
                .send()
                .await
                .unwrap();
            crate::support::Server::read(resp).await
        }
    };
    let d1 = del("delete-1").await;
    assert!(d1.status.is_success(), "{}", d1.text);
    let d2 = del("delete-1").await;
    assert_eq!(d2.status, d1.status);
    assert_eq!(d2.header("idempotency-replayed"), Some("true"));
    del("delete-2").await.expect_error(404, "not_found");
}

async fn stored_bodies(env: &TestEnv) -> Vec<Vec<u8>> {
    let sql = "SELECT response_body FROM idempotency_records WHERE response_body IS NOT NULL";
    match env.backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&env.database_url).await.unwrap();
            let rows = sqlx::query_scalar(sql).fetch_all(&pool).await.unwrap();
            pool.close().await;
            rows
        }
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&env.database_url).await.unwrap();
            let rows = sqlx::query_scalar(sql).fetch_all(&pool).await.unwrap();
            pool.close().await;
            rows
        }
    }
}

async fn refusals_before_execution_are_not_stored(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&fast()).await;
    let key = [("Idempotency-Key", "order-42")];
    // A mistyped field: 422, not stored; the corrected request with the same key is sent.
    server
        .post_with(
            MESSAGES,
            &seed.key,
            &json!({"phone": "+4915123456789", "mesage": "hi"}),
            &key,
        )
        .await
        .expect_error(422, "validation_failed");
    let sent = server
        .post_with(
            MESSAGES,
            &seed.key,
            &json!({"phone": "+4915123456789", "message": "hi"}),
            &key,
        )
        .await
        .expect(201);
    assert_eq!(sent.header("idempotency-replayed"), None);
    let again = server
        .post_with(
            MESSAGES,
            &seed.key,
            &json!({"phone": "+4915123456789", "message": "hi"}),
            &key,
        )
        .await
        .expect(201);
    assert_eq!(again.header("idempotency-replayed"), Some("true"));
    assert_eq!(again.body["message"]["uuid"], sent.body["message"]["uuid"]);
    // The same for an endpoint: an unknown event, then the corrected body.
    let key = [("Idempotency-Key", "endpoint-7")];
    server
        .post_with(
            ENDPOINTS,
            &seed.key,
            &json!({"name": "crm", "url": "http://127.0.0.1:9/x", "events": ["no.such"]}),
            &key,
        )
        .await
        .expect_error(422, "validation_failed");
    server
        .post_with(
            ENDPOINTS,
            &seed.key,
            &json!({"name": "crm", "url": "http://127.0.0.1:9/x", "events": ["message.sent"]}),
            &key,
        )
        .await
        .expect(201);
    // A scope refusal is not stored either.
    let reader = env.key(seed.org_id, "webhooks:read").await;
    server
        .post_with(
            ENDPOINTS,
            &reader,
            &json!({"name": "crm", "url": "http://127.0.0.1:9/x", "events": ["message.sent"]}),
            &[("Idempotency-Key", "scoped")],
        )
        .await
        .expect_error(403, "insufficient_scope");
}

async fn duplicates_racing_on_a_sandbox_send_write_one_message(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    // Two instances on one database: duplicates on one instance meet in it, those on the other
    // meet at the key's row, which the winner's record writes.
    let settings = [("SWITCHBOARD_RATE_LIMIT_SENDS", "100000")];
    let a = env.start(&settings).await;
    let b = env.start(&settings).await;
    let rounds = 4;
    for round in 0..rounds {
        let key = format!("race-{round}");
        let body = json!({"phone": "+4915123456789", "message": format!("round {round}")});
        let headers = [("Idempotency-Key", key.as_str())];
        let answers = futures::future::join_all((0..16).map(|i| {
            let server = if i % 2 == 0 { &a } else { &b };
            server.post_with(MESSAGES, &seed.key, &body, &headers)
        }))
        .await;
        // One answer is first-hand; every other one replays it byte for byte, or was refused
        // while a duplicate ran (409 `idempotency_in_progress`).
        let seen: Vec<_> = answers.iter().map(|r| (r.status, &r.text)).collect();
        let first: Vec<_> = answers
            .iter()
            .filter(|r| r.status.as_u16() == 201 && r.header("idempotency-replayed").is_none())
            .collect();
        assert_eq!(first.len(), 1, "round {round}: one first answer: {seen:?}");
        let first = first[0];
        for r in &answers {
            match r.status.as_u16() {
                201 => assert_eq!(r.text, first.text, "round {round}: byte for byte"),
                409 => assert_eq!(
                    r.body["error"]["code"], "idempotency_in_progress",
                    "{}",
                    r.text
                ),
                _ => panic!("round {round}: {seen:?}"),
            }
        }
        // Afterwards, both instances replay it.
        for server in [&a, &b] {
            let again = server
                .post_with(MESSAGES, &seed.key, &body, &headers)
                .await
                .expect(201);
            assert_eq!(again.header("idempotency-replayed"), Some("true"));
            assert_eq!(again.text, first.text);
        }
    }
    let messages = a
        .get("/api/v1/integrations/messages?limit=100", &seed.key)
        .await
        .expect(200)
        .body;
    assert_eq!(messages["data"].as_array().unwrap().len(), rounds);
    assert_eq!(
        crate::db_peek::events_named(&env, seed.org_id, "message.sent")
            .await
            .len(),
        rounds
    );
}
