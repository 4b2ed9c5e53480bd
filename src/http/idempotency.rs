//! `Idempotency-Key` (specification 3 and 4.4, CONVENTIONS.md "Idempotency").
//!
//! A record per credential and key holds the request's fingerprint (SHA-256 of method, path
//! and body) and, once the request completed, its status and JSON body:
//!
//! * same key, same fingerprint, completed: the stored status and body are replayed with
//!   `Idempotency-Replayed: true`;
//! * same key, different method, path or body: 409 `idempotency_conflict`;
//! * same key while the first request runs: 409 `idempotency_in_progress` (`Retry-After: 1`);
//! * a claim whose lease (`SWITCHBOARD_IDEMPOTENCY_LEASE`) ran out (its request crashed) is
//!   taken over by the next request with the key;
//! * as at Stripe, a result is stored only once the request started executing: a 2xx, and a
//!   4xx that the work recorded itself in its own transaction (a provider's refusal of a send,
//!   [`ResponseStored`]); a 4xx decided before anything was written (validation, scope,
//!   channel, template and consent rules) is not stored, so the corrected request may reuse
//!   the key; a 5xx is not stored either, so that the client's retry with the same key can
//!   succeed: in both cases the claim is released;
//! * the three v1 send paths require the header and complete the record in the send's own
//!   transaction ([`run_send`]: a free key is claimed only before a provider call, and a
//!   sandbox send writes it with its record; a duplicate of a send running in this process is
//!   answered from memory); [`honour`] applies the same rules to every other v1 POST, PUT and DELETE
//!   that carries the header; a stored response that carries a secret (an endpoint's create
//!   and `rotate-secret`) is sealed with the master key, never kept in clear;
//! * records expire after `SWITCHBOARD_IDEMPOTENCY_RETENTION` and are purged.
//!
//! The work runs in a task of its own, so a client that hangs up does not abandon it half-way.
//! Handlers whose work writes its result and the completed record in one transaction (the
//! sends) mark the response [`ResponseStored`]; any other 2xx/4xx is stored here afterwards.

use std::future::Future;

use axum::body::Body;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use tracing::Instrument;
use uuid::Uuid;

use super::auth::Principal;
use super::error::ApiError;
use super::request_id;
use super::state::{AppState, Running};
use switchboard_store::{
    ClaimOutcome, ClaimToken, IdempotencyClaim, IdempotencyState, NewKey, Stored, StoredResponse,
};

pub const HEADER: &str = "idempotency-key";
pub const REPLAYED_HEADER: &str = "idempotency-replayed";
/// The longest key accepted (specification 4.4).
pub const MAX_KEY_LEN: usize = 120;
/// The largest response body kept for replay.
const MAX_STORED_BODY: usize = 1024 * 1024;

/// A valid `Idempotency-Key`: 1 to [`MAX_KEY_LEN`] visible ASCII characters. Only
/// [`IdempotencyKey::parse`] makes one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Parses a header value: 1 to [`MAX_KEY_LEN`] visible ASCII characters (the
    /// structured-field string form `"..."` is accepted too).
    pub fn parse(raw: &[u8]) -> Result<Self, ApiError> {
        let raw = match raw {
            [b'"', inner @ .., b'"'] => inner,
            other => other,
        };
        match std::str::from_utf8(raw) {
            Ok(key)
                if !key.is_empty()
                    && key.len() <= MAX_KEY_LEN
                    && key.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                Ok(IdempotencyKey(key.to_owned()))
            }
            _ => Err(ApiError::idempotency_key_invalid(format!(
                "The Idempotency-Key must be 1 to {MAX_KEY_LEN} visible ASCII characters (a UUID is a good choice)."
            ))),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Marks a response whose idempotency record was completed in the work's own transaction.
#[derive(Clone, Copy, Debug)]
pub struct ResponseStored;

/// Marks a response of work that lost its claim to another request (which took the key over
/// after the lease ran out); nothing was written.
#[derive(Clone, Copy, Debug)]
pub struct ClaimLost;

/// Marks a response of work that claimed its key itself ([`Deferred::claim`]): the claim is
/// settled as [`run`] settles its own (released on an error, completed with a 2xx the work did
/// not store).
#[derive(Clone, Copy, Debug)]
pub struct ClaimTaken(pub ClaimToken);

/// Reads `Idempotency-Key`: 1 to 120 visible ASCII characters (the structured-field string
/// form `"..."` is accepted too). `required`: a missing header is a 400.
pub fn read_key(headers: &HeaderMap, required: bool) -> Result<Option<IdempotencyKey>, ApiError> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else {
        return if required {
            Err(ApiError::idempotency_key_missing())
        } else {
            Ok(None)
        };
    };
    if values.next().is_some() {
        return Err(ApiError::idempotency_key_invalid(
            "Send one Idempotency-Key header, not several.",
        ));
    }
    IdempotencyKey::parse(value.as_bytes()).map(Some)
}

