//! Conformance of `WebhookStore` on both backends .

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;

#[allow(unused_imports)]
use crate::support::*;
use switchboard_domain::Timestamp;
use switchboard_domain::event::{Actor, Effects, EventCategory, NewEvent, OrgEvent};
use switchboard_domain::webhooks::delivery::{self, EndpointHealth};
use switchboard_domain::webhooks::endpoint::{EndpointOrdering, EndpointStatus};
use switchboard_store::testing::TestStore;
use switchboard_store::webhooks::*;
use switchboard_store::{SharedStore, StoreError};

conformance!(
    endpoints_lifecycle,
    committed_deliveries_wake_the_dispatchers,
    fan_out_follows_subscriptions,
    test_deliveries_reach_one_endpoint,
    claims_are_exclusive_and_respect_limits,
    expired_leases_are_taken_over,
    controls_filter_the_fan_out_and_lengthen_leases,
    claims_ahead_are_handed_back_as_they_were,
    deliveries_are_handed_off_as_they_are_written,
    first_attempts_are_kept_in_the_delivery_row,
    event_data_is_kept_once_in_the_envelope,
    concurrent_claims_never_overlap,
    outcomes_update_deliveries_and_health,
    endpoints_are_disabled_at_the_threshold,
    outcomes_are_recorded_in_batches,
    outcomes_and_the_next_claim_share_a_transaction,
    successes_in_a_batch_keep_their_times_and_reset_health,
    plain_successes_store_what_after_attempt_decides,
    ledger_queries_retry_and_purge,
    retention_drops_whole_partitions,
    retention_reads_every_organization,
    legacy_records_share_the_fan_out,
    master_key_rotation_reseals_signing_secrets_only,
);

fn t(ms: i64) -> Timestamp {
    Timestamp::from_millis(1_786_000_000_000 + ms)
}

fn endpoint(org_id: i64, url: &str, events: &[&str]) -> NewEndpoint {
    NewEndpoint {
        uuid: Uuid::now_v7(),
        org_id,
        name: "receiver".into(),
        url: url.into(),
        events: events.iter().map(|e| e.to_string()).collect(),
        headers: BTreeMap::new(),
        sealed_secret: vec![1, 2, 3],
        status: EndpointStatus::Active,
        now: t(0),
        legacy: false,
        ordering: EndpointOrdering::None,
        controls: Default::default(),
    }
}

async fn create_legacy(s: &SharedStore, org_id: i64, url: &str, events: &[&str]) -> EndpointRecord {
    let mut new = endpoint(org_id, url, events);
    new.legacy = true;
    new.sealed_secret = Vec::new();
    s.create_endpoint(new, no_effects()).await.unwrap()
}

async fn create(s: &SharedStore, org_id: i64, url: &str, events: &[&str]) -> EndpointRecord {
    s.create_endpoint(endpoint(org_id, url, events), no_effects())
        .await
        .unwrap()
}

async fn emit(s: &SharedStore, org_id: i64, name: &str, at: i64) -> NewEvent {
    let e = NewEvent::new(org_id, name, json!({"n": at}), None, t(at));
    s.write_effects(Effects::none().event(e.clone()))
        .await
        .unwrap();
    e
}

fn all(limit: i64) -> DeliveryQuery {
    DeliveryQuery {
        limit,
        ..Default::default()
    }
}

fn claim(now: i64, limit: usize, per_endpoint: usize) -> ClaimRequest {
    ClaimRequest {
        token: Uuid::new_v4(),
        now: t(now),
        lease_until: t(now + 10_000),
        timeout: Duration::from_secs(5),
        limit,
        per_endpoint,
        in_flight: HashMap::new(),
        ahead: None,
    }
}

fn attempt(number: i64, at: i64, status: Option<i64>, code: Option<&str>) -> AttemptRecord {
    AttemptRecord {
        number,
        url: Some("https://example.com/hook".into()),
        started_at: t(at),
        duration_ms: Some(12),
        response_status: status,
        error_code: code.map(str::to_owned),
        error_message: code.map(|c| format!("failed: {c}")),
        response_body_excerpt: Some("ok".into()),
        signed_with: Some(vec!["sec_0123456789ab".into()]),
    }
}

fn outcome(
    c: &ClaimedDelivery,
    at: i64,
    disposition: Disposition,
    status: Option<i64>,
) -> AttemptOutcome {
    let code = match disposition {
        Disposition::Delivered => None,
        _ => Some("http_error"),
    };
    AttemptOutcome {
        delivery_id: c.id,
        token: c.token,
        attempt: attempt(c.attempt, at, status, code),
        disposition,
        now: t(at),
        disable_after: 3,
    }
}

