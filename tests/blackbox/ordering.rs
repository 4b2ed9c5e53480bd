//! Ordered delivery per contact (CONVENTIONS "Ordered delivery"): a failing delivery holds back
//! only its own contact's later deliveries on that endpoint; `X-Switchboard-Sequence` numbers
//! each contact's deliveries, and a permanent failure leaves a gap; unordered endpoints carry
//! no sequence; two instances on one PostgreSQL keep the order.

use std::time::Duration;

use serde_json::{Value, json};

use crate::both_backends;
use crate::receivers::{Behaviour, ReceivedRequest, Receiver};
use crate::recovery::{ledger, send, settings};
use crate::support::{Backend, TestEnv};
use crate::webhooks::Api;

const WAIT: Duration = Duration::from_secs(60);

both_backends!(
    // On PostgreSQL both run with two instances sharing the work.
    one_contacts_failure_holds_only_its_own_later_deliveries,
    a_permanent_failure_leaves_a_gap_in_the_sequence,
);

/// The text of a delivered `message.sent`.
fn text(r: &ReceivedRequest) -> String {
    r.json()["data"]["message"]["text"]["body"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn sequence(r: &ReceivedRequest) -> Option<u64> {
    r.header("x-switchboard-sequence")
        .map(|s| s.parse().unwrap())
}

/// Index of the first request whose text is `t` and that got a 2xx (the receiver answers by
/// rule: we know which texts fail).
fn first_arrival(rs: &[ReceivedRequest], t: &str) -> usize {
    rs.iter()
        .position(|r| text(r) == t)
        .unwrap_or_else(|| panic!("{t} never arrived"))
}

async fn per_contact_endpoint(api: &Api<'_>, url: &str) -> String {
    let ep = api.create(url, &["message.sent"]).await;
    let r = api
        .put(&ep.uuid, json!({"ordering": "per_contact"}))
        .await
        .expect(200);
    assert_eq!(r.body["ordering"], "per_contact");
    assert_eq!(api.get_endpoint(&ep.uuid).await["ordering"], "per_contact");
    ep.uuid
}

async fn one_contacts_failure_holds_only_its_own_later_deliveries(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let config = settings(&[
        (
            "SWITCHBOARD_WEBHOOK_RETRY_DELAYS",
            // Long enough that A's head is still retrying when B's have arrived, also on a
            // busy machine (it holds A's chain only while it retries).
            "400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms,400ms",
        ),
        ("SWITCHBOARD_WEBHOOK_DISABLE_AFTER", "100"),
    ]);
    let server = env.start(&config).await;
    // On PostgreSQL a second instance dispatches too, and some events are written through it.
    let second = match backend {
        Backend::Postgres => Some(env.start(&config).await),
        Backend::Sqlite => None,
    };
    let other = second.as_ref().unwrap_or(&server);
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    let ordered = per_contact_endpoint(&api, &rx.url("/ordered")).await;
    let plain = api.create(&rx.url("/plain"), &["message.sent"]).await;
    assert_eq!(api.get_endpoint(&plain.uuid).await["ordering"], "none");
    rx.when_body_contains("/ordered", "A-first", Behaviour::Status(500));

    let (a, b) = ("+4915123460001", "+4915123460002");
    send(&server, &seed.key, a, "A-first").await;
    send(other, &seed.key, a, "A-second").await;
    send(other, &seed.key, b, "B-first").await;
    send(&server, &seed.key, a, "A-third").await;
    send(other, &seed.key, b, "B-second").await;

    // B flows while A's head is failing; A's later deliveries wait.
    rx.wait_until(WAIT, |rs| {
        let on = |t: &str| {
            rs.iter()
                .filter(|r| r.path == "/ordered" && text(r) == t)
                .count()
        };
        on("B-first") == 1 && on("B-second") == 1 && on("A-first") >= 3
    })
    .await;
    let held = rx.requests("/ordered");
    assert!(
        !held
            .iter()
            .any(|r| text(r) == "A-second" || text(r) == "A-third"),
        "A's later events wait for its first: {:?}",
        held.iter().map(text).collect::<Vec<_>>()
    );
    let b_seq: Vec<Option<u64>> = held
        .iter()
        .filter(|r| text(r).starts_with('B'))
        .map(sequence)
        .collect();
    assert_eq!(b_seq, vec![Some(1), Some(2)]);
    assert!(
        held.iter()
            .filter(|r| text(r) == "A-first")
            .all(|r| sequence(r) == Some(1))
    );
    // The unordered endpoint got everything already, without sequence numbers.
    let plain_got = rx.wait_for("/plain", 5, WAIT).await;
    assert!(plain_got.iter().all(|r| sequence(r).is_none()));

    // The head succeeds: the rest follows in order, each after the one before.
    rx.clear_rules("/ordered");
    let all = rx
        .wait_until(WAIT, |rs| {
            rs.iter()
                .any(|r| r.path == "/ordered" && text(r) == "A-third")
        })
        .await;
    let ordered_rs: Vec<ReceivedRequest> =
        all.into_iter().filter(|r| r.path == "/ordered").collect();
    let last_a_first = ordered_rs
        .iter()
        .rposition(|r| text(r) == "A-first")
        .unwrap();
    assert!(last_a_first < first_arrival(&ordered_rs, "A-second"));
    assert!(first_arrival(&ordered_rs, "A-second") < first_arrival(&ordered_rs, "A-third"));
    let a_seq: Vec<(String, Option<u64>)> = ordered_rs
        .iter()
        .filter(|r| text(r).starts_with('A'))
        .map(|r| (text(r), sequence(r)))
        .collect();
    assert_eq!(a_seq.last().unwrap(), &("A-third".to_owned(), Some(3)));
    assert!(a_seq.contains(&("A-second".to_owned(), Some(2))));

    // The ledger shows the numbers too.
    let rows = ledger(&server, &seed.key, &ordered).await;
    let mut seqs: Vec<i64> = rows
        .iter()
        .map(|d| d["sequence"].as_i64().unwrap())
        .collect();
    seqs.sort();
    assert_eq!(seqs, vec![1, 1, 2, 2, 3]);
    for d in ledger(&server, &seed.key, &plain.uuid).await {
        assert_eq!(d["sequence"], Value::Null);
    }
}

async fn a_permanent_failure_leaves_a_gap_in_the_sequence(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let config = settings(&[
        ("SWITCHBOARD_WEBHOOK_RETRY_DELAYS", "100ms,100ms"),
        ("SWITCHBOARD_WEBHOOK_DISABLE_AFTER", "100"),
    ]);
    // On PostgreSQL two instances share the work: the claim query keeps the order.
    let server = env.start(&config).await;
    let second = match backend {
        Backend::Postgres => Some(env.start(&config).await),
        Backend::Sqlite => None,
    };
    let rx = Receiver::start().await;
    // `ordering` on create too (and in the list); an unknown value is a 422 naming it.
    let created = server
        .post(
            "/api/v1/integrations/webhook-endpoints",
            &seed.key,
            &json!({"url": rx.url("/ordered"), "events": ["message.sent"], "ordering": "per_contact"}),
        )
        .await
        .expect(201);
    assert_eq!(created.body["ordering"], "per_contact");
    let ordered = created.body["uuid"].as_str().unwrap().to_owned();
    let list = server
        .get("/api/v1/integrations/webhook-endpoints", &seed.key)
        .await
        .expect(200);
    assert_eq!(list.body["data"][0]["ordering"], "per_contact");
    let bad = server
        .post(
            "/api/v1/integrations/webhook-endpoints",
            &seed.key,
            &json!({"url": rx.url("/x"), "events": ["message.sent"], "ordering": "sideways"}),
        )
        .await;
    assert_eq!(bad.status.as_u16(), 422, "{}", bad.text);
    assert!(bad.text.contains("ordering"), "{}", bad.text);
    rx.respond("/ordered", Behaviour::Slow(Duration::from_millis(30), 200));
    rx.when_body_contains("/ordered", "C-2", Behaviour::Status(400));
    let c = "+4915123460003";
    for i in 1..=6 {
        let s = second.as_ref().filter(|_| i % 2 == 0).unwrap_or(&server);
        send(s, &seed.key, c, &format!("C-{i}")).await;
    }
    let got = rx
        .wait_until(WAIT, |rs| {
            rs.iter().any(|r| r.path == "/ordered" && text(r) == "C-6")
        })
        .await;
    let texts: Vec<String> = got
        .iter()
        .filter(|r| r.path == "/ordered")
        .map(text)
        .collect();
    assert_eq!(
        texts,
        (1..=6).map(|i| format!("C-{i}")).collect::<Vec<_>>(),
        "one attempt each, in order"
    );
    let seqs: Vec<Option<u64>> = got
        .iter()
        .filter(|r| r.path == "/ordered")
        .map(sequence)
        .collect();
    assert_eq!(seqs, (1..=6).map(Some).collect::<Vec<_>>());
    // The receiver accepted 1, 3, 4, 5, 6: the gap at 2 is the failed delivery in the ledger.
    let rows = ledger(&server, &seed.key, &ordered).await;
    let failed: Vec<&Value> = rows.iter().filter(|d| d["status"] == "failed").collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["sequence"], 2);
    drop(second);
}
