//! Logs and metrics.
//!
//! Logs are structured (`tracing`), written to standard error, as text or as one JSON object
//! per line (`SWITCHBOARD_LOG_FORMAT=json`). Every line logged while handling a request carries
//! the request's span, with its `request_id`. Keys, secrets, tokens and message bodies are never
//! logged: the types that hold them do not implement `Debug` with their contents.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::{Config, LogFormat};

/// Installs the global log subscriber (once; later calls do nothing).
pub fn init_logging(config: &Config) {
    let filter = EnvFilter::try_new(&config.log).unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let _ = match config.log_format {
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        LogFormat::Text => builder.with_target(false).try_init(),
    };
}

/// Installs the Prometheus recorder (once per process) and returns its handle.
pub fn metrics_handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Suffix("_seconds".into()),
                    &[
                        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                        5.0, 10.0,
                    ],
                )
                .ok()?
                .install_recorder()
                .map_err(|e| eprintln!("metrics recorder not installed: {e}"))
                .ok()
                .inspect(|handle| {
                    describe_metrics();
                    spawn_upkeep(handle.clone());
                })
        })
        .clone()
}

/// How often histogram samples are folded into their buckets without a scrape.
const UPKEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// The recorder keeps each histogram sample until it is folded into its buckets, which a
/// render (a scrape of `/metrics`) or an upkeep does: without upkeep, a service nobody scrapes
/// grows by every request it serves. A thread of its own (independent of any runtime) runs it.
fn spawn_upkeep(handle: PrometheusHandle) {
    let _ = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(UPKEEP_INTERVAL);
                handle.run_upkeep();
            }
        });
}

