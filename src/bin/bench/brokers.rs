//! `--scenario brokers`: deliveries per second to each destination type on this machine:
//! `https` (the local receiver), `redis_stream`, `nats_jetstream` and `rabbitmq` (the brokers
//! on their default local ports). For each type, on a fresh database: `--endpoints` endpoints
//! of that type subscribed to `message.sent`, `--backlog` sends from `--connections` clients,
//! and the time from the first send until every delivery is recorded `delivered` (the
//! server's `switchboard_webhook_attempts_total{outcome="delivered"}`). The same server
//! settings for every type (those of `bench`: 8 attempts per endpoint, 64 in all).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use crate::Args;
use crate::load::{self, Req};
use crate::receiver::Receiver;
use crate::server::{self, Backend, Database, Server};

const REDIS: &str = "redis://127.0.0.1:6379";
const NATS: &str = "nats://127.0.0.1:4222";
const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// One destination type's figures.
#[derive(Debug, serde::Serialize)]
pub struct DestinationRate {
    pub destination: String,
    pub endpoints: usize,
    pub deliveries: usize,
    pub seconds: f64,
    pub deliveries_per_sec: f64,
    /// Messages found at the broker afterwards (at least `deliveries`; none for https).
    pub broker_messages: Option<u64>,
}

/// Where a run's messages go, and how they are counted and removed.
enum Place {
    Https(Receiver),
    Redis(String),
    Nats(async_nats::jetstream::Context, String),
    Amqp(lapin::Connection, lapin::Channel, String),
}

