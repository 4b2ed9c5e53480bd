//! `bench`: the load tool. It starts a release `switchboard` server per backend on a fresh
//! database, seeds an organization, a sandbox channel, a contact, a key and a local webhook
//! receiver, and measures request rates, latencies, webhook delivery rates, event-to-delivery
//! times, memory and start-up time. It prints one table and writes it as JSON.
//!
//! ```sh
//! cargo run --release --bin bench -- --backend both --duration 10s --connections 32
//! cargo run --release --bin bench -- --scenario recovery    # feed pages and a recovery
//! cargo run --release --bin bench -- --scenario ordering    # per_contact vs unordered
//! cargo run --release --bin bench -- --scenario tracing     # with and without span export
//! cargo run --release --bin bench -- --scenario batch       # batch sends through the queue
//! cargo run --release --bin bench -- --scenario media       # WhatsApp media: MB/s, peak RSS
//! cargo run --release --bin bench -- --scenario scale       # 1M pending deliveries, 10M messages
//! cargo run --release --bin bench -- --scenario inbound     # WhatsApp callbacks per second
//! cargo run --release --bin bench -- --scenario brokers     # deliveries/s: https, redis, nats, rabbitmq
//! cargo run --release --bin bench -- --scenario purge --backend postgres  # a day of 10M deliveries
//! ```

