//! Operators' conventions: metric names, HELP lines and counters at 0 from start-up, the build
//! info, 405s labelled with their route; the log lines of exhausted deliveries and automatic
//! disabling; `switchboard config`, settings in `--help`, a warning for a mistyped variable.

use std::time::Duration;

use reqwest::Method;

use crate::both_backends;
use crate::receivers::{Behaviour, Receiver};
use crate::support::{Backend, Server, TestEnv};
use crate::webhooks::{Api, with};

both_backends!(
    metrics_follow_prometheus_conventions,
    exhausted_deliveries_and_automatic_disabling_are_logged,
    settings_are_listed_and_typos_are_warned_about,
    transport_errors_have_the_json_error_body,
    migrate_logs_one_line_per_migration,
    organization_names_are_not_repeated_by_accident,
);

/// `switchboard migrate` on an empty database: one log line per migration (its version, name
/// and duration), no statement text; a second run applies nothing and says so.
async fn migrate_logs_one_line_per_migration(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let dir = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    let migrations = std::fs::read_dir(format!(
        "{}/crates/store/migrations/{dir}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
    .count();
    let out = env.run(&["migrate"], &[]).await;
    assert!(out.success, "{}", out.stderr);
    let applied: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("migration applied"))
        .collect();
    assert_eq!(applied.len(), migrations, "{}", out.stderr);
    assert!(applied[0].contains("foundation"), "{}", applied[0]);
    for line in out.stderr.lines() {
        assert!(
            line.len() < 400 && !line.contains("CREATE TABLE"),
            "no statement text in the log: {line}"
        );
    }
    let again = env.run(&["migrate"], &[]).await;
    assert!(again.success, "{}", again.stderr);
    assert!(
        !again.stderr.contains("migration applied"),
        "{}",
        again.stderr
    );
    assert!(again.stderr.contains("up to date"), "{}", again.stderr);
}

/// A second organization with the same name (any case) is refused unless `--force`.
async fn organization_names_are_not_repeated_by_accident(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let first = env.admin(&["org", "create", "--name", "Northwind"]).await;
    let again = env
        .admin_raw(&["org", "create", "--name", " northwind "])
        .await;
    assert!(!again.success);
    assert!(
        again.stderr.contains("exists already")
            && again.stderr.contains(&format!("id {}", first["id"])),
        "{}",
        again.stderr
    );
    let forced = env
        .admin(&["org", "create", "--name", "Northwind", "--force"])
        .await;
    assert_ne!(forced["id"], first["id"]);
    let list = env.admin_raw(&["org", "list"]).await;
    assert_eq!(
        list.stdout.matches("Northwind").count(),
        2,
        "{}",
        list.stdout
    );
}

async fn metrics(server: &Server) -> String {
    server
        .call(Method::GET, "/metrics", None, None)
        .await
        .expect(200)
        .text
}

async fn metrics_follow_prometheus_conventions(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[]).await;
    // Before anything happened: every counter an alert uses is there at 0.
    let text = metrics(&server).await;
    for line in [
        "switchboard_webhook_endpoints_disabled_total 0",
        "switchboard_webhook_attempts_total{outcome=\"retries_exhausted\"} 0",
        "switchboard_rate_limited_total{policy=\"sends\"} 0",
        "switchboard_webhook_deliveries_purged_total 0",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        text.contains(&format!(
            "switchboard_build_info{{version=\"{version}\"}} 1"
        )),
        "{text}"
    );
    // A 405 on a known route is labelled with its template, not "unmatched".
    server
        .call(
            Method::DELETE,
            "/api/v1/integrations/channels",
            Some(&seed.key),
            None,
        )
        .await
        .expect_error(405, "method_not_allowed");
    let text = metrics(&server).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("switchboard_http_requests_total")
                && l.contains("method=\"DELETE\"")
                && l.contains("route=\"/api/v1/integrations/channels\"")
                && l.contains("status=\"405\"")),
        "{text}"
    );
    // Every sample is a switchboard_ metric with a HELP and a TYPE line; units in the names.
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let name = line.split(['{', ' ']).next().unwrap();
        assert!(name.starts_with("switchboard_"), "{name}");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .filter(|f| text.contains(&format!("# TYPE {f} histogram")))
            .unwrap_or(name);
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "no HELP for {family}"
        );
    }
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let mut parts = line.split(' ').skip(2);
        let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
        match kind {
            "counter" => assert!(name.ends_with("_total"), "{name}"),
            "histogram" => assert!(name.ends_with("_seconds"), "{name}"),
            _ => {}
        }
    }
}