/// Every metric the service exports: name, kind, help text. Names follow Prometheus'
/// conventions: the `switchboard_` prefix, the unit in the name (`_seconds`, `_bytes`), `_total`
/// on counters.
pub const METRICS: &[(&str, &str, &str)] = &[
    (
        "switchboard_build_info",
        "gauge",
        "Always 1; the labels name the running build.",
    ),
    (
        "switchboard_http_requests_total",
        "counter",
        "HTTP requests by method, matched route template and status.",
    ),
    (
        "switchboard_http_request_duration_seconds",
        "histogram",
        "HTTP request latency by method and matched route template.",
    ),
    (
        "switchboard_rate_limited_total",
        "counter",
        "Requests refused with 429, by class (reads, sends, tests, batch_items).",
    ),
    (
        "switchboard_rate_limit_redis_errors_total",
        "counter",
        "Redis failures of the shared rate limiter (the instance then limits on its own for a few seconds).",
    ),
    (
        "switchboard_rate_limit_local_fallback_total",
        "counter",
        "Requests limited by the instance's own limiter because Redis was unavailable.",
    ),
    (
        "switchboard_inbound_unsupported_total",
        "counter",
        "Inbound messages of a kind the service does not show, stored as unsupported, by provider.",
    ),
    (
        "switchboard_provider_sends_total",
        "counter",
        "Provider calls by channel type and result (accepted, rejected, throttled, unavailable, not_configured, unsupported).",
    ),
    (
        "switchboard_pacing_wait_seconds",
        "histogram",
        "How long a paced provider send waited for its slot.",
    ),
    (
        "switchboard_media_memory_wait_seconds",
        "histogram",
        "How long a media send waited for its share of SWITCHBOARD_MEDIA_MEMORY.",
    ),
    (
        "switchboard_pacing_late_total",
        "counter",
        "Paced sends woken too late for their slot, which asked for a new one.",
    ),
    (
        "switchboard_pacing_deferred_total",
        "counter",
        "Sends the channel's pace put beyond its bound (queued, or put back by the send worker).",
    ),
    (
        "switchboard_pacing_redis_errors_total",
        "counter",
        "Redis failures of the shared pace (the instance then paces on its own for a few seconds).",
    ),
    (
        "switchboard_send_queue_messages",
        "gauge",
        "Messages waiting in the send queue (queued sends and batch items).",
    ),
    (
        "switchboard_send_queue_sent_total",
        "counter",
        "Queued messages the send worker finished, by status (sent, failed).",
    ),
    (
        "switchboard_send_queue_outcome_unknown_total",
        "counter",
        "Queued messages whose instance died during the provider call (failed, not sent again).",
    ),
    (
        "switchboard_send_queue_outcome_settled_total",
        "counter",
        "Queued messages in flight when their instance died, recorded sent from the provider's status callback (it echoed the message's uuid).",
    ),
    (
        "switchboard_storage_errors_total",
        "counter",
        "Storage failures of the database, by kind (full: no space left; io: an I/O error); writes fail while they last.",
    ),
    (
        "switchboard_storage_writable",
        "gauge",
        "1 while the database takes writes; 0 from a storage failure (full disk, I/O error) until a readiness write commits again.",
    ),
    (
        "switchboard_batch_items_total",
        "counter",
        "Items of accepted batch sends.",
    ),
    (
        "switchboard_send_group_commits_total",
        "counter",
        "Transactions of the sends' group commit (records per transaction: records_total / commits_total).",
    ),
    (
        "switchboard_send_group_records_total",
        "counter",
        "Sends' records written by the group commit.",
    ),
    (
        "switchboard_provider_send_duration_seconds",
        "histogram",
        "Provider call latency by channel type.",
    ),
    (
        "switchboard_media_uploads_total",
        "counter",
        "WhatsApp media files by result: uploaded, reused (a fresh upload of the same bytes on the channel), rejected, failed.",
    ),
    (
        "switchboard_provider_callbacks_total",
        "counter",
        "Verified provider callbacks applied, by channel type.",
    ),
    (
        "switchboard_webhook_attempts_total",
        "counter",
        "Webhook delivery attempts by outcome (delivered, retry, failed, retries_exhausted, interrupted).",
    ),
    (
        "switchboard_webhook_attempt_duration_seconds",
        "histogram",
        "One webhook delivery attempt's duration.",
    ),
    (
        "switchboard_webhook_delivery_lag_seconds",
        "histogram",
        "From an event to its successful delivery.",
    ),
    (
        "switchboard_webhook_endpoints_disabled_total",
        "counter",
        "Webhook endpoints disabled after consecutive failed deliveries.",
    ),
    (
        "switchboard_webhook_claims_total",
        "counter",
        "Claim transactions of the webhook dispatcher, by whether the claim was made with a batch of outcomes (with=outcomes) or alone.",
    ),
    (
        "switchboard_webhook_deliveries_claimed_ahead_total",
        "counter",
        "Webhook deliveries claimed ahead of the free slots (to quick endpoints), started as slots free up.",
    ),
    (
        "switchboard_webhook_deliveries_handed_total",
        "counter",
        "Webhook deliveries written leased to this instance's dispatcher (handed off as they were written, with no claim transaction).",
    ),
    (
        "switchboard_webhook_deliveries_handed_back_total",
        "counter",
        "Claimed webhook deliveries whose attempt never started, handed back as they were (at shutdown, or when their endpoint slowed down).",
    ),
    (
        "switchboard_webhook_deliveries_due",
        "gauge",
        "Webhook deliveries due now.",
    ),
    (
        "switchboard_webhook_oldest_due_seconds",
        "gauge",
        "How long the oldest due webhook delivery has waited.",
    ),
    (
        "switchboard_webhook_deliveries_purged_total",
        "counter",
        "Delivery ledger records removed by retention.",
    ),
    (
        "switchboard_webhook_throttle_waits_total",
        "counter",
        "Attempts that waited for their slot in their endpoint's max_per_second.",
    ),
    (
        "switchboard_webhook_throttle_late_total",
        "counter",
        "Throttled attempts woken more than 25 ms after their slot, which took a new slot rather than burst.",
    ),
    (
        "switchboard_webhook_throttle_handed_back_total",
        "counter",
        "Claimed deliveries handed back because their endpoint's throttle had no slot within their lease.",
    ),
    (
        "switchboard_webhook_throttle_redis_errors_total",
        "counter",
        "Redis failures of the endpoint throttle (the instance then throttles on its own for a few seconds).",
    ),
];