async fn endpoints_lifecycle(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let other = s.create_org("Other", t(0)).await.unwrap();
    let mut new = endpoint(
        org.id,
        "https://a.example.com/x",
        &["message.*", "crm.deal_won"],
    );
    new.headers.insert("X-Tenant".into(), "acme".into());
    let e = s
        .create_endpoint(
            new.clone(),
            Box::new(|e| {
                Effects::none().log(OrgEvent::new(
                    e.org_id,
                    "webhook_endpoint.created",
                    EventCategory::Admin,
                    Actor::Admin,
                    None,
                    json!({}),
                    t(0),
                ))
            }),
        )
        .await
        .unwrap();
    assert_eq!(e.uuid, new.uuid);
    assert_eq!(e.events, vec!["message.*", "crm.deal_won"]);
    assert_eq!(e.headers["X-Tenant"], "acme");
    assert_eq!(e.sealed_secret, vec![1, 2, 3]);
    assert_eq!(e.status, EndpointStatus::Active);
    assert_eq!(e.consecutive_failures, 0);
    assert_eq!(s.list_org_events(org.id, 10).await.unwrap().len(), 1);
    assert_eq!(s.get_endpoint(org.id, e.uuid).await.unwrap(), e);
    assert!(matches!(
        s.get_endpoint(other.id, e.uuid).await,
        Err(StoreError::NotFound)
    ));

    // Newest first, with a cursor.
    let mut later = endpoint(org.id, "https://b.example.com/x", &["*"]);
    later.now = t(10);
    let e2 = s.create_endpoint(later, no_effects()).await.unwrap();
    let page = s.list_endpoints(org.id, false, None, 10).await.unwrap();
    assert_eq!(
        page.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![e2.id, e.id]
    );
    let rest = s
        .list_endpoints(org.id, false, Some((e2.created_at, e2.id)), 10)
        .await
        .unwrap();
    assert_eq!(rest.iter().map(|e| e.id).collect::<Vec<_>>(), vec![e.id]);
    assert!(
        s.list_endpoints(other.id, false, None, 10)
            .await
            .unwrap()
            .is_empty()
    );

    // A patch changes only what it names; effects see before and after.
    let updated = s
        .update_endpoint(
            org.id,
            e.uuid,
            EndpointPatch {
                name: Some("Renamed".into()),
                events: Some(vec!["*".into()]),
                ..Default::default()
            },
            t(20),
            Box::new(|(old, new)| {
                assert_eq!(old.name, "receiver");
                assert_eq!(new.name, "Renamed");
                Effects::none()
            }),
        )
        .await
        .unwrap();
    assert_eq!(updated.name, "Renamed");
    assert_eq!(updated.events, vec!["*"]);
    assert_eq!(updated.url, e.url);
    assert_eq!(updated.headers, e.headers);
    assert_eq!(updated.updated_at, t(20));
    // A patch of nothing, or of the current values, changes nothing, not even updated_at.
    for patch in [
        EndpointPatch::default(),
        EndpointPatch {
            name: Some("Renamed".into()),
            status: Some(EndpointStatus::Active),
            ..Default::default()
        },
    ] {
        let same = s
            .update_endpoint(org.id, e.uuid, patch, t(25), no_effects())
            .await
            .unwrap();
        assert_eq!(same, updated);
    }
    // Disabling and re-enabling.
    let disabled = s
        .update_endpoint(
            org.id,
            e.uuid,
            EndpointPatch {
                status: Some(EndpointStatus::Disabled),
                disabled_reason: Some("maintenance".into()),
                ..Default::default()
            },
            t(30),
            no_effects(),
        )
        .await
        .unwrap();
    assert_eq!(disabled.status, EndpointStatus::Disabled);
    assert_eq!(disabled.disabled_reason.as_deref(), Some("maintenance"));
    assert_eq!(disabled.disabled_at, Some(t(30)));
    let enabled = s
        .update_endpoint(
            org.id,
            e.uuid,
            EndpointPatch {
                status: Some(EndpointStatus::Active),
                ..Default::default()
            },
            t(40),
            no_effects(),
        )
        .await
        .unwrap();
    assert_eq!(enabled.status, EndpointStatus::Active);
    assert_eq!(enabled.disabled_reason, None);
    assert_eq!(enabled.disabled_at, None);
    // A new secret.
    let rotated = s
        .update_endpoint(
            org.id,
            e.uuid,
            EndpointPatch {
                sealed_secret: Some(vec![9, 9]),
                ..Default::default()
            },
            t(50),
            no_effects(),
        )
        .await
        .unwrap();
    assert_eq!(rotated.sealed_secret, vec![9, 9]);
    assert!(matches!(
        s.update_endpoint(
            other.id,
            e.uuid,
            EndpointPatch::default(),
            t(50),
            no_effects()
        )
        .await,
        Err(StoreError::NotFound)
    ));

    // Deleted: gone from reads and lists, a second delete is NotFound.
    s.delete_endpoint(org.id, e.uuid, t(60), no_effects())
        .await
        .unwrap();
    assert!(matches!(
        s.get_endpoint(org.id, e.uuid).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        s.delete_endpoint(org.id, e.uuid, t(61), no_effects()).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        s.delete_endpoint(other.id, e2.uuid, t(61), no_effects())
            .await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        s.list_endpoints(org.id, false, None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

async fn fan_out_follows_subscriptions(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let other = s.create_org("Other", t(0)).await.unwrap();
    let all_ep = create(&s, org.id, "https://a.example.com/all", &["*"]).await;
    let ns = create(&s, org.id, "https://a.example.com/ns", &["security.*"]).await;
    let exact = create(
        &s,
        org.id,
        "https://a.example.com/exact",
        &["security.api_key_revoked"],
    )
    .await;
    // The same URL (spelled differently) twice: one delivery.
    let same1 = create(
        &s,
        org.id,
        "https://A.example.com:443/same",
        &["security.*"],
    )
    .await;
    let same2 = create(&s, org.id, "https://a.example.com/same", &["*"]).await;
    let off = create(&s, org.id, "https://a.example.com/off", &["*"]).await;
    s.update_endpoint(
        org.id,
        off.uuid,
        EndpointPatch {
            status: Some(EndpointStatus::Disabled),
            ..Default::default()
        },
        t(1),
        no_effects(),
    )
    .await
    .unwrap();
    let foreign = create(&s, other.id, "https://a.example.com/foreign", &["*"]).await;

    let created = emit(&s, org.id, "security.api_key_created", 10).await;
    let revoked = emit(&s, org.id, "security.api_key_revoked", 11).await;
    emit(&s, org.id, "integration.test", 12).await;
    // A webhook.* event about an endpoint never goes to that endpoint.
    let note = NewEvent::new(
        org.id,
        "webhook.delivery_failed",
        json!({"endpoint_uuid": all_ep.uuid}),
        None,
        t(13),
    );
    s.write_effects(Effects::none().event(note.clone()))
        .await
        .unwrap();

    let ds = s.list_deliveries(org.id, &all(100)).await.unwrap();
    let to = |e: &EndpointRecord| -> Vec<String> {
        let mut v: Vec<String> = ds
            .iter()
            .filter(|d| d.endpoint_uuid == Some(e.uuid))
            .map(|d| d.event_name.clone())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        to(&all_ep),
        vec![created.name.clone(), revoked.name.clone()]
    );
    assert_eq!(to(&ns), vec![created.name.clone(), revoked.name.clone()]);
    assert_eq!(to(&exact), vec![revoked.name.clone()]);
    assert_eq!(to(&same1), vec![created.name.clone(), revoked.name.clone()]);
    assert_eq!(
        to(&same2),
        vec!["webhook.delivery_failed".to_owned()],
        "the first endpoint of a URL wins; the second gets what the first does not"
    );
    assert!(to(&off).is_empty());
    assert!(ds.iter().all(|d| d.event_name != "integration.test"));
    assert!(
        ds.iter()
            .all(|d| d.status == DeliveryStatus::Pending && d.attempts == 0)
    );
    assert!(ds.iter().all(|d| d.next_attempt_at.is_some()));
    let d = ds.iter().find(|d| d.event_name == created.name).unwrap();
    assert_eq!(d.event_uuid, created.uuid);
    assert_eq!(d.created_at, t(10));
    assert!(
        s.list_deliveries(other.id, &all(100))
            .await
            .unwrap()
            .is_empty()
    );
    let _ = foreign;
}

async fn test_deliveries_reach_one_endpoint(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let other = s.create_org("Other", t(0)).await.unwrap();
    let a = create(&s, org.id, "https://a.example.com/a", &["crm.deal_won"]).await;
    let b = create(&s, org.id, "https://a.example.com/b", &["*"]).await;
    let event = NewEvent::new(org.id, "integration.test", json!({}), None, t(5));
    let id = s
        .create_test_delivery(org.id, a.uuid, event.clone(), Uuid::now_v7())
        .await
        .unwrap();
    let ds = s.list_deliveries(org.id, &all(10)).await.unwrap();
    assert_eq!(ds.len(), 1);
    assert_eq!(ds[0].uuid, id);
    assert_eq!(ds[0].endpoint_uuid, Some(a.uuid));
    assert_eq!(ds[0].event_uuid, event.uuid);
    let _ = b;
    assert!(matches!(
        s.create_test_delivery(
            other.id,
            a.uuid,
            NewEvent::new(other.id, "integration.test", json!({}), None, t(5)),
            Uuid::now_v7()
        )
        .await,
        Err(StoreError::NotFound)
    ));
}

async fn claims_are_exclusive_and_respect_limits(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let a = create(&s, org.id, "https://a.example.com/a", &["*"]).await;
    let b = create(&s, org.id, "https://a.example.com/b", &["*"]).await;
    for i in 0..5 {
        emit(&s, org.id, "security.api_key_created", 100 + i).await;
    }
    // Nothing is due before the events.
    assert!(
        s.claim_deliveries(&claim(50, 10, 10))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(s.next_delivery_due().await.unwrap(), Some(t(100)));

    // Per endpoint: at most 2 each, counting those already in flight.
    let mut req = claim(1000, 10, 2);
    req.in_flight.insert(b.id, 1);
    let first = s.claim_deliveries(&req).await.unwrap();
    let per = |v: &[ClaimedDelivery], e: &EndpointRecord| {
        v.iter()
            .filter(|d| d.endpoint.as_ref().unwrap().id == e.id)
            .count()
    };
    assert_eq!((per(&first, &a), per(&first, &b)), (2, 1));
    for d in &first {
        assert_eq!(d.attempt, 1);
        assert_eq!(d.token, req.token);
        assert_eq!(d.event.name, "security.api_key_created");
        let ep = d.endpoint.as_ref().unwrap();
        assert_eq!(ep.sealed_secret, vec![1, 2, 3]);
        assert!(!ep.deleted);
    }
    // Oldest first.
    assert_eq!(first[0].event.occurred_at, t(100));
    // Claimed deliveries are not claimable again until their lease expires.
    let again = s.claim_deliveries(&claim(1000, 100, 100)).await.unwrap();
    assert_eq!(again.len(), 10 - 3);
    assert!(again.iter().all(|d| first.iter().all(|f| f.id != d.id)));
    assert!(
        s.claim_deliveries(&claim(1000, 100, 100))
            .await
            .unwrap()
            .is_empty()
    );
    // In flight: no next attempt shown. Claimed deliveries are neither the next due ones (an
    // expired lease is found by the dispatcher's poll) nor in the backlog until their leases
    // expire; then they count from their own due time.
    let d = s.list_deliveries(org.id, &all(100)).await.unwrap();
    assert!(d.iter().all(|d| d.in_flight && d.next_attempt_at.is_none()));
    assert_eq!(s.next_delivery_due().await.unwrap(), None);
    assert_eq!(s.delivery_backlog(t(1000)).await.unwrap(), (0, None));
    assert_eq!(s.delivery_backlog(t(10_999)).await.unwrap(), (0, None));
    assert_eq!(
        s.delivery_backlog(t(11_000)).await.unwrap(),
        (10, Some(t(100)))
    );
    // The global limit.
    let org2 = s.create_org("Two", t(0)).await.unwrap();
    create(&s, org2.id, "https://a.example.com/c", &["*"]).await;
    for i in 0..3 {
        emit(&s, org2.id, "security.api_key_created", 200 + i).await;
    }
    assert_eq!(
        s.claim_deliveries(&claim(1000, 2, 100))
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        s.claim_deliveries(&claim(1000, 0, 100))
            .await
            .unwrap()
            .len(),
        0
    );
}

async fn expired_leases_are_taken_over(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    create(&s, org.id, "https://a.example.com/a", &["*"]).await;
    emit(&s, org.id, "security.api_key_created", 100).await;
    let first = s.claim_deliveries(&claim(1000, 10, 10)).await.unwrap();
    assert_eq!(first.len(), 1);
    // Still leased at 10.999 s; taken over after 11 s.
    assert!(
        s.claim_deliveries(&claim(10_999, 10, 10))
            .await
            .unwrap()
            .is_empty()
    );
    let second = s.claim_deliveries(&claim(11_000, 10, 10)).await.unwrap();
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].attempt, 2);
    // The first claimer can no longer record its outcome.
    assert_eq!(
        s.record_attempt(outcome(
            &first[0],
            11_500,
            Disposition::Delivered,
            Some(200)
        ))
        .await
        .unwrap(),
        AttemptRecorded::LeaseLost
    );
    assert_eq!(
        s.record_attempt(outcome(
            &second[0],
            11_600,
            Disposition::Delivered,
            Some(200)
        ))
        .await
        .unwrap(),
        AttemptRecorded::Done {
            status: DeliveryStatus::Delivered,
            endpoint_disabled: false
        }
    );
    let (d, attempts, event) = s.get_delivery(org.id, first[0].uuid).await.unwrap();
    assert_eq!(d.status, DeliveryStatus::Delivered);
    assert_eq!(d.attempts, 2);
    assert_eq!(event.name, "security.api_key_created");
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0].number, 1);
    assert_eq!(
        attempts[0].error_code.as_deref(),
        Some("attempt_interrupted")
    );
    assert_eq!(attempts[0].started_at, t(1000));
    assert_eq!(attempts[0].duration_ms, None);
    assert_eq!(attempts[1].number, 2);
    assert_eq!(attempts[1].response_status, Some(200));
}

async fn controls_filter_the_fan_out_and_lengthen_leases(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let mut new = endpoint(org.id, "https://a.example.com/slow", &["*"]);
    new.controls = EndpointControls {
        filter: Some(r#"{"event": {"$ne": "security.api_key_revoked"}}"#.into()),
        timeout_ms: Some(20_000),
        retry_delays_ms: Some(vec![1_000, 60_000]),
        max_per_second: Some(5),
        ..Default::default()
    };
    let slow = s.create_endpoint(new.clone(), no_effects()).await.unwrap();
    assert_eq!(slow.controls, new.controls, "stored and read back");
    let plain = create(&s, org.id, "https://a.example.com/plain", &["*"]).await;
    emit(&s, org.id, "security.api_key_created", 100).await;
    emit(&s, org.id, "security.api_key_revoked", 200).await;
    // The filtered endpoint gets the first event only; the other both.
    let claimed = s.claim_deliveries(&claim(1000, 10, 10)).await.unwrap();
    let to = |e: &EndpointRecord| {
        claimed
            .iter()
            .filter(|d| d.endpoint.as_ref().map(|x| x.id) == Some(e.id))
            .collect::<Vec<_>>()
    };
    assert_eq!(to(&slow).len(), 1);
    assert_eq!(to(&slow)[0].event.name, "security.api_key_created");
    assert_eq!(to(&plain).len(), 2);
    // Leased for the endpoint's own 20 s instead of the claim's 5 s: 15 s longer.
    assert_eq!(to(&slow)[0].lease_until, t(1000 + 10_000 + 15_000));
    let controls = &to(&slow)[0].endpoint.as_ref().unwrap().controls;
    assert_eq!(controls.timeout_ms, Some(20_000));
    assert_eq!(controls.retry_delays_ms, Some(vec![1_000, 60_000]));
    assert_eq!(controls.max_per_second, Some(5));
    for d in to(&plain) {
        assert_eq!(d.lease_until, t(11_000));
    }
    // The plain deliveries' leases expire at 11 s, the slow one's not before 26 s.
    let later = s.claim_deliveries(&claim(11_000, 10, 10)).await.unwrap();
    assert_eq!(later.len(), 2);
    assert!(
        later
            .iter()
            .all(|d| d.endpoint.as_ref().unwrap().id == plain.id)
    );
    assert!(
        s.claim_deliveries(&claim(25_999, 10, 10))
            .await
            .unwrap()
            .iter()
            .all(|d| d.endpoint.as_ref().unwrap().id != slow.id)
    );
    // A patch changes the controls it names, and `Some(None)` removes one.
    let changed = s
        .update_endpoint(
            org.id,
            slow.uuid,
            EndpointPatch {
                controls: ControlsPatch {
                    filter: Some(None),
                    max_per_second: Some(Some(9)),
                    ..Default::default()
                },
                ..Default::default()
            },
            t(30_000),
            Box::new(|_| Effects::none()),
        )
        .await
        .unwrap();
    assert_eq!(changed.controls.filter, None);
    assert_eq!(changed.controls.max_per_second, Some(9));
    assert_eq!(changed.controls.timeout_ms, Some(20_000));
    assert_eq!(changed.updated_at, t(30_000));
}

async fn claims_ahead_are_handed_back_as_they_were(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let a = create(&s, org.id, "https://a.example.com/a", &["*"]).await;
    let b = create(&s, org.id, "https://a.example.com/b", &["*"]).await;
    let c = create(&s, org.id, "https://a.example.com/c", &["*"]).await;
    for i in 0..6 {
        emit(&s, org.id, "security.api_key_created", 100 + i).await;
    }
    let before = s.list_deliveries(org.id, &all(100)).await.unwrap();
    assert_eq!(before.len(), 18);

    // At once: 3 in all, 2 per endpoint counting the one of `a` this instance holds. Ahead: up
    // to 10, only to `a` and `b`, each holding at most one more than `per_endpoint`.
    let mut req = claim(1000, 3, 2);
    req.in_flight.insert(a.id, 1);
    req.ahead = Some(ClaimAhead {
        limit: 10,
        room: HashMap::from([(a.id, 1), (b.id, 1)]),
    });
    let claimed = s.claim_deliveries(&req).await.unwrap();
    let count = |e: &EndpointRecord, ahead: bool| {
        claimed
            .iter()
            .filter(|d| d.endpoint.as_ref().unwrap().id == e.id && d.ahead == ahead)
            .count()
    };
    // The oldest event's three deliveries start at once.
    assert_eq!(
        (count(&a, false), count(&b, false), count(&c, false)),
        (1, 1, 1)
    );
    assert_eq!(
        (count(&a, true), count(&b, true), count(&c, true)),
        (1, 2, 0)
    );
    for d in &claimed {
        assert_eq!(d.attempt, 1);
        assert_eq!(d.lease_until, t(11_000));
        assert_eq!(d.event.occurred_at == t(100), !d.ahead);
    }
    assert_eq!(s.delivery_backlog(t(1000)).await.unwrap().0, 18 - 6);
    assert_eq!(s.delivery_backlog(t(11_000)).await.unwrap().0, 18);

    // Handed back: as before the claim, with no attempt counted or logged. A token that no
    // longer holds its delivery hands nothing back.
    let ahead: Vec<&ClaimedDelivery> = claimed.iter().filter(|d| d.ahead).collect();
    let at_once = claimed.iter().find(|d| !d.ahead).unwrap();
    let mut back: Vec<(i64, Uuid, ClaimedFrom)> = ahead
        .iter()
        .map(|d| (d.id, d.token, d.claimed_from.clone()))
        .collect();
    back.push((at_once.id, Uuid::new_v4(), at_once.claimed_from.clone()));
    assert_eq!(s.hand_back(back, t(2000)).await.unwrap(), 3);
    for d in &ahead {
        let (now, attempts, _) = s.get_delivery(org.id, d.uuid).await.unwrap();
        let was = before.iter().find(|r| r.id == d.id).unwrap();
        assert_eq!(now.attempts, 0);
        assert!(!now.in_flight);
        assert_eq!(now.next_attempt_at, was.next_attempt_at);
        assert_eq!(now.last_attempt_at, was.last_attempt_at);
        assert!(attempts.is_empty());
    }
    let (d, _, _) = s.get_delivery(org.id, at_once.uuid).await.unwrap();
    assert!(d.in_flight);
    assert_eq!(d.attempts, 1);
    // With no free slot, a claim takes deliveries ahead alone.
    let mut req = claim(2000, 0, 2);
    req.in_flight.insert(c.id, 2);
    req.ahead = Some(ClaimAhead {
        limit: 5,
        room: HashMap::from([(c.id, 1)]),
    });
    let only_ahead = s.claim_deliveries(&req).await.unwrap();
    assert_eq!(only_ahead.len(), 1);
    assert!(only_ahead[0].ahead);
    assert_eq!(only_ahead[0].endpoint.as_ref().unwrap().id, c.id);
    // Claimable again at once, as the same first attempt.
    let again = s.claim_deliveries(&claim(2000, 100, 100)).await.unwrap();
    assert_eq!(again.len(), 18 - 3 - 1);
    for d in ahead {
        let c = again.iter().find(|c| c.id == d.id).unwrap();
        assert_eq!(c.attempt, 1);
        assert!(!c.ahead);
    }
}

fn offer(limit: usize, per_endpoint: usize) -> switchboard_store::handoff::Offer {
    switchboard_store::handoff::Offer {
        token: Uuid::new_v4(),
        timeout: Duration::from_secs(5),
        lease_margin: Duration::from_secs(5),
        limit,
        per_endpoint,
        in_flight: HashMap::new(),
        ahead_limit: 0,
        room: HashMap::new(),
    }
}

async fn deliveries_are_handed_off_as_they_are_written(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let a = create(&s, org.id, "https://a.example.com/a", &["*"]).await;
    let mut slow = endpoint(org.id, "https://a.example.com/b", &["*"]);
    slow.controls.timeout_ms = Some(8_000);
    let b = s.create_endpoint(slow, no_effects()).await.unwrap();
    let handoff = s.handoff();
    let mut rx = handoff.receiver().expect("the receiver is taken once");

    // No offer: every delivery is written due, for a claim.
    emit(&s, org.id, "security.api_key_created", 100).await;
    assert!(rx.try_recv().is_err());
    assert_eq!(s.delivery_backlog(t(1000)).await.unwrap().0, 2);
    let first = s.claim_deliveries(&claim(1000, 10, 10)).await.unwrap();
    assert_eq!(first.len(), 2);
    let done = first
        .iter()
        .map(|d| outcome(d, 1100, Disposition::Delivered, Some(200)));
    s.record_attempts(done.collect()).await.unwrap();

    // Room for one delivery per endpoint, two in all: the event's deliveries are written
    // leased to this process and handed over after the commit, one of them with the longer
    // lease of its endpoint's own time limit.
    let o = offer(2, 1);
    let token = o.token;
    handoff.offer(Some(o));
    emit(&s, org.id, "security.api_key_created", 2000).await;
    let handed = rx.try_recv().expect("handed after the commit");
    assert_eq!(handed.token, token);
    assert_eq!(handed.deliveries.len(), 2);
    let claimed = s.read_handed(&handed, t(2000)).await.unwrap();
    // The transaction that wrote them knew them whole: what they carry to the dispatcher (which
    // then reads nothing back) is exactly what the read-back finds.
    let mut carried = handed.claimed().expect("carried whole");
    carried.sort_by_key(|d| d.id);
    assert_eq!(carried, claimed);
    // In the dispatcher's hands now: no longer on their way (they reduce no further offer).
    handoff.settle(&handed);
    assert_eq!(claimed.len(), 2);
    for d in &claimed {
        let ep = d.endpoint.as_ref().unwrap();
        assert_eq!(d.token, token);
        assert_eq!(d.attempt, 1);
        assert!(!d.ahead);
        assert_eq!(d.event.occurred_at, t(2000));
        let lease = if ep.id == b.id {
            2000 + 3000 + 10_000
        } else {
            2000 + 10_000
        };
        assert_eq!(d.lease_until, t(lease), "endpoint {}", ep.url);
        let (row, attempts, _) = s.get_delivery(org.id, d.uuid).await.unwrap();
        assert!(row.in_flight);
        assert_eq!(row.attempts, 1);
        assert!(attempts.is_empty());
    }
    // Leased: no claim takes them, and nothing is due.
    assert_eq!(s.delivery_backlog(t(3000)).await.unwrap().0, 0);
    assert!(
        s.claim_deliveries(&claim(3000, 10, 10))
            .await
            .unwrap()
            .is_empty()
    );

    // The offer is used up: the next event's deliveries are written due.
    emit(&s, org.id, "security.api_key_created", 4000).await;
    assert!(rx.try_recv().is_err());
    assert_eq!(s.delivery_backlog(t(4000)).await.unwrap().0, 2);
    let due = s.claim_deliveries(&claim(4000, 10, 10)).await.unwrap();
    assert_eq!(due.len(), 2);
    let done = due
        .iter()
        .map(|d| outcome(d, 4100, Disposition::Delivered, Some(200)));
    s.record_attempts(done.collect()).await.unwrap();

    // A handed delivery records its outcome with the hand-off's token, as a claimed one.
    let to_a = claimed
        .iter()
        .find(|d| d.endpoint.as_ref().unwrap().id == a.id)
        .unwrap();
    assert_eq!(
        s.record_attempt(outcome(to_a, 2100, Disposition::Delivered, Some(200)))
            .await
            .unwrap(),
        AttemptRecorded::Done {
            status: DeliveryStatus::Delivered,
            endpoint_disabled: false
        }
    );
    let (row, attempts, _) = s.get_delivery(org.id, to_a.uuid).await.unwrap();
    assert_eq!(row.status, DeliveryStatus::Delivered);
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].number, 1);

    // One whose process stopped before the attempt is taken over when its lease expires, its
    // interrupted attempt logged (at least once, as every claim).
    let to_b = claimed
        .iter()
        .find(|d| d.endpoint.as_ref().unwrap().id == b.id)
        .unwrap();
    assert!(
        s.claim_deliveries(&claim(14_999, 10, 10))
            .await
            .unwrap()
            .is_empty()
    );
    let taken = s.claim_deliveries(&claim(15_000, 10, 10)).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!((taken[0].id, taken[0].attempt), (to_b.id, 2));
    let (_, attempts, _) = s.get_delivery(org.id, to_b.uuid).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(
        attempts[0].error_code.as_deref(),
        Some("attempt_interrupted")
    );
    assert_eq!(attempts[0].started_at, t(2000));

    // Handed back (the dispatcher stopped before starting it): due again as written, with no
    // attempt counted or logged.
    handoff.offer(Some(offer(1, 1)));
    emit(&s, org.id, "security.api_key_created", 20_000).await;
    let handed = rx.try_recv().expect("handed after the commit");
    assert_eq!(handed.deliveries.len(), 1);
    let back: Vec<(i64, Uuid, ClaimedFrom)> = handed
        .deliveries
        .iter()
        .map(|d| {
            let from = ClaimedFrom {
                last_attempt_at: None,
                next_attempt_at: Some(d.written_at),
            };
            (d.id, handed.token, from)
        })
        .collect();
    assert_eq!(s.hand_back(back, t(20_001)).await.unwrap(), 1);
    handoff.settle(&handed);
    let again = s.claim_deliveries(&claim(20_002, 10, 10)).await.unwrap();
    assert_eq!(again.len(), 2, "both of the event's deliveries are due");
    let back_again = again
        .iter()
        .find(|d| d.id == handed.deliveries[0].id)
        .unwrap();
    assert_eq!(back_again.attempt, 1);
    // A token that no longer holds a delivery reads nothing back.
    assert!(s.read_handed(&handed, t(20_003)).await.unwrap().is_empty());

    // An endpoint whose retired secret is still in its grace period: its deliveries are
    // handed off without it, and read back (with the retired secret) before the attempt.
    s.update_endpoint(
        org.id,
        a.uuid,
        EndpointPatch {
            sealed_secret: Some(vec![7, 7]),
            retire_secret_until: Some(t(90_000)),
            ..Default::default()
        },
        t(30_000),
        no_effects(),
    )
    .await
    .unwrap();
    handoff.offer(Some(offer(2, 1)));
    emit(&s, org.id, "security.api_key_created", 30_001).await;
    let handed = rx.try_recv().expect("handed after the commit");
    assert_eq!(handed.deliveries.len(), 2);
    assert!(handed.claimed().is_none(), "one of them is not known whole");
    let by_endpoint = |ep: i64| {
        handed
            .deliveries
            .iter()
            .find(|d| d.endpoint_id == ep)
            .unwrap()
    };
    assert!(by_endpoint(a.id).claimed.is_none());
    let to_b = by_endpoint(b.id)
        .claimed
        .clone()
        .expect("b has no retired secret");
    let read = s.read_handed(&handed, t(30_001)).await.unwrap();
    assert_eq!(read.len(), 2);
    let read_a = read.iter().find(|d| d.id == by_endpoint(a.id).id).unwrap();
    let ep_a = read_a.endpoint.as_ref().unwrap();
    assert_eq!(ep_a.sealed_secret, vec![7, 7]);
    assert_eq!(ep_a.retired_secrets.len(), 1);
    assert_eq!(read.iter().find(|d| d.id == to_b.id), Some(&*to_b));
    handoff.settle(&handed);
    handoff.offer(None);
}

