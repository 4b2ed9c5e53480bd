//! Configuration: environment variables, an optional TOML file, defaults that work on a fresh
//! machine, and validation that names the offending setting.
//!
//! Every setting is an environment variable `SWITCHBOARD_<NAME>`; the TOML file given with
//! `--config` may set the same settings under the lower-case name without the prefix
//! (`SWITCHBOARD_WEBHOOK_TIMEOUT` is `webhook_timeout = "10s"`). The environment wins.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
pub use switchboard_store::DatabaseUrl;

use crate::crypto::MasterKey;
use switchboard_domain::time::{format_duration, parse_duration};

/// One known setting: its name (without prefix), default and one-line meaning.
pub struct Setting {
    pub name: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
}

/// Every setting, in the order the README lists them.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: "listen",
        default: "127.0.0.1:8080",
        meaning: "HTTP listen address",
    },
    Setting {
        name: "database_url",
        default: "sqlite://switchboard.db",
        meaning: "sqlite://PATH (embedded) or postgres://... (production, several instances)",
    },
    Setting {
        name: "master_key",
        default: "",
        meaning: "32 bytes as 64 hex characters; encrypts signing secrets and provider tokens at rest. With SQLite, generated once into master.key beside the database file; required with PostgreSQL",
    },
    Setting {
        name: "redis_url",
        default: "",
        meaning: "when set, rate limits are shared by all instances through Redis",
    },
    Setting {
        name: "webhook_allow_private_targets",
        default: "false",
        meaning: "development only: allows http://, any port, loopback and private addresses as endpoint URLs",
    },
    Setting {
        name: "webhook_retry_delays",
        default: "30s,5m,30m",
        meaning: "delays between delivery attempts; attempts = delays + 1",
    },
    Setting {
        name: "webhook_disable_after",
        default: "10",
        meaning: "consecutive failed deliveries before an endpoint is disabled",
    },
    Setting {
        name: "webhook_timeout",
        default: "10s",
        meaning: "one delivery attempt's time limit",
    },
    Setting {
        name: "webhook_concurrency",
        default: "64",
        meaning: "delivery attempts in flight at once, per instance",
    },
    Setting {
        name: "webhook_endpoint_concurrency",
        default: "4",
        meaning: "delivery attempts in flight at once to one endpoint, per instance",
    },
    Setting {
        name: "webhook_poll_interval",
        default: "1s",
        meaning: "how often the dispatcher looks for due deliveries when nothing woke it (deliveries written by other processes on SQLite)",
    },
    Setting {
        name: "rate_limit_reads",
        default: "120",
        meaning: "authenticated reads per credential per minute",
    },
    Setting {
        name: "rate_limit_sends",
        default: "30",
        meaning: "message sends per credential per minute",
    },
    Setting {
        name: "rate_limit_tests",
        default: "10",
        meaning: "webhook endpoint tests per credential per minute",
    },
    Setting {
        name: "rate_limit_overrides",
        default: "",
        meaning: "per-organization limits: ORG_ID:reads=N,sends=N,tests=N; separated by ';'",
    },
    Setting {
        name: "delivery_retention",
        default: "90d",
        meaning: "how long webhook delivery records are kept",
    },
    Setting {
        name: "idempotency_retention",
        default: "7d",
        meaning: "how long idempotency records are kept",
    },
    Setting {
        name: "idempotency_lease",
        default: "60s",
        meaning: "how long a running request holds its idempotency key before another may take it over",
    },
    Setting {
        name: "provider_timeout",
        default: "15s",
        meaning: "time limit of one call to a messaging provider",
    },
    Setting {
        name: "purge_interval",
        default: "10m",
        meaning: "how often expired records are purged",
    },
    Setting {
        name: "database_max_connections",
        default: "16",
        meaning: "connection pool size (PostgreSQL; readers on SQLite)",
    },
    Setting {
        name: "http_header_timeout",
        default: "10s",
        meaning: "a client must send a request's headers within this time",
    },
    Setting {
        name: "http_body_timeout",
        default: "30s",
        meaning: "a client must send a request's whole body within this time (else 408)",
    },
    Setting {
        name: "shutdown_grace",
        default: "30s",
        meaning: "how long SIGTERM waits for in-flight requests and attempts",
    },
    Setting {
        name: "consent_clock_skew",
        default: "0s",
        meaning: "how far in the future a consent's captured_at may lie (for callers whose clocks run ahead; by default none: it must not lie in the future)",
    },
    Setting {
        name: "consent_max_age",
        default: "",
        meaning: "when set, consent captured longer ago than this is refused (unset: any age)",
    },
    Setting {
        name: "log",
        default: "info",
        meaning: "log filter (tracing EnvFilter syntax)",
    },
    Setting {
        name: "log_format",
        default: "text",
        meaning: "text or json (one JSON object per line)",
    },
];