async fn exhausted_deliveries_and_automatic_disabling_are_logged(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env
        .start(&with(&[
            ("SWITCHBOARD_WEBHOOK_RETRY_DELAYS", "50ms"),
            ("SWITCHBOARD_WEBHOOK_DISABLE_AFTER", "2"),
        ]))
        .await;
    let api = Api::new(&server, &seed.key);
    let rx = Receiver::start().await;
    rx.respond("/down", Behaviour::Status(503));
    let ep = api
        .create(&rx.url("/down?token=query-secret-123"), &["*"])
        .await;
    for _ in 0..2 {
        let (id, _) = api.test(&ep.uuid).await;
        api.wait_status(&id, "retries_exhausted").await;
    }
    api.wait_endpoint(&ep.uuid, "disabled", |e| e["status"] == "disabled")
        .await;
    // The log lines are written as the outcome is recorded; give the writer a moment.
    let end = tokio::time::Instant::now() + Duration::from_secs(10);
    let logs = loop {
        let logs = server.logs();
        if logs.contains("webhook endpoint disabled automatically") {
            break logs;
        }
        assert!(tokio::time::Instant::now() < end, "{logs}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let exhausted: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == "webhook delivery exhausted its retries")
        .collect();
    assert_eq!(exhausted.len(), 2, "{logs}");
    for l in &exhausted {
        assert_eq!(l["level"], "WARN");
        assert_eq!(l["fields"]["endpoint_uuid"], ep.uuid.as_str());
        assert_eq!(l["fields"]["event"], "integration.test");
    }
    let disabled = lines
        .iter()
        .find(|l| l["fields"]["message"] == "webhook endpoint disabled automatically")
        .unwrap();
    assert_eq!(disabled["level"], "ERROR");
    assert_eq!(disabled["fields"]["endpoint_uuid"], ep.uuid.as_str());
    assert_eq!(
        disabled["fields"]["reason"],
        "2 consecutive failed deliveries"
    );
    assert!(!logs.contains("query-secret-123"), "never the URL's query");
    assert!(!logs.contains(&ep.secret), "never a secret");
}

async fn settings_are_listed_and_typos_are_warned_about(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let out = env
        .run(&["config"], &[("SWITCHBOARD_WEBHOOK_RETRY_DELAY", "1s")])
        .await;
    assert!(out.success, "{}", out.stderr);
    for needle in [
        "SWITCHBOARD_LISTEN",
        "SWITCHBOARD_WEBHOOK_DISABLE_AFTER",
        "SWITCHBOARD_RECOVERY_PAGE_SIZE",
        "(default)",
        "(env)",
    ] {
        assert!(out.stdout.contains(needle), "{needle}: {}", out.stdout);
    }
    assert!(
        !out.stdout.contains(&env.master_key),
        "the master key is never printed"
    );
    assert!(
        out.stdout.contains(
            "SWITCHBOARD_WEBHOOK_RETRY_DELAY is not a setting (did you mean SWITCHBOARD_WEBHOOK_RETRY_DELAYS?)"
        ),
        "{}",
        out.stdout
    );
    let help = env.run(&["--help"], &[]).await;
    assert!(help.success);
    assert!(
        help.stdout
            .contains("SWITCHBOARD_WEBHOOK_RETRY_DELAYS (30s,5m,30m)"),
        "{}",
        help.stdout
    );
    // serve warns at start-up, naming the closest setting; test variables are not warned about.
    let server = env
        .start(&[
            ("SWITCHBOARD_WEBHOOK_RETRY_DELAY", "1s"),
            ("SWITCHBOARD_TEST_SOMETHING", "x"),
        ])
        .await;
    let logs = server.logs();
    assert!(
        logs.contains("SWITCHBOARD_WEBHOOK_RETRY_DELAY is not a setting and is ignored; did you mean SWITCHBOARD_WEBHOOK_RETRY_DELAYS?"),
        "{logs}"
    );
    assert!(!logs.contains("SWITCHBOARD_TEST_SOMETHING"), "{logs}");
}

/// A raw request on a new connection; the whole answer as text.
async fn raw(server: &Server, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = server.base.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

async fn transport_errors_have_the_json_error_body(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let server = env.start(&[]).await;
    let big = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(70_000)
    );
    for (request, status, code) in [
        (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Bad: a\rb\r\n\r\n".to_vec(),
            "400",
            "invalid_request",
        ),
        (big.into_bytes(), "431", "headers_too_large"),
    ] {
        let answer = raw(&server, &request).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status} ")),
            "{answer}"
        );
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.contains("content-type: application/json"), "{head}");
        let json: serde_json::Value = serde_json::from_str(body).expect("a JSON body");
        assert_eq!(json["error"]["code"], code);
        let id = json["error"]["request_id"].as_str().unwrap();
        assert!(head.contains(&format!("x-request-id: {id}")), "{head}");
    }
    // The server is unharmed.
    server
        .call(Method::GET, "/healthz", None, None)
        .await
        .expect(200);
}
