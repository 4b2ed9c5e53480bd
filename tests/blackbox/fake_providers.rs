//! Fake messaging providers for black-box tests: a WhatsApp Cloud API (Graph) server and a
//! Telegram Bot API server, each an axum server on a random port that speaks the real protocol
//! (paths, bearer token / token in the path, request bodies, answer shapes, error bodies),
//! records what it received, and can be told how to answer the next requests: normally, 503,
//! a provider rejection, malformed JSON, or held until released (a slow provider).

#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::{Mutex, Notify, Semaphore};

/// How the fake answers one request.
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// A normal, successful answer.
    Accept,
    /// HTTP 503 with a provider error body.
    Unavailable,
    /// A 4xx with the provider's error body (Graph: `{"error": {...}}`; Telegram:
    /// `{"ok": false, ...}`).
    Reject {
        status: u16,
        code: i64,
        message: String,
        details: Option<String>,
    },
    /// HTTP 200 with a body that is not JSON.
    Malformed,
    /// Waits until [`Fake::release`] (or forever), then answers normally.
    Hold,
}

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    pub authorization: Option<String>,
    /// The W3C trace context the call carried.
    pub traceparent: Option<String>,
    pub body: Value,
}

struct Inner {
    script: Mutex<VecDeque<Behaviour>>,
    received: Mutex<Vec<Received>>,
    counter: AtomicU64,
    arrived: Notify,
    arrivals: AtomicU64,
    release: Semaphore,
    token: String,
    /// The Business Account's templates (`GET /{waba_id}/message_templates`).
    templates: Mutex<Vec<Value>>,
    /// Template list requests served (each page is one).
    template_pages: AtomicU64,
    /// The Graph API's limits, when set ([`Fake::set_limits`]).
    limits: std::sync::Mutex<Limits>,
    /// Sends refused with a throttling error (130429, 131056).
    throttled: AtomicU64,
    /// Of those, refused for the pair rate (131056).
    pair_throttled: AtomicU64,
    /// Media uploads accepted (`POST /{phone_number_id}/media`).
    uploads: Mutex<Vec<Upload>>,
    /// Where accepted sends' `sent` statuses are reported, when set
    /// ([`Fake::report_statuses`]).
    callbacks: std::sync::Mutex<Option<Callbacks>>,
    /// Status callbacks the receiver accepted.
    callbacks_delivered: AtomicU64,
    /// Every accepted send: its request body and the message id answered.
    accepted_log: std::sync::Mutex<Vec<(Value, String)>>,
}

/// Where the fake Graph API reports statuses: a channel's inbound URL and its app secret.
#[derive(Clone, Debug)]
struct Callbacks {
    url: String,
    app_secret: String,
    phone_number_id: String,
}

/// What the real Graph API enforces on a phone number: its throughput (messages per second;
/// beyond it error 130429) and the pair rate to one recipient (beyond it error 131056).
#[derive(Default)]
struct Limits {
    per_second: Option<usize>,
    pair_interval: Option<Duration>,
    /// When accepted sends arrived (the last second's).
    recent: VecDeque<std::time::Instant>,
    /// When each recipient last got a message.
    last_to: std::collections::HashMap<String, std::time::Instant>,
}

/// One media upload the fake Graph API accepted.
#[derive(Clone, Debug)]
pub struct Upload {
    pub phone_number_id: String,
    /// The `type` field (the MIME type).
    pub mime: String,
    /// The `file` part's file name and content type.
    pub file_name: Option<String>,
    pub file_content_type: Option<String>,
    pub size: u64,
    /// SHA-256 of the file, lowercase hex.
    pub sha256: String,
    /// The media id answered.
    pub id: String,
}

/// A running fake provider.
#[derive(Clone)]
pub struct Fake {
    /// The base URL to configure as the channel's `api_base_url`.
    pub base_url: String,
    inner: Arc<Inner>,
}