/// The environment variable of a setting.
pub fn env_name(setting: &str) -> String {
    format!("SWITCHBOARD_{}", setting.to_ascii_uppercase())
}

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
    pub webhook_allow_private_targets: bool,
    pub webhook_retry_delays: Vec<Duration>,
    pub webhook_disable_after: u32,
    pub webhook_timeout: Duration,
    pub webhook_concurrency: usize,
    pub webhook_endpoint_concurrency: usize,
    pub webhook_poll_interval: Duration,
    pub rate_limits: RateLimits,
    pub rate_limit_overrides: BTreeMap<i64, RateLimits>,
    pub delivery_retention: Duration,
    pub idempotency_retention: Duration,
    pub idempotency_lease: Duration,
    pub provider_timeout: Duration,
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

        let master_raw = src.get("master_key");
        let master_key = if !master_raw.is_empty() {
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
        };

        let redis_raw = src.get("redis_url");
        let redis_url = if redis_raw.is_empty() {
            None
        } else if redis_raw.starts_with("redis://") || redis_raw.starts_with("rediss://") {
            url::Url::parse(&redis_raw).map_err(|e| {
                src.error("redis_url", &redis_raw, &format!("not a valid URL: {e}"))
            })?;
            Some(redis_raw)
        } else {
            return Err(src.error(
                "redis_url",
                &redis_raw,
                "expected redis://HOST:PORT or rediss://...",
            ));
        };

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

        let log_format_raw = src.get("log_format");
        let log_format = match log_format_raw.as_str() {
            "text" | "pretty" => LogFormat::Text,
            "json" => LogFormat::Json,
            _ => return Err(src.error("log_format", &log_format_raw, "expected text or json")),
        };
        let log = src.get("log");
        tracing_subscriber::EnvFilter::try_new(&log)
            .map_err(|e| src.error("log", &log, &format!("not a valid log filter: {e}")))?;

        Ok(Config {
            listen,
            database_url,
            master_key,
            redis_url,
            webhook_allow_private_targets: src.boolean("webhook_allow_private_targets")?,
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
            rate_limits,
            rate_limit_overrides,
            delivery_retention: src.duration(
                "delivery_retention",
                Duration::from_secs(1),
                Duration::from_secs(3650 * 86400),
            )?,
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
            consent_max_age: if src.get("consent_max_age").is_empty() {
                None
            } else {
                Some(src.duration(
                    "consent_max_age",
                    Duration::from_secs(60),
                    Duration::from_secs(36500 * 86400),
                )?)
            },
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

struct Sources<'a> {
    env: &'a HashMap<String, String>,
    file: Option<&'a BTreeMap<String, String>>,
    file_path: Option<&'a Path>,
}

impl Sources<'_> {
    fn default_of(name: &str) -> &'static str {
        SETTINGS
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.default)
            .unwrap_or_else(|| panic!("unknown setting {name}"))
    }

    /// Where a setting's value came from, for error messages.
    fn origin(&self, name: &str) -> String {
        if self.env.contains_key(&env_name(name)) {
            env_name(name)
        } else if self.file.is_some_and(|f| f.contains_key(name)) {
            match self.file_path {
                Some(p) => format!("`{name}` in {}", p.display()),
                None => format!("`{name}` in the configuration file"),
            }
        } else {
            env_name(name)
        }
    }

    fn get(&self, name: &str) -> String {
        if let Some(v) = self.env.get(&env_name(name)) {
            return v.trim().to_owned();
        }
        if let Some(v) = self.file.and_then(|f| f.get(name)) {
            return v.trim().to_owned();
        }
        Self::default_of(name).to_owned()
    }

    fn error(&self, name: &str, value: &str, expected: &str) -> ConfigError {
        ConfigError(format!("{}: {expected} (got {value:?})", self.origin(name)))
    }

    fn error_secret(&self, name: &str, expected: &str) -> ConfigError {
        ConfigError(format!("{}: {expected}", self.origin(name)))
    }

    fn number(&self, name: &str, min: u32, max: u32) -> Result<u32, ConfigError> {
        let raw = self.get(name);
        match raw.parse::<u32>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(self.error(
                name,
                &raw,
                &format!("expected a whole number from {min} to {max}"),
            )),
        }
    }

    fn boolean(&self, name: &str) -> Result<bool, ConfigError> {
        let raw = self.get(name);
        match raw.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(self.error(
                name,
                &raw,
                "expected true or false (also 1/0, yes/no, on/off)",
            )),
        }
    }

    fn duration(&self, name: &str, min: Duration, max: Duration) -> Result<Duration, ConfigError> {
        let raw = self.get(name);
        let d = parse_duration(&raw).map_err(|e| {
            self.error(
                name,
                &raw,
                &format!("expected a duration such as 500ms, 10s, 5m, 2h or 7d; {e}"),
            )
        })?;
        if d < min || d > max {
            return Err(self.error(
                name,
                &raw,
                &format!(
                    "expected a duration from {} to {}",
                    format_duration(min),
                    format_duration(max)
                ),
            ));
        }
        Ok(d)
    }
}

