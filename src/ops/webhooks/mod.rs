//! Webhook endpoint operations: create, update (including disabling and re-enabling), delete,
//! rotate the signing secret, send a test event, retry a delivery. Each change writes an
//! organization log entry (`webhook_endpoint.*`) in the same transaction; secrets never appear
//! in it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use uuid::Uuid;

use crate::crypto::{AAD_SIGNING_SECRET, SecretBox};
use crate::url_safety::{self, Lookup, Policy};
use switchboard_domain::ValidationErrors;
use switchboard_domain::clock::Clock;
use switchboard_domain::event::{Actor, Effects};
use switchboard_domain::webhooks::catalogue;
use switchboard_domain::webhooks::destination::DestinationType;
use switchboard_domain::webhooks::endpoint::{EndpointOrdering, EndpointStatus};
use switchboard_domain::webhooks::events as wh_events;
use switchboard_domain::webhooks::signing;
use switchboard_store::webhooks::{
    ControlsPatch, DeliveryRecord, EndpointControls, EndpointPatch, EndpointRecord, NewEndpoint,
    RetryRefusal,
};
use switchboard_store::{Store, StoreError};

mod checks;
mod log;
use checks::Checker;
use log::{created_effects, update_effects};

/// How long creating or updating an endpoint waits for its host name to resolve.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the operations need.
pub struct Deps<'a> {
    pub store: &'a dyn Store,
    pub secrets: &'a SecretBox,
    pub clock: &'a dyn Clock,
    pub policy: Policy,
    pub lookup: &'a Lookup,
}

#[derive(Debug)]
pub enum WebhookError {
    /// Fields that break a rule (422 `validation_failed`).
    Validation(ValidationErrors),
    /// A well-formed URL that webhooks may not target (422 `unsafe_url`).
    UnsafeUrl(String),
    /// No such endpoint or delivery in the organization (404).
    NotFound(&'static str),
    /// The delivery's endpoint was deleted (409 `endpoint_deleted`).
    EndpointDeleted,
    /// The endpoint is disabled: re-enable it first (422 `endpoint_disabled`).
    EndpointDisabled,
    Store(StoreError),
}

impl From<StoreError> for WebhookError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => WebhookError::NotFound("The webhook endpoint"),
            other => WebhookError::Store(other),
        }
    }
}

pub type WebhookResult<T> = Result<T, WebhookError>;

/// A new endpoint.
#[derive(Default)]
pub struct CreateEndpoint {
    pub name: Option<String>,
    /// Required for an `https` endpoint, refused for a broker.
    pub url: Option<String>,
    /// `https` (default) or a broker type.
    pub destination: Option<DestinationType>,
    /// A broker endpoint's target.
    pub target: Option<serde_json::Value>,
    pub events: Vec<String>,
    pub headers: BTreeMap<String, String>,
    pub status: Option<EndpointStatus>,
    pub ordering: Option<EndpointOrdering>,
    /// A filter on the envelope (`None`: every subscribed event).
    pub filter: Option<serde_json::Value>,
    /// The endpoint's own attempt time limit (`1s`-`30s`).
    pub timeout: Option<String>,
    /// The endpoint's own retry delays (1 to 10, each `1s`-`72h`).
    pub retry_delays: Option<Vec<String>>,
    /// The most deliveries per second (1-10 000).
    pub max_per_second: Option<i64>,
    /// Authentication to an https endpoint.
    pub auth: Option<serde_json::Value>,
}

/// A change: `None` leaves a field as it is.
#[derive(Default)]
pub struct UpdateEndpoint {
    pub name: Option<String>,
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    pub headers: Option<BTreeMap<String, String>>,
    pub status: Option<EndpointStatus>,
    pub ordering: Option<EndpointOrdering>,
    /// `Some(None)` removes the filter.
    pub filter: Option<Option<serde_json::Value>>,
    /// A broker endpoint's new target.
    pub target: Option<serde_json::Value>,
    /// `Some(None)` restores the deployment's setting (or, for `max_per_second`, no limit).
    pub timeout: Option<Option<String>>,
    pub retry_delays: Option<Option<Vec<String>>>,
    pub max_per_second: Option<Option<i64>>,
    /// `Some(None)` removes the authentication.
    pub auth: Option<Option<serde_json::Value>>,
}

/// A name for an endpoint created without one: its URL's host.
fn default_name(url: &str) -> String {
    url::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_else(|| "Webhook endpoint".to_owned())
}

/// What an endpoint operation addresses: a modern endpoint (`/webhook-endpoints`) or a legacy
/// record (`/api/webhooks`). Both live in one table; each surface sees only its own kind
/// (the other kind is a 404).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Endpoint,
    LegacyRecord,
}

impl Kind {
    fn legacy(self) -> bool {
        self == Kind::LegacyRecord
    }