/// Rows of the attempt log of a delivery (counted by a no-op update).
async fn logged_attempts(ts: &TestStore, delivery_id: i64) -> u64 {
    ts.raw_execute(&format!(
        "UPDATE webhook_attempts SET number = number WHERE delivery_id = {delivery_id}"
    ))
    .await
    .unwrap()
}

/// An event's data is stored once, in its envelope (the row's `data` is JSON `null`), and the
/// readers of events give it back: the outbox, a claim's read-back, the ledger (a recovery reads
/// it the same way, for its ordering and the `webhook.*` rule: tests/blackbox/recovery.rs). Rows
/// written before (their data in `data`) read as they are.
async fn event_data_is_kept_once_in_the_envelope(ts: &TestStore) {
    let s = ts.store.clone();
    let org = s.create_org("Acme", t(0)).await.unwrap();
    create(&s, org.id, "https://a.example.com/a", &["*"]).await;
    let data = json!({"n": 1, "nested": {"list": [1, "two", null], "text": "é"}});
    let e = NewEvent::new(
        org.id,
        "security.api_key_created",
        data.clone(),
        None,
        t(100),
    );
    s.write_effects(Effects::none().event(e.clone()))
        .await
        .unwrap();
    let nulls = ts
        .raw_execute("UPDATE events SET name = name WHERE data = 'null' AND envelope IS NOT NULL")
        .await
        .unwrap();
    assert_eq!(nulls, 1, "the data is in the envelope only");
    let outbox = s.list_outbox_events(org.id, 10).await.unwrap();
    assert_eq!(outbox.len(), 1);
    assert_eq!(outbox[0].data, data);
    let claimed = s.claim_deliveries(&claim(1000, 10, 10)).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].event.data, data);
    let (_, _, event) = s.get_delivery(org.id, claimed[0].uuid).await.unwrap();
    assert_eq!(event.data, data);
    // A row written before: its data in `data`, no envelope.
    let org_id = org.id;
    let (uuid, at) = match ts.backend() {
        "sqlite" => ("randomblob(16)", "1786000000000"),
        _ => ("gen_random_uuid()", "'2026-08-06 12:00:00+00'"),
    };
    ts.raw_execute(&format!(
        "INSERT INTO events (uuid, org_id, name, data, occurred_at)
         VALUES ({uuid}, {org_id}, 'security.api_key_created', '{{\"old\": true}}', {at})"
    ))
    .await
    .unwrap();
    let mut outbox: Vec<Value> = s
        .list_outbox_events(org.id, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.data)
        .collect();
    outbox.sort_by_key(|d| d.to_string());
    assert_eq!(outbox, vec![data, json!({"old": true})]);
}

