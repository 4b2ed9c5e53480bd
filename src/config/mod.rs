//! Configuration: environment variables, an optional TOML file, defaults that work on a fresh
//! machine, and validation that names the offending setting.
//!
//! Every setting is an environment variable `SWITCHBOARD_<NAME>`; the TOML file given with
//! `--config` may set the same settings under the lower-case name without the prefix
//! (`SWITCHBOARD_WEBHOOK_TIMEOUT` is `webhook_timeout = "10s"`). The environment wins.

mod settings;
mod sources;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;
pub use switchboard_store::DatabaseUrl;

use crate::crypto::MasterKey;
use switchboard_domain::time::format_duration;

pub use settings::{SETTINGS, Setting, env_name, help_text, unknown_variables};
pub use sources::parse_toml;
use sources::{Sources, check_listen, parse_delays, parse_overrides, read_toml};

/// A configuration problem, naming the setting and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Requests per minute for each rate-limit class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimits {
    pub reads: u32,
    pub sends: u32,
    pub tests: u32,
}

/// Where the master key comes from.
#[derive(Clone, Debug)]
pub enum MasterKeySource {
    /// Given in `SWITCHBOARD_MASTER_KEY`.
    Configured(MasterKey),
    /// Kept in a file beside the SQLite database, created on first use.
    File(PathBuf),
}

/// The validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: String,
    pub database_url: DatabaseUrl,
    pub master_key: MasterKeySource,
    pub redis_url: Option<String>,
    /// The OTLP/HTTP collector's base URL (spans go to `{base}/v1/traces`); `None`: no export.
    pub otlp_endpoint: Option<String>,
    pub webhook_allow_private_targets: bool,
    /// `SWITCHBOARD_WEBHOOK_CA_CERTS`: a PEM file of extra certificate authorities.
    pub webhook_ca_certs: Option<PathBuf>,
    /// Those authorities, loaded by `serve` before it starts (empty elsewhere).
    pub webhook_ca_roots: Vec<reqwest::Certificate>,
    pub webhook_retry_delays: Vec<Duration>,
    pub webhook_disable_after: u32,
    pub webhook_timeout: Duration,
    pub webhook_concurrency: usize,
    pub webhook_endpoint_concurrency: usize,
    pub webhook_poll_interval: Duration,
    pub recovery_page_size: u32,
    pub recovery_page_interval: Duration,
    /// How often the template catalogues are synced from the providers (zero: never).
    pub template_sync_interval: Duration,
    /// The least time between two messages of a channel to one recipient (paced channels).
    pub recipient_interval: Duration,
    /// Batch items per credential per minute.
    pub rate_limit_batch_items: u32,
    pub rate_limits: RateLimits,
    pub rate_limit_overrides: BTreeMap<i64, RateLimits>,
    pub delivery_retention: Duration,
    /// PostgreSQL: the webhook tables are partitioned so that retention drops whole partitions
    /// (converted once by `migrate` and `serve`; see docs/operations.md).
    pub retention_partitions: bool,
    pub idempotency_retention: Duration,
    pub idempotency_lease: Duration,
    pub provider_timeout: Duration,
    /// Time limit of fetching one media file, and of uploading it to the provider.
    pub media_timeout: Duration,
    /// How long a queued send left in flight by a stopped instance waits for the provider's
    /// status callback before it fails with `provider_outcome_unknown`.
    pub send_outcome_wait: Duration,
    /// MiB that media files in hand may take at once.
    pub media_memory_mib: u32,
    pub purge_interval: Duration,
    pub database_max_connections: u32,
    pub http_header_timeout: Duration,
    pub http_body_timeout: Duration,
    pub shutdown_grace: Duration,
    pub consent_clock_skew: Duration,
    pub consent_max_age: Option<Duration>,
    pub log: String,
    pub log_format: LogFormat,
}

