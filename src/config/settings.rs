//! The table of known settings: names, defaults and meanings (what docs/configuration.md lists).

/// One known setting: its name (without prefix), default and one-line meaning.
pub struct Setting {
    pub name: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
}

/// Every setting, in the order docs/configuration.md lists them.
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
        name: "otlp_endpoint",
        default: "",
        meaning: "when set, spans (requests, store transactions, provider calls, webhook attempts) are exported over OTLP/HTTP (protobuf) to {this base URL}/v1/traces, as OTEL_EXPORTER_OTLP_ENDPOINT would",
    },
    Setting {
        name: "webhook_allow_private_targets",
        default: "false",
        meaning: "development only: allows http://, any port, loopback and private addresses as endpoint URLs",
    },
    Setting {
        name: "webhook_ca_certs",
        default: "",
        meaning: "a PEM file of certificate authorities that webhook deliveries trust besides the built-in roots (one or more certificates); serve refuses to start when it cannot be read",
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
        name: "recovery_page_size",
        default: "500",
        meaning: "events a recovery walks per transaction (each page also records its progress)",
    },
    Setting {
        name: "template_sync_interval",
        default: "1h",
        meaning: "how often serve syncs each whatsapp_cloud channel's template catalogue from its WhatsApp Business Account (channels whose provider settings name a waba_id); 0s turns it off",
    },
    Setting {
        name: "recovery_page_interval",
        default: "0s",
        meaning: "pause between two pages of a recovery (spreads a large recovery's load on the database)",
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
        name: "rate_limit_batch_items",
        default: "6000",
        meaning: "items of POST /messages/batch per credential per minute (a batch also counts as one send)",
    },
    Setting {
        name: "recipient_interval",
        default: "6s",
        meaning: "the least time between two messages of a whatsapp_cloud channel to one recipient (sends wait up to 10s, batch items are scheduled); 0s turns it off",
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
        name: "retention_partitions",
        default: "false",
        meaning: "PostgreSQL only: partition the webhook tables (events, deliveries, attempts) so that retention drops whole partitions instead of deleting rows; migrate and serve convert the tables once, and there is no way back (docs/operations.md)",
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
        name: "media_memory",
        default: "256",
        meaning: "MiB that whatsapp_cloud media files in hand (fetched, not yet uploaded) may take at once; each send holds its media type's limit (a document 100) until its upload is done, others wait",
    },
    Setting {
        name: "media_timeout",
        default: "20s",
        meaning: "time limit of fetching one media file for a whatsapp_cloud send, and of uploading it to the provider",
    },
    Setting {
        name: "send_outcome_wait",
        default: "10m",
        meaning: "how long a queued send that was in flight when its instance stopped waits for the provider's status callback (whatsapp_cloud echoes the message's uuid) before it fails with provider_outcome_unknown",
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

/// Variables with the prefix that are not settings: the configuration file's path, the
/// `listen` command's key, and the variables of the project's own tests and benchmarks.
fn is_not_a_setting(var: &str) -> bool {
    matches!(var, "SWITCHBOARD_CONFIG" | "SWITCHBOARD_API_KEY")
        || var.starts_with("SWITCHBOARD_TEST_")
        || var.starts_with("SWITCHBOARD_BENCH_")
}

/// The `SWITCHBOARD_*` variables of `vars` that are no setting, each with the closest setting's
/// variable when one is close (a typo), for a start-up warning.
pub fn unknown_variables<'a>(
    vars: impl IntoIterator<Item = &'a str>,
) -> Vec<(String, Option<String>)> {
    let known: Vec<String> = SETTINGS.iter().map(|s| env_name(s.name)).collect();
    let mut unknown: Vec<(String, Option<String>)> = vars
        .into_iter()
        .filter(|v| v.starts_with("SWITCHBOARD_") && !is_not_a_setting(v))
        .filter(|v| !known.iter().any(|k| k == v))
        .map(|v| {
            let closest = known
                .iter()
                .map(|k| (strsim::levenshtein(k, v), k))
                .min()
                .filter(|(d, k)| *d <= 3.max(k.len() / 5))
                .map(|(_, k)| k.clone());
            (v.to_owned(), closest)
        })
        .collect();
    unknown.sort();
    unknown
}

/// Every setting with its variable and default, for `--help`.
pub fn help_text() -> String {
    let mut out = String::from("Settings (environment variable, default: meaning):\n");
    for s in SETTINGS {
        let default = if s.default.is_empty() {
            "unset"
        } else {
            s.default
        };
        out.push_str(&format!(
            "  {} ({default}): {}\n",
            env_name(s.name),
            s.meaning
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_name_the_closest_setting_and_non_settings_are_left_alone() {
        let found = unknown_variables([
            "SWITCHBOARD_LISTEN",
            "SWITCHBOARD_WEBHOOK_RETRY_DELAY",
            "SWITCHBOARD_DATABSE_URL",
            "SWITCHBOARD_TEST_POSTGRES_URL",
            "SWITCHBOARD_CONFIG",
            "SWITCHBOARD_API_KEY",
            "SWITCHBOARD_COMPLETELY_DIFFERENT_THING",
            "PATH",
        ]);
        assert_eq!(
            found,
            vec![
                ("SWITCHBOARD_COMPLETELY_DIFFERENT_THING".to_owned(), None),
                (
                    "SWITCHBOARD_DATABSE_URL".to_owned(),
                    Some("SWITCHBOARD_DATABASE_URL".to_owned())
                ),
                (
                    "SWITCHBOARD_WEBHOOK_RETRY_DELAY".to_owned(),
                    Some("SWITCHBOARD_WEBHOOK_RETRY_DELAYS".to_owned())
                ),
            ]
        );
    }

    #[test]
    fn the_help_lists_every_setting() {
        let help = help_text();
        for s in SETTINGS {
            assert!(help.contains(&env_name(s.name)), "{}", s.name);
        }
    }
}
