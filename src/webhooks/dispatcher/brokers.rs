//! Attempts to broker destinations (CONVENTIONS "Destinations, filters, throttles, endpoint
//! authentication"): the message body is byte for byte the HTTPS request body, and the
//! message carries the same headers. Redis Streams: `XADD {stream} MAXLEN ~ {max_len} *` with
//! the field `body` and one field per header, its name in lower case; the attempt succeeds
//! with the entry's id.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use redis::IntoConnectionInfo;

use super::Dispatcher;
use super::attempt::AttemptResult;
use crate::url_safety::{self, SafeResolver};
use switchboard_domain::sealed::AAD_TARGET_URL;
use switchboard_domain::webhooks::destination;
use switchboard_store::webhooks::{ClaimedDelivery, ClaimedEndpoint};

/// Open broker connections, by full target URL (credentials included: kept in memory only).
#[derive(Default)]
pub(super) struct Connections {
    redis: Mutex<HashMap<String, redis::aio::MultiplexedConnection>>,
    nats: Mutex<HashMap<String, (async_nats::Client, async_nats::jetstream::Context)>>,
    amqp: Mutex<HashMap<String, (lapin::Connection, lapin::Channel)>>,
}

/// A broker endpoint's target as stored (credentials masked).
fn target_of(endpoint: &ClaimedEndpoint) -> Option<serde_json::Value> {
    endpoint
        .controls
        .target
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
}

/// A key template filled for the delivery's event.
fn render(d: &ClaimedDelivery, template: &str) -> String {
    let channel = d
        .event
        .channel
        .as_ref()
        .and_then(|c| serde_json::to_value(c).ok());
    destination::render_template(template, &d.event.name, &d.event.data, channel.as_ref())
}

/// A URL's user or password as written (`%XX` decoded; `+` stays `+`).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What went wrong, for the attempt log: the server's error code and message, or the I/O
/// error; never the connection's URL or credentials.
fn describe(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_owned(),
        _ if e.is_io_error() => e.to_string(),
        _ => format!("{:?}", e.kind()),
    }
}

impl Dispatcher {
    /// The target URL of a broker endpoint: sealed when it holds credentials, else as stored.
    fn target_url(&self, endpoint: &ClaimedEndpoint) -> Result<String, AttemptResult> {
        if let Some(sealed) = &endpoint.controls.sealed_target_url {
            return match self.secrets.open(sealed, AAD_TARGET_URL) {
                Ok(u) => Ok(String::from_utf8_lossy(&u).into_owned()),
                Err(e) => {
                    tracing::error!(endpoint_uuid = %endpoint.uuid, error = %e, "cannot open a target URL");
                    Err(AttemptResult::error(
                        "secret_unavailable",
                        "The endpoint's target credentials could not be read; the attempt was not made."
                            .into(),
                    ))
                }
            };
        }
        Ok(endpoint.url.clone())
    }