impl Fake {
    async fn start(router: fn(Arc<Inner>) -> Router, token: &str, prefix: &str) -> Fake {
        let inner = Arc::new(Inner {
            script: Mutex::new(VecDeque::new()),
            received: Mutex::new(Vec::new()),
            counter: AtomicU64::new(0),
            arrived: Notify::new(),
            arrivals: AtomicU64::new(0),
            release: Semaphore::new(0),
            token: token.to_owned(),
            templates: Mutex::new(Vec::new()),
            template_pages: AtomicU64::new(0),
            limits: std::sync::Mutex::new(Limits::default()),
            throttled: AtomicU64::new(0),
            pair_throttled: AtomicU64::new(0),
            uploads: Mutex::new(Vec::new()),
            callbacks: std::sync::Mutex::new(None),
            callbacks_delivered: AtomicU64::new(0),
            accepted_log: std::sync::Mutex::new(Vec::new()),
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let app = router(inner.clone());
        // A thread and runtime of its own: the time the fake sees a request arrive (its rate
        // limits) does not wait for the test's other tasks.
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let _ = axum::serve(listener, app).await;
            });
        });
        Fake {
            base_url: format!("http://{addr}{prefix}"),
            inner,
        }
    }

    /// A WhatsApp Cloud API server that accepts `access_token` as the bearer token. Its base URL
    /// ends with `/v21.0`, like the real one.
    pub async fn graph(access_token: &str) -> Fake {
        Fake::start(graph_router, access_token, "/v21.0").await
    }

    /// A Telegram Bot API server that accepts `bot_token` in the path.
    pub async fn telegram(bot_token: &str) -> Fake {
        Fake::start(telegram_router, bot_token, "").await
    }

    /// Queues how the next requests are answered (afterwards: normally).
    pub async fn then(&self, b: Behaviour) {
        self.inner.script.lock().await.push_back(b);
    }

    /// Every request received so far.
    pub async fn received(&self) -> Vec<Received> {
        self.inner.received.lock().await.clone()
    }

    /// How many requests arrived so far.
    pub fn arrivals(&self) -> u64 {
        self.inner.arrivals.load(Ordering::SeqCst)
    }

    /// Waits until `n` requests have arrived (held ones included).
    pub async fn wait_for_arrivals(&self, n: u64) {
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let notified = self.inner.arrived.notified();
                if self.arrivals() >= n {
                    return;
                }
                notified.await;
            }
        })
        .await
        .expect("the request reaches the fake provider");
    }

    /// Sets the templates of the Business Account, as the Graph API lists them.
    pub async fn set_templates(&self, templates: Vec<Value>) {
        *self.inner.templates.lock().await = templates;
    }

    /// Enforces the Graph API's limits from now on: at most `per_second` sends in any one-second
    /// window (else 130429) and one message per `pair_interval` to a recipient (else 131056).
    pub fn set_limits(&self, per_second: Option<usize>, pair_interval: Option<Duration>) {
        let mut l = self.inner.limits.lock().unwrap();
        l.per_second = per_second;
        l.pair_interval = pair_interval;
    }

    /// Sends accepted so far (each answered with a new message id).
    pub fn accepted(&self) -> u64 {
        self.inner.counter.load(Ordering::SeqCst)
    }

    /// Sends refused with a throttling error so far.
    pub fn throttled(&self) -> u64 {
        self.inner.throttled.load(Ordering::SeqCst)
    }

    /// Sends refused for the pair rate (131056) so far.
    pub fn pair_throttled(&self) -> u64 {
        self.inner.pair_throttled.load(Ordering::SeqCst)
    }

    /// Template list pages served so far.
    pub fn template_pages(&self) -> u64 {
        self.inner.template_pages.load(Ordering::SeqCst)
    }

    /// The media uploads accepted so far, oldest first.
    pub async fn uploads(&self) -> Vec<Upload> {
        self.inner.uploads.lock().await.clone()
    }

    /// Lets one held request answer.
    pub fn release(&self) {
        self.inner.release.add_permits(1);
    }

    /// Reports a `sent` status for every accepted send from now on, as the Graph API does: a
    /// webhook to `url` (a channel's `/inbound/{uuid}`) signed with `app_secret`, echoing the
    /// send's `biz_opaque_callback_data`; a callback that is not answered 2xx is tried again
    /// every 100 ms for a minute (Meta retries its webhooks too), each time to the URL set
    /// last (see [`Fake::redirect_statuses`]).
    pub fn report_statuses(&self, url: &str, app_secret: &str, phone_number_id: &str) {
        *self.inner.callbacks.lock().unwrap() = Some(Callbacks {
            url: url.to_owned(),
            app_secret: app_secret.to_owned(),
            phone_number_id: phone_number_id.to_owned(),
        });
    }

    /// Points the status callbacks (pending ones included) at another URL (a restarted server).
    pub fn redirect_statuses(&self, url: &str) {
        if let Some(c) = self.inner.callbacks.lock().unwrap().as_mut() {
            c.url = url.to_owned();
        }
    }

    /// Every send accepted so far: its request body and the message id answered.
    pub fn accepted_sends(&self) -> Vec<(Value, String)> {
        self.inner.accepted_log.lock().unwrap().clone()
    }

    /// Status callbacks the receiver accepted so far.
    pub fn statuses_delivered(&self) -> u64 {
        self.inner.callbacks_delivered.load(Ordering::SeqCst)
    }
}

