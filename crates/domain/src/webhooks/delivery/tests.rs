use super::*;
use crate::event::EventCategory;
use crate::webhooks::catalogue::{WEBHOOK_DELIVERY_FAILED, WEBHOOK_ENDPOINT_DISABLED};

fn t(ms: i64) -> Timestamp {
    Timestamp::from_millis(ms)
}

fn schedule() -> Vec<Duration> {
    vec![
        Duration::from_secs(30),
        Duration::from_secs(300),
        Duration::from_secs(1800),
    ]
}

const DELIVERY: Uuid = Uuid::from_u128(1);
const EVENT: Uuid = Uuid::from_u128(2);
const ENDPOINT: Uuid = Uuid::from_u128(3);

fn delivery(event_name: &str, attempts: i64) -> Delivery<'_> {
    Delivery {
        org_id: 7,
        uuid: DELIVERY,
        event_uuid: EVENT,
        event_name,
        attempts,
    }
}

fn endpoint(failures: i64) -> EndpointHealth {
    EndpointHealth {
        uuid: ENDPOINT,
        name: "Orders".into(),
        url: "https://example.com/hook?token=secret".into(),
        status: EndpointStatus::Active,
        deleted: false,
        consecutive_failures: failures,
        legacy: false,
    }
}

fn disabled(failures: i64) -> EndpointHealth {
    EndpointHealth {
        status: EndpointStatus::Disabled,
        ..endpoint(failures)
    }
}

fn deleted() -> EndpointHealth {
    EndpointHealth {
        deleted: true,
        status: EndpointStatus::Disabled,
        ..endpoint(0)
    }
}

fn attempt(disposition: Disposition, status: Option<i64>) -> Attempt<'static> {
    let failed = !matches!(disposition, Disposition::Delivered);
    Attempt {
        disposition,
        response_status: status,
        error_code: failed.then_some("http_error"),
        error_message: failed.then_some("The endpoint answered 500."),
    }
}

fn names(t: &Transition) -> Vec<&str> {
    t.effects.outbox.iter().map(|e| e.name.as_str()).collect()
}

const NOW: i64 = 1_000_000;

fn record(ep: Option<&EndpointHealth>, a: Attempt<'_>, attempts: i64) -> Transition {
    after_attempt(&delivery("message.sent", attempts), ep, &a, 3, t(NOW))
}

// --- classify and disposition: what the dispatcher decides

#[test]
fn results_are_classified_by_status_then_by_error() {
    assert_eq!(classify(Some(204), None), StatusClass::Success);
    assert_eq!(
        classify(Some(503), Some("http_error")),
        StatusClass::Retryable
    );
    assert_eq!(
        classify(Some(404), Some("http_error")),
        StatusClass::Permanent
    );
    assert_eq!(
        classify(Some(302), Some("redirect_not_followed")),
        StatusClass::Retryable
    );
    assert_eq!(
        classify(None, Some(ENDPOINT_DELETED)),
        StatusClass::Permanent
    );
    for code in [
        "timeout",
        "dns_failed",
        "connection_failed",
        "unsafe_target",
        "secret_unavailable",
    ] {
        assert_eq!(classify(None, Some(code)), StatusClass::Retryable, "{code}");
    }
    assert_eq!(classify(None, None), StatusClass::Retryable);
}

#[test]
fn dispositions_follow_the_schedule() {
    let d = schedule();
    let now = t(NOW);
    assert_eq!(
        disposition(StatusClass::Success, 1, &d, None, 0.5, now),
        Disposition::Delivered
    );
    assert_eq!(
        disposition(StatusClass::Permanent, 1, &d, None, 0.5, now),
        Disposition::Failed
    );
    // Retryable with attempts left: the n-th delay after the n-th attempt.
    assert_eq!(
        disposition(StatusClass::Retryable, 1, &d, None, 0.0, now),
        Disposition::RetryAt(t(NOW + 30_000))
    );
    assert_eq!(
        disposition(StatusClass::Retryable, 3, &d, None, 0.0, now),
        Disposition::RetryAt(t(NOW + 1_800_000))
    );
    // The jitter passed in only delays (at most 10 %).
    assert_eq!(
        disposition(StatusClass::Retryable, 1, &d, None, 0.5, now),
        Disposition::RetryAt(t(NOW + 31_500))
    );
    // Exhausted after the last delay, and for nonsensical counts.
    assert_eq!(
        disposition(StatusClass::Retryable, 4, &d, None, 0.0, now),
        Disposition::Exhausted
    );
    assert_eq!(
        disposition(StatusClass::Retryable, -1, &d, None, 0.0, now),
        Disposition::Exhausted
    );
}