impl Config {
    /// Loads from the process environment and an optional TOML file.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let env: HashMap<String, String> = std::env::vars().collect();
        let file_values = match file {
            Some(path) => Some(read_toml(path)?),
            None => None,
        };
        Config::from_sources(&env, file_values.as_ref(), file)
    }

    /// Every setting's effective raw value and where it came from (`env`, `file` or
    /// `default`), secrets masked: what `switchboard config` prints.
    pub fn effective(
        file: Option<&Path>,
    ) -> Result<Vec<(String, String, &'static str)>, ConfigError> {
        let env: HashMap<String, String> = std::env::vars().collect();
        let file_values = match file {
            Some(path) => Some(read_toml(path)?),
            None => None,
        };
        Ok(SETTINGS
            .iter()
            .map(|s| {
                let (value, source) = match env.get(&env_name(s.name)) {
                    Some(v) => (v.clone(), "env"),
                    None => match file_values.as_ref().and_then(|f| f.get(s.name)) {
                        Some(v) => (v.clone(), "file"),
                        None => (s.default.to_owned(), "default"),
                    },
                };
                (env_name(s.name), mask(s.name, &value), source)
            })
            .collect())
    }

    /// The defaults, as if nothing was set.
    pub fn defaults() -> Config {
        Config::from_sources(&HashMap::new(), None, None).expect("defaults are valid")
    }

    /// Builds the configuration from environment variables and file values (already read).
    pub fn from_sources(
        env: &HashMap<String, String>,
        file: Option<&BTreeMap<String, String>>,
        file_path: Option<&Path>,
    ) -> Result<Config, ConfigError> {
        let src = Sources {
            env,
            file,
            file_path,
        };

        let listen = src.get("listen");
        check_listen(&listen).map_err(|e| src.error("listen", &listen, &e))?;
        let database_raw = src.get("database_url");
        let database_url = DatabaseUrl::parse(&database_raw)
            .map_err(|e| src.error("database_url", &database_raw, &e))?;

        let master_key = master_key(&src, &database_url)?;
        let redis_url = redis_url(&src)?;
        let otlp_endpoint = otlp_endpoint(&src)?;

        let delays_raw = src.get("webhook_retry_delays");
        let webhook_retry_delays = parse_delays(&delays_raw)
            .map_err(|e| src.error("webhook_retry_delays", &delays_raw, &e))?;

        let rate_limits = RateLimits {
            reads: src.number("rate_limit_reads", 1, 1_000_000)?,
            sends: src.number("rate_limit_sends", 1, 1_000_000)?,
            tests: src.number("rate_limit_tests", 1, 1_000_000)?,
        };
        let overrides_raw = src.get("rate_limit_overrides");
        let rate_limit_overrides = parse_overrides(&overrides_raw, rate_limits)
            .map_err(|e| src.error("rate_limit_overrides", &overrides_raw, &e))?;

        let (log, log_format) = log_settings(&src)?;

        Ok(Config {
            listen,
            database_url,
            master_key,
            redis_url,
            otlp_endpoint,
            webhook_allow_private_targets: src.boolean("webhook_allow_private_targets")?,
            webhook_ca_certs: Some(src.get("webhook_ca_certs"))
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
            webhook_ca_roots: Vec::new(),
            webhook_retry_delays,
            webhook_disable_after: src.number("webhook_disable_after", 1, 1_000_000)?,
            webhook_timeout: src.duration(
                "webhook_timeout",
                Duration::from_millis(10),
                Duration::from_secs(300),
            )?,
            webhook_concurrency: src.number("webhook_concurrency", 1, 10_000)? as usize,
            webhook_endpoint_concurrency: src.number("webhook_endpoint_concurrency", 1, 1_000)?
                as usize,
            webhook_poll_interval: src.duration(
                "webhook_poll_interval",
                Duration::from_millis(10),
                Duration::from_secs(60),
            )?,
            recovery_page_size: src.number("recovery_page_size", 1, 10_000)?,
            template_sync_interval: src.duration(
                "template_sync_interval",
                Duration::ZERO,
                Duration::from_secs(30 * 86_400),
            )?,
            recipient_interval: src.duration(
                "recipient_interval",
                Duration::ZERO,
                Duration::from_secs(3_600),
            )?,
            rate_limit_batch_items: src.number("rate_limit_batch_items", 1, 10_000_000)?,
            recovery_page_interval: src.duration(
                "recovery_page_interval",
                Duration::ZERO,
                Duration::from_secs(60),
            )?,
            rate_limits,
            rate_limit_overrides,
            delivery_retention: src.duration(
                "delivery_retention",
                Duration::from_secs(1),
                Duration::from_secs(3650 * 86400),
            )?,
            retention_partitions: src.boolean("retention_partitions")?,
            idempotency_retention: src.duration(
                "idempotency_retention",
                Duration::from_millis(1),
                Duration::from_secs(3650 * 86400),
            )?,
            idempotency_lease: src.duration(
                "idempotency_lease",
                Duration::from_millis(10),
                Duration::from_secs(86400),
            )?,
            provider_timeout: src.duration(
                "provider_timeout",
                Duration::from_millis(10),
                Duration::from_secs(300),
            )?,
            media_memory_mib: src.number("media_memory", 100, 1_000_000)?,
            media_timeout: src.duration(
                "media_timeout",
                Duration::from_millis(10),
                Duration::from_secs(3600),
            )?,
            send_outcome_wait: src.duration(
                "send_outcome_wait",
                Duration::ZERO,
                Duration::from_secs(7 * 86400),
            )?,
            purge_interval: src.duration(
                "purge_interval",
                Duration::from_millis(10),
                Duration::from_secs(86400),
            )?,
            database_max_connections: src.number("database_max_connections", 1, 10_000)?,
            http_header_timeout: src.duration(
                "http_header_timeout",
                Duration::from_millis(10),
                Duration::from_secs(600),
            )?,
            http_body_timeout: src.duration(
                "http_body_timeout",
                Duration::from_millis(10),
                Duration::from_secs(3600),
            )?,
            shutdown_grace: src.duration(
                "shutdown_grace",
                Duration::ZERO,
                Duration::from_secs(3600),
            )?,
            consent_clock_skew: src.duration(
                "consent_clock_skew",
                Duration::ZERO,
                Duration::from_secs(86400),
            )?,
            consent_max_age: consent_max_age(&src)?,
            log,
            log_format,
        })
    }

    /// The time rules of consent evidence (conversation initiation and campaign sends).
    pub fn consent_rules(&self) -> switchboard_domain::template::ConsentRules {
        switchboard_domain::template::ConsentRules {
            clock_skew: self.consent_clock_skew,
            max_age: self.consent_max_age,
        }
    }

    /// The number of delivery attempts: one more than the number of retry delays.
    pub fn webhook_max_attempts(&self) -> u32 {
        self.webhook_retry_delays.len() as u32 + 1
    }

    /// The rate limits of an organization (its override, or the defaults).
    pub fn rate_limits_for(&self, org_id: i64) -> RateLimits {
        self.rate_limit_overrides
            .get(&org_id)
            .copied()
            .unwrap_or(self.rate_limits)
    }

    /// Human-readable summary of the effective configuration, without secrets.
    pub fn summary(&self) -> Vec<(String, String)> {
        vec![
            ("listen".into(), self.listen.clone()),
            ("database".into(), self.database_url.redacted()),
            (
                "redis".into(),
                if self.redis_url.is_some() {
                    "configured".into()
                } else {
                    "off (per-instance rate limits)".into()
                },
            ),
            (
                "webhook_retry_delays".into(),
                self.webhook_retry_delays
                    .iter()
                    .map(|d| format_duration(*d))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
        ]
    }
}