fn check_listen(s: &str) -> Result<(), String> {
    if s.parse::<SocketAddr>().is_ok() {
        return Ok(());
    }
    match s.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err("expected HOST:PORT such as 127.0.0.1:8080 or 0.0.0.0:8080".into()),
    }
}

fn parse_delays(s: &str) -> Result<Vec<Duration>, String> {
    let items: Vec<&str> = s
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .collect();
    if items.is_empty() {
        return Err("expected a comma-separated list of durations such as 30s,5m,30m".into());
    }
    if items.len() > 25 {
        return Err("at most 25 retry delays".into());
    }
    items
        .into_iter()
        .map(|i| {
            let d = parse_duration(i)?;
            if d > Duration::from_secs(7 * 86400) {
                return Err(format!("`{i}` is longer than 7d"));
            }
            Ok(d)
        })
        .collect()
}

fn parse_overrides(s: &str, base: RateLimits) -> Result<BTreeMap<i64, RateLimits>, String> {
    let mut out = BTreeMap::new();
    for entry in s.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (org, limits) = entry
            .split_once(':')
            .ok_or_else(|| format!("`{entry}`: expected ORG_ID:reads=N,sends=N,tests=N"))?;
        let org: i64 = org
            .trim()
            .parse()
            .map_err(|_| format!("`{org}` is not an organization id"))?;
        let mut l = base;
        for pair in limits.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| format!("`{pair}`: expected CLASS=N"))?;
            let v: u32 = v
                .trim()
                .parse()
                .ok()
                .filter(|v| (1..=1_000_000).contains(v))
                .ok_or_else(|| format!("`{pair}`: expected a whole number from 1 to 1000000"))?;
            match k.trim() {
                "reads" => l.reads = v,
                "sends" => l.sends = v,
                "tests" => l.tests = v,
                other => {
                    return Err(format!(
                        "`{other}` is not a rate-limit class (reads, sends, tests)"
                    ));
                }
            }
        }
        out.insert(org, l);
    }
    Ok(out)
}