#[test]
fn a_longer_retry_after_replaces_the_scheduled_delay() {
    let d = schedule();
    let later = Some(Duration::from_secs(120));
    assert_eq!(
        disposition(StatusClass::Retryable, 1, &d, later, 0.0, t(NOW)),
        Disposition::RetryAt(t(NOW + 120_000))
    );
    // A shorter one does not shorten the schedule, and adds no attempt.
    let sooner = Some(Duration::from_secs(1));
    assert_eq!(
        disposition(StatusClass::Retryable, 1, &d, sooner, 0.0, t(NOW)),
        Disposition::RetryAt(t(NOW + 30_000))
    );
    assert_eq!(
        disposition(StatusClass::Retryable, 4, &d, later, 0.0, t(NOW)),
        Disposition::Exhausted
    );
}

// --- after_attempt: what the store writes

#[test]
fn a_2xx_delivers_and_resets_the_failure_count() {
    let ep = endpoint(2);
    let tr = record(Some(&ep), attempt(Disposition::Delivered, Some(200)), 2);
    assert_eq!(tr.status, DeliveryStatus::Delivered);
    assert_eq!(tr.next_attempt_at, None);
    assert_eq!(tr.delivered_at, Some(t(NOW)));
    assert_eq!((tr.error_code, tr.error_message), (None, None));
    assert_eq!(tr.consecutive_failures, Some(0));
    assert_eq!(tr.disabled_reason, None);
    assert!(tr.effects.is_empty());
    // Nothing to reset: the endpoint is left alone.
    let tr = record(
        Some(&endpoint(0)),
        attempt(Disposition::Delivered, Some(204)),
        1,
    );
    assert_eq!(tr.consecutive_failures, None);
}

#[test]
fn a_retryable_failure_with_attempts_left_is_scheduled() {
    let ep = endpoint(1);
    let at = t(NOW + 30_000);
    let tr = record(Some(&ep), attempt(Disposition::RetryAt(at), Some(500)), 1);
    assert_eq!(tr.status, DeliveryStatus::Retrying);
    assert_eq!(tr.next_attempt_at, Some(at));
    assert_eq!(tr.delivered_at, None);
    assert_eq!(tr.error_code.as_deref(), Some("http_error"));
    assert_eq!(
        tr.error_message.as_deref(),
        Some("The endpoint answered 500.")
    );
    // Not a failed delivery yet: no count, no event.
    assert_eq!(tr.consecutive_failures, None);
    assert!(tr.effects.is_empty());
}

#[test]
fn retries_exhausted_count_a_failure_and_report_it() {
    let ep = endpoint(0);
    let tr = record(Some(&ep), attempt(Disposition::Exhausted, Some(503)), 4);
    assert_eq!(tr.status, DeliveryStatus::RetriesExhausted);
    assert_eq!(tr.next_attempt_at, None);
    assert_eq!(tr.consecutive_failures, Some(1));
    assert_eq!(tr.disabled_reason, None);
    assert_eq!(names(&tr), [WEBHOOK_DELIVERY_FAILED]);
    assert!(tr.effects.log.is_empty());
    let data = &tr.effects.outbox[0].data;
    assert_eq!(data["delivery_id"], DELIVERY.to_string());
    assert_eq!(data["event_id"], EVENT.to_string());
    assert_eq!(data["event"], "message.sent");
    assert_eq!(data["endpoint_uuid"], ENDPOINT.to_string());
    assert_eq!(data["endpoint_url"], "https://example.com/hook");
    assert_eq!(data["status"], "retries_exhausted");
    assert_eq!(data["attempts"], 4);
    assert_eq!(data["response_status"], 503);
    assert_eq!(data["error_code"], "http_error");
    assert_eq!(tr.effects.outbox[0].org_id, 7);
}