/// The fingerprint of a request: SHA-256 over method, path and the raw body.
pub fn fingerprint(method: &Method, path: &str, body: &[u8]) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(method.as_str().as_bytes());
    h.update([0]);
    h.update(path.as_bytes());
    h.update([0]);
    h.update(body);
    h.finalize().to_vec()
}

/// A JSON response from stored bytes.
pub fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// A stored response, replayed as stored (specification section 3: "stored status and body
/// returned"): an error body keeps the `request_id` of the request that produced it, while
/// the replay's own id is in its `X-Request-Id` header.
/// [`replay`], a sealed response opened first (its key's `aad`).
fn replay_opened(state: &AppState, aad: &[u8], stored: Stored) -> Response {
    let Stored::Response(stored) = stored else {
        return replay(stored);
    };
    match stored.body.strip_prefix(SEALED) {
        None => replay(Stored::Response(stored)),
        Some(sealed) => match state.secrets.open(sealed, aad) {
            Ok(body) => replay(Stored::Response(StoredResponse {
                status: stored.status,
                body,
            })),
            Err(_) => {
                tracing::warn!(
                    "a sealed idempotent response cannot be opened (was the master key rotated?)"
                );
                ApiError::idempotency_conflict().into_response()
            }
        },
    }
}

fn replay(stored: Stored) -> Response {
    let (status, body) = super::recorded::answer(&stored);
    let mut r = json_response(status, body);
    r.headers_mut()
        .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    r
}

/// Runs `work` in a task of its own (with this request's id, span and trace), so that it finishes
/// even if the client hangs up.
async fn detached<Fut>(work: Fut) -> Response
where
    Fut: Future<Output = Response> + Send + 'static,
{
    let id = request_id::current().unwrap_or_else(request_id::generate);
    let span = tracing::Span::current();
    let work = request_id::scope(id.clone(), work.instrument(span));
    let task = match crate::trace::current() {
        Some(trace) => tokio::spawn(crate::trace::scope(trace, work)),
        None => tokio::spawn(work),
    };
    match task.await {
        Ok(r) => r,
        Err(e) => {
            request_id::scope(id, async move {
                ApiError::internal(format!("the request's task failed: {e}")).into_response()
            })
            .await
        }
    }
}

/// Runs `work` under the idempotency rules for `key` (without a key: just runs it). `work`
/// receives the claim to complete in its own transaction, if it can.
/// [`run`] for a POST whose `Idempotency-Key` is read from `headers` (`required` on the v1
/// send paths, optional on the legacy ones); a malformed or missing required key is answered
/// here.
pub async fn run_post<W, Fut>(
    state: &AppState,
    principal: &Principal,
    headers: &HeaderMap,
    required: bool,
    path: &str,
    body: &[u8],
    work: W,
) -> Response
where
    W: FnOnce(Option<ClaimToken>) -> Fut,
    Fut: Future<Output = Response> + Send + 'static,
{
    match read_key(headers, required) {
        Ok(key) => {
            let request = Fingerprinted {
                method: &Method::POST,
                path,
                body,
                seal: false,
            };
            run(state, principal, key, request, work).await
        }
        Err(e) => e.into_response(),
    }
}

/// The v1 paths that handle `Idempotency-Key` themselves (the sends).
const SEND_PATHS: [&str; 4] = [
    "/api/v1/integrations/messages",
    "/api/v1/integrations/messages/media",
    "/api/v1/integrations/messages/template",
    "/api/v1/integrations/messages/batch",
];

/// Marker stored in front of a sealed response body (JSON never starts with it).
const SEALED: &[u8] = b"sealed:";