impl Place {
    async fn new(destination: &str, id: &str) -> anyhow::Result<Place> {
        Ok(match destination {
            "https" => Place::Https(Receiver::start().await?),
            "redis_stream" => Place::Redis(format!("sbbench:{id}")),
            "nats_jetstream" => {
                let client = async_nats::connect(NATS)
                    .await
                    .context("NATS on 127.0.0.1:4222")?;
                let js = async_nats::jetstream::new(client);
                let name = format!("SBBENCH_{id}");
                js.get_or_create_stream(async_nats::jetstream::stream::Config {
                    name: name.clone(),
                    subjects: vec![format!("sbbench.{id}.>")],
                    ..Default::default()
                })
                .await
                .map_err(|e| anyhow::anyhow!("JetStream stream: {e}"))?;
                Place::Nats(js, name)
            }
            "rabbitmq" => {
                use lapin::options::{
                    ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
                };
                use lapin::types::FieldTable;
                let conn = lapin::Connection::connect(AMQP, lapin::ConnectionProperties::default())
                    .await
                    .context("RabbitMQ on 127.0.0.1:5672")?;
                let ch = conn.create_channel().await?;
                let name = format!("sbbench.{id}");
                ch.exchange_declare(
                    &name,
                    lapin::ExchangeKind::Topic,
                    ExchangeDeclareOptions::default(),
                    FieldTable::default(),
                )
                .await?;
                ch.queue_declare(&name, QueueDeclareOptions::default(), FieldTable::default())
                    .await?;
                ch.queue_bind(
                    &name,
                    &name,
                    "#",
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await?;
                Place::Amqp(conn, ch, name)
            }
            other => anyhow::bail!("unknown destination {other}"),
        })
    }

    /// The endpoint body of the `n`th endpoint.
    fn endpoint(&self, n: usize, id: &str) -> Value {
        match self {
            Place::Https(r) => {
                json!({"name": "bench", "url": r.url(n), "events": ["message.sent"]})
            }
            Place::Redis(stream) => json!({"type": "redis_stream", "events": ["message.sent"],
                "target": {"url": REDIS, "stream": format!("{stream}:{n}"), "max_len": 10_000_000}}),
            Place::Nats(..) => json!({"type": "nats_jetstream", "events": ["message.sent"],
                "target": {"url": NATS, "subject": format!("sbbench.{id}.{n}.{{event}}")}}),
            Place::Amqp(_, _, name) => json!({"type": "rabbitmq", "events": ["message.sent"],
                "target": {"url": AMQP, "exchange": name, "routing_key": format!("{n}.{{event}}")}}),
        }
    }

    /// Messages at the broker, then removes them.
    async fn count_and_remove(self, endpoints: usize) -> anyhow::Result<Option<u64>> {
        Ok(match self {
            Place::Https(_) => None,
            Place::Redis(stream) => {
                let client = redis::Client::open(REDIS)?;
                let mut conn = client.get_multiplexed_async_connection().await?;
                let mut total = 0;
                for n in 0..endpoints {
                    let key = format!("{stream}:{n}");
                    let len: u64 = redis::cmd("XLEN").arg(&key).query_async(&mut conn).await?;
                    let _: () = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
                    total += len;
                }
                Some(total)
            }
            Place::Nats(js, name) => {
                let mut stream = js
                    .get_stream(&name)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                let n = stream
                    .info()
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?
                    .state
                    .messages;
                js.delete_stream(&name)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                Some(n)
            }
            Place::Amqp(_conn, ch, name) => {
                use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
                let n = ch
                    .queue_delete(&name, QueueDeleteOptions::default())
                    .await?;
                ch.exchange_delete(&name, ExchangeDeleteOptions::default())
                    .await?;
                Some(u64::from(n))
            }
        })
    }
}

/// The server's count of delivered attempts.
async fn delivered(client: &reqwest::Client, srv: &Server) -> anyhow::Result<u64> {
    let text = client.get(srv.url("/metrics")).send().await?.text().await?;
    Ok(text
        .lines()
        .filter(|l| {
            l.starts_with("switchboard_webhook_attempts_total{")
                && l.contains("outcome=\"delivered\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64)
}

async fn rate(
    args: &Args,
    bin: &std::path::Path,
    backend: Backend,
    destination: &str,
) -> anyhow::Result<DestinationRate> {
    let db = Database::create(backend, &args.postgres_url).await?;
    let seed = server::seed(bin, &db).await?;
    let srv = Server::start(bin, &db).await?;
    let client = load::client();
    let id = uuid::Uuid::new_v4().simple().to_string();
    let place = Place::new(destination, &id).await?;
    for n in 0..args.endpoints {
        client
            .post(srv.url("/api/v1/integrations/webhook-endpoints"))
            .bearer_auth(&seed.key)
            .json(&place.endpoint(n, &id))
            .send()
            .await?
            .error_for_status()
            .context("create the endpoint")?;
    }
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let (client, next) = (client.clone(), next.clone());
        let (url, key, body) = (
            srv.url("/api/v1/integrations/messages"),
            seed.key.clone(),
            load::send_body(&seed),
        );
        let total = args.backlog;
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::SeqCst) < total {
                let _ = Req::post(
                    url.clone(),
                    &key,
                    uuid::Uuid::new_v4().to_string(),
                    body.clone(),
                )
                .send(&client)
                .await;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let expected = (args.backlog * args.endpoints) as u64;
    let deadline = Instant::now() + Duration::from_secs(900);
    let mut done = delivered(&client, &srv).await?;
    while done < expected {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{destination}: only {done} of {expected} deliveries in 900 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        done = delivered(&client, &srv).await?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let broker_messages = place.count_and_remove(args.endpoints).await?;
    drop(srv);
    db.drop_database().await;
    Ok(DestinationRate {
        destination: destination.to_owned(),
        endpoints: args.endpoints,
        deliveries: expected as usize,
        seconds,
        deliveries_per_sec: expected as f64 / seconds,
        broker_messages,
    })
}

pub async fn brokers(
    args: &Args,
    bin: &std::path::Path,
    backend: Backend,
) -> anyhow::Result<Vec<DestinationRate>> {
    let mut out = Vec::new();
    for destination in ["https", "redis_stream", "nats_jetstream", "rabbitmq"] {
        let r = rate(args, bin, backend, destination).await?;
        eprintln!(
            "  {destination}: {:.0} deliveries/s ({} in {:.1} s)",
            r.deliveries_per_sec, r.deliveries, r.seconds
        );
        out.push(r);
    }
    Ok(out)
}
