//! The columns of a claimed delivery's endpoint, read by a claim (`webhooks::claims`, which
//! joins them to the delivery) and by a fan-out that hands its deliveries off as it writes
//! them (`fan_out`): one reading of them into a [`ClaimedEndpoint`] for both. Below `write`,
//! beside the fan-out.

use std::collections::BTreeMap;

use sqlx::types::Json;
use uuid::Uuid;

use crate::webhooks::{ClaimedEndpoint, EndpointControls};
use crate::{StoreError, StoreResult};
use switchboard_domain::Timestamp;
use switchboard_domain::webhooks::destination::DestinationType;
use switchboard_domain::webhooks::endpoint::EndpointStatus;

/// The columns of a claimed delivery's endpoint (`ep_*`; all null when it has none): what
/// a claim reads back, and what a fan-out that hands its deliveries off reads as it writes
/// them (`fan_out`).
#[derive(sqlx::FromRow)]
pub(super) struct EndpointColumns {
    pub(super) ep_id: Option<i64>,
    ep_uuid: Option<Uuid>,
    ep_url: Option<String>,
    ep_headers: Option<Json<BTreeMap<String, String>>>,
    ep_secret: Option<Vec<u8>>,
    ep_status: Option<String>,
    ep_deleted_at: Option<Timestamp>,
    ep_legacy: Option<bool>,
    pub(super) ep_timeout_ms: Option<i64>,
    ep_retry_delays_ms: Option<String>,
    ep_max_per_second: Option<i64>,
    ep_destination: Option<String>,
    ep_target: Option<String>,
    ep_target_secret: Option<Vec<u8>>,
    ep_auth: Option<String>,
    ep_auth_secret: Option<Vec<u8>>,
}

/// The endpoint columns as `ep_*`, of `webhook_endpoints` named `ep`.
pub(super) const ENDPOINT_COLUMNS: &str = "ep.id AS ep_id, ep.uuid AS ep_uuid, ep.url AS ep_url, ep.headers AS ep_headers,
     ep.signing_secret AS ep_secret, ep.status AS ep_status, ep.deleted_at AS ep_deleted_at,
     ep.legacy AS ep_legacy, ep.timeout_ms AS ep_timeout_ms, ep.retry_delays_ms AS ep_retry_delays_ms,
     ep.max_per_second AS ep_max_per_second, ep.destination AS ep_destination, ep.target AS ep_target,
     ep.target_secret AS ep_target_secret, ep.auth AS ep_auth, ep.auth_secret AS ep_auth_secret";

impl EndpointColumns {
    /// The endpoint as a claimed delivery carries it, with `retired` secrets still in their
    /// grace period (newest first); `None` when the columns are null (no endpoint).
    pub(super) fn into_endpoint(
        self,
        retired: Vec<Vec<u8>>,
    ) -> StoreResult<Option<ClaimedEndpoint>> {
        let r = self;
        let (Some(id), Some(uuid), Some(url), Some(status)) =
            (r.ep_id, r.ep_uuid, r.ep_url, r.ep_status)
        else {
            return Ok(None);
        };
        Ok(Some(ClaimedEndpoint {
            id,
            uuid,
            url,
            headers: r.ep_headers.map(|h| h.0).unwrap_or_default(),
            sealed_secret: r.ep_secret.unwrap_or_default(),
            status: endpoint_status(&status)?,
            deleted: r.ep_deleted_at.is_some(),
            legacy: r.ep_legacy.unwrap_or(false),
            retired_secrets: retired,
            controls: EndpointControls {
                filter: None,
                timeout_ms: r.ep_timeout_ms,
                retry_delays_ms: delays_of_column(r.ep_retry_delays_ms.as_deref()),
                max_per_second: r.ep_max_per_second,
                destination: r
                    .ep_destination
                    .as_deref()
                    .and_then(DestinationType::parse)
                    .unwrap_or_default(),
                target: r.ep_target,
                sealed_target_url: r.ep_target_secret,
                auth: r.ep_auth,
                sealed_auth_secret: r.ep_auth_secret,
            },
        }))
    }
}

/// An endpoint's retry delays as stored (a JSON array of milliseconds), if set.
pub(super) fn delays_of_column(text: Option<&str>) -> Option<Vec<i64>> {
    text.and_then(|t| serde_json::from_str(t).ok())
}

pub(super) fn endpoint_status(s: &str) -> StoreResult<EndpointStatus> {
    EndpointStatus::parse(s)
        .ok_or_else(|| StoreError::Other(format!("unknown endpoint status {s}")))
}