async fn first_attempts_are_kept_in_the_delivery_row(ts: &TestStore) {
    let s = ts.store.clone();
    let org = s.create_org("Acme", t(0)).await.unwrap();
    create(&s, org.id, "https://a.example.com/a", &["*"]).await;
    emit(&s, org.id, "security.api_key_created", 100).await;
    emit(&s, org.id, "security.api_key_created", 200).await;
    let claimed = s.claim_deliveries(&claim(1000, 10, 10)).await.unwrap();
    assert_eq!(claimed.len(), 2);
    let (first, retried) = (&claimed[0], &claimed[1]);
    // A plain success of a first attempt writes the delivery row alone.
    let results = s
        .record_attempts(vec![
            outcome(first, 1100, Disposition::Delivered, Some(200)),
            outcome(retried, 1100, Disposition::RetryAt(t(1500)), Some(503)),
        ])
        .await
        .unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(logged_attempts(ts, first.id).await, 0);
    let (d, attempts, _) = s.get_delivery(org.id, first.uuid).await.unwrap();
    assert_eq!(d.status, DeliveryStatus::Delivered);
    assert_eq!(attempts.len(), 1);
    let a = &attempts[0];
    let want = attempt(1, 1100, Some(200), None);
    assert_eq!(a.number, 1);
    assert_eq!(a.url, want.url);
    assert_eq!(a.started_at, want.started_at);
    assert_eq!(a.duration_ms, want.duration_ms);
    assert_eq!(a.response_status, Some(200));
    assert_eq!(a.error_code, None);
    assert_eq!(a.response_body_excerpt, want.response_body_excerpt);
    assert_eq!(a.signed_with, want.signed_with);
    // A retry's attempts, the failure and the later success, are rows of the log.
    let again = s.claim_deliveries(&claim(1500, 10, 10)).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].attempt, 2);
    s.record_attempts(vec![outcome(
        &again[0],
        1600,
        Disposition::Delivered,
        Some(200),
    )])
    .await
    .unwrap();
    assert_eq!(logged_attempts(ts, retried.id).await, 2);
    let (d, attempts, _) = s.get_delivery(org.id, retried.uuid).await.unwrap();
    assert_eq!(d.status, DeliveryStatus::Delivered);
    let numbers: Vec<(i64, Option<i64>)> = attempts
        .iter()
        .map(|a| (a.number, a.response_status))
        .collect();
    assert_eq!(numbers, [(1, Some(503)), (2, Some(200))]);
    // A manual retry of the delivered one: its second attempt goes to the log, the first stays.
    s.retry_delivery(org.id, first.uuid, t(2000))
        .await
        .unwrap()
        .unwrap();
    let redo = s.claim_deliveries(&claim(2000, 10, 10)).await.unwrap();
    assert_eq!(redo.len(), 1);
    s.record_attempts(vec![outcome(
        &redo[0],
        2100,
        Disposition::Delivered,
        Some(201),
    )])
    .await
    .unwrap();
    let (_, attempts, _) = s.get_delivery(org.id, first.uuid).await.unwrap();
    let numbers: Vec<(i64, Option<i64>)> = attempts
        .iter()
        .map(|a| (a.number, a.response_status))
        .collect();
    assert_eq!(numbers, [(1, Some(200)), (2, Some(201))]);
    assert_eq!(logged_attempts(ts, first.id).await, 1);
}

async fn concurrent_claims_never_overlap(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    for i in 0..10 {
        create(&s, org.id, &format!("https://a.example.com/{i}"), &["*"]).await;
    }
    for i in 0..30 {
        emit(&s, org.id, "security.api_key_created", 100 + i).await;
    }
    let total = 300;
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = s.claim_deliveries(&claim(5000, 7, 100)).await.unwrap();
                if got.is_empty() {
                    break;
                }
                mine.extend(got.into_iter().map(|d| d.id));
            }
            mine
        }));
    }
    let mut seen = std::collections::HashSet::new();
    for t in tasks {
        for id in t.await.unwrap() {
            assert!(seen.insert(id), "delivery {id} was claimed twice");
        }
    }
    assert_eq!(seen.len(), total);
}