#[test]
fn a_permanent_4xx_fails_at_once() {
    let ep = endpoint(0);
    let tr = record(Some(&ep), attempt(Disposition::Failed, Some(410)), 1);
    assert_eq!(tr.status, DeliveryStatus::Failed);
    assert_eq!(tr.next_attempt_at, None);
    assert_eq!(tr.consecutive_failures, Some(1));
    assert_eq!(names(&tr), [WEBHOOK_DELIVERY_FAILED]);
    assert_eq!(tr.effects.outbox[0].data["status"], "failed");
    assert_eq!(tr.effects.outbox[0].data["response_status"], 410);
}

#[test]
fn the_threshold_disables_the_endpoint() {
    // Two failures counted, threshold 3: this one disables.
    let ep = endpoint(2);
    let tr = record(Some(&ep), attempt(Disposition::Failed, Some(400)), 1);
    assert_eq!(tr.consecutive_failures, Some(3));
    let reason = tr.disabled_reason.clone().expect("disabled");
    assert_eq!(reason, events::auto_disable_reason(3, false));
    assert!(reason.contains("re-enable with PUT"), "{reason}");
    assert_eq!(
        names(&tr),
        [WEBHOOK_DELIVERY_FAILED, WEBHOOK_ENDPOINT_DISABLED]
    );
    let disabled_event = &tr.effects.outbox[1];
    assert_eq!(disabled_event.data["endpoint_uuid"], ENDPOINT.to_string());
    assert_eq!(disabled_event.data["name"], "Orders");
    assert_eq!(disabled_event.data["url"], "https://example.com/hook");
    assert_eq!(disabled_event.data["disabled_reason"], reason);
    assert_eq!(disabled_event.data["consecutive_failures"], 3);
    assert_eq!(tr.effects.log.len(), 1);
    let log = &tr.effects.log[0];
    assert_eq!(log.event_type, "webhook_endpoint.disabled");
    assert_eq!(log.category, EventCategory::Admin);
    assert_eq!(log.actor, Actor::System);
    assert_eq!(log.details["automatic"], true);
    assert_eq!(log.details["consecutive_failures"], 3);
    assert_eq!(log.details["last_delivery_id"], DELIVERY.to_string());
    // Past the threshold (a lower setting than the count) disables too; below it does not.
    let tr = record(Some(&endpoint(9)), attempt(Disposition::Exhausted, None), 4);
    assert_eq!(tr.consecutive_failures, Some(10));
    assert!(tr.disabled_reason.is_some());
    let tr = record(Some(&endpoint(1)), attempt(Disposition::Exhausted, None), 4);
    assert_eq!(tr.disabled_reason, None);
}

#[test]
fn legacy_records_are_disabled_with_their_own_way_back() {
    let ep = EndpointHealth {
        legacy: true,
        ..endpoint(2)
    };
    let tr = record(Some(&ep), attempt(Disposition::Failed, Some(404)), 1);
    let reason = tr.disabled_reason.expect("disabled");
    assert_eq!(reason, events::auto_disable_reason(3, true));
    assert!(reason.contains("register it again"), "{reason}");
}