/// The `sent` status webhook of an accepted send, delivered until accepted (on the fake's own
/// runtime).
fn report_sent(inner: &Arc<Inner>, wamid: &str, to: &str, opaque: Option<&str>) {
    if inner.callbacks.lock().unwrap().is_none() {
        return;
    }
    let mut status = wa_status(wamid, "sent", to);
    if let Some(o) = opaque {
        status["biz_opaque_callback_data"] = json!(o);
    }
    let inner = inner.clone();
    tokio::spawn(async move {
        let client = reqwest::Client::new();
        let end = tokio::time::Instant::now() + Duration::from_secs(60);
        while tokio::time::Instant::now() < end {
            let Some(c) = inner.callbacks.lock().unwrap().clone() else {
                return;
            };
            let raw = serde_json::to_vec(&wa_webhook(
                &c.phone_number_id,
                vec![],
                vec![status.clone()],
            ))
            .unwrap();
            let sent = client
                .post(&c.url)
                .header("content-type", "application/json")
                .header("x-hub-signature-256", hub_signature(&c.app_secret, &raw))
                .timeout(Duration::from_secs(2))
                .body(raw)
                .send()
                .await;
            if sent.is_ok_and(|r| r.status().is_success()) {
                inner.callbacks_delivered.fetch_add(1, Ordering::SeqCst);
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

async fn arrive(inner: &Arc<Inner>, path: String, headers: &HeaderMap, body: &Bytes) -> Behaviour {
    let value = serde_json::from_slice(body).unwrap_or(Value::Null);
    inner.received.lock().await.push(Received {
        path,
        authorization: headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        traceparent: headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: value,
    });
    let behaviour = inner
        .script
        .lock()
        .await
        .pop_front()
        .unwrap_or(Behaviour::Accept);
    inner.arrivals.fetch_add(1, Ordering::SeqCst);
    inner.arrived.notify_waiters();
    if let Behaviour::Hold = behaviour {
        inner.release.acquire().await.unwrap().forget();
        return Behaviour::Accept;
    }
    behaviour
}

fn json_response(status: u16, body: Value) -> Response {
    (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response()
}

// ---------------------------------------------------------------------------------------------
// WhatsApp Cloud API

fn graph_error(status: u16, code: i64, message: &str, details: Option<&str>) -> Response {
    let mut error = json!({
        "message": message,
        "type": "OAuthException",
        "code": code,
        "fbtrace_id": "AbCdEfFake",
    });
    if let Some(d) = details {
        error["error_data"] = json!({ "messaging_product": "whatsapp", "details": d });
    }
    json_response(status, json!({ "error": error }))
}

/// What the Graph API checks of a send body; `Err` is a (#100) invalid parameter.
fn check_graph_body(body: &Value) -> Result<(), String> {
    if body["messaging_product"] != "whatsapp" {
        return Err("messaging_product must be whatsapp".into());
    }
    let to = body["to"].as_str().ok_or("to is required")?;
    if to.is_empty() || !to.bytes().all(|b| b.is_ascii_digit()) {
        return Err("to must be digits".into());
    }
    let kind = body["type"].as_str().ok_or("type is required")?;
    let obj = &body[kind];
    match kind {
        "text" => {
            obj["body"].as_str().ok_or("text.body is required")?;
        }
        "interactive" => {
            obj["type"].as_str().ok_or("interactive.type is required")?;
            obj["body"]["text"]
                .as_str()
                .ok_or("interactive.body.text is required")?;
        }
        "image" | "document" | "audio" | "video" | "sticker" => {
            // Switchboard uploads media and sends by id (checked against the uploads).
            obj["id"]
                .as_str()
                .ok_or("id is required (media is sent by the id of an upload)")?;
        }
        "template" => {
            obj["name"].as_str().ok_or("template.name is required")?;
            obj["language"]["code"]
                .as_str()
                .ok_or("template.language.code is required")?;
        }
        "reaction" => {
            obj["message_id"]
                .as_str()
                .ok_or("reaction.message_id is required")?;
            // An empty emoji removes the reaction.
            obj["emoji"].as_str().ok_or("reaction.emoji is required")?;
        }
        "location" => {
            let lat = obj["latitude"]
                .as_f64()
                .ok_or("location.latitude is required")?;
            let lon = obj["longitude"]
                .as_f64()
                .ok_or("location.longitude is required")?;
            if !(-90.0..=90.0).contains(&lat) || !(-180.0..=180.0).contains(&lon) {
                return Err("location out of range".into());
            }
        }
        "contacts" => {
            let list = body["contacts"]
                .as_array()
                .ok_or("contacts must be an array")?;
            if list.is_empty() {
                return Err("contacts must not be empty".into());
            }
            for c in list {
                c["name"]["formatted_name"]
                    .as_str()
                    .ok_or("contacts[].name.formatted_name is required")?;
            }
        }
        other => return Err(format!("unknown type {other}")),
    }
    // A reply: `context` is `{"message_id": the wamid quoted}` and nothing else.
    if let Some(context) = body.get("context") {
        let ok = context.as_object().is_some_and(|c| {
            c.len() == 1 && c["message_id"].as_str().is_some_and(|id| !id.is_empty())
        });
        if !ok {
            return Err("context must be {\"message_id\": \"wamid...\"}".into());
        }
    }
    Ok(())
}

/// `GET /{version}/{waba_id}/message_templates?limit=N&after=CURSOR`: the Graph API's paging
/// (`paging.cursors` on every page, `paging.next` only when there is a next page).
async fn message_templates(
    State(inner): State<Arc<Inner>>,
    headers: HeaderMap,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
) -> Response {
    let expected = format!("Bearer {}", inner.token);
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(expected.as_str()) {
        return graph_error(401, 190, "Invalid OAuth access token.", None);
    }
    inner.template_pages.fetch_add(1, Ordering::SeqCst);
    let limit: usize = q
        .get("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(25)
        .clamp(1, 1000);
    let start: usize = match q.get("after") {
        None => 0,
        Some(a) => match a.strip_prefix("cur").and_then(|n| n.parse().ok()) {
            Some(n) => n,
            None => return graph_error(400, 100, "(#100) Invalid parameter: after", None),
        },
    };
    let all = inner.templates.lock().await.clone();
    let end = (start + limit).min(all.len());
    let page: Vec<Value> = all
        .get(start..end)
        .map(<[Value]>::to_vec)
        .unwrap_or_default();
    let mut paging =
        json!({"cursors": {"before": format!("cur{start}"), "after": format!("cur{end}")}});
    if end < all.len() {
        paging["next"] = json!(format!(
            "https://graph.facebook.com/v21.0/next?after=cur{end}"
        ));
    }
    json_response(200, json!({ "data": page, "paging": paging }))
}

/// The Graph API's throttling of an accepted send to `to`, if it is over a limit.
fn over_limits(inner: &Inner, to: &str) -> Option<Response> {
    let mut l = inner.limits.lock().unwrap();
    let now = std::time::Instant::now();
    while l
        .recent
        .front()
        .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1))
    {
        l.recent.pop_front();
    }
    if let Some(max) = l.per_second {
        if l.recent.len() >= max {
            return Some(graph_error(
                400,
                130429,
                "(#130429) Rate limit hit: Cloud API message throughput has been reached.",
                Some(
                    "Message failed to send because there were too many messages sent from this phone number in a short period of time.",
                ),
            ));
        }
    }
    if let Some(interval) = l.pair_interval {
        if l.last_to
            .get(to)
            .is_some_and(|t| now.duration_since(*t) < interval)
        {
            return Some(graph_error(
                400,
                131056,
                "(#131056) (Business Account, Consumer Account) pair rate limit hit",
                Some(
                    "Message failed to send because there were too many messages sent from this phone number to the same phone number in a short period of time.",
                ),
            ));
        }
    }
    l.recent.push_back(now);
    l.last_to.insert(to.to_owned(), now);
    None
}

/// `POST /{version}/{phone_number_id}/media`: multipart with `messaging_product=whatsapp`,
/// `type=<mime>` and `file`, as the Graph API takes it; the file is hashed as it streams in (not
/// kept); answers `{"id": "..."}`.
async fn upload_media(
    State(inner): State<Arc<Inner>>,
    Path((_version, phone_number_id)): Path<(String, String)>,
    headers: HeaderMap,
    mut form: axum::extract::Multipart,
) -> Response {
    use sha2::Digest;
    let expected = format!("Bearer {}", inner.token);
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(expected.as_str()) {
        return graph_error(401, 190, "Invalid OAuth access token.", None);
    }
    let bad = |why: &str| graph_error(400, 100, &format!("(#100) Invalid parameter: {why}"), None);
    let (mut product, mut mime, mut file) = (None, None, None);
    loop {
        let mut field = match form.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(_) => return bad("the multipart body cannot be read"),
        };
        match field.name().unwrap_or_default() {
            "messaging_product" => product = field.text().await.ok(),
            "type" => mime = field.text().await.ok(),
            "file" => {
                let file_name = field.file_name().map(str::to_owned);
                let content_type = field.content_type().map(str::to_owned);
                let mut hasher = sha2::Sha256::new();
                let mut size = 0u64;
                loop {
                    match field.chunk().await {
                        Ok(Some(c)) => {
                            size += c.len() as u64;
                            hasher.update(&c);
                        }
                        Ok(None) => break,
                        Err(_) => return bad("the file cannot be read"),
                    }
                }
                file = Some((
                    file_name,
                    content_type,
                    size,
                    hex::encode(hasher.finalize()),
                ));
            }
            _ => {}
        }
    }
    if product.as_deref() != Some("whatsapp") {
        return bad("messaging_product must be whatsapp");
    }
    let Some(mime) = mime.filter(|m| m.contains('/')) else {
        return bad("type is required");
    };
    let Some((file_name, file_content_type, size, sha256)) = file.filter(|f| f.2 > 0) else {
        return bad("file is required");
    };
    let mut uploads = inner.uploads.lock().await;
    let id = format!("{}", 880_000_001 + uploads.len() as u64);
    uploads.push(Upload {
        phone_number_id,
        mime,
        file_name,
        file_content_type,
        size,
        sha256,
        id: id.clone(),
    });
    json_response(200, json!({ "id": id }))
}

fn graph_router(inner: Arc<Inner>) -> Router {
    async fn messages(
        State(inner): State<Arc<Inner>>,
        Path((version, phone_number_id)): Path<(String, String)>,
        headers: HeaderMap,
        body: Bytes,
    ) -> Response {
        let path = format!("/{version}/{phone_number_id}/messages");
        let behaviour = arrive(&inner, path, &headers, &body).await;
        let expected = format!("Bearer {}", inner.token);
        if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(expected.as_str()) {
            return graph_error(401, 190, "Invalid OAuth access token.", None);
        }
        let Ok(value) = serde_json::from_slice::<Value>(&body) else {
            return graph_error(400, 100, "(#100) The parameter body is invalid JSON", None);
        };
        // A read receipt (optionally with the typing indicator): `{"success": true}`.
        if value["status"] == "read" {
            if value["messaging_product"] != "whatsapp" || !value["message_id"].is_string() {
                return graph_error(400, 100, "(#100) Invalid parameter: message_id", None);
            }
            if !value["typing_indicator"].is_null() && value["typing_indicator"]["type"] != "text" {
                return graph_error(400, 100, "(#100) Invalid parameter: typing_indicator", None);
            }
            return json_response(200, json!({ "success": true }));
        }
        if let Err(why) = check_graph_body(&value) {
            return graph_error(400, 100, &format!("(#100) Invalid parameter: {why}"), None);
        }
        if let Some(id) = value
            .get(value["type"].as_str().unwrap_or_default())
            .and_then(|o| o.get("id"))
            .and_then(Value::as_str)
        {
            if !inner.uploads.lock().await.iter().any(|u| u.id == id) {
                return graph_error(400, 131053, "Media upload error: unknown media id", None);
            }
        }
        if matches!(behaviour, Behaviour::Accept | Behaviour::Hold) {
            if let Some(refusal) = over_limits(&inner, value["to"].as_str().unwrap_or_default()) {
                inner.throttled.fetch_add(1, Ordering::SeqCst);
                return refusal;
            }
        }
        match behaviour {
            Behaviour::Accept | Behaviour::Hold => {
                let n = inner.counter.fetch_add(1, Ordering::SeqCst) + 1;
                let to = value["to"].clone();
                inner
                    .accepted_log
                    .lock()
                    .unwrap()
                    .push((value.clone(), format!("wamid.FAKE{n:06}")));
                report_sent(
                    &inner,
                    &format!("wamid.FAKE{n:06}"),
                    to.as_str().unwrap_or_default(),
                    value["biz_opaque_callback_data"].as_str(),
                );
                json_response(
                    200,
                    json!({
                        "messaging_product": "whatsapp",
                        "contacts": [{ "input": to, "wa_id": to }],
                        "messages": [{ "id": format!("wamid.FAKE{n:06}"), "message_status": "accepted" }],
                    }),
                )
            }
            Behaviour::Unavailable => graph_error(503, 2, "Service temporarily unavailable", None),
            Behaviour::Reject {
                status,
                code,
                message,
                details,
            } => graph_error(status, code, &message, details.as_deref()),
            Behaviour::Malformed => (StatusCode::OK, "<html>not json</html>").into_response(),
        }
    }
    Router::new()
        .route("/{version}/{phone_number_id}/messages", post(messages))
        .route(
            "/{version}/{phone_number_id}/media",
            post(upload_media).layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route(
            "/{version}/{waba_id}/message_templates",
            axum::routing::get(message_templates),
        )
        .with_state(inner)
}

// ---------------------------------------------------------------------------------------------
// Telegram Bot API

fn telegram_error(status: u16, code: i64, description: &str) -> Response {
    json_response(
        status,
        json!({ "ok": false, "error_code": code, "description": description }),
    )
}

fn telegram_router(inner: Arc<Inner>) -> Router {
    async fn method(
        State(inner): State<Arc<Inner>>,
        Path((bot, method)): Path<(String, String)>,
        headers: HeaderMap,
        body: Bytes,
    ) -> Response {
        let behaviour = arrive(&inner, format!("/{bot}/{method}"), &headers, &body).await;
        if bot != format!("bot{}", inner.token) {
            return telegram_error(401, 401, "Unauthorized");
        }
        let Ok(value) = serde_json::from_slice::<Value>(&body) else {
            return telegram_error(400, 400, "Bad Request: invalid JSON");
        };
        let chat_id = value["chat_id"].clone();
        if chat_id.is_null() {
            return telegram_error(400, 400, "Bad Request: chat_id is empty");
        }
        let required = match method.as_str() {
            "sendMessage" => "text",
            "sendPhoto" => "photo",
            "sendDocument" => "document",
            "sendAudio" => "audio",
            "sendVideo" => "video",
            "sendSticker" => "sticker",
            "sendLocation" | "sendVenue" => "latitude",
            "sendContact" => "phone_number",
            "setMessageReaction" => "message_id",
            _ => return telegram_error(404, 404, "Not Found: method not found"),
        };
        let extra: &[&str] = match method.as_str() {
            "sendLocation" => &["longitude"],
            "sendVenue" => &["longitude", "title", "address"],
            "sendContact" => &["first_name"],
            _ => &[],
        };
        for k in extra {
            if value[*k].is_null() || value[*k] == "" {
                return telegram_error(400, 400, &format!("Bad Request: {k} is empty"));
            }
        }
        // A reply: ReplyParameters with an integer message_id.
        if let Some(reply) = value.get("reply_parameters") {
            if !reply["message_id"].is_i64() {
                return telegram_error(
                    400,
                    400,
                    "Bad Request: can't parse reply parameters JSON object",
                );
            }
        }
        if required == "message_id" {
            // setMessageReaction: a message id and a list of at most one emoji reaction.
            let reaction = value["reaction"].as_array();
            if !value["message_id"].is_i64()
                || reaction.is_none_or(|r| r.len() > 1)
                || reaction.is_some_and(|r| r.iter().any(|x| x["type"] != "emoji"))
            {
                return telegram_error(400, 400, "Bad Request: REACTION_INVALID");
            }
            return match behaviour {
                Behaviour::Accept | Behaviour::Hold => {
                    json_response(200, json!({ "ok": true, "result": true }))
                }
                Behaviour::Unavailable => telegram_error(502, 502, "Bad Gateway"),
                Behaviour::Reject {
                    status,
                    code,
                    message,
                    ..
                } => telegram_error(status, code, &message),
                Behaviour::Malformed => (StatusCode::OK, "not json").into_response(),
            };
        }
        if required == "latitude" {
            if !value["latitude"].is_number() {
                return telegram_error(400, 400, "Bad Request: latitude is empty");
            }
        } else if value[required].as_str().is_none_or(str::is_empty) {
            return telegram_error(400, 400, &format!("Bad Request: {required} is empty"));
        }
        match behaviour {
            Behaviour::Accept | Behaviour::Hold => {
                let n = inner.counter.fetch_add(1, Ordering::SeqCst) + 1;
                json_response(
                    200,
                    json!({ "ok": true, "result": {
                        "message_id": n,
                        "date": 1_786_000_000,
                        "chat": { "id": chat_id, "type": "private" },
                    }}),
                )
            }
            Behaviour::Unavailable => telegram_error(502, 502, "Bad Gateway"),
            Behaviour::Reject {
                status,
                code,
                message,
                ..
            } => telegram_error(status, code, &message),
            Behaviour::Malformed => (StatusCode::OK, "not json").into_response(),
        }
    }
    Router::new()
        .route("/{bot}/{method}", post(method))
        .with_state(inner)
}

/// `sha256=<hex HMAC-SHA256(body, app_secret)>`, as Meta signs webhooks.
pub fn hub_signature(app_secret: &str, body: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(app_secret.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// A WhatsApp Cloud API webhook body with inbound messages and statuses.
pub fn wa_webhook(phone_number_id: &str, messages: Vec<Value>, statuses: Vec<Value>) -> Value {
    let contacts: Vec<Value> = messages
        .iter()
        .map(|m| json!({ "profile": { "name": "Ada Lovelace" }, "wa_id": m["from"] }))
        .collect();
    let mut value = json!({
        "messaging_product": "whatsapp",
        "metadata": { "display_phone_number": "15550001111", "phone_number_id": phone_number_id },
    });
    if !messages.is_empty() {
        value["contacts"] = json!(contacts);
        value["messages"] = json!(messages);
    }
    if !statuses.is_empty() {
        value["statuses"] = json!(statuses);
    }
    json!({
        "object": "whatsapp_business_account",
        "entry": [{ "id": "WABA_ID", "changes": [{ "field": "messages", "value": value }] }],
    })
}

/// One inbound text message of a WhatsApp webhook.
pub fn wa_text(from_digits: &str, wamid: &str, unix_seconds: i64, text: &str) -> Value {
    json!({
        "from": from_digits,
        "id": wamid,
        "timestamp": unix_seconds.to_string(),
        "type": "text",
        "text": { "body": text },
    })
}

/// One status update of a WhatsApp webhook.
pub fn wa_status(wamid: &str, status: &str, recipient: &str) -> Value {
    let mut s = json!({
        "id": wamid,
        "status": status,
        "timestamp": "1786000000",
        "recipient_id": recipient,
    });
    if status == "failed" {
        s["errors"] = json!([{ "code": 131026, "title": "Message undeliverable",
            "message": "Message undeliverable", "error_data": { "details": "Receiver is incapable" } }]);
    }
    s
}