async fn outcomes_update_deliveries_and_health(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let a = create(&s, org.id, "https://a.example.com/a", &["security.*"]).await;
    let watcher = create(&s, org.id, "https://a.example.com/w", &["webhook.*"]).await;
    emit(&s, org.id, "security.api_key_created", 100).await;
    let c = s.claim_deliveries(&claim(1000, 10, 10)).await.unwrap();
    assert_eq!(c.len(), 1);
    // A retryable failure with attempts left: retrying at the given time.
    let r = s
        .record_attempt(outcome(
            &c[0],
            1100,
            Disposition::RetryAt(t(2000)),
            Some(503),
        ))
        .await
        .unwrap();
    assert_eq!(
        r,
        AttemptRecorded::Done {
            status: DeliveryStatus::Retrying,
            endpoint_disabled: false
        }
    );
    let (d, _, _) = s.get_delivery(org.id, c[0].uuid).await.unwrap();
    assert_eq!(d.status, DeliveryStatus::Retrying);
    assert_eq!(d.next_attempt_at, Some(t(2000)));
    assert_eq!(d.response_status, Some(503));
    assert_eq!(d.error_code.as_deref(), Some("http_error"));
    assert!(!d.in_flight);
    assert!(
        s.claim_deliveries(&claim(1999, 10, 10))
            .await
            .unwrap()
            .is_empty()
    );
    // Exhausted: the endpoint's counter goes up and webhook.delivery_failed goes to the watcher.
    let c2 = s.claim_deliveries(&claim(2000, 10, 10)).await.unwrap();
    assert_eq!(c2[0].attempt, 2);
    s.record_attempt(outcome(&c2[0], 2100, Disposition::Exhausted, Some(500)))
        .await
        .unwrap();
    let (d, attempts, _) = s.get_delivery(org.id, c[0].uuid).await.unwrap();
    assert_eq!(d.status, DeliveryStatus::RetriesExhausted);
    assert_eq!(d.next_attempt_at, None);
    assert_eq!(attempts.len(), 2);
    assert_eq!(
        s.get_endpoint(org.id, a.uuid)
            .await
            .unwrap()
            .consecutive_failures,
        1
    );
    let notes = s
        .list_deliveries(
            org.id,
            &DeliveryQuery {
                endpoint_uuid: Some(watcher.uuid),
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].event_name, "webhook.delivery_failed");
    let (_, _, note) = s.get_delivery(org.id, notes[0].uuid).await.unwrap();
    assert_eq!(note.data["delivery_id"], json!(c[0].uuid));
    assert_eq!(note.data["status"], "retries_exhausted");
    assert_eq!(note.data["attempts"], 2);
    // A failure of that notification does not produce another one (no loop).
    let c3 = s.claim_deliveries(&claim(2200, 10, 10)).await.unwrap();
    assert_eq!(c3.len(), 1);
    s.record_attempt(outcome(&c3[0], 2300, Disposition::Failed, Some(400)))
        .await
        .unwrap();
    assert_eq!(s.list_deliveries(org.id, &all(100)).await.unwrap().len(), 2);
    // A success resets the counter.
    emit(&s, org.id, "security.api_key_revoked", 3000).await;
    let c4 = s.claim_deliveries(&claim(3000, 10, 10)).await.unwrap();
    s.record_attempt(outcome(&c4[0], 3100, Disposition::Delivered, Some(200)))
        .await
        .unwrap();
    let (d, _, _) = s.get_delivery(org.id, c4[0].uuid).await.unwrap();
    assert_eq!(d.status, DeliveryStatus::Delivered);
    assert_eq!(d.delivered_at, Some(t(3100)));
    assert_eq!(
        s.get_endpoint(org.id, a.uuid)
            .await
            .unwrap()
            .consecutive_failures,
        0
    );
    // An interrupted attempt is handed back without counting as a failure.
    emit(&s, org.id, "security.api_key_revoked", 4000).await;
    let c5 = s.claim_deliveries(&claim(4000, 10, 10)).await.unwrap();
    s.record_attempt(AttemptOutcome {
        attempt: attempt(1, 4000, None, Some("attempt_interrupted")),
        ..outcome(&c5[0], 4000, Disposition::Interrupted(t(4001)), None)
    })
    .await
    .unwrap();
    let (d, _, _) = s.get_delivery(org.id, c5[0].uuid).await.unwrap();
    assert_eq!(d.status, DeliveryStatus::Pending);
    assert_eq!(d.next_attempt_at, Some(t(4001)));
    assert_eq!(
        s.get_endpoint(org.id, a.uuid)
            .await
            .unwrap()
            .consecutive_failures,
        0
    );
}

async fn endpoints_are_disabled_at_the_threshold(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let a = create(&s, org.id, "https://a.example.com/a", &["security.*"]).await;
    let watcher = create(
        &s,
        org.id,
        "https://a.example.com/w",
        &["webhook.endpoint_disabled"],
    )
    .await;
    for i in 0..4 {
        emit(&s, org.id, "security.api_key_created", 100 + i).await;
    }
    let claimed = s.claim_deliveries(&claim(1000, 3, 10)).await.unwrap();
    assert_eq!(claimed.len(), 3);
    let mut disabled = Vec::new();
    for c in &claimed {
        match s
            .record_attempt(outcome(c, 1100, Disposition::Failed, Some(410)))
            .await
            .unwrap()
        {
            AttemptRecorded::Done {
                endpoint_disabled, ..
            } => disabled.push(endpoint_disabled),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        disabled,
        vec![false, false, true],
        "disabled at the third (disable_after = 3)"
    );
    let e = s.get_endpoint(org.id, a.uuid).await.unwrap();
    assert_eq!(e.status, EndpointStatus::Disabled);
    assert_eq!(e.consecutive_failures, 3);
    assert!(
        e.disabled_reason
            .unwrap()
            .contains("3 consecutive failed deliveries")
    );
    assert_eq!(e.disabled_at, Some(t(1100)));
    // The log entry, and the event to the other endpoint.
    let log = s.list_org_events(org.id, 10).await.unwrap();
    let entry = log
        .iter()
        .find(|l| l.event_type == "webhook_endpoint.disabled")
        .expect("a log entry");
    assert_eq!(entry.category, EventCategory::Admin);
    assert_eq!(entry.actor, Actor::System);
    let to_watcher = s
        .list_deliveries(
            org.id,
            &DeliveryQuery {
                endpoint_uuid: Some(watcher.uuid),
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(to_watcher.len(), 1);
    assert_eq!(to_watcher[0].event_name, "webhook.endpoint_disabled");
    // Its fourth (pending) delivery is held: nothing scheduled, nothing claimable.
    let held: Vec<DeliveryRecord> = s
        .list_deliveries(
            org.id,
            &DeliveryQuery {
                endpoint_uuid: Some(a.uuid),
                status: Some(DeliveryStatus::Pending),
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].next_attempt_at, None);
    let claimable = s.claim_deliveries(&claim(2000, 10, 10)).await.unwrap();
    assert!(
        claimable
            .iter()
            .all(|c| c.endpoint.as_ref().unwrap().id != a.id)
    );
    // New events do not fan out to it.
    emit(&s, org.id, "security.api_key_revoked", 3000).await;
    assert_eq!(
        s.list_deliveries(
            org.id,
            &DeliveryQuery {
                endpoint_uuid: Some(a.uuid),
                limit: 10,
                ..Default::default()
            }
        )
        .await
        .unwrap()
        .len(),
        4
    );
    // Re-enabling resets the counter and schedules the held delivery at once.
    let e = s
        .update_endpoint(
            org.id,
            a.uuid,
            EndpointPatch {
                status: Some(EndpointStatus::Active),
                ..Default::default()
            },
            t(4000),
            no_effects(),
        )
        .await
        .unwrap();
    assert_eq!(e.consecutive_failures, 0);
    let resumed = s.claim_deliveries(&claim(4000, 10, 10)).await.unwrap();
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0].uuid, held[0].uuid);
}

async fn ledger_queries_retry_and_purge(ts: &TestStore) {
    let s = ts.store.clone();
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let a = create(&s, org.id, "https://a.example.com/a", &["*"]).await;
    let b = create(
        &s,
        org.id,
        "https://a.example.com/b",
        &["security.api_key_revoked"],
    )
    .await;
    emit(&s, org.id, "security.api_key_created", 100).await;
    emit(&s, org.id, "security.api_key_revoked", 200).await;
    emit(&s, org.id, "crm.deal_won", 300).await;
    let q = |f: &dyn Fn(&mut DeliveryQuery)| {
        let mut q = all(100);
        f(&mut q);
        q
    };
    let names = |v: Vec<DeliveryRecord>| v.into_iter().map(|d| d.event_name).collect::<Vec<_>>();
    let everything = s.list_deliveries(org.id, &all(100)).await.unwrap();
    assert_eq!(everything.len(), 4);
    assert!(
        everything
            .windows(2)
            .all(|w| (w[0].created_at, w[0].id) > (w[1].created_at, w[1].id)),
        "newest first"
    );
    assert_eq!(
        names(
            s.list_deliveries(
                org.id,
                &q(&|q| q.event = Some(EventFilter::Exact("crm.deal_won".into())))
            )
            .await
            .unwrap()
        ),
        vec!["crm.deal_won"]
    );
    assert_eq!(
        s.list_deliveries(
            org.id,
            &q(&|q| q.event = Some(EventFilter::Namespace("security".into())))
        )
        .await
        .unwrap()
        .len(),
        3
    );
    assert_eq!(
        s.list_deliveries(
            org.id,
            &q(&|q| q.event = Some(EventFilter::Namespace("secur".into())))
        )
        .await
        .unwrap()
        .len(),
        0
    );
    assert_eq!(
        names(
            s.list_deliveries(org.id, &q(&|q| q.endpoint_uuid = Some(b.uuid)))
                .await
                .unwrap()
        ),
        vec!["security.api_key_revoked"]
    );
    assert_eq!(
        s.list_deliveries(
            org.id,
            &q(&|q| {
                q.since = Some(t(200));
                q.until = Some(t(300));
            })
        )
        .await
        .unwrap()
        .len(),
        2
    );
    assert_eq!(
        s.list_deliveries(org.id, &q(&|q| q.status = Some(DeliveryStatus::Delivered)))
            .await
            .unwrap()
            .len(),
        0
    );
    // Cursor: strictly before a position.
    let first = &everything[1];
    let after = s
        .list_deliveries(
            org.id,
            &q(&|q| q.before = Some((first.created_at, first.id))),
        )
        .await
        .unwrap();
    assert_eq!(after.len(), 2);
    assert_eq!(after[0].id, everything[2].id);
    let limited = s.list_deliveries(org.id, &all(1)).await.unwrap();
    assert_eq!(limited.len(), 1);

    // Deliver one, then retry it: pending and due at once.
    let claimed = s.claim_deliveries(&claim(1000, 10, 10)).await.unwrap();
    for c in &claimed {
        s.record_attempt(outcome(c, 1100, Disposition::Delivered, Some(200)))
            .await
            .unwrap();
    }
    let target = claimed[0].uuid;
    let r = s
        .retry_delivery(org.id, target, t(5000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.status, DeliveryStatus::Pending);
    assert_eq!(r.next_attempt_at, Some(t(5000)));
    assert_eq!(r.attempts, 1);
    let again = s.claim_deliveries(&claim(5000, 10, 10)).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].uuid, target);
    assert_eq!(again[0].attempt, 2);
    // While in flight, a retry changes nothing.
    let r = s
        .retry_delivery(org.id, target, t(5001))
        .await
        .unwrap()
        .unwrap();
    assert!(r.in_flight);
    assert!(matches!(
        s.retry_delivery(org.id, Uuid::now_v7(), t(5001)).await,
        Err(StoreError::NotFound)
    ));
    let other = s.create_org("Other", t(0)).await.unwrap();
    assert!(matches!(
        s.retry_delivery(other.id, target, t(5001)).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        s.get_delivery(other.id, target).await,
        Err(StoreError::NotFound)
    ));
    // An endpoint's deletion fails its unfinished deliveries; retrying them is refused.
    emit(&s, org.id, "security.api_key_revoked", 6000).await;
    s.delete_endpoint(org.id, b.uuid, t(6001), no_effects())
        .await
        .unwrap();
    let gone = s
        .list_deliveries(org.id, &q(&|q| q.endpoint_uuid = Some(b.uuid)))
        .await
        .unwrap();
    assert_eq!(
        gone.len(),
        2,
        "the ledger keeps a deleted endpoint's deliveries"
    );
    let failed = gone
        .iter()
        .find(|d| d.status == DeliveryStatus::Failed)
        .expect("failed");
    assert_eq!(failed.error_code.as_deref(), Some("endpoint_deleted"));
    assert_eq!(
        s.retry_delivery(org.id, failed.uuid, t(6002))
            .await
            .unwrap(),
        Err(RetryRefusal::EndpointDeleted)
    );

    if ts.partitioned().await {
        // The rows are in a range partition: they go whole with it, never one by one
        // (retention_drops_whole_partitions).
        let before = s.list_deliveries(org.id, &all(100)).await.unwrap();
        assert_eq!(s.purge_deliveries(t(250), 1000).await.unwrap(), (0, 0));
        assert_eq!(s.list_deliveries(org.id, &all(100)).await.unwrap(), before);
        return;
    }
    // Purge: deliveries created before the cutoff (not in flight), then orphaned events.
    let (d, e1) = s.purge_deliveries(t(250), 1000).await.unwrap();
    assert_eq!(d, 2, "the delivery in flight is kept");
    assert_eq!(e1, 1, "the second event, whose deliveries are all gone");
    s.record_attempt(outcome(&again[0], 5100, Disposition::Delivered, Some(200)))
        .await
        .unwrap();
    let (d, e) = s.purge_deliveries(t(250), 1000).await.unwrap();
    assert_eq!(d, 1);
    assert_eq!(e, 1, "the first event, once its delivery is gone");
    let left = s.list_deliveries(org.id, &all(100)).await.unwrap();
    assert!(left.iter().all(|d| d.created_at >= t(250)));
    let (d, _) = s.purge_deliveries(t(250), 1000).await.unwrap();
    assert_eq!(d, 0);
    let _ = a;
}