/// Middleware (inside authentication): `Idempotency-Key`, when present, on every v1 POST, PUT
/// and DELETE but the sends (CONVENTIONS "Idempotency").
pub async fn honour(
    axum::extract::State(state): axum::extract::State<AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    if !matches!(method, Method::POST | Method::PUT | Method::DELETE)
        || !path.starts_with("/api/v1/integrations/")
        || SEND_PATHS.contains(&path.as_str())
    {
        return next.run(req).await;
    }
    let key = match read_key(req.headers(), false) {
        Ok(Some(key)) => key,
        Ok(None) => return next.run(req).await,
        Err(e) => return e.into_response(),
    };
    let Some(principal) = req.extensions().get::<Principal>().cloned() else {
        return next.run(req).await;
    };
    // Responses that carry an endpoint's signing secret are kept sealed.
    let seal = method == Method::POST
        && (path == "/api/v1/integrations/webhook-endpoints" || path.ends_with("/rotate-secret"));
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, super::json::BODY_LIMIT).await {
        Ok(b) => b,
        Err(e) if super::deadline::is_deadline(&e) => {
            return ApiError::request_timeout().into_response();
        }
        Err(_) => return ApiError::payload_too_large(super::json::BODY_LIMIT).into_response(),
    };
    let req = axum::extract::Request::from_parts(parts, Body::from(bytes.clone()));
    let request = Fingerprinted {
        method: &method,
        path: &path,
        body: &bytes,
        seal,
    };
    run(&state, &principal, Some(key), request, move |_| {
        next.run(req)
    })
    .await
}

/// What a request is recognised by, and whether its stored response is sealed.
pub struct Fingerprinted<'a> {
    pub method: &'a Method,
    pub path: &'a str,
    pub body: &'a [u8],
    pub seal: bool,
}

fn seal_aad(key_id: i64, key: &IdempotencyKey) -> Vec<u8> {
    format!("idempotency:{key_id}:{}", key.as_str()).into_bytes()
}

/// Releases a claim whose release failed (the storage refused writes: a full disk), once a
/// second until it succeeds or the claim's lease ends (then it is free anyway), so that the
/// client's retry with the same key is not held up for the whole lease once writes resume.
fn release_later(state: &AppState, token: ClaimToken) {
    let store = state.store.clone();
    let lease = state.config.idempotency_lease;
    tokio::spawn(async move {
        let end = tokio::time::Instant::now() + lease;
        while tokio::time::Instant::now() < end {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            if store.release_idempotency(token).await.is_ok() {
                return;
            }
        }
    });
}

pub async fn run<W, Fut>(
    state: &AppState,
    principal: &Principal,
    key: Option<IdempotencyKey>,
    request: Fingerprinted<'_>,
    work: W,
) -> Response
where
    W: FnOnce(Option<ClaimToken>) -> Fut,
    Fut: Future<Output = Response> + Send + 'static,
{
    let Some(key) = key else {
        return detached(work(None)).await;
    };
    let seal = request.seal;
    let keyed = Keyed::new(state, principal, key, &request);
    let token = match keyed.claim(state).await {
        Ok(token) => token,
        Err(answer) => return answer,
    };
    let response = detached(work(Some(token))).await;
    keyed.settle(state, seal, token, response).await
}

/// A send's hold on its `Idempotency-Key` ([`run_send`]).
pub enum SendClaim {
    /// Claimed before the send.
    Held(ClaimToken),
    /// Free when the request came, and not claimed yet: a send that reaches nothing outside the
    /// process writes the key with its record (`ClaimRef::New`); any other claims it before its
    /// provider call ([`Deferred::claim`]).
    Deferred(Deferred),
}

/// A key not claimed yet, and what claiming or writing it needs.
pub struct Deferred {
    state: AppState,
    keyed: Keyed,
}

impl Deferred {
    /// The key as the send's record writes it, completed.
    pub fn new_key(&self) -> NewKey {
        let c = &self.keyed.claim;
        NewKey {
            api_key_id: c.api_key_id,
            key: c.key.clone(),
            method: c.method.clone(),
            path: c.path.clone(),
            fingerprint: c.fingerprint.clone(),
            now: self.state.clock.now(),
            retention: self.state.config.idempotency_retention,
        }
    }

    /// Claims the key now (before a provider call, or after the send's record found it taken):
    /// the claim, or the answer to give instead (a replay, `idempotency_conflict`,
    /// `idempotency_in_progress`, a store error). Mark the work's response [`ClaimTaken`].
    pub async fn claim(&self) -> Result<ClaimToken, Response> {
        self.keyed.claim(&self.state).await
    }
}