/// Reads a TOML file into setting name → text value. Unknown keys are an error.
fn read_toml(path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError(format!(
            "cannot read configuration file {}: {e}",
            path.display()
        ))
    })?;
    parse_toml(&text)
        .map_err(|e| ConfigError(format!("configuration file {}: {e}", path.display())))
}

pub fn parse_toml(text: &str) -> Result<BTreeMap<String, String>, String> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| e.message().to_owned())?;
    let mut out = BTreeMap::new();
    for (key, value) in table {
        if !SETTINGS.iter().any(|s| s.name == key) {
            return Err(format!("unknown setting `{key}`"));
        }
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Array(items) => items
                .into_iter()
                .map(|i| match i {
                    toml::Value::String(s) => Ok(s),
                    other => Err(format!(
                        "`{key}`: expected a list of strings, found {other}"
                    )),
                })
                .collect::<Result<Vec<_>, _>>()?
                .join(","),
            other => return Err(format!("`{key}`: unsupported value {other}")),
        };
        out.insert(key, text);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_work_on_a_fresh_machine() {
        let c = Config::defaults();
        assert_eq!(c.listen, "127.0.0.1:8080");
        assert_eq!(
            c.database_url,
            DatabaseUrl::Sqlite {
                path: "switchboard.db".into()
            }
        );
        assert!(
            matches!(&c.master_key, MasterKeySource::File(p) if p == Path::new("./master.key"))
        );
        assert_eq!(
            c.webhook_retry_delays,
            vec![
                Duration::from_secs(30),
                Duration::from_secs(300),
                Duration::from_secs(1800)
            ]
        );
        assert_eq!(c.webhook_max_attempts(), 4);
        assert_eq!(c.webhook_disable_after, 10);
        assert_eq!(c.webhook_timeout, Duration::from_secs(10));
        assert_eq!(
            c.rate_limits,
            RateLimits {
                reads: 120,
                sends: 30,
                tests: 10
            }
        );
        assert_eq!(c.delivery_retention, Duration::from_secs(90 * 86400));
        assert_eq!(c.idempotency_retention, Duration::from_secs(7 * 86400));
        assert!(!c.webhook_allow_private_targets);
        assert_eq!(c.log_format, LogFormat::Text);
    }

    #[test]
    fn environment_wins_over_file() {
        let file = parse_toml("webhook_timeout = \"3s\"\nrate_limit_reads = 50\nwebhook_retry_delays = [\"1s\", \"2s\"]").unwrap();
        let c = Config::from_sources(
            &env(&[("SWITCHBOARD_WEBHOOK_TIMEOUT", "5s")]),
            Some(&file),
            None,
        )
        .unwrap();
        assert_eq!(c.webhook_timeout, Duration::from_secs(5));
        assert_eq!(c.rate_limits.reads, 50);
        assert_eq!(
            c.webhook_retry_delays,
            vec![Duration::from_secs(1), Duration::from_secs(2)]
        );
    }

    #[test]
    fn bad_values_name_the_variable_and_the_expectation() {
        let cases = [
            ("SWITCHBOARD_WEBHOOK_TIMEOUT", "ten", "expected a duration"),
            (
                "SWITCHBOARD_RATE_LIMIT_READS",
                "-1",
                "expected a whole number",
            ),
            (
                "SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS",
                "maybe",
                "expected true or false",
            ),
            (
                "SWITCHBOARD_DATABASE_URL",
                "mysql://x",
                "expected sqlite://PATH",
            ),
            ("SWITCHBOARD_LISTEN", "8080", "expected HOST:PORT"),
            ("SWITCHBOARD_MASTER_KEY", "abc", "64 hexadecimal"),
            (
                "SWITCHBOARD_WEBHOOK_RETRY_DELAYS",
                "30s,,5x",
                "unknown unit",
            ),
            ("SWITCHBOARD_LOG_FORMAT", "xml", "expected text or json"),
            (
                "SWITCHBOARD_REDIS_URL",
                "localhost:6379",
                "expected redis://",
            ),
            (
                "SWITCHBOARD_RATE_LIMIT_OVERRIDES",
                "7:writes=3",
                "not a rate-limit class",
            ),
        ];
        for (var, value, expected) in cases {
            let err = Config::from_sources(&env(&[(var, value)]), None, None)
                .unwrap_err()
                .0;
            assert!(err.starts_with(var), "{var}: {err}");
            assert!(err.contains(expected), "{var}: {err}");
        }
    }

    #[test]
    fn the_master_key_value_is_never_echoed() {
        let err = Config::from_sources(
            &env(&[("SWITCHBOARD_MASTER_KEY", "secret-value")]),
            None,
            None,
        )
        .unwrap_err()
        .0;
        assert!(!err.contains("secret-value"), "{err}");
    }

    #[test]
    fn postgres_requires_a_master_key() {
        let err = Config::from_sources(
            &env(&[("SWITCHBOARD_DATABASE_URL", "postgres://u@h/db")]),
            None,
            None,
        )
        .unwrap_err()
        .0;
        assert!(err.contains("SWITCHBOARD_MASTER_KEY is required"), "{err}");
        let key = "00".repeat(32);
        let c = Config::from_sources(
            &env(&[
                ("SWITCHBOARD_DATABASE_URL", "postgres://u:pw@h/db"),
                ("SWITCHBOARD_MASTER_KEY", &key),
            ]),
            None,
            None,
        )
        .unwrap();
        assert!(c.database_url.is_postgres());
        assert!(!c.database_url.redacted().contains("pw"));
    }

    #[test]
    fn master_key_file_sits_beside_the_sqlite_file() {
        let c = Config::from_sources(
            &env(&[("SWITCHBOARD_DATABASE_URL", "sqlite:///var/lib/sb/data.db")]),
            None,
            None,
        )
        .unwrap();
        assert!(
            matches!(&c.master_key, MasterKeySource::File(p) if p == Path::new("/var/lib/sb/master.key"))
        );
    }

    #[test]
    fn file_errors() {
        assert!(
            parse_toml("nonsense = 1")
                .unwrap_err()
                .contains("unknown setting `nonsense`")
        );
        assert!(parse_toml("listen = ").is_err());
        let file = parse_toml("webhook_disable_after = 0").unwrap();
        let err = Config::from_sources(&HashMap::new(), Some(&file), Some(Path::new("sb.toml")))
            .unwrap_err()
            .0;
        assert!(
            err.starts_with("`webhook_disable_after` in sb.toml"),
            "{err}"
        );
    }

    #[test]
    fn every_setting_is_documented_in_the_readme() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
        for s in SETTINGS {
            assert!(
                readme.contains(&format!("`{}`", env_name(s.name))),
                "{} is missing from the README",
                env_name(s.name)
            );
        }
    }

    #[test]
    fn rate_limit_overrides() {
        let c = Config::from_sources(
            &env(&[(
                "SWITCHBOARD_RATE_LIMIT_OVERRIDES",
                "7:reads=1000,sends=60; 9:tests=1",
            )]),
            None,
            None,
        )
        .unwrap();
        assert_eq!(
            c.rate_limits_for(7),
            RateLimits {
                reads: 1000,
                sends: 60,
                tests: 10
            }
        );
        assert_eq!(
            c.rate_limits_for(9),
            RateLimits {
                reads: 120,
                sends: 30,
                tests: 1
            }
        );
        assert_eq!(c.rate_limits_for(1), c.rate_limits);
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn any_value_of_any_setting_is_accepted_or_named_in_the_error(i in 0usize..SETTINGS.len(), value in "\\PC{0,60}") {
                let name = env_name(SETTINGS[i].name);
                let env: HashMap<String, String> = [(name.clone(), value)].into_iter().collect();
                if let Err(e) = Config::from_sources(&env, None, None) {
                    prop_assert!(e.0.starts_with(&name) || e.0.contains("SWITCHBOARD_MASTER_KEY"), "{}", e.0);
                }
            }
        }
    }
}
