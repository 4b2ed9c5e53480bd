//! The service itself: health, readiness, metrics and the OpenAPI document, unknown routes,
//! request ids, logs, start-up and shutdown, slow and oversized clients, the admin tools.

use reqwest::Method;
use serde_json::{Value, json};

use crate::both_backends;
use crate::support::{Backend, TestEnv};

both_backends!(
    health_ready_metrics_and_openapi_need_no_key,
    unknown_routes_methods_and_request_ids,
    admin_tools_print_one_json_object_and_refuse_bad_input,
    sigterm_finishes_cleanly,
    json_logs_carry_request_ids_and_no_keys,
    wrong_master_key_is_a_clear_startup_error,
    slow_and_oversized_clients_are_cut_off,
);

async fn health_ready_metrics_and_openapi_need_no_key(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let server = env.start(&[]).await;
    let r = server
        .call(Method::GET, "/healthz", None, None)
        .await
        .expect(200);
    assert_eq!(r.body["status"], "ok");
    assert!(r.header("x-request-id").is_some());
    let r = server
        .call(Method::GET, "/readyz", None, None)
        .await
        .expect(200);
    assert_eq!(r.body["database"], "ok");
    let r = server
        .call(Method::GET, "/api/v1/integrations/openapi.json", None, None)
        .await
        .expect(200);
    assert_eq!(r.body["info"]["version"], "v1");
    let op = &r.body["paths"]["/api/v1/integrations/channels"]["get"];
    assert!(op.is_object(), "GET /channels is documented");
    assert!(
        op["responses"]["401"].is_object()
            && op["responses"]["403"].is_object()
            && op["responses"]["429"].is_object()
    );
    assert!(r.body["components"]["securitySchemes"]["bearer"].is_object());
    assert!(r.body["components"]["schemas"]["ErrorBody"].is_object());
    let m = server
        .call(Method::GET, "/metrics", None, None)
        .await
        .expect(200);
    assert!(
        m.text.contains("switchboard_http_requests_total"),
        "{}",
        m.text
    );
    assert!(
        m.text.contains("route=\"/healthz\""),
        "metrics are labelled by route: {}",
        m.text
    );
    assert!(
        m.text.contains("switchboard_http_request_duration_seconds"),
        "{}",
        m.text
    );
}
async fn unknown_routes_methods_and_request_ids(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[]).await;
    server
        .get("/api/v1/integrations/nothing-here", &seed.key)
        .await
        .expect_error(404, "not_found");
    server
        .call(Method::GET, "/nothing", None, None)
        .await
        .expect_error(404, "not_found");
    server
        .call(
            Method::DELETE,
            "/api/v1/integrations/channels",
            Some(&seed.key),
            None,
        )
        .await
        .expect_error(405, "method_not_allowed");
    let r = server
        .client
        .get(server.url("/api/v1/integrations/channels"))
        .bearer_auth(&seed.key)
        .header("X-Request-Id", "client-chosen.id:42")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"], "client-chosen.id:42");
    let r = server
        .client
        .get(server.url("/healthz"))
        .header("X-Request-Id", "bad id with spaces")
        .send()
        .await
        .unwrap();
    let id = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(
        id.starts_with("req_"),
        "an unsafe inbound id is replaced: {id}"
    );
}
async fn admin_tools_print_one_json_object_and_refuse_bad_input(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let org = env.admin(&["org", "create", "--name", "Acme"]).await;
    assert_eq!(org["name"], "Acme");
    assert!(org["id"].is_i64() && org["uuid"].is_string());
    let org_id = org["id"].to_string();

    let key = env
        .admin(&[
            "key",
            "create",
            "--org",
            &org_id,
            "--name",
            "crm",
            "--scopes",
            "channels:read,messages:write",
        ])
        .await;
    for field in ["id", "key", "prefix", "scopes", "expires_at"] {
        assert!(key.get(field).is_some(), "key create prints {field}: {key}");
    }
    let token = key["key"].as_str().unwrap();
    assert!(token.starts_with("sbk_") && token.starts_with(key["prefix"].as_str().unwrap()));
    assert_eq!(key["scopes"], json!(["channels:read", "messages:write"]));
    assert_eq!(key["expires_at"], Value::Null);

    let refusals: &[&[&str]] = &[
        &["org", "create"],
        &["org", "create", "--name", "   "],
        &[
            "channel",
            "create",
            "--org",
            &org_id,
            "--type",
            "carrier_pigeon",
            "--name",
            "x",
        ],
        &[
            "channel", "create", "--org", "999999", "--type", "sandbox", "--name", "x",
        ],
        &[
            "channel",
            "create",
            "--org",
            &org_id,
            "--type",
            "sandbox",
            "--name",
            "x",
            "--slug",
            "Not A Slug",
        ],
        &[
            "channel",
            "create",
            "--org",
            &org_id,
            "--type",
            "sandbox",
            "--name",
            "x",
            "--provider-config",
            "{not json",
        ],
        &[
            "channel",
            "create",
            "--org",
            &org_id,
            "--type",
            "sandbox",
            "--name",
            "x",
            "--provider-config",
            "[1,2]",
        ],
        &["channel", "update", "424242", "--inactive"],
        &["channel", "update", "1", "--active", "--inactive"],
        &["key", "create", "--org", &org_id, "--scopes", "everything"],
        &["key", "create", "--org", &org_id, "--scopes", ""],
        &[
            "key",
            "create",
            "--org",
            &org_id,
            "--expires-at",
            "next tuesday",
            "--scopes",
            "*",
        ],
        &["key", "create", "--org", "999999", "--scopes", "*"],
        &["key", "create", "--org", "abc", "--scopes", "*"],
        &["key", "revoke", "999999"],
        &["key", "rotate", "999999"],
        &[
            "key",
            "import-legacy",
            "--org",
            &org_id,
            "--key",
            "has space",
        ],
        &["no-such-command"],
    ];
    let before = env.admin(&["key", "list", "--org", &org_id]).await["data"]
        .as_array()
        .unwrap()
        .len();
    for args in refusals {
        let out = env.admin_raw(args).await;
        assert!(!out.success, "{args:?} must fail");
        assert!(
            out.stdout.trim().is_empty(),
            "{args:?} prints nothing on stdout: {}",
            out.stdout
        );
        assert_eq!(
            out.stderr.trim().lines().count(),
            1,
            "{args:?}: one line on stderr, got {:?}",
            out.stderr
        );
    }
    let after = env.admin(&["key", "list", "--org", &org_id]).await["data"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after, "refused commands change nothing");

    // A default channel from another organization is refused.
    let other = env.admin(&["org", "create", "--name", "Other"]).await;
    let foreign = env
        .admin(&[
            "channel",
            "create",
            "--org",
            &other["id"].to_string(),
            "--type",
            "sandbox",
            "--name",
            "Theirs",
        ])
        .await;
    let out = env
        .admin_raw(&[
            "key",
            "create",
            "--org",
            &org_id,
            "--default-channel",
            &foreign["id"].to_string(),
            "--scopes",
            "*",
        ])
        .await;
    assert!(
        !out.success && out.stderr.contains("does not belong"),
        "{}",
        out.stderr
    );
    let own = env
        .admin(&[
            "channel", "create", "--org", &org_id, "--type", "sandbox", "--name", "Ours",
        ])
        .await;
    let k = env
        .admin(&[
            "key",
            "create",
            "--org",
            &org_id,
            "--default-channel",
            &own["id"].to_string(),
            "--scopes",
            "*",
        ])
        .await;
    assert_eq!(k["default_channel_id"], own["id"]);

    // Without --json, a readable line.
    let out = env
        .run(&["admin", "org", "create", "--name", "Plain"], &[])
        .await;
    assert!(
        out.success && out.stdout.starts_with("created organization"),
        "{}",
        out.stdout
    );

    // Help exists for every command.
    for args in [
        &["--help"][..],
        &["serve", "--help"],
        &["migrate", "--help"],
        &["admin", "--help"],
        &["admin", "key", "create", "--help"],
    ] {
        let out = env.run(args, &[]).await;
        assert!(
            out.success && out.stdout.contains("Usage"),
            "{args:?}: {}",
            out.stdout
        );
    }
    let out = env.run(&["migrate"], &[]).await;
    assert!(out.success, "{}", out.stderr);
}
async fn sigterm_finishes_cleanly(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let mut server = env.start(&[]).await;
    server
        .get("/api/v1/integrations/channels", &seed.key)
        .await
        .expect(200);
    assert_eq!(server.terminate().await, Some(0));
    assert!(server.logs().contains("shutting down"), "{}", server.logs());
}
async fn json_logs_carry_request_ids_and_no_keys(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&[("SWITCHBOARD_LOG", "debug")]).await;
    let r = server
        .get("/api/v1/integrations/channels", &seed.key)
        .await
        .expect(200);
    let id = r.header("x-request-id").unwrap().to_owned();
    server
        .get(
            "/api/v1/integrations/channels",
            "sbk_not_a_real_key_at_all_00000000000000",
        )
        .await
        .expect(401);
    // Let the log line reach the pipe.
    let mut found = false;
    for _ in 0..50 {
        if server.logs().contains(&id) {
            found = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(found, "a log line carries the request id {id}");
    let logs = server.logs();
    for line in logs.lines().filter(|l| l.starts_with('{')) {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(
            v["level"].is_string() && v["timestamp"].is_string(),
            "{line}"
        );
    }
    assert!(!logs.contains(&seed.key), "the key never appears in logs");
    assert!(
        !logs.contains(&env.master_key),
        "the master key never appears in logs"
    );
}
async fn wrong_master_key_is_a_clear_startup_error(backend: Backend) {
    let env = TestEnv::new(backend).await;
    env.seed().await;
    let other_key = crate::support::hex_key();
    let out = env
        .run(&["serve"], &[("SWITCHBOARD_MASTER_KEY", &other_key)])
        .await;
    assert!(!out.success);
    assert!(
        out.stderr.contains("SWITCHBOARD_MASTER_KEY") && out.stderr.contains("not the master key"),
        "{}",
        out.stderr
    );
    let bad = env
        .run(&["serve"], &[("SWITCHBOARD_WEBHOOK_TIMEOUT", "soon")])
        .await;
    assert!(!bad.success);
    assert!(
        bad.stderr.contains("SWITCHBOARD_WEBHOOK_TIMEOUT")
            && bad.stderr.contains("expected a duration"),
        "{}",
        bad.stderr
    );
}
async fn slow_and_oversized_clients_are_cut_off(backend: Backend) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let env = TestEnv::new(backend).await;
    let server = env
        .start(&[("SWITCHBOARD_HTTP_HEADER_TIMEOUT", "300ms")])
        .await;
    let addr = server.base.trim_start_matches("http://").to_owned();

    // Headers that never finish: the server closes the connection.
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        slow.read_to_end(&mut buf),
    )
    .await;
    assert!(
        read.is_ok(),
        "the server must close a connection whose headers never finish"
    );
    assert!(
        buf.is_empty() || String::from_utf8_lossy(&buf).starts_with("HTTP/1.1 408"),
        "{}",
        String::from_utf8_lossy(&buf)
    );

    // A header block over 64 KiB is refused.
    let mut big = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    let _ = big.write_all(request.as_bytes()).await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        big.read_to_end(&mut buf),
    )
    .await;
    let text = String::from_utf8_lossy(&buf);
    assert!(
        !text.starts_with("HTTP/1.1 200"),
        "an oversized header block is not served: {text}"
    );

    // The server is still healthy.
    server
        .call(Method::GET, "/healthz", None, None)
        .await
        .expect(200);
}