/// Rows of a table (counted by a no-op update).
async fn rows(ts: &TestStore, table: &str, column: &str) -> u64 {
    ts.raw_execute(&format!("UPDATE {table} SET {column} = {column}"))
        .await
        .unwrap()
}

async fn retention_drops_whole_partitions(ts: &TestStore) {
    let s = ts.store.clone();
    let span = Duration::from_millis(10);
    let org = s.create_org("Acme", t(0)).await.unwrap();
    create(&s, org.id, "https://a.example.com/a", &["*"]).await;
    emit(&s, org.id, "security.api_key_created", 1000).await;
    emit(&s, org.id, "security.api_key_created", 1100).await;
    // An attempt in the log: a retried first attempt.
    let first = s.claim_deliveries(&claim(1200, 1, 1)).await.unwrap();
    s.record_attempts(vec![outcome(
        &first[0],
        1200,
        Disposition::RetryAt(t(90_000)),
        Some(503),
    )])
    .await
    .unwrap();
    assert_eq!(rows(ts, "webhook_attempts", "number").await, 1);
    if !ts.partitioned().await {
        // No partitions (SQLite, or PostgreSQL's tables not converted): nothing dropped, the
        // rows go one by one.
        let dropped = s
            .drop_expired_partitions(t(5000), t(2000), span)
            .await
            .unwrap();
        assert_eq!(dropped, DroppedPartitions::default());
        assert_eq!(s.purge_deliveries(t(2000), 1000).await.unwrap(), (2, 2));
        assert_eq!(rows(ts, "webhook_attempts", "number").await, 0);
        return;
    }
    // The live partitions (their oldest rows are a span old) roll; nothing is past the cutoff.
    let dropped = s
        .drop_expired_partitions(t(2000), t(500), span)
        .await
        .unwrap();
    assert_eq!(dropped, DroppedPartitions::default());
    // Later rows go to the new partitions.
    emit(&s, org.id, "security.api_key_created", 3000).await;
    let later = s.list_deliveries(org.id, &all(10)).await.unwrap();
    assert_eq!(later.len(), 3);
    // Past the cutoff of 2 500: the first partitions go whole (deliveries, the attempt, then
    // the events no delivery refers to any more); the new ones roll and stay. Two instances
    // purge at once: each partition goes once, and neither fails.
    let other = ts.another_instance().await;
    let (a, b) = tokio::join!(
        s.drop_expired_partitions(t(4000), t(2500), span),
        other.drop_expired_partitions(t(4000), t(2500), span)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let dropped = DroppedPartitions {
        partitions: a.partitions + b.partitions,
        deliveries: a.deliveries + b.deliveries,
        events: a.events + b.events,
    };
    assert_eq!(
        dropped,
        DroppedPartitions {
            partitions: 2,
            deliveries: 2,
            events: 2
        }
    );
    let kept = s.list_deliveries(org.id, &all(10)).await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].created_at, t(3000));
    assert_eq!(rows(ts, "webhook_attempts", "number").await, 0);
    assert_eq!(rows(ts, "events", "name").await, 1);
    // A partition with an attempt in flight is kept until the attempt ends.
    let flying = s.claim_deliveries(&claim(5000, 1, 1)).await.unwrap();
    assert_eq!(flying.len(), 1);
    let dropped = s
        .drop_expired_partitions(t(6000), t(5500), span)
        .await
        .unwrap();
    assert_eq!(dropped, DroppedPartitions::default(), "held by the lease");
    s.record_attempts(vec![outcome(
        &flying[0],
        5100,
        Disposition::Delivered,
        Some(200),
    )])
    .await
    .unwrap();
    let dropped = s
        .drop_expired_partitions(t(6000), t(5500), span)
        .await
        .unwrap();
    assert_eq!((dropped.deliveries, dropped.events), (1, 1));
    assert!(
        s.list_deliveries(org.id, &all(10))
            .await
            .unwrap()
            .is_empty()
    );
    // Rows written before partitioning (the history partition) still go one by one.
    let org_id = org.id;
    ts.raw_execute(&format!(
        "INSERT INTO events (id, uuid, org_id, name, data, occurred_at)
         VALUES (7, gen_random_uuid(), {org_id}, 'security.api_key_created', '{{}}', 'epoch'::timestamptz)"
    ))
    .await
    .unwrap();
    ts.raw_execute(&format!(
        "INSERT INTO webhook_deliveries (id, uuid, org_id, event_id, event_name, status, created_at, updated_at)
         VALUES (9, gen_random_uuid(), {org_id}, 7, 'security.api_key_created', 'delivered', 'epoch', 'epoch')"
    ))
    .await
    .unwrap();
    ts.raw_execute(
        "INSERT INTO webhook_attempts (delivery_id, number, started_at) VALUES (9, 1, 'epoch')",
    )
    .await
    .unwrap();
    assert_eq!(rows(ts, "webhook_deliveries_history", "status").await, 1);
    assert_eq!(s.purge_deliveries(t(2000), 1000).await.unwrap(), (1, 1));
    assert_eq!(rows(ts, "webhook_deliveries_history", "status").await, 0);
    assert_eq!(rows(ts, "webhook_attempts", "number").await, 0);
}

/// Deliveries have no index by age alone (migration 0054): the purge and the age of a partition
/// read each organization's range of `(org_id, created_at, id)`, and must miss none, whichever
/// organization holds the oldest or the newest row.
async fn retention_reads_every_organization(ts: &TestStore) {
    let s = ts.store.clone();
    let span = Duration::from_millis(10);
    let a = s.create_org("Acme", t(0)).await.unwrap();
    let b = s.create_org("Bolt", t(0)).await.unwrap();
    create(&s, a.id, "https://a.example.com/a", &["*"]).await;
    create(&s, b.id, "https://b.example.com/b", &["*"]).await;
    emit(&s, b.id, "security.api_key_created", 1000).await;
    emit(&s, a.id, "security.api_key_created", 1100).await;
    emit(&s, b.id, "security.api_key_created", 1200).await;
    emit(&s, a.id, "security.api_key_created", 3000).await;
    // The ledger by status reads the partial index for every status but delivered.
    let pending = |org| {
        let s = s.clone();
        async move {
            let q = DeliveryQuery {
                status: Some(DeliveryStatus::Pending),
                ..all(10)
            };
            s.list_deliveries(org, &q).await.unwrap().len()
        }
    };
    assert_eq!((pending(a.id).await, pending(b.id).await), (2, 2));
    if !ts.partitioned().await {
        // One delivery a call: oldest first within each organization, every organization in
        // turn, the young one kept.
        let mut calls = 0;
        while s.purge_deliveries(t(2000), 1).await.unwrap().0 == 1 {
            calls += 1;
            assert!(calls <= 3, "only three deliveries are past the cutoff");
        }
        assert_eq!(calls, 3);
        assert!(s.list_deliveries(b.id, &all(10)).await.unwrap().is_empty());
        let kept = s.list_deliveries(a.id, &all(10)).await.unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].created_at, t(3000));
        return;
    }
    // The oldest row (organization b's) makes the live partition a span old: it rolls. The
    // newest (organization a's, at 3 000) keeps it past a cutoff of 2 000, and it goes past
    // one of 3 500.
    let dropped = s
        .drop_expired_partitions(t(4000), t(2000), span)
        .await
        .unwrap();
    assert_eq!(dropped, DroppedPartitions::default());
    let dropped = s
        .drop_expired_partitions(t(5000), t(3500), span)
        .await
        .unwrap();
    assert_eq!(dropped.deliveries, 4);
    assert!(s.list_deliveries(a.id, &all(10)).await.unwrap().is_empty());
}