mod batch;
mod brokers;
mod inbound;
mod load;
mod media;
mod outage;
mod purge;
mod receiver;
mod report;
mod scale;
mod server;
mod tracing;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use report::Report;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "bench",
    about = "Switchboard load tool: rates, latencies, deliveries, memory, start-up."
)]
pub struct Args {
    /// sqlite, postgres or both.
    #[arg(long, default_value = "both")]
    pub backend: String,
    /// PostgreSQL server to create the benchmark database on.
    #[arg(
        long,
        env = "SWITCHBOARD_TEST_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pub postgres_url: String,
    /// How long each closed-loop measurement runs.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Concurrent connections of the load generator.
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Messages sent to build the webhook backlog whose draining is measured.
    #[arg(long, default_value_t = 2000)]
    pub backlog: usize,
    /// Webhook endpoints (each its own receiver URL) subscribed during the backlog measurement.
    #[arg(long, default_value_t = 8)]
    pub endpoints: usize,
    /// Concurrency of the plain client that is the floor for delivery rates (the dispatcher's
    /// default global concurrency).
    #[arg(long, default_value_t = 64)]
    pub plain_concurrency: usize,
    /// Where to write the JSON results.
    #[arg(long, default_value = "bench-results/latest.json")]
    pub json: PathBuf,
    /// The server binary (default: `switchboard` beside this binary, built with --release).
    #[arg(long)]
    pub server_bin: Option<PathBuf>,
    /// standard (rates, latencies, deliveries), recovery (feed pages and a recovery over kept
    /// events), ordering (per_contact against unordered deliveries), tracing (the same loops
    /// with and without span export), batch (batch sends through the send queue), media
    /// (WhatsApp media sends: MB/s and peak memory), scale (deliveries per second with many
    /// pending, history pages over many messages), inbound (WhatsApp callbacks per second,
    /// texts and every kind) or brokers (deliveries per second to each destination type:
    /// https, redis_stream, nats_jetstream, rabbitmq; `--backlog` sends to `--endpoints`
    /// endpoints of each) or purge (PostgreSQL: a day of `--purge-deliveries` past the
    /// retention deleted as rows and dropped as a partition).
    #[arg(long, default_value = "standard")]
    pub scenario: String,
    /// recovery: events kept in the database.
    #[arg(long, default_value_t = 1_000_000)]
    pub kept_events: i64,
    /// recovery: the newest kept events the recovery re-queues.
    #[arg(long, default_value_t = 100_000)]
    pub recovery_events: i64,
    /// recovery: feed pages of 1 000 read from the oldest event.
    #[arg(long, default_value_t = 100)]
    pub feed_pages: usize,
    /// tracing, inbound: an earlier build of the server, measured in the same rounds (tracing:
    /// without export, what the trace context costs when nothing is exported).
    #[arg(long)]
    pub baseline_bin: Option<PathBuf>,
    /// ordering: contacts the sends go to.
    #[arg(long, default_value_t = 1000)]
    pub contacts: usize,
    /// batch: batches of 1 000 items posted.
    #[arg(long, default_value_t = 10)]
    pub batches: usize,
    /// ordering: messages per contact.
    #[arg(long, default_value_t = 10)]
    pub events_per_contact: usize,
    /// media: documents sent at once (each different bytes).
    #[arg(long, default_value_t = 20)]
    pub media_docs: usize,
    /// media: the size of each document, in MiB (WhatsApp's limit is 100).
    #[arg(long, default_value_t = 50)]
    pub media_mb: u64,
    /// scale: the pending deliveries to measure the delivery rate with, comma-separated (0
    /// skips this part).
    #[arg(long, value_delimiter = ',', default_value = "10000,1000000")]
    pub scale_pending: Vec<i64>,
    /// scale: the messages in the history whose pages are measured (0 skips this part).
    #[arg(long, default_value_t = 10_000_000)]
    pub scale_messages: i64,
    /// scale: every pending delivery due at one time (as a re-enabled endpoint's held
    /// deliveries are), instead of at its event's time (as the fan-out writes them).
    #[arg(long)]
    pub scale_same_due: bool,
    /// purge: the deliveries (and events) of the day that the purge removes.
    #[arg(long, default_value_t = 10_000_000)]
    pub purge_deliveries: i64,
    /// purge: rows, partitions or both.
    #[arg(long, default_value = "both")]
    pub purge_mode: String,
    /// scale: keep the history database (its URL is printed), to examine it by hand.
    #[arg(long)]
    pub scale_keep: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    switchboard_domain::time::parse_duration(s)
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    match rt.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let backends: Vec<server::Backend> = match args.backend.as_str() {
        "sqlite" => vec![server::Backend::Sqlite],
        "postgres" => vec![server::Backend::Postgres],
        "both" => vec![server::Backend::Sqlite, server::Backend::Postgres],
        other => anyhow::bail!("--backend: expected sqlite, postgres or both, got {other}"),
    };
    let bin = server::server_binary(args.server_bin.clone())?;
    if args.scenario != "standard" {
        let mut all = serde_json::Map::new();
        let mut scale_runs = Vec::new();
        for backend in backends {
            eprintln!("== {} ({})", backend.name(), args.scenario);
            let value = match args.scenario.as_str() {
                "recovery" => serde_json::to_value(outage::recovery(&args, &bin, backend).await?)?,
                "ordering" => serde_json::to_value(outage::ordering(&args, &bin, backend).await?)?,
                "tracing" => serde_json::to_value(tracing::tracing(&args, &bin, backend).await?)?,
                "batch" => serde_json::to_value(batch::batch(&args, &bin, backend).await?)?,
                "brokers" => serde_json::to_value(brokers::brokers(&args, &bin, backend).await?)?,
                "media" => serde_json::to_value(media::media(&args, &bin, backend).await?)?,
                "inbound" => serde_json::to_value(inbound::inbound(&args, &bin, backend).await?)?,
                "purge" => serde_json::to_value(purge::purge(&args, &bin, backend).await?)?,
                "scale" => {
                    let r = scale::scale(&args, &bin, backend).await?;
                    let value = serde_json::to_value(&r)?;
                    scale_runs.push((backend.name(), r));
                    value
                }
                other => anyhow::bail!(
                    "--scenario: expected standard, recovery, ordering, tracing, batch, media, scale, inbound, brokers or purge, got {other}"
                ),
            };
            println!(
                "{}: {}",
                backend.name(),
                serde_json::to_string_pretty(&value)?
            );
            all.insert(backend.name().to_owned(), value);
        }
        if !scale_runs.is_empty() {
            scale::print(&scale_runs);
        }
        if let Some(dir) = args.json.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&args.json, serde_json::to_vec_pretty(&all)?)?;
        eprintln!("results written to {}", args.json.display());
        return Ok(());
    }
    let mut report = Report::new(&args);
    for backend in backends {
        eprintln!("== {}", backend.name());
        let results = scenarios(&args, &bin, backend).await?;
        report.add(backend.name(), results);
    }
    report.print();
    report.write(&args.json)?;
    eprintln!("results written to {}", args.json.display());
    Ok(())
}

