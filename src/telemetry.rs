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
                .inspect(|handle| spawn_upkeep(handle.clone()))
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