#[test]
fn a_disabled_endpoint_holds_its_deliveries_and_counts_nothing() {
    let ep = disabled(3);
    // A retry is held: no next attempt until re-enabled.
    let tr = record(
        Some(&ep),
        attempt(Disposition::RetryAt(t(NOW + 30_000)), Some(500)),
        1,
    );
    assert_eq!(tr.status, DeliveryStatus::Retrying);
    assert_eq!(tr.next_attempt_at, None);
    assert_eq!(tr.consecutive_failures, None);
    // A failure is reported but neither counted nor disabling again.
    let tr = record(Some(&ep), attempt(Disposition::Failed, Some(400)), 1);
    assert_eq!(tr.status, DeliveryStatus::Failed);
    assert_eq!(tr.consecutive_failures, None);
    assert_eq!(tr.disabled_reason, None);
    assert_eq!(names(&tr), [WEBHOOK_DELIVERY_FAILED]);
    // A success (an attempt in flight when it was disabled) does not reset the count.
    let tr = record(Some(&ep), attempt(Disposition::Delivered, Some(200)), 1);
    assert_eq!(tr.status, DeliveryStatus::Delivered);
    assert_eq!(tr.consecutive_failures, None);
    // An interrupted attempt is held too.
    let tr = record(
        Some(&ep),
        attempt(Disposition::Interrupted(t(NOW)), None),
        2,
    );
    assert_eq!(tr.status, DeliveryStatus::Retrying);
    assert_eq!(tr.next_attempt_at, None);
}

#[test]
fn a_deleted_endpoint_fails_what_did_not_succeed() {
    let ep = deleted();
    for d in [
        Disposition::RetryAt(t(NOW + 30_000)),
        Disposition::Failed,
        Disposition::Exhausted,
        Disposition::Interrupted(t(NOW)),
    ] {
        let tr = record(Some(&ep), attempt(d, Some(500)), 2);
        assert_eq!(tr.status, DeliveryStatus::Failed, "{d:?}");
        assert_eq!(tr.next_attempt_at, None);
        assert_eq!(tr.error_code.as_deref(), Some(ENDPOINT_DELETED));
        assert_eq!(tr.error_message.as_deref(), Some(ENDPOINT_DELETED_MESSAGE));
        assert_eq!(tr.consecutive_failures, None);
        assert!(tr.effects.is_empty(), "no event about a deleted endpoint");
    }
    // A success that raced the deletion stays a success.
    let tr = record(Some(&ep), attempt(Disposition::Delivered, Some(200)), 1);
    assert_eq!(tr.status, DeliveryStatus::Delivered);
    assert_eq!(tr.delivered_at, Some(t(NOW)));
    assert!(tr.effects.is_empty());
}

#[test]
fn an_interrupted_attempt_is_due_again_and_not_a_failure() {
    let ep = endpoint(2);
    let tr = record(
        Some(&ep),
        attempt(Disposition::Interrupted(t(NOW)), None),
        1,
    );
    assert_eq!(tr.status, DeliveryStatus::Pending);
    assert_eq!(tr.next_attempt_at, Some(t(NOW)));
    assert_eq!(tr.consecutive_failures, None);
    assert!(tr.effects.is_empty());
    let tr = record(
        Some(&ep),
        attempt(Disposition::Interrupted(t(NOW)), None),
        3,
    );
    assert_eq!(tr.status, DeliveryStatus::Retrying);
}

#[test]
fn failures_of_webhook_events_count_without_further_events() {
    let ep = endpoint(2);
    let d = delivery("webhook.delivery_failed", 4);
    let tr = after_attempt(
        &d,
        Some(&ep),
        &attempt(Disposition::Exhausted, Some(500)),
        3,
        t(NOW),
    );
    assert_eq!(tr.consecutive_failures, Some(3));
    // Disabled at the threshold: that is reported, the failure itself is not.
    assert_eq!(names(&tr), [WEBHOOK_ENDPOINT_DISABLED]);
}

#[test]
fn a_delivery_without_endpoint_changes_only_itself() {
    let tr = record(None, attempt(Disposition::Failed, None), 1);
    assert_eq!(tr.status, DeliveryStatus::Failed);
    assert_eq!(tr.consecutive_failures, None);
    assert!(tr.effects.is_empty());
    let tr = record(None, attempt(Disposition::Interrupted(t(NOW)), None), 1);
    assert_eq!(tr.next_attempt_at, None);
}