/// [`run_post`] for the sends: when the key is free, the work runs without a claim
/// ([`SendClaim::Deferred`]) and a send that reaches nothing outside the process writes its key
/// with its record, one write instead of a claim and its completion (CONVENTIONS
/// "Idempotency": the same answers either way). A key in use is claimed first, as by [`run`].
pub async fn run_send<W, Fut>(
    state: &AppState,
    principal: &Principal,
    headers: &HeaderMap,
    required: bool,
    path: &str,
    body: &[u8],
    work: W,
) -> Response
where
    W: FnOnce(Option<SendClaim>) -> Fut,
    Fut: Future<Output = Response> + Send + 'static,
{
    let key = match read_key(headers, required) {
        Ok(Some(key)) => key,
        Ok(None) => return detached(work(None)).await,
        Err(e) => return e.into_response(),
    };
    let request = Fingerprinted {
        method: &Method::POST,
        path,
        body,
        seal: false,
    };
    let keyed = Keyed::new(state, principal, key, &request);
    // A duplicate of a send that runs in this process: answered now, as the database would
    // (another instance's duplicates meet at the key's row).
    let flight = match InFlight::enter(state, &keyed) {
        Ok(flight) => flight,
        Err(e) => return e.into_response(),
    };
    let work = |claim| {
        let work = work(Some(claim));
        async move {
            let response = work.await;
            drop(flight);
            response
        }
    };
    let free = matches!(
        state
            .store
            .idempotency_state(principal.key_id, keyed.key.as_str(), state.clock.now())
            .await,
        Ok(IdempotencyState::Absent)
    );
    if !free {
        let token = match keyed.claim(state).await {
            Ok(token) => token,
            Err(answer) => return answer,
        };
        let response = detached(work(SendClaim::Held(token))).await;
        return keyed.settle(state, false, token, response).await;
    }
    let deferred = Deferred {
        state: state.clone(),
        keyed: keyed.clone(),
    };
    let response = detached(work(SendClaim::Deferred(deferred))).await;
    match response.extensions().get::<ClaimTaken>() {
        Some(&ClaimTaken(token)) => keyed.settle(state, false, token, response).await,
        // Written with its record, or refused before anything was written.
        None => response,
    }
}

/// A send's key held in this process while its work runs (`AppInner::sends_in_flight`).
struct InFlight {
    state: AppState,
    key: (i64, String),
    id: Uuid,
}

impl InFlight {
    /// Holds the key, or answers a duplicate of a send running here: 409
    /// `idempotency_in_progress` (`idempotency_conflict` for another body), as its claim would.
    /// A send running for longer than the lease is passed over, as its claim would be.
    fn enter(state: &AppState, keyed: &Keyed) -> Result<InFlight, ApiError> {
        use dashmap::mapref::entry::Entry;
        let key = (keyed.claim.api_key_id, keyed.claim.key.clone());
        let running = Running {
            fingerprint: keyed.claim.fingerprint.clone(),
            since: std::time::Instant::now(),
            id: Uuid::new_v4(),
        };
        let id = running.id;
        match state.sends_in_flight.entry(key.clone()) {
            Entry::Occupied(first)
                if first.get().since.elapsed() < state.config.idempotency_lease =>
            {
                return Err(if first.get().fingerprint == keyed.claim.fingerprint {
                    ApiError::idempotency_in_progress()
                } else {
                    ApiError::idempotency_conflict()
                });
            }
            Entry::Occupied(mut stale) => {
                stale.insert(running);
            }
            Entry::Vacant(free) => {
                free.insert(running);
            }
        }
        Ok(InFlight {
            state: state.clone(),
            key,
            id,
        })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.state
            .sends_in_flight
            .remove_if(&self.key, |_, running| running.id == self.id);
    }
}

/// A request's key with what identifies the request (its fingerprint) and its claim.
#[derive(Clone)]
struct Keyed {
    key: IdempotencyKey,
    claim: IdempotencyClaim,
    aad: Vec<u8>,
}

impl Keyed {
    fn new(
        state: &AppState,
        principal: &Principal,
        key: IdempotencyKey,
        request: &Fingerprinted<'_>,
    ) -> Keyed {
        let claim = IdempotencyClaim {
            api_key_id: principal.key_id,
            key: key.as_str().to_owned(),
            method: request.method.as_str().to_owned(),
            path: request.path.to_owned(),
            fingerprint: fingerprint(request.method, request.path, request.body),
            owner: Uuid::new_v4(),
            now: state.clock.now(),
            lease: state.config.idempotency_lease,
            retention: state.config.idempotency_retention,
        };
        Keyed {
            aad: seal_aad(principal.key_id, &key),
            key,
            claim,
        }
    }

    /// Claims the key: the token, or the answer to give instead.
    async fn claim(&self, state: &AppState) -> Result<ClaimToken, Response> {
        let claim = IdempotencyClaim {
            now: state.clock.now(),
            ..self.claim.clone()
        };
        match state.store.claim_idempotency(claim).await {
            Err(e) => Err(ApiError::from(e).into_response()),
            Ok(ClaimOutcome::Replay(stored)) => Err(replay_opened(state, &self.aad, stored)),
            Ok(ClaimOutcome::Conflict) => Err(ApiError::idempotency_conflict().into_response()),
            Ok(ClaimOutcome::InProgress) => {
                Err(ApiError::idempotency_in_progress().into_response())
            }
            Ok(ClaimOutcome::Claimed { token, taken_over }) => {
                if taken_over {
                    tracing::warn!(
                        "took over an idempotency key whose previous request did not finish within the lease"
                    );
                }
                Ok(token)
            }
        }
    }

