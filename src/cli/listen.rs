//! `switchboard listen --forward-to URL`: the local webhook loop (CONVENTIONS "Developer loop").
//! It reads the event stream of a running server with an API key, and POSTs each envelope to a
//! local URL signed exactly as a delivery is (`X-Switchboard-*` and Standard Webhooks headers)
//! with a session secret it prints, one line per event. The forwarding is done here, not by the
//! server, so local targets need no setting. It reconnects with backoff and resumes from the
//! last event it forwarded (`Last-Event-ID`), so a dropped connection loses nothing.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use uuid::Uuid;

use switchboard_domain::webhooks::signing;

#[derive(Args, Debug)]
pub struct ListenArgs {
    /// Where to POST each event (for example http://127.0.0.1:3000/webhooks).
    #[arg(long, value_name = "URL")]
    pub forward_to: String,
    /// Events to forward: a comma-separated list of names, `*` or `namespace.*` (default all).
    #[arg(long, value_name = "LIST")]
    pub events: Option<String>,
    /// The Switchboard server.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// An API key with webhooks:read (or set SWITCHBOARD_API_KEY).
    #[arg(long, env = "SWITCHBOARD_API_KEY", hide_env_values = true)]
    pub api_key: String,
    /// Once the stream is open, ask the server to emit a typed sample of this event (as
    /// `switchboard trigger EVENT` does; the key then also needs webhooks:write).
    #[arg(long, value_name = "EVENT")]
    pub trigger: Option<String>,
}

#[derive(Args, Debug)]
pub struct TriggerArgs {
    /// The event to emit a typed sample of (`metadata.test: true`), such as message.received.
    pub event: String,
    /// The Switchboard server.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// An API key with webhooks:write (or set SWITCHBOARD_API_KEY).
    #[arg(long, env = "SWITCHBOARD_API_KEY", hide_env_values = true)]
    pub api_key: String,
}

/// `switchboard trigger EVENT`: the server records a typed sample of EVENT, which goes to the
/// event stream (and `listen`) and to every endpoint subscribed to it. Exit 0 once recorded.
pub async fn trigger(args: TriggerArgs) -> ExitCode {
    let server = match url::Url::parse(&args.server) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("error: --server: {e}");
            return ExitCode::from(2);
        }
    };
    match emit(&client(), &server, &args.api_key, &args.event).await {
        Ok(id) => {
            println!("{} recorded (event {id})", args.event);
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .build()
        .expect("an HTTP client")
}

/// Asks `server` to emit a sample of `event`; the event's id, or why not.
async fn emit(
    client: &reqwest::Client,
    server: &url::Url,
    key: &str,
    event: &str,
) -> Result<String, String> {
    let mut url = server.clone();
    url.set_query(None);
    url.path_segments_mut()
        .map_err(|()| "--server cannot be a base URL".to_owned())?
        .clear()
        .extend([
            "api",
            "v1",
            "integrations",
            "webhook-events",
            event,
            "trigger",
        ]);
    let resp = client
        .post(url)
        .bearer_auth(key)
        .send()
        .await
        .map_err(|e| {
            format!(
                "cannot reach {}: {e}",
                server.origin().ascii_serialization()
            )
        })?;
    let status = resp.status();
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    if status.is_success() {
        Ok(body["event_id"].as_str().unwrap_or_default().to_owned())
    } else {
        Err(format!(
            "the server refused ({status}): {}",
            body["error"]["message"]
                .as_str()
                .unwrap_or("no reason given")
        ))
    }
}

/// Checks that `key` may read the stream before anything is printed: a missing scope or a bad
/// key is said at once, not after the banner.
async fn check_access(
    client: &reqwest::Client,
    server: &url::Url,
    key: &str,
) -> Result<(), String> {
    let mut url = server.clone();
    url.set_path("/api/v1/integrations/webhook-events");
    url.set_query(Some("limit=1"));
    let resp = client.get(url).bearer_auth(key).send().await.map_err(|e| {
        format!(
            "cannot reach {}: {e} (is `switchboard serve` running?)",
            server.origin().ascii_serialization()
        )
    })?;
    let status = resp.status();
    if status.is_success() {
        return Ok(());
    }
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    Err(format!(
        "the server refused the key ({status}): {}",
        body["error"]["message"]
            .as_str()
            .unwrap_or("no reason given")
    ))
}

/// One Server-Sent Event of the stream.
struct StreamEvent {
    id: String,
    data: String,
}

/// Runs until Ctrl-C (exit 0) or a refusal that retrying cannot fix (exit 1).
pub async fn run(args: ListenArgs) -> ExitCode {
    let forward = match url::Url::parse(&args.forward_to) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => u,
        _ => {
            eprintln!("error: --forward-to must be an http:// or https:// URL");
            return ExitCode::from(2);
        }
    };
    let mut stream_url = match url::Url::parse(&args.server) {
        Ok(u) => u,
        Err(e) => {
            eprintln!("error: --server: {e}");
            return ExitCode::from(2);
        }
    };
    stream_url.set_path("/api/v1/integrations/event-stream");
    if let Some(events) = &args.events {
        stream_url.query_pairs_mut().append_pair("events", events);
    }
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .build()
        .expect("an HTTP client");
    if let Err(message) = check_access(&client, &stream_url, &args.api_key).await {
        eprintln!("error: {message}");
        return ExitCode::FAILURE;
    }
    let secret = signing::generate_secret();
    println!("Forwarding events to {forward}");
    println!("Session signing secret (verify with it as with an endpoint's): {secret}");
    println!("Ctrl-C stops.");

    let mut trigger = args.trigger.clone();
    let mut last_id: Option<String> = None;
    let mut backoff = Duration::from_millis(500);
    let work = async {
        loop {
            let before = last_id.clone();
            match follow(
                &client,
                &stream_url,
                &args.api_key,
                &mut last_id,
                &forward,
                &secret,
                &mut trigger,
            )
            .await
            {
                Ok(()) if last_id != before => backoff = Duration::from_millis(500),
                Ok(()) => {}
                Err(Stop(message)) => {
                    eprintln!("error: {message}");
                    return ExitCode::FAILURE;
                }
            }
            eprintln!("stream interrupted; reconnecting in {backoff:?}");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
    };
    tokio::select! {
        code = work => code,
        _ = tokio::signal::ctrl_c() => {
            println!("stopped");
            ExitCode::SUCCESS
        }
    }
}

/// A refusal that retrying cannot fix (a bad key, a missing scope, a bad filter).
struct Stop(String);

/// Reads the stream until it ends or breaks (`Ok`: reconnect), forwarding each event.
async fn follow(
    client: &reqwest::Client,
    stream_url: &url::Url,
    key: &str,
    last_id: &mut Option<String>,
    forward: &url::Url,
    secret: &str,
    trigger: &mut Option<String>,
) -> Result<(), Stop> {
    let mut req = client.get(stream_url.clone()).bearer_auth(key);
    if let Some(id) = last_id.as_deref() {
        req = req.header("Last-Event-ID", id);
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "cannot reach {}: {e}",
                stream_url.origin().ascii_serialization()
            );
            return Ok(());
        }
    };
    let status = resp.status();
    if status.is_client_error() && status.as_u16() != 429 && status.as_u16() != 408 {
        let body = resp.text().await.unwrap_or_default();
        return Err(Stop(format!(
            "the server refused the stream ({status}): {body}"
        )));
    }
    if !status.is_success() {
        eprintln!("the server answered {status}");
        return Ok(());
    }
    // The stream is open: the sample asked for with --trigger is emitted now, and arrives on it.
    if let Some(event) = trigger.take() {
        match emit(client, stream_url, key, &event).await {
            Ok(id) => println!("triggered {event} (event {id})"),
            Err(message) => eprintln!("--trigger {event}: {message}"),
        }
    }
    let mut resp = resp;
    let mut buf = String::new();
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) | Err(_) => return Ok(()),
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            if let Some(event) = parse_block(&block) {
                forward_one(client, forward, secret, &event).await;
                *last_id = Some(event.id);
            }
        }
    }
}