    fn not_found(self) -> WebhookError {
        WebhookError::NotFound(match self {
            Kind::Endpoint => "The webhook endpoint",
            Kind::LegacyRecord => "The webhook record",
        })
    }
}

/// One endpoint of the organization, of this kind (404 for the other kind).
pub async fn get_endpoint(
    deps: &Deps<'_>,
    org_id: i64,
    uuid: Uuid,
    kind: Kind,
) -> WebhookResult<EndpointRecord> {
    match deps.store.get_endpoint(org_id, uuid).await {
        Ok(e) if e.legacy == kind.legacy() => Ok(e),
        Ok(_) | Err(StoreError::NotFound) => Err(kind.not_found()),
        Err(e) => Err(WebhookError::Store(e)),
    }
}

/// Creates an endpoint. Returns it and its signing secret (shown once).
pub async fn create_endpoint(
    deps: &Deps<'_>,
    org_id: i64,
    input: CreateEndpoint,
    actor: Actor,
) -> WebhookResult<(EndpointRecord, String)> {
    let mut check = Checker::new();
    let destination = input.destination.unwrap_or_default();
    let mut url = input.url.clone().unwrap_or_default();
    let mut target = None;
    match destination {
        DestinationType::Https => {
            if input.url.is_none() {
                check.errors.add("url", "is required");
            } else {
                check.url(&url, deps).await;
            }
            if input.target.is_some() {
                check.errors.add(
                    "target",
                    "only a broker endpoint has a target; an https endpoint has url",
                );
            }
        }
        t => {
            if input.url.is_some() {
                check.errors.add(
                    "url",
                    format!(
                        "a {} endpoint has no url: its address is target.url",
                        t.as_str()
                    ),
                );
            }
            match &input.target {
                None => check.errors.add("target", "is required for this type"),
                Some(v) => target = check.target(t, v, deps).await,
            }
        }
    }
    if let Some((masked, _, _)) = &target {
        url.clone_from(masked);
    }
    let name = input.name.unwrap_or_else(|| default_name(&url));
    check.name(&name);
    let events = check.events(&input.events);
    check.headers(&input.headers);
    let filter = input.filter.as_ref().and_then(|f| check.filter(f));
    let controls = EndpointControls {
        filter,
        timeout_ms: input.timeout.as_deref().and_then(|t| check.timeout(t)),
        retry_delays_ms: input
            .retry_delays
            .as_deref()
            .and_then(|d| check.retry_delays(d)),
        max_per_second: input.max_per_second.and_then(|n| check.max_per_second(n)),
        destination,
        target: target.as_ref().map(|t| t.1.clone()),
        sealed_target_url: target.and_then(|t| t.2),
        auth: None,
        sealed_auth_secret: None,
    };
    let mut controls = controls;
    if let Some(a) = &input.auth {
        if let Some((answered, sealed)) = check.auth(a, destination, deps).await {
            controls.auth = Some(answered);
            controls.sealed_auth_secret = Some(sealed);
        }
    }
    check.finish()?;

    let secret = signing::generate_secret();
    let now = deps.clock.now();
    let status = input.status.unwrap_or(EndpointStatus::Active);
    let record = deps
        .store
        .create_endpoint(
            NewEndpoint {
                uuid: Uuid::now_v7(),
                org_id,
                name,
                url,
                events,
                headers: input.headers,
                sealed_secret: deps.secrets.seal(secret.as_bytes(), AAD_SIGNING_SECRET),
                status,
                now,
                legacy: false,
                ordering: input.ordering.unwrap_or_default(),
                controls,
            },
            Box::new(move |e| created_effects(e, actor, now)),
        )
        .await?;
    Ok((record, secret))
}