/// HELP lines for every metric, and every counter at 0 from start-up (with its known label
/// values), so that an alert on `increase(...)` sees the first event, and the build's info.
fn describe_metrics() {
    for (name, kind, help) in METRICS {
        match *kind {
            "counter" => metrics::describe_counter!(*name, *help),
            "histogram" => metrics::describe_histogram!(*name, *help),
            _ => metrics::describe_gauge!(*name, *help),
        }
    }
    metrics::gauge!("switchboard_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    for name in [
        "switchboard_rate_limit_redis_errors_total",
        "switchboard_rate_limit_local_fallback_total",
        "switchboard_webhook_endpoints_disabled_total",
        "switchboard_webhook_deliveries_purged_total",
        "switchboard_pacing_deferred_total",
        "switchboard_pacing_late_total",
        "switchboard_pacing_redis_errors_total",
        "switchboard_send_queue_outcome_unknown_total",
        "switchboard_send_queue_outcome_settled_total",
        "switchboard_batch_items_total",
        "switchboard_send_group_commits_total",
        "switchboard_send_group_records_total",
        "switchboard_webhook_deliveries_claimed_ahead_total",
        "switchboard_webhook_deliveries_handed_total",
        "switchboard_webhook_deliveries_handed_back_total",
        "switchboard_webhook_throttle_waits_total",
        "switchboard_webhook_throttle_late_total",
        "switchboard_webhook_throttle_handed_back_total",
        "switchboard_webhook_throttle_redis_errors_total",
    ] {
        metrics::counter!(name).absolute(0);
    }
    for kind in ["full", "io"] {
        metrics::counter!("switchboard_storage_errors_total", "kind" => kind).absolute(0);
    }
    metrics::gauge!("switchboard_storage_writable").set(1.0);
    for with in ["outcomes", "alone"] {
        metrics::counter!("switchboard_webhook_claims_total", "with" => with).absolute(0);
    }
    // Histograms exist (empty) from start-up too; the HTTP series with the route every scrape
    // takes.
    for name in [
        "switchboard_pacing_wait_seconds",
        "switchboard_media_memory_wait_seconds",
        "switchboard_webhook_attempt_duration_seconds",
        "switchboard_webhook_delivery_lag_seconds",
    ] {
        let _ = metrics::histogram!(name);
    }
    let _ = metrics::histogram!("switchboard_http_request_duration_seconds", "method" => "GET", "route" => "/metrics");
    metrics::counter!("switchboard_http_requests_total", "method" => "GET", "route" => "/metrics", "status" => "200").absolute(0);
    for status in ["sent", "failed"] {
        metrics::counter!("switchboard_send_queue_sent_total", "status" => status).absolute(0);
    }
    metrics::gauge!("switchboard_send_queue_messages").set(0.0);
    for policy in ["reads", "sends", "tests", "batch_items"] {
        metrics::counter!("switchboard_rate_limited_total", "policy" => policy).absolute(0);
    }
    for outcome in [
        "delivered",
        "retry",
        "failed",
        "retries_exhausted",
        "interrupted",
    ] {
        metrics::counter!("switchboard_webhook_attempts_total", "outcome" => outcome).absolute(0);
    }
    for channel_type in switchboard_domain::channel::ChannelType::ALL {
        let channel_type = channel_type.as_str();
        let _ = metrics::histogram!("switchboard_provider_send_duration_seconds", "channel_type" => channel_type);
        metrics::counter!("switchboard_provider_callbacks_total", "channel_type" => channel_type)
            .absolute(0);
        for result in [
            "accepted",
            "rejected",
            "throttled",
            "unavailable",
            "not_configured",
            "unsupported",
        ] {
            metrics::counter!("switchboard_provider_sends_total", "channel_type" => channel_type, "result" => result)
                .absolute(0);
        }
    }
    for provider in ["whatsapp_cloud", "telegram"] {
        metrics::counter!("switchboard_inbound_unsupported_total", "provider" => provider)
            .absolute(0);
    }
    for result in ["uploaded", "reused", "rejected", "failed"] {
        metrics::counter!("switchboard_media_uploads_total", "result" => result).absolute(0);
    }
    metrics::gauge!("switchboard_webhook_deliveries_due").set(0.0);
    metrics::gauge!("switchboard_webhook_oldest_due_seconds").set(0.0);
}