/// `log` and `log_format`, checked.
fn log_settings(src: &Sources<'_>) -> Result<(String, LogFormat), ConfigError> {
    let log_format_raw = src.get("log_format");
    let log_format = match log_format_raw.as_str() {
        "text" | "pretty" => LogFormat::Text,
        "json" => LogFormat::Json,
        _ => return Err(src.error("log_format", &log_format_raw, "expected text or json")),
    };
    let log = src.get("log");
    tracing_subscriber::EnvFilter::try_new(&log)
        .map_err(|e| src.error("log", &log, &format!("not a valid log filter: {e}")))?;
    Ok((log, log_format))
}

/// A value as `switchboard config` shows it: keys hidden, passwords in URLs hidden.
fn mask(name: &str, value: &str) -> String {
    if value.is_empty() {
        return "(unset)".into();
    }
    if name.contains("key") || name.contains("secret") || name.contains("token") {
        return "(set, hidden)".into();
    }
    match url::Url::parse(value) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => value.to_owned(),
    }
}

/// The master key: configured (64 hex characters), else with SQLite a file beside the
/// database (created on first start); PostgreSQL requires it configured.
fn master_key(
    src: &Sources<'_>,
    database_url: &DatabaseUrl,
) -> Result<MasterKeySource, ConfigError> {
    let master_raw = src.get("master_key");
    Ok(if !master_raw.is_empty() {
        MasterKeySource::Configured(
            MasterKey::from_hex(&master_raw).map_err(|e| src.error_secret("master_key", &e))?,
        )
    } else {
        match &database_url {
            DatabaseUrl::Sqlite { path } => MasterKeySource::File(
                path.parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or_else(|| Path::new("."))
                    .join("master.key"),
            ),
            DatabaseUrl::Postgres { .. } => {
                return Err(ConfigError(format!(
                    "{} is required with PostgreSQL: 64 hexadecimal characters (for example the output of `openssl rand -hex 32`)",
                    env_name("master_key")
                )));
            }
        }
    })
}

