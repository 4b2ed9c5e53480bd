//! After an outage (CONVENTIONS "Recovery, replay and the event feed"): start a recovery of an
//! endpoint (the background worker, `webhooks::recovery`, walks it), redeliver in bulk, read
//! the event feed.

use std::time::Duration;

use uuid::Uuid;

use switchboard_domain::webhooks::endpoint::EndpointStatus;
use switchboard_domain::{Timestamp, ValidationErrors};
use switchboard_store::StoreError;
use switchboard_store::recovery::{BulkRetry, FeedItem, FeedPosition, NewRecovery, RecoveryRecord};

use super::webhooks::{Deps, Kind, WebhookError, WebhookResult, get_endpoint};

/// The window of a recovery: `since` (within the retention, not in the future), `until`
/// (default now, not in the future, after `since`).
pub struct RecoveryWindow {
    pub since: Timestamp,
    pub until: Option<Timestamp>,
}

/// Starts a recovery of an active endpoint of the organization: 404 for an unknown one, 422
/// `endpoint_disabled` for a disabled one, 422 on `since`/`until` for a window out of bounds.
pub async fn start_recovery(
    deps: &Deps<'_>,
    org_id: i64,
    endpoint_uuid: Uuid,
    window: RecoveryWindow,
    retention: Duration,
) -> WebhookResult<RecoveryRecord> {
    let now = deps.clock.now();
    let until = window.until.unwrap_or(now);
    let mut errors = ValidationErrors::new();
    let oldest = Timestamp::from_millis(
        now.millis()
            .saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX)),
    );
    if window.since > now {
        errors.add("since", "must not lie in the future");
    } else if window.since < oldest {
        errors.add(
            "since",
            format!(
                "lies beyond the retention of {} (events older than that are no longer kept); the oldest allowed is {}",
                switchboard_domain::time::format_duration(retention),
                oldest
            ),
        );
    }
    if until > now {
        errors.add("until", "must not lie in the future");
    } else if until <= window.since {
        errors.add("until", "must be later than since");
    }
    if !errors.is_empty() {
        return Err(WebhookError::Validation(errors));
    }
    let endpoint = get_endpoint(deps, org_id, endpoint_uuid, Kind::Endpoint).await?;
    if endpoint.status != EndpointStatus::Active {
        return Err(WebhookError::EndpointDisabled);
    }
    Ok(deps
        .store
        .create_recovery(NewRecovery {
            uuid: Uuid::now_v7(),
            org_id,
            endpoint_uuid,
            since: window.since,
            until,
            now,
        })
        .await?)
}

/// A recovery of the organization's endpoint (404 for anything else).
pub async fn get_recovery(
    deps: &Deps<'_>,
    org_id: i64,
    endpoint_uuid: Uuid,
    uuid: Uuid,
) -> WebhookResult<RecoveryRecord> {
    match deps.store.get_recovery(org_id, endpoint_uuid, uuid).await {
        Ok(r) => Ok(r),
        Err(StoreError::NotFound) => Err(WebhookError::NotFound("The recovery")),
        Err(e) => Err(WebhookError::Store(e)),
    }
}

/// Rows per statement of a bulk redelivery.
pub const BULK_RETRY_PAGE: i64 = 500;

/// Redelivers now every matching delivery that is not delivered and not in flight (at least
/// one of `status` or `endpoint_uuid` is required: a 422 otherwise; an unknown endpoint is a
/// 404). Returns how many.
pub async fn retry_deliveries(
    deps: &Deps<'_>,
    org_id: i64,
    filter: BulkRetry,
) -> WebhookResult<u64> {
    if filter.status.is_none() && filter.endpoint_uuid.is_none() {
        let mut errors = ValidationErrors::new();
        errors.add("status", "give status or endpoint_uuid (or both)");
        return Err(WebhookError::Validation(errors));
    }
    if let (Some(since), Some(until)) = (filter.since, filter.until) {
        if until <= since {
            let mut errors = ValidationErrors::new();
            errors.add("until", "must be later than since");
            return Err(WebhookError::Validation(errors));
        }
    }
    if let Some(uuid) = filter.endpoint_uuid {
        get_endpoint(deps, org_id, uuid, Kind::Endpoint).await?;
    }
    Ok(deps
        .store
        .retry_deliveries(org_id, &filter, deps.clock.now(), BULK_RETRY_PAGE)
        .await?)
}

/// A page of the event feed after `after`.
pub async fn read_feed(
    deps: &Deps<'_>,
    org_id: i64,
    after: FeedPosition,
    events: &[switchboard_store::webhooks::EventFilter],
    limit: i64,
) -> WebhookResult<Vec<FeedItem>> {
    Ok(deps.store.read_feed(org_id, after, events, limit).await?)
}