#[test]
fn health_follows_the_transitions_of_a_batch() {
    let mut ep = endpoint(1);
    for expected in [2, 3] {
        let tr = record(Some(&ep), attempt(Disposition::Failed, Some(400)), 1);
        ep.apply(&tr);
        assert_eq!(ep.consecutive_failures, expected);
    }
    assert_eq!(ep.status, EndpointStatus::Disabled);
    // Once disabled, the next outcome of the batch is held and not counted.
    let tr = record(Some(&ep), attempt(Disposition::Failed, Some(400)), 1);
    ep.apply(&tr);
    assert_eq!(ep.consecutive_failures, 3);
}

#[test]
fn statuses_round_trip_and_finality() {
    for s in DeliveryStatus::ALL {
        assert_eq!(DeliveryStatus::parse(s.as_str()), Some(s));
        assert_eq!(s.to_string(), s.as_str());
    }
    assert_eq!(DeliveryStatus::parse("lost"), None);
    assert!(!DeliveryStatus::Pending.is_final() && !DeliveryStatus::Retrying.is_final());
    assert!(DeliveryStatus::Delivered.is_final() && DeliveryStatus::Failed.is_final());
    assert!(DeliveryStatus::RetriesExhausted.is_final());
}

mod plain_success {
    use super::*;
    use proptest::prelude::*;

    fn health() -> impl Strategy<Value = Option<EndpointHealth>> {
        prop::option::of((any::<bool>(), any::<bool>(), any::<bool>())).prop_map(|ep| {
            ep.map(|(active, deleted, legacy)| EndpointHealth {
                status: if active {
                    EndpointStatus::Active
                } else {
                    EndpointStatus::Disabled
                },
                deleted,
                legacy,
                ..endpoint(0)
            })
        })
    }

    proptest! {
        /// The store's fast path writes `plain_success` for every plain success: it must be
        /// what `after_attempt` decides for each of them, whatever the delivery, the endpoint's
        /// status and the attempt's details.
        #[test]
        fn every_plain_success_transitions_as_after_attempt_decides(
            ep in health(),
            attempts in 1i64..20,
            webhook_event in any::<bool>(),
            response in prop::option::of(200i64..300),
            disable_after in 1u32..10,
            now in 0i64..4_000_000_000_000,
        ) {
            let name = if webhook_event { "webhook.delivery_failed" } else { "message.sent" };
            prop_assert!(is_plain_success(Disposition::Delivered, false));
            let decided = after_attempt(
                &delivery(name, attempts),
                ep.as_ref(),
                &attempt(Disposition::Delivered, response),
                disable_after,
                t(now),
            );
            let plain = plain_success(t(now));
            prop_assert_eq!(decided.status, plain.status);
            prop_assert_eq!(decided.next_attempt_at, plain.next_attempt_at);
            prop_assert_eq!(&decided.error_code, &plain.error_code);
            prop_assert_eq!(&decided.error_message, &plain.error_message);
            prop_assert_eq!(decided.delivered_at, plain.delivered_at);
            prop_assert_eq!(decided.consecutive_failures, plain.consecutive_failures);
            prop_assert_eq!(&decided.disabled_reason, &plain.disabled_reason);
            prop_assert!(decided.effects.is_empty() && plain.effects.is_empty());
            prop_assert_eq!(plain.status, DeliveryStatus::Delivered);
            prop_assert_eq!(plain.delivered_at, Some(t(now)));
        }
    }

    #[test]
    fn only_successes_to_endpoints_without_failures_are_plain() {
        assert!(is_plain_success(Disposition::Delivered, false));
        assert!(!is_plain_success(Disposition::Delivered, true));
        assert!(!is_plain_success(Disposition::Failed, false));
        assert!(!is_plain_success(Disposition::Exhausted, false));
        assert!(!is_plain_success(Disposition::RetryAt(t(5)), false));
        assert!(!is_plain_success(Disposition::Interrupted(t(5)), false));
        // A failing endpoint's success resets its count: not plain.
        let reset = after_attempt(
            &delivery("message.sent", 1),
            Some(&endpoint(2)),
            &attempt(Disposition::Delivered, Some(200)),
            5,
            t(9),
        );
        assert_eq!(reset.consecutive_failures, Some(0));
    }
}