/// `SWITCHBOARD_REDIS_URL`: `redis://` or `rediss://`, or none.
fn redis_url(src: &Sources<'_>) -> Result<Option<String>, ConfigError> {
    let redis_raw = src.get("redis_url");
    Ok(if redis_raw.is_empty() {
        None
    } else if redis_raw.starts_with("redis://") || redis_raw.starts_with("rediss://") {
        url::Url::parse(&redis_raw)
            .map_err(|e| src.error("redis_url", &redis_raw, &format!("not a valid URL: {e}")))?;
        Some(redis_raw)
    } else {
        return Err(src.error(
            "redis_url",
            &redis_raw,
            "expected redis://HOST:PORT or rediss://...",
        ));
    })
}

/// `SWITCHBOARD_OTLP_ENDPOINT`: the collector's http(s) base URL, or none.
fn otlp_endpoint(src: &Sources<'_>) -> Result<Option<String>, ConfigError> {
    let otlp_raw = src.get("otlp_endpoint");
    Ok(if otlp_raw.is_empty() {
        None
    } else {
        match url::Url::parse(&otlp_raw) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
                Some(otlp_raw.trim_end_matches('/').to_owned())
            }
            _ => {
                return Err(src.error(
                    "otlp_endpoint",
                    &otlp_raw,
                    "expected the collector's base URL, such as http://127.0.0.1:4318",
                ));
            }
        }
    })
}

/// `SWITCHBOARD_CONSENT_MAX_AGE`: unset means evidence of consent never ages out.
fn consent_max_age(src: &Sources<'_>) -> Result<Option<Duration>, ConfigError> {
    if src.get("consent_max_age").is_empty() {
        return Ok(None);
    }
    src.duration(
        "consent_max_age",
        Duration::from_secs(60),
        Duration::from_secs(36500 * 86400),
    )
    .map(Some)
}

#[cfg(test)]
mod tests;