/// Changes an endpoint. `status: active` re-enables it (the failure counter restarts at zero
/// and its held deliveries are sent); `status: disabled` disables it.
pub async fn update_endpoint(
    deps: &Deps<'_>,
    org_id: i64,
    uuid: Uuid,
    input: UpdateEndpoint,
    actor: Actor,
) -> WebhookResult<EndpointRecord> {
    let current = get_endpoint(deps, org_id, uuid, Kind::Endpoint).await?;
    let destination = current.controls.destination;
    let mut check = Checker::new();
    if let Some(n) = &input.name {
        check.name(n);
    }
    let mut url = input.url.clone();
    if let Some(u) = &input.url {
        if destination == DestinationType::Https {
            check.url(u, deps).await;
        } else {
            check.errors.add(
                "url",
                format!(
                    "a {} endpoint has no url: its address is target.url",
                    destination.as_str()
                ),
            );
        }
    }
    let mut target = None;
    if let Some(t) = &input.target {
        if destination == DestinationType::Https {
            check.errors.add(
                "target",
                "only a broker endpoint has a target; an https endpoint has url",
            );
        } else if let Some((masked, answered, sealed)) = check.target(destination, t, deps).await {
            url = Some(masked);
            target = Some((answered, sealed));
        }
    }
    let events = input.events.as_ref().map(|e| check.events(e));
    if let Some(h) = &input.headers {
        check.headers(h);
    }
    let controls = ControlsPatch {
        filter: input
            .filter
            .as_ref()
            .map(|f| f.as_ref().and_then(|f| check.filter(f))),
        timeout_ms: input
            .timeout
            .as_ref()
            .map(|t| t.as_deref().and_then(|t| check.timeout(t))),
        retry_delays_ms: input
            .retry_delays
            .as_ref()
            .map(|d| d.as_deref().and_then(|d| check.retry_delays(d))),
        max_per_second: input
            .max_per_second
            .map(|n| n.and_then(|n| check.max_per_second(n))),
        target,
        auth: match &input.auth {
            None => None,
            Some(None) => Some(None),
            Some(Some(a)) => check.auth(a, destination, deps).await.map(Some),
        },
    };
    check.finish()?;

    let now = deps.clock.now();
    let record = deps
        .store
        .update_endpoint(
            org_id,
            uuid,
            EndpointPatch {
                name: input.name,
                url,
                events,
                headers: input.headers,
                status: input.status,
                disabled_reason: None,
                sealed_secret: None,
                retire_secret_until: None,
                ordering: input.ordering,
                controls,
            },
            now,
            Box::new(move |(old, new)| update_effects(old, new, actor, now)),
        )
        .await?;
    Ok(record)
}

/// Deletes an endpoint of this kind (a legacy record through `/api/webhooks`).
pub async fn delete_endpoint(
    deps: &Deps<'_>,
    org_id: i64,
    uuid: Uuid,
    kind: Kind,
    actor: Actor,
) -> WebhookResult<()> {
    get_endpoint(deps, org_id, uuid, kind).await?;
    let now = deps.clock.now();
    deps.store
        .delete_endpoint(
            org_id,
            uuid,
            now,
            Box::new(move |e| {
                Effects::none().log(wh_events::endpoint_log(
                    e.org_id,
                    "deleted",
                    e.uuid,
                    actor,
                    json!({ "name": e.name, "url": url_safety::redacted(&e.url), "legacy": e.legacy }),
                    now,
                ))
            }),
        )
        .await?;
    Ok(())
}

/// Replaces the signing secret; the new one is returned once and signs every attempt from now
/// on (including retries of earlier deliveries).
/// The longest grace period of a rotation, during which the old secret still signs.
pub const MAX_ROTATION_GRACE: Duration = Duration::from_secs(7 * 24 * 3600);
/// The grace period of a rotation that names none.
pub const DEFAULT_ROTATION_GRACE: Duration = Duration::from_secs(24 * 3600);

/// Replaces the signing secret. The old secret keeps signing deliveries (beside the new one)
/// for `grace` (`0s`: dropped at once), then is erased. Returns the endpoint and the new secret.
pub async fn rotate_secret(
    deps: &Deps<'_>,
    org_id: i64,
    uuid: Uuid,
    grace: Duration,
    actor: Actor,
) -> WebhookResult<(EndpointRecord, String)> {
    get_endpoint(deps, org_id, uuid, Kind::Endpoint).await?;
    let secret = signing::generate_secret();
    let now = deps.clock.now();

    let record = deps
        .store
        .update_endpoint(
            org_id,
            uuid,
            EndpointPatch {
                sealed_secret: Some(deps.secrets.seal(secret.as_bytes(), AAD_SIGNING_SECRET)),
                retire_secret_until: (!grace.is_zero()).then(|| now.saturating_add(grace)),
                ..Default::default()
            },
            now,
            Box::new(move |(_, e)| {
                Effects::none().log(wh_events::endpoint_log(
                    e.org_id,
                    "secret_rotated",
                    e.uuid,
                    actor,
                    json!({ "name": e.name, "grace_period_seconds": grace.as_secs() }),
                    now,
                ))
            }),
        )
        .await?;
    Ok((record, secret))
}

/// Sends a test event to this endpoint alone, whatever its subscriptions: `integration.test`,
/// or with `event` a sample of that event (one this deployment emits; otherwise a 422 on
/// `event`), marked `metadata.test: true`. Returns (delivery, event) ids.
pub async fn send_test(
    deps: &Deps<'_>,
    org_id: i64,
    uuid: Uuid,
    event: Option<&str>,
) -> WebhookResult<(Uuid, Uuid)> {
    let name = event.unwrap_or(catalogue::INTEGRATION_TEST);
    emitted(name)?;
    let endpoint = get_endpoint(deps, org_id, uuid, Kind::Endpoint).await?;
    let channel = default_channel(deps, org_id).await?;
    let cx = super::samples::SampleContext {
        org_id,
        endpoint_uuid: endpoint.uuid,
        endpoint_name: &endpoint.name,
        endpoint_url: &endpoint.url,
        channel,
        now: deps.clock.now(),
    };
    let Some(event) = super::samples::sample_event(name, &cx) else {
        return Err(WebhookError::NotFound("The event's sample"));
    };
    let event_id = event.uuid;
    let delivery_id = deps
        .store
        .create_test_delivery(org_id, uuid, event, Uuid::now_v7())
        .await?;
    Ok((delivery_id, event_id))
}