    /// Settles the claim `token` after the work answered `response`: kept as the work stored it,
    /// replaced by the new owner's answer when the claim was lost, released after an error,
    /// completed with a 2xx the work did not store (sealed with `seal`).
    async fn settle(
        &self,
        state: &AppState,
        seal: bool,
        token: ClaimToken,
        response: Response,
    ) -> Response {
        let replay = |stored: Stored| replay_opened(state, &self.aad, stored);
        if response.extensions().get::<ResponseStored>().is_some() {
            return response;
        }
        if response.extensions().get::<ClaimLost>().is_some() {
            // Another request owns the key now: answer with its result if it has one.
            return match state
                .store
                .idempotency_state(self.claim.api_key_id, self.key.as_str(), state.clock.now())
                .await
            {
                Ok(IdempotencyState::Completed {
                    fingerprint: fp,
                    response,
                }) if fp == self.claim.fingerprint => replay(response),
                _ => ApiError::idempotency_in_progress().into_response(),
            };
        }
        let status = response.status();
        if !status.is_success() {
            // Refused before it started executing, or a 5xx: the key may be used again.
            if let Err(e) = state.store.release_idempotency(token).await {
                tracing::warn!(error = %e, "could not release an idempotency claim; trying again until its lease ends");
                release_later(state, token);
            }
            return response;
        }
        // A 2xx that the work did not record itself: store it now (sealed if it carries a secret).
        let (parts, body) = response.into_parts();
        let bytes = match axum::body::to_bytes(body, MAX_STORED_BODY).await {
            Ok(b) => b,
            Err(e) => {
                let _ = state.store.release_idempotency(token).await;
                return ApiError::internal(format!("could not read the response to store it: {e}"))
                    .into_response();
            }
        };
        let stored = StoredResponse {
            status: parts.status.as_u16(),
            body: if seal {
                [SEALED, &state.secrets.seal(&bytes, &self.aad)].concat()
            } else {
                bytes.to_vec()
            },
        };
        match state.store.complete_idempotency(token, stored).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(
                    "the idempotency claim was taken over before its response was stored"
                )
            }
            Err(e) => tracing::warn!(error = %e, "could not store the idempotent response"),
        }
        Response::from_parts(parts, Body::from(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(HEADER, HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    fn code(r: Result<Option<IdempotencyKey>, ApiError>) -> &'static str {
        r.unwrap_err().code
    }

    #[test]
    fn keys_are_checked() {
        assert_eq!(
            read_key(&headers(&[b"order-42"]), true).unwrap(),
            Some(IdempotencyKey("order-42".into()))
        );
        assert_eq!(
            read_key(&headers(&[b"\"sf-string\""]), true).unwrap(),
            Some(IdempotencyKey("sf-string".into()))
        );
        assert_eq!(read_key(&HeaderMap::new(), false).unwrap(), None);
        assert_eq!(
            code(read_key(&HeaderMap::new(), true)),
            "idempotency_key_missing"
        );
        let long = "k".repeat(121);
        for bad in [
            b"".as_slice(),
            b"\"\"",
            long.as_bytes(),
            b"has space",
            b"caf\xc3\xa9",
            b"tab\there",
        ] {
            assert_eq!(
                code(read_key(&headers(&[bad]), true)),
                "idempotency_key_invalid",
                "{bad:?}"
            );
        }
        assert!(read_key(&headers(&["k".repeat(120).as_bytes()]), true).is_ok());
        assert_eq!(
            code(read_key(&headers(&[b"a", b"b"]), false)),
            "idempotency_key_invalid"
        );
    }

    #[test]
    fn fingerprints_cover_method_path_and_body() {
        let a = fingerprint(&Method::POST, "/x", b"{}");
        assert_eq!(a, fingerprint(&Method::POST, "/x", b"{}"));
        assert_ne!(a, fingerprint(&Method::PUT, "/x", b"{}"));
        assert_ne!(a, fingerprint(&Method::POST, "/y", b"{}"));
        assert_ne!(a, fingerprint(&Method::POST, "/x", b"{ }"));
        // The separator keeps path and body apart.
        assert_ne!(
            fingerprint(&Method::POST, "/x", b"a"),
            fingerprint(&Method::POST, "/xa", b"")
        );
    }
}