    /// A connection to the Redis of `url`, opened to an address checked by the URL-safety
    /// rules (no second look-up between the check and the connection).
    async fn redis_connection(
        &self,
        url: &str,
    ) -> Result<redis::aio::MultiplexedConnection, AttemptResult> {
        if let Some(c) = self.brokers.redis.lock().unwrap().get(url) {
            return Ok(c.clone());
        }
        let parsed =
            url_safety::check_broker_url(url, "redis", 6379, self.policy).map_err(|e| {
                AttemptResult::error(
                    "unsafe_target",
                    format!("The endpoint's target is not allowed: {e}."),
                )
            })?;
        let host = parsed
            .host_str()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = parsed.port().unwrap_or(6379);
        let addrs = SafeResolver::new(self.policy)
            .resolve_checked(&host)
            .await
            .map_err(|e| AttemptResult::error("unsafe_target", format!("{e}.")))?;
        let mut info = url.into_connection_info().map_err(|e| {
            AttemptResult::error(
                "invalid_target",
                format!("The target URL is not a Redis URL: {e}."),
            )
        })?;
        info.addr = redis::ConnectionAddr::Tcp(addrs[0].ip().to_string(), port);
        let client = redis::Client::open(info).map_err(|e| {
            AttemptResult::error("broker_unavailable", format!("Redis: {}.", describe(&e)))
        })?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Duration::from_secs(5))
            .set_response_timeout(Duration::from_secs(30));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| {
                AttemptResult::error(
                    "broker_unavailable",
                    format!("Could not connect to Redis: {}.", describe(&e)),
                )
            })?;
        self.brokers
            .redis
            .lock()
            .unwrap()
            .insert(url.to_owned(), conn.clone());
        Ok(conn)
    }

    /// A checked address (`ip:port`) for a broker URL: its host resolved and kept only when
    /// the URL-safety rules allow it.
    async fn broker_address(
        &self,
        url: &str,
        scheme: &str,
        default_port: u16,
    ) -> Result<(url::Url, std::net::SocketAddr), AttemptResult> {
        let parsed =
            url_safety::check_broker_url(url, scheme, default_port, self.policy).map_err(|e| {
                AttemptResult::error(
                    "unsafe_target",
                    format!("The endpoint's target is not allowed: {e}."),
                )
            })?;
        let host = parsed
            .host_str()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = parsed.port().unwrap_or(default_port);
        let addrs = SafeResolver::new(self.policy)
            .resolve_checked(&host)
            .await
            .map_err(|e| AttemptResult::error("unsafe_target", format!("{e}.")))?;
        Ok((parsed, std::net::SocketAddr::new(addrs[0].ip(), port)))
    }

    /// A JetStream context on a connection to the NATS server of `url`, at a checked address
    /// (servers the cluster advertises are ignored: they were not checked).
    async fn nats_context(
        &self,
        url: &str,
    ) -> Result<async_nats::jetstream::Context, AttemptResult> {
        // A connection that lost its server is replaced (a new one fails at once while the
        // server is away) rather than reused until the client's own reconnection succeeds.
        if let Some((client, context)) = self.brokers.nats.lock().unwrap().get(url) {
            if client.connection_state() != async_nats::connection::State::Disconnected {
                return Ok(context.clone());
            }
        }
        let (parsed, addr) = self.broker_address(url, "nats", 4222).await?;
        let mut options = async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(5))
            .ignore_discovered_servers()
            .name("switchboard-webhooks");
        if let Some(password) = parsed.password() {
            options = options
                .user_and_password(percent_decode(parsed.username()), percent_decode(password));
        } else if !parsed.username().is_empty() {
            options = options.token(percent_decode(parsed.username()));
        }
        let client = options
            .connect(format!("nats://{addr}"))
            .await
            .map_err(|e| {
                AttemptResult::error(
                    "broker_unavailable",
                    format!("Could not connect to NATS: {}.", e.kind()),
                )
            })?;
        let context = async_nats::jetstream::new(client.clone());
        self.brokers
            .nats
            .lock()
            .unwrap()
            .insert(url.to_owned(), (client, context.clone()));
        Ok(context)
    }

    /// One attempt to a `nats_jetstream` endpoint.
    pub(super) async fn publish_nats(
        &self,
        d: &ClaimedDelivery,
        endpoint: &ClaimedEndpoint,
        headers: &[(String, String)],
        body: Vec<u8>,
        timeout: Duration,
    ) -> AttemptResult {
        let Some(target) = target_of(endpoint) else {
            return AttemptResult::error(
                "invalid_target",
                "The endpoint has no readable target.".into(),
            );
        };
        let url = match self.target_url(endpoint) {
            Ok(u) => u,
            Err(e) => return e,
        };
        let subject = render(d, target["subject"].as_str().unwrap_or("switchboard"));
        let mut map = async_nats::HeaderMap::new();
        for (name, value) in headers {
            map.insert(name.as_str(), value.as_str());
        }
        map.insert("Nats-Msg-Id", d.uuid.to_string().as_str());
        let attempt = async {
            let js = self.nats_context(&url).await?;
            let ack = js
                .publish_with_headers(subject.clone(), map, body.into())
                .await
                .map_err(|e| {
                    AttemptResult::error(
                        "broker_unavailable",
                        format!("NATS refused the publish: {}.", e.kind()),
                    )
                })?
                .await
                .map_err(|e| {
                    AttemptResult::error(
                        "broker_rejected",
                        format!("JetStream did not acknowledge: {}.", e.kind()),
                    )
                })?;
            Ok::<_, AttemptResult>(AttemptResult::acked(format!(
                "JetStream {} seq {}{}",
                ack.stream,
                ack.sequence,
                if ack.duplicate { " (duplicate)" } else { "" }
            )))
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(r) | Err(r)) => r,
            Err(_) => AttemptResult::timeout(timeout),
        }
    }

    /// A confirm-mode channel on a connection to the RabbitMQ of `url`, at a checked address.
    async fn amqp_channel(&self, url: &str) -> Result<lapin::Channel, AttemptResult> {
        if let Some((conn, channel)) = self.brokers.amqp.lock().unwrap().get(url) {
            if conn.status().connected() && channel.status().connected() {
                return Ok(channel.clone());
            }
        }
        let (_, addr) = self.broker_address(url, "amqp", 5672).await?;
        let mut uri: lapin::uri::AMQPUri = url.parse().map_err(|e: String| {
            AttemptResult::error(
                "invalid_target",
                format!(
                    "The target URL is not an AMQP URL: {}.",
                    e.replace(url, "(url)")
                ),
            )
        })?;
        uri.authority.host = addr.ip().to_string();
        uri.authority.port = addr.port();
        let unavailable = |e: lapin::Error| {
            AttemptResult::error(
                "broker_unavailable",
                format!("Could not open a RabbitMQ channel: {e}."),
            )
        };
        let conn = lapin::Connection::connect_uri(uri, lapin::ConnectionProperties::default())
            .await
            .map_err(unavailable)?;
        let channel = conn.create_channel().await.map_err(unavailable)?;
        channel
            .confirm_select(lapin::options::ConfirmSelectOptions::default())
            .await
            .map_err(unavailable)?;
        self.brokers
            .amqp
            .lock()
            .unwrap()
            .insert(url.to_owned(), (conn, channel.clone()));
        Ok(channel)
    }

    /// One attempt to a `rabbitmq` endpoint.
    pub(super) async fn publish_amqp(
        &self,
        d: &ClaimedDelivery,
        endpoint: &ClaimedEndpoint,
        headers: &[(String, String)],
        body: Vec<u8>,
        timeout: Duration,
    ) -> AttemptResult {
        use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
        let Some(target) = target_of(endpoint) else {
            return AttemptResult::error(
                "invalid_target",
                "The endpoint has no readable target.".into(),
            );
        };
        let url = match self.target_url(endpoint) {
            Ok(u) => u,
            Err(e) => return e,
        };
        let exchange = target["exchange"].as_str().unwrap_or_default().to_owned();
        let routing_key = render(d, target["routing_key"].as_str().unwrap_or("switchboard"));
        let mut table = FieldTable::default();
        for (name, value) in headers {
            table.insert(
                ShortString::from(name.clone()),
                AMQPValue::LongString(LongString::from(value.clone())),
            );
        }
        let properties = lapin::BasicProperties::default()
            .with_content_type(ShortString::from("application/json"))
            .with_message_id(ShortString::from(d.uuid.to_string()))
            .with_delivery_mode(2)
            .with_headers(table);
        let attempt = async {
            let channel = self.amqp_channel(&url).await?;
            let failed = |e: lapin::Error| {
                AttemptResult::error(
                    "broker_unavailable",
                    format!("RabbitMQ publish failed: {e}."),
                )
            };
            let confirm = channel
                .basic_publish(
                    &exchange,
                    &routing_key,
                    lapin::options::BasicPublishOptions {
                        mandatory: true,
                        ..Default::default()
                    },
                    &body,
                    properties,
                )
                .await
                .map_err(failed)?
                .await
                .map_err(failed)?;
            match confirm {
                lapin::publisher_confirm::Confirmation::Ack(None) => Ok(AttemptResult::acked(
                    format!("RabbitMQ confirmed to {exchange:?} with {routing_key:?}"),
                )),
                lapin::publisher_confirm::Confirmation::Ack(Some(returned)) => {
                    Err(AttemptResult::error(
                        "broker_rejected",
                        format!(
                            "RabbitMQ returned the message: {} {} (no queue takes {routing_key:?} from {exchange:?}).",
                            returned.reply_code, returned.reply_text
                        ),
                    ))
                }
                lapin::publisher_confirm::Confirmation::Nack(_) => Err(AttemptResult::error(
                    "broker_rejected",
                    "RabbitMQ refused the message (nack).".into(),
                )),
                lapin::publisher_confirm::Confirmation::NotRequested => Err(AttemptResult::error(
                    "broker_unavailable",
                    "The channel is not in confirm mode.".into(),
                )),
            }
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(r)) => r,
            Ok(Err(r)) => {
                if r.error_code == Some("broker_unavailable") {
                    self.brokers.amqp.lock().unwrap().remove(&url);
                }
                r
            }
            Err(_) => {
                self.brokers.amqp.lock().unwrap().remove(&url);
                AttemptResult::timeout(timeout)
            }
        }
    }

    /// One attempt to a `redis_stream` endpoint.
    pub(super) async fn publish_redis(
        &self,
        d: &ClaimedDelivery,
        endpoint: &ClaimedEndpoint,
        headers: &[(String, String)],
        body: Vec<u8>,
        timeout: Duration,
    ) -> AttemptResult {
        let target: serde_json::Value = match endpoint
            .controls
            .target
            .as_deref()
            .and_then(|t| serde_json::from_str(t).ok())
        {
            Some(t) => t,
            None => {
                return AttemptResult::error(
                    "invalid_target",
                    "The endpoint has no readable target.".into(),
                );
            }
        };
        let url = match self.target_url(endpoint) {
            Ok(u) => u,
            Err(e) => return e,
        };
        let channel = d
            .event
            .channel
            .as_ref()
            .and_then(|c| serde_json::to_value(c).ok());
        let stream = destination::render_template(
            target["stream"].as_str().unwrap_or("switchboard"),
            &d.event.name,
            &d.event.data,
            channel.as_ref(),
        );
        let max_len = target["max_len"]
            .as_u64()
            .unwrap_or(destination::DEFAULT_MAX_LEN);
        let attempt = async {
            let mut conn = self.redis_connection(&url).await?;
            let mut cmd = redis::cmd("XADD");
            cmd.arg(&stream)
                .arg("MAXLEN")
                .arg("~")
                .arg(max_len)
                .arg("*")
                .arg("body")
                .arg(body);
            for (name, value) in headers {
                cmd.arg(name.to_ascii_lowercase()).arg(value);
            }
            match cmd.query_async::<String>(&mut conn).await {
                Ok(id) => Ok(AttemptResult::acked(format!("XADD {stream} {id}"))),
                Err(e) => {
                    // A broken connection is opened again at the next attempt.
                    if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                        self.brokers.redis.lock().unwrap().remove(&url);
                        Err(AttemptResult::error(
                            "broker_unavailable",
                            format!("Redis connection failed: {}.", describe(&e)),
                        ))
                    } else {
                        Err(AttemptResult::error(
                            "broker_rejected",
                            format!("Redis refused XADD: {}.", describe(&e)),
                        ))
                    }
                }
            }
        };
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(r) | Err(r)) => r,
            Err(_) => {
                self.brokers.redis.lock().unwrap().remove(&url);
                AttemptResult::timeout(timeout)
            }
        }
    }
}