/// A 422 on `event` unless this deployment emits `name`.
fn emitted(name: &str) -> WebhookResult<()> {
    if catalogue::is_emitted(name) {
        return Ok(());
    }
    let issue = if catalogue::is_event(name) {
        "this deployment never emits this event (GET /webhook-events says which it emits)"
    } else {
        "is not an event of the catalogue (GET /webhook-events)"
    };
    let mut errors = ValidationErrors::new();
    errors.add("event", issue.to_owned());
    Err(WebhookError::Validation(errors))
}

/// The organization's default channel, named in the samples of channel events.
async fn default_channel(
    deps: &Deps<'_>,
    org_id: i64,
) -> WebhookResult<Option<switchboard_domain::channel::ChannelIdentity>> {
    Ok(deps
        .store
        .list_channels(org_id)
        .await?
        .into_iter()
        .find(|c| c.is_default)
        .map(|c| c.identity()))
}

/// `switchboard trigger EVENT`: records a typed sample of `name` (`metadata.test: true`) as the
/// real event would be, in the same transaction as its deliveries: it is in the event feed and
/// stream and goes to every endpoint of the organization subscribed to it. Returns its id.
/// `integration.test` goes to one endpoint only (`POST .../webhook-endpoints/{uuid}/test`).
pub async fn trigger_sample(deps: &Deps<'_>, org_id: i64, name: &str) -> WebhookResult<Uuid> {
    emitted(name)?;
    if name == catalogue::INTEGRATION_TEST {
        let mut errors = ValidationErrors::new();
        errors.add(
            "event",
            "integration.test is sent to one endpoint: POST /webhook-endpoints/{uuid}/test"
                .to_owned(),
        );
        return Err(WebhookError::Validation(errors));
    }
    let cx = super::samples::SampleContext {
        org_id,
        endpoint_uuid: Uuid::nil(),
        endpoint_name: "",
        endpoint_url: "",
        channel: default_channel(deps, org_id).await?,
        now: deps.clock.now(),
    };
    let Some(event) = super::samples::sample_event(name, &cx) else {
        return Err(WebhookError::NotFound("The event's sample"));
    };
    let event = event.as_triggered_sample();
    let event_id = event.uuid;
    deps.store
        .write_effects(Effects::none().event(event))
        .await?;
    Ok(event_id)
}

/// Redelivers a delivery now (see `WebhookStore::retry_delivery`).
pub async fn retry_delivery(
    deps: &Deps<'_>,
    org_id: i64,
    delivery_uuid: Uuid,
) -> WebhookResult<DeliveryRecord> {
    match deps
        .store
        .retry_delivery(org_id, delivery_uuid, deps.clock.now())
        .await
    {
        Ok(Ok(d)) => Ok(d),
        Ok(Err(RetryRefusal::EndpointDeleted)) => Err(WebhookError::EndpointDeleted),
        Err(StoreError::NotFound) => Err(WebhookError::NotFound("The delivery")),
        Err(e) => Err(WebhookError::Store(e)),
    }
}

/// Creates a legacy webhook record (`POST /api/webhooks`): a URL and its events, checked by the
/// same rules as an endpoint's (event names, URL safety), stored as an endpoint row with
/// `legacy` set, no secret, no custom headers and its URL's host as its name. Logged as
/// `webhook_endpoint.created` with `legacy: true`.
pub async fn create_legacy_record(
    deps: &Deps<'_>,
    org_id: i64,
    url: String,
    events: Vec<String>,
    actor: Actor,
) -> WebhookResult<EndpointRecord> {
    let mut check = Checker::new();
    check.url(&url, deps).await;
    let events = check.events(&events);
    check.finish()?;
    let now = deps.clock.now();
    let record = deps
        .store
        .create_endpoint(
            NewEndpoint {
                uuid: Uuid::now_v7(),
                org_id,
                name: default_name(&url),
                url,
                events,
                headers: BTreeMap::new(),
                sealed_secret: Vec::new(),
                status: EndpointStatus::Active,
                now,
                legacy: true,
                ordering: EndpointOrdering::None,
                controls: Default::default(),
            },
            Box::new(move |e| created_effects(e, actor, now)),
        )
        .await?;
    Ok(record)
}