async fn outcomes_are_recorded_in_batches(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let a = create(&s, org.id, "https://a.example.com/a", &["security.*"]).await;
    let b = create(&s, org.id, "https://a.example.com/b", &["security.*"]).await;
    for i in 0..4 {
        emit(&s, org.id, "security.api_key_created", 100 + i).await;
    }
    let claimed = s.claim_deliveries(&claim(1000, 100, 100)).await.unwrap();
    assert_eq!(claimed.len(), 8);
    let on = |c: &ClaimedDelivery, e: &EndpointRecord| c.endpoint.as_ref().unwrap().id == e.id;
    let mut outcomes = Vec::new();
    let mut expected = Vec::new();
    // a: three permanent failures (disabled at the third: disable_after = 3), then one more
    // outcome recorded after the disabling in the same batch; b: delivered, plus a stale claim.
    for c in claimed.iter().filter(|c| on(c, &a)) {
        outcomes.push(outcome(c, 1100, Disposition::Failed, Some(400)));
    }
    let mut b_claims = claimed.iter().filter(|c| on(c, &b));
    let b1 = b_claims.next().unwrap();
    outcomes.push(outcome(b1, 1100, Disposition::Delivered, Some(200)));
    let b2 = b_claims.next().unwrap();
    let mut stale = outcome(b2, 1100, Disposition::Delivered, Some(200));
    stale.token = Uuid::new_v4();
    outcomes.push(stale);
    // Out of order on purpose.
    outcomes.reverse();
    let results = s.record_attempts(outcomes.clone()).await.unwrap();
    assert_eq!(results.len(), outcomes.len());
    for (o, r) in outcomes.iter().zip(&results) {
        let want = if o.token != claimed[0].token {
            AttemptRecorded::LeaseLost
        } else if o.disposition == Disposition::Delivered {
            AttemptRecorded::Done {
                status: DeliveryStatus::Delivered,
                endpoint_disabled: false,
            }
        } else {
            // Which of a's outcomes disables it depends on the order of recording; checked
            // below through the counts.
            r.clone()
        };
        expected.push(want);
    }
    assert_eq!(results, expected);
    let disabling = results
        .iter()
        .filter(|r| {
            matches!(
                r,
                AttemptRecorded::Done {
                    endpoint_disabled: true,
                    ..
                }
            )
        })
        .count();
    assert_eq!(disabling, 1, "{results:?}");
    let e = s.get_endpoint(org.id, a.uuid).await.unwrap();
    assert_eq!(e.status, EndpointStatus::Disabled);
    assert_eq!(e.consecutive_failures, 3, "counting stops once disabled");
    let failed = s
        .list_deliveries(
            org.id,
            &DeliveryQuery {
                endpoint_uuid: Some(a.uuid),
                status: Some(DeliveryStatus::Failed),
                limit: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(failed.len(), 4);
    // The success recorded with the batch's other successes: its own time, status and attempt.
    let (d, attempts, _) = s.get_delivery(org.id, b1.uuid).await.unwrap();
    assert_eq!(d.status, DeliveryStatus::Delivered);
    assert_eq!(d.delivered_at, Some(t(1100)));
    assert_eq!(d.response_status, Some(200));
    assert!(!d.in_flight);
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].response_status, Some(200));
    assert_eq!(attempts[0].number, 1);
    let (d, attempts, _) = s.get_delivery(org.id, b2.uuid).await.unwrap();
    assert!(d.in_flight, "the stale claim recorded nothing");
    assert!(attempts.is_empty());
    assert_eq!(s.record_attempts(Vec::new()).await.unwrap(), Vec::new());
}

async fn outcomes_and_the_next_claim_share_a_transaction(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let mut new = endpoint(org.id, "https://a.example.com/ordered", &["security.*"]);
    new.ordering = EndpointOrdering::PerContact;
    let ordered = s.create_endpoint(new, no_effects()).await.unwrap();
    let plain = create(&s, org.id, "https://a.example.com/plain", &["security.*"]).await;
    let contact = Uuid::new_v4();
    let mut events = Vec::new();
    for i in 0..2 {
        let e = NewEvent::new(
            org.id,
            "security.api_key_created",
            json!({"contact_uuid": contact.to_string(), "n": i}),
            None,
            t(100 + i),
        );
        s.write_effects(Effects::none().event(e.clone()))
            .await
            .unwrap();
        events.push(e);
    }
    // The ordered endpoint's chain has its head due and its second delivery held; the plain
    // endpoint has both due.
    let first = s.claim_deliveries(&claim(1000, 100, 100)).await.unwrap();
    assert_eq!(first.len(), 3, "{first:?}");
    let on = |c: &ClaimedDelivery, e: &EndpointRecord| c.endpoint.as_ref().unwrap().id == e.id;
    let head = first.iter().find(|c| on(c, &ordered)).unwrap();
    assert_eq!(head.event.uuid, events[0].uuid);
    let mut on_plain = first.iter().filter(|c| on(c, &plain));
    let p1 = on_plain.next().unwrap();
    let p2 = on_plain.next().unwrap();
    let mut stale = outcome(p2, 1100, Disposition::Delivered, Some(200));
    stale.token = Uuid::new_v4();
    let outcomes = vec![
        outcome(head, 1100, Disposition::Delivered, Some(200)),
        outcome(p1, 1100, Disposition::Delivered, Some(200)),
        stale,
    ];
    let next = claim(1100, 100, 100);
    let (results, claimed) = s.record_and_claim(outcomes, &next).await.unwrap();
    let delivered = AttemptRecorded::Done {
        status: DeliveryStatus::Delivered,
        endpoint_disabled: false,
    };
    assert_eq!(
        results,
        vec![delivered.clone(), delivered, AttemptRecorded::LeaseLost]
    );
    // The head's outcome released the chain's next delivery, and the same transaction's
    // claim took it (the plain endpoint's second delivery is still held by its first claim).
    assert_eq!(claimed.len(), 1, "{claimed:?}");
    assert_eq!(claimed[0].event.uuid, events[1].uuid);
    assert_eq!(claimed[0].token, next.token);
    assert_eq!(claimed[0].attempt, 1);
    assert!(on(&claimed[0], &ordered));
    let (d, attempts, _) = s.get_delivery(org.id, head.uuid).await.unwrap();
    assert_eq!(d.status, DeliveryStatus::Delivered);
    assert_eq!(attempts.len(), 1);
    let (d, _, _) = s.get_delivery(org.id, p2.uuid).await.unwrap();
    assert!(d.in_flight, "the stale outcome recorded nothing");
    // Outcomes only (a claim of none), and a claim only.
    let (results, claimed) = s
        .record_and_claim(
            vec![outcome(p2, 1200, Disposition::Delivered, Some(200))],
            &claim(1200, 0, 100),
        )
        .await
        .unwrap();
    assert_eq!(results.len(), 1);
    assert!(claimed.is_empty());
    let (d, _, _) = s.get_delivery(org.id, p2.uuid).await.unwrap();
    assert_eq!(d.status, DeliveryStatus::Delivered);
    let (results, claimed) = s
        .record_and_claim(Vec::new(), &claim(1300, 100, 100))
        .await
        .unwrap();
    assert!(results.is_empty());
    assert!(claimed.is_empty(), "nothing else is due: {claimed:?}");
}

async fn successes_in_a_batch_keep_their_times_and_reset_health(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let a = create(&s, org.id, "https://a.example.com/a", &["security.*"]).await;
    let b = create(&s, org.id, "https://a.example.com/b", &["security.*"]).await;
    emit(&s, org.id, "security.api_key_created", 100).await;
    let first = s.claim_deliveries(&claim(1000, 10, 10)).await.unwrap();
    assert_eq!(first.len(), 2);
    let on_a = first
        .iter()
        .find(|c| c.endpoint.as_ref().unwrap().id == a.id)
        .unwrap();
    s.record_attempt(outcome(on_a, 1001, Disposition::Failed, Some(400)))
        .await
        .unwrap();
    assert_eq!(
        s.get_endpoint(org.id, a.uuid)
            .await
            .unwrap()
            .consecutive_failures,
        1
    );
    for i in 0..3 {
        emit(&s, org.id, "security.api_key_created", 200 + i).await;
    }
    let second = s.claim_deliveries(&claim(2000, 100, 100)).await.unwrap();
    assert_eq!(second.len(), 6);
    // Every claim still held (b's first one included) succeeds, each at its own time.
    let held: Vec<&ClaimedDelivery> = first
        .iter()
        .filter(|c| c.endpoint.as_ref().unwrap().id == b.id)
        .chain(second.iter())
        .collect();
    let outcomes: Vec<AttemptOutcome> = held
        .iter()
        .enumerate()
        .map(|(i, c)| {
            outcome(
                c,
                3000 + i as i64,
                Disposition::Delivered,
                Some(200 + i as i64),
            )
        })
        .collect();
    let results = s.record_attempts(outcomes.clone()).await.unwrap();
    assert!(results.iter().all(|r| *r
        == AttemptRecorded::Done {
            status: DeliveryStatus::Delivered,
            endpoint_disabled: false
        }));
    for (i, c) in held.iter().enumerate() {
        let (d, attempts, _) = s.get_delivery(org.id, c.uuid).await.unwrap();
        assert_eq!(d.status, DeliveryStatus::Delivered);
        assert_eq!(d.delivered_at, Some(t(3000 + i as i64)));
        assert_eq!(d.response_status, Some(200 + i as i64));
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].started_at, t(3000 + i as i64));
    }
    // A success resets a failing endpoint's count; the other endpoint's stays at zero.
    assert_eq!(
        s.get_endpoint(org.id, a.uuid)
            .await
            .unwrap()
            .consecutive_failures,
        0
    );
    assert_eq!(
        s.get_endpoint(org.id, b.uuid)
            .await
            .unwrap()
            .consecutive_failures,
        0
    );
    // Recording the same claims again records nothing.
    let again = s.record_attempts(outcomes).await.unwrap();
    assert!(again.iter().all(|r| *r == AttemptRecorded::LeaseLost));
}