/// Every measurement, for one backend.
async fn scenarios(
    args: &Args,
    bin: &std::path::Path,
    backend: server::Backend,
) -> anyhow::Result<report::BackendResults> {
    let mut out = report::BackendResults::default();
    let db = server::Database::create(backend, &args.postgres_url).await?;
    let seed = server::seed(bin, &db).await?;
    let receiver = receiver::Receiver::start().await?;

    let started = server::Server::start(bin, &db).await?;
    out.startup_ms = Some(started.startup.as_secs_f64() * 1000.0);
    out.idle_rss_mb = started.rss_mb();
    let srv = started;
    let client = load::client();

    let base = srv.base.clone();
    let key = seed.key.clone();

    eprintln!("  GET /healthz");
    let url = format!("{base}/healthz");
    out.healthz =
        Some(load::closed_loop(&client, args, move |_, _| load::Req::get(url.clone(), None)).await);
    eprintln!("  GET /channels");
    let (url, k) = (format!("{base}/api/v1/integrations/channels"), key.clone());
    out.channels = Some(
        load::closed_loop(&client, args, move |_, _| {
            load::Req::get(url.clone(), Some(&k))
        })
        .await,
    );

    // One subscribed endpoint while sends are measured: every send also produces a delivery.
    let endpoint = srv
        .create_endpoint(&client, &seed.key, &receiver.url(0), &["message.sent"])
        .await;
    if endpoint.is_none() {
        eprintln!("  (webhook endpoints are not available; delivery measurements skipped)");
    }

    eprintln!("  POST /messages");
    let (url, k, body) = (
        format!("{base}/api/v1/integrations/messages"),
        key.clone(),
        load::send_body(&seed),
    );
    let sends = load::closed_loop(&client, args, move |task, i| {
        load::Req::post(
            url.clone(),
            &k,
            format!("bench-{task}-{i}-{}", uuid::Uuid::new_v4()),
            body.clone(),
        )
    })
    .await;
    let sent = sends.ok;
    out.sends = (sends.ok > 0).then_some(sends);
    if endpoint.is_some() {
        // Let the deliveries of the sends drain before the next measurements.
        receiver.wait_for(sent, Duration::from_secs(600)).await;
    }

    eprintln!("  GET /messages");
    let (url, k) = (
        format!("{base}/api/v1/integrations/messages?limit=50"),
        key.clone(),
    );
    let history = load::closed_loop(&client, args, move |_, _| {
        load::Req::get(url.clone(), Some(&k))
    })
    .await;
    out.messages_page = (history.ok > 0).then_some(history);

    if endpoint.is_some() {
        deliveries(args, &client, &srv, &seed, &receiver, &mut out).await;
    }
    out.peak_rss_mb = srv.peak_rss_mb();
    drop(srv);
    db.drop_database().await;
    Ok(out)
}

/// The delivery measurements, with one endpoint subscribed already: event-to-delivery under
/// light load, then deliveries per second to `--endpoints` endpoints (and the latencies under
/// that load), then the plain client to the same receivers.
async fn deliveries(
    args: &Args,
    client: &reqwest::Client,
    srv: &server::Server,
    seed: &server::Seed,
    receiver: &receiver::Receiver,
    out: &mut report::BackendResults,
) {
    // Light load: one send at a time, 20 per second; time from the event to its arrival.
    receiver.reset();
    eprintln!("  event-to-delivery, light load");
    let n = load::paced_sends(client, srv, seed, 20.0, Duration::from_secs(5)).await;
    receiver.wait_for(n, Duration::from_secs(60)).await;
    out.delivery_latency_light = receiver.latency_summary();

    // Heavy load: more endpoints, a burst of sends, and the rate at which deliveries arrive.
    for n in 1..args.endpoints {
        srv.create_endpoint(client, &seed.key, &receiver.url(n), &["message.sent"])
            .await;
    }
    receiver.reset();
    eprintln!(
        "  deliveries per second ({} sends x {} endpoints)",
        args.backlog, args.endpoints
    );
    out.deliveries_per_sec = load::backlog(
        client,
        srv,
        seed,
        receiver,
        args.backlog,
        args.endpoints,
        args.connections,
    )
    .await;
    out.delivery_latency_heavy = receiver.latency_summary();
    // How the dispatcher claimed during the drain (servers without the counter print
    // nothing).
    if let Ok(r) = client.get(srv.url("/metrics")).send().await {
        let text = r.text().await.unwrap_or_default();
        for line in text
            .lines()
            .filter(|l| l.starts_with("switchboard_webhook_claims_total"))
        {
            eprintln!("    {line}");
        }
    }

    eprintln!("  plain client to the same receivers");
    let body = receiver.sample_body().unwrap_or_else(|| b"{}".to_vec());
    let urls: Vec<String> = (0..args.endpoints).map(|n| receiver.url(n)).collect();
    out.plain_client_per_sec = Some(load::plain_posts(client, args, &urls, body).await);
}