/// One SSE block: `id:` and `data:` lines (comments and other fields ignored).
fn parse_block(block: &str) -> Option<StreamEvent> {
    let (mut id, mut data) = (None, Vec::new());
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("id:") {
            id = Some(v.trim_start().to_owned());
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    Some(StreamEvent {
        id: id?,
        data: (!data.is_empty()).then(|| data.join("\n"))?,
    })
}

/// POSTs one envelope, signed as a delivery, and prints one line.
async fn forward_one(client: &reqwest::Client, to: &url::Url, secret: &str, event: &StreamEvent) {
    let name = serde_json::from_str::<serde_json::Value>(&event.data)
        .ok()
        .and_then(|v| v["event"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "?".into());
    let delivery = Uuid::now_v7().to_string();
    let timestamp = chrono::Utc::now().timestamp();
    let body = event.data.as_bytes();
    let signatures = signing::sign_all(&[secret], &delivery, timestamp, body);
    let started = Instant::now();
    let outcome = client
        .post(to.clone())
        .timeout(Duration::from_secs(10))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header("X-Switchboard-Event", name.as_str())
        .header("X-Switchboard-Delivery", delivery.as_str())
        .header("X-Switchboard-Attempt", "1")
        .header("X-Switchboard-Timestamp", timestamp.to_string())
        .header("X-Switchboard-Signature", signatures.switchboard)
        .header("webhook-id", delivery.as_str())
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signatures.standard)
        .body(body.to_vec())
        .send()
        .await;
    let took = started.elapsed().as_millis();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    match outcome {
        Ok(r) => println!("{now}  {name}  -> {} ({took} ms)", r.status().as_u16()),
        Err(e) => println!("{now}  {name}  -> error: {e} ({took} ms)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_parsed() {
        let e = parse_block("id: abc.def\ndata: {\"event\":\"x\"}\n\n").unwrap();
        assert_eq!(
            (e.id.as_str(), e.data.as_str()),
            ("abc.def", "{\"event\":\"x\"}")
        );
        assert!(parse_block(": keep-alive\n\n").is_none());
        assert!(
            parse_block("data: {}\n\n").is_none(),
            "an event without an id"
        );
        let multi = parse_block("id:1\ndata:a\ndata:b\n\n").unwrap();
        assert_eq!(multi.data, "a\nb");
    }
}