/// A plain success (its endpoint's failure count is zero) is recorded by the store's fast
/// path, without the endpoint's lock: what it stores is what `delivery::after_attempt`
/// decides, here over a delivery whose earlier failure left an error and a next attempt.
async fn plain_successes_store_what_after_attempt_decides(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let ep = create(&s, org.id, "https://a.example.com/a", &["security.*"]).await;
    emit(&s, org.id, "security.api_key_created", 100).await;
    let first = s.claim_deliveries(&claim(1000, 10, 10)).await.unwrap();
    assert_eq!(first.len(), 1);
    s.record_attempt(outcome(
        &first[0],
        1001,
        Disposition::RetryAt(t(2000)),
        Some(503),
    ))
    .await
    .unwrap();
    let again = s.claim_deliveries(&claim(2000, 10, 10)).await.unwrap();
    assert_eq!(again.len(), 1);
    let health = EndpointHealth {
        uuid: ep.uuid,
        name: ep.name.clone(),
        url: ep.url.clone(),
        status: EndpointStatus::Active,
        deleted: false,
        consecutive_failures: s
            .get_endpoint(org.id, ep.uuid)
            .await
            .unwrap()
            .consecutive_failures,
        legacy: false,
    };
    assert!(delivery::is_plain_success(
        Disposition::Delivered,
        health.consecutive_failures != 0
    ));
    let recorded = s
        .record_attempt(outcome(&again[0], 2001, Disposition::Delivered, Some(200)))
        .await
        .unwrap();
    let (d, attempts, _) = s.get_delivery(org.id, again[0].uuid).await.unwrap();
    let decided = delivery::after_attempt(
        &delivery::Delivery {
            org_id: org.id,
            uuid: d.uuid,
            event_uuid: d.event_uuid,
            event_name: &d.event_name,
            attempts: again[0].attempt,
        },
        Some(&health),
        &delivery::Attempt {
            disposition: Disposition::Delivered,
            response_status: Some(200),
            error_code: None,
            error_message: None,
        },
        3,
        t(2001),
    );
    assert_eq!(
        recorded,
        AttemptRecorded::Done {
            status: decided.status,
            endpoint_disabled: decided.disabled_reason.is_some()
        }
    );
    assert_eq!(d.status, decided.status);
    assert_eq!(d.next_attempt_at, decided.next_attempt_at);
    assert_eq!(d.error_code, decided.error_code);
    assert_eq!(d.error_message, decided.error_message);
    assert_eq!(d.delivered_at, decided.delivered_at);
    assert_eq!(d.response_status, Some(200));
    assert!(!d.in_flight);
    assert_eq!(attempts.len(), 2);
    assert_eq!(decided.consecutive_failures, None);
    assert!(decided.effects.is_empty());
    assert_eq!(
        s.get_endpoint(org.id, ep.uuid)
            .await
            .unwrap()
            .consecutive_failures,
        0
    );
}

async fn legacy_records_share_the_fan_out(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    // A legacy record first, then a modern endpoint with the same URL: the modern one wins.
    let shared_legacy = create_legacy(&s, org.id, "https://a.example.com/both", &["*"]).await;
    let modern = create(
        &s,
        org.id,
        "https://A.example.com:443/both",
        &["security.*"],
    )
    .await;
    // Two legacy records with one URL: one delivery.
    let twin1 = create_legacy(&s, org.id, "https://a.example.com/twin", &["security.*"]).await;
    let twin2 = create_legacy(&s, org.id, "https://a.example.com/twin", &["*"]).await;
    let other_events =
        create_legacy(&s, org.id, "https://a.example.com/contacts", &["contact.*"]).await;
    assert!(shared_legacy.legacy && !modern.legacy);
    assert!(shared_legacy.sealed_secret.is_empty());
    assert_eq!(s.get_endpoint(org.id, twin1.uuid).await.unwrap(), twin1);

    // Each kind lists only itself.
    let legacy: Vec<Uuid> = s
        .list_endpoints(org.id, true, None, 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.uuid)
        .collect();
    assert_eq!(
        legacy,
        vec![
            other_events.uuid,
            twin2.uuid,
            twin1.uuid,
            shared_legacy.uuid
        ]
    );
    let modern_list = s.list_endpoints(org.id, false, None, 10).await.unwrap();
    assert_eq!(modern_list, vec![modern.clone()]);

    let created = emit(&s, org.id, "security.api_key_created", 10).await;
    let ds = s.list_deliveries(org.id, &all(100)).await.unwrap();
    let to = |e: &EndpointRecord| {
        ds.iter()
            .filter(|d| d.endpoint_uuid == Some(e.uuid))
            .count()
    };
    assert_eq!(
        to(&modern),
        1,
        "the modern endpoint of a shared URL gets it"
    );
    assert_eq!(to(&shared_legacy), 0, "never a second delivery to that URL");
    assert_eq!(to(&twin1) + to(&twin2), 1, "one delivery per URL");
    assert_eq!(to(&twin1), 1, "the older record of a URL wins");
    assert_eq!(to(&other_events), 0);
    assert_eq!(ds.len(), 2);
    assert!(ds.iter().all(|d| d.event_uuid == created.uuid));

    // An event only the legacy record of the shared URL subscribes to goes to it.
    emit(&s, org.id, "crm.deal_won", 11).await;
    let ds = s.list_deliveries(org.id, &all(100)).await.unwrap();
    let mut deal: Vec<Option<Uuid>> = ds
        .iter()
        .filter(|d| d.event_name == "crm.deal_won")
        .map(|d| d.endpoint_uuid)
        .collect();
    deal.sort();
    let mut expected = vec![Some(shared_legacy.uuid), Some(twin2.uuid)];
    expected.sort();
    assert_eq!(deal, expected);

    // Claims say which deliveries are legacy (sent unsigned).
    let claimed = s.claim_deliveries(&claim(20, 10, 10)).await.unwrap();
    assert_eq!(claimed.len(), 4);
    for c in &claimed {
        let ep = c.endpoint.as_ref().unwrap();
        assert_eq!(ep.legacy, ep.uuid != modern.uuid, "{:?}", ep.uuid);
        if ep.legacy {
            assert!(ep.sealed_secret.is_empty());
        }
    }

    // A deleted legacy record receives nothing more.
    s.delete_endpoint(org.id, twin1.uuid, t(30), no_effects())
        .await
        .unwrap();
    assert!(matches!(
        s.get_endpoint(org.id, twin1.uuid).await,
        Err(StoreError::NotFound)
    ));
    emit(&s, org.id, "security.api_key_revoked", 40).await;
    let ds = s.list_deliveries(org.id, &all(100)).await.unwrap();
    let mut revoked: Vec<Option<Uuid>> = ds
        .iter()
        .filter(|d| d.event_name == "security.api_key_revoked")
        .map(|d| d.endpoint_uuid)
        .collect();
    revoked.sort();
    let mut expected = vec![Some(modern.uuid), Some(twin2.uuid)];
    expected.sort();
    assert_eq!(revoked, expected, "the twin left takes over its URL");
}

async fn master_key_rotation_reseals_signing_secrets_only(s: SharedStore) {
    let org = s.create_org("Acme", t(0)).await.unwrap();
    let modern = create(&s, org.id, "https://a.example.com/m", &["*"]).await;
    let legacy = create_legacy(&s, org.id, "https://a.example.com/l", &["*"]).await;
    let gone = create(&s, org.id, "https://a.example.com/g", &["*"]).await;
    s.delete_endpoint(org.id, gone.uuid, t(1), no_effects())
        .await
        .unwrap();
    s.init_setting("check", b"old").await.unwrap();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    let reseal = move |sealed: &[u8], aad: &[u8]| -> Result<Vec<u8>, String> {
        log.lock().unwrap().push((sealed.to_vec(), aad.to_vec()));
        let mut v = sealed.to_vec();
        v.push(9);
        Ok(v)
    };
    let n = s.reseal_secrets(&reseal, "check", b"new").await.unwrap();
    assert_eq!(n, 1, "only the live modern endpoint holds a secret");
    assert_eq!(
        seen.lock().unwrap().clone(),
        vec![(
            modern.sealed_secret.clone(),
            switchboard_domain::sealed::AAD_SIGNING_SECRET.to_vec()
        )]
    );
    let after = s.get_endpoint(org.id, modern.uuid).await.unwrap();
    assert_eq!(
        after.sealed_secret,
        [modern.sealed_secret.clone(), vec![9]].concat()
    );
    assert!(
        s.get_endpoint(org.id, legacy.uuid)
            .await
            .unwrap()
            .sealed_secret
            .is_empty()
    );
    assert_eq!(s.get_setting("check").await.unwrap(), Some(b"new".to_vec()));
}

/// This process's commits wake its own dispatcher; on PostgreSQL, the commits of another
/// instance that wrote deliveries wake it too (the store's LISTEN). SQLite has no cross-process
/// signal (the dispatcher polls), so there only the local wake-up is checked.
async fn committed_deliveries_wake_the_dispatchers(ts: &TestStore) {
    let s = ts.store.clone();
    let org = s.create_org("Acme", t(0)).await.unwrap();
    create(&s, org.id, "https://example.com/a", &["message.*"]).await;

    let local = s.wakeups();
    emit(&s, org.id, "message.sent", 1).await;
    tokio::time::timeout(Duration::from_secs(1), local.notified())
        .await
        .expect("a local commit wakes this process's dispatcher");

    if ts.backend() != "postgres" {
        return;
    }
    let other = ts.another_instance().await;
    let remote = other.wakeups();
    // The other instance's listener connects in the background; until it listens, commits do
    // not reach it. Commit until one does (each commit writes one delivery).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut n = 2;
    loop {
        emit(&s, org.id, "message.sent", n).await;
        n += 1;
        if tokio::time::timeout(Duration::from_millis(200), remote.notified())
            .await
            .is_ok()
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "another instance's commit never woke this one"
        );
    }
    // Listening now: the very next commit wakes it.
    emit(&s, org.id, "message.sent", n).await;
    tokio::time::timeout(Duration::from_secs(2), remote.notified())
        .await
        .expect("the next commit of another instance wakes this one at once");
}
