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
    assert!(matches!(&c.master_key, MasterKeySource::File(p) if p == Path::new("./master.key")));
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
    let file = parse_toml(
        "webhook_timeout = \"3s\"\nrate_limit_reads = 50\nwebhook_retry_delays = [\"1s\", \"2s\"]",
    )
    .unwrap();
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
fn every_setting_is_documented_in_the_configuration_reference() {
    let reference = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap();
    for s in SETTINGS {
        assert!(
            reference.contains(&format!("| `{}` |", env_name(s.name))),
            "{} is missing from docs/configuration.md's table",
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
