//! Issue 8: a bounded soak. Mixed traffic (reads, sends, signed inbound callbacks, deliveries to
//! healthy, flaky and failing receivers) for `SWITCHBOARD_SOAK_SECONDS` (20 s by default; run
//! longer by hand), then: no 5xx, no error logged, every delivery settled (no growing queue),
//! and resident memory flat after warm-up.
//!
//! The traffic is paced (`SWITCHBOARD_SOAK_RATE` requests per second in all, 100 by default),
//! below the service's capacity, so that a queue that grows is a defect and not an overload;
//! the webhook backlog (`switchboard_webhook_deliveries_due` from `/metrics`) is sampled as it runs.
//!
//! By hand, for the figures in docs/operations.md:
//! `SWITCHBOARD_SOAK_SECONDS=600 cargo test --release --test blackbox soak -- --nocapture`

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::Mutex;

use crate::fake_providers::{self, Fake};
use crate::receivers::{Behaviour, Receiver};
use crate::support::{Backend, TestEnv};

crate::async_tests!(4; soak_mixed_traffic_stays_healthy);

fn rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

async fn soak_mixed_traffic_stays_healthy() {
    let seconds: u64 = std::env::var("SWITCHBOARD_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let rate: f64 = std::env::var("SWITCHBOARD_SOAK_RATE")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|r: &f64| *r > 0.0)
        .unwrap_or(100.0);
    let backend = match std::env::var("SWITCHBOARD_SOAK_BACKEND").as_deref() {
        Ok("postgres") if crate::support::postgres_url().is_some() => Backend::Postgres,
        _ => Backend::Sqlite,
    };
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph("EAAG-soak-token").await;
    let wa = env
        .admin(&[
            "channel", "create", "--org", &seed.org_id.to_string(), "--type", "whatsapp_cloud", "--name", "WA", "--slug", "wa",
            "--provider-config",
            &json!({"phone_number_id": "1098765", "access_token": "EAAG-soak-token", "app_secret": "soak-app-secret", "api_base_url": graph.base_url}).to_string(),
        ])
        .await;
    let receiver = Receiver::start().await;
    receiver.respond("/failing", Behaviour::Status(500));
    let server = env
        .start(&[
            ("SWITCHBOARD_WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
            ("SWITCHBOARD_WEBHOOK_RETRY_DELAYS", "100ms,200ms,300ms"),
            ("SWITCHBOARD_WEBHOOK_TIMEOUT", "2s"),
            ("SWITCHBOARD_RATE_LIMIT_READS", "1000000"),
            ("SWITCHBOARD_RATE_LIMIT_SENDS", "1000000"),
            ("SWITCHBOARD_LOG", "warn"),
        ])
        .await;
    let mut healthy = Vec::new();
    for (path, events) in [
        ("/ok", json!(["message.*"])),
        ("/flaky", json!(["message.sent"])),
        ("/failing", json!(["message.received"])),
    ] {
        let ep = server
            .post(
                "/api/v1/integrations/webhook-endpoints",
                &seed.key,
                &json!({"name": path, "url": receiver.url(path), "events": events}),
            )
            .await
            .expect(201);
        if path != "/failing" {
            healthy.push(ep.body["uuid"].as_str().unwrap().to_owned());
        }
    }
    // The flaky receiver fails every third request.
    receiver.script(
        "/flaky",
        (0..100_000)
            .map(|i| {
                if i % 3 == 0 {
                    Behaviour::Status(503)
                } else {
                    Behaviour::Status(200)
                }
            })
            .collect(),
    );

    let pid = server.child.id().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let server = Arc::new(server);
    let started = Instant::now();
    let mut workers = Vec::new();
    const WORKERS: u64 = 8;
    let period = Duration::from_secs_f64(WORKERS as f64 / rate);
    for w in 0..WORKERS {
        let (server, stop, counts, key) = (
            server.clone(),
            stop.clone(),
            counts.clone(),
            seed.key.clone(),
        );
        let wa_uuid = wa["uuid"].as_str().unwrap().to_owned();
        workers.push(tokio::spawn(async move {
            let mut i = 0u64;
            let mut pace = tokio::time::interval(period);
            pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !stop.load(Ordering::Relaxed) {
                pace.tick().await;
                i += 1;
                let (label, status) = match (w + i) % 5 {
                    0 | 1 => {
                        let r = server
                            .post_with(
                                "/api/v1/integrations/messages",
                                &key,
                                &json!({"phone": format!("+49151{:08}", (w * 1_000_000 + i) % 100_000_000), "message": "soak"}),
                                &[("Idempotency-Key", &uuid::Uuid::new_v4().to_string())],
                            )
                            .await;
                        ("send", r.status.as_u16())
                    }
                    2 => ("read messages", server.get("/api/v1/integrations/messages?limit=50", &key).await.status.as_u16()),
                    3 => ("read channels", server.get("/api/v1/integrations/channels", &key).await.status.as_u16()),
                    _ => {
                        let wamid = format!("wamid.soak.{w}.{i}");
                        let now = chrono::Utc::now().timestamp();
                        let callback = fake_providers::wa_webhook(
                            "1098765",
                            vec![fake_providers::wa_text(&format!("49170{:07}", (w * 10_000 + i) % 10_000_000), &wamid, now, "hi")],
                            vec![],
                        );
                        let raw = serde_json::to_vec(&callback).unwrap();
                        let r = server
                            .client
                            .post(server.url(&format!("/inbound/{wa_uuid}")))
                            .header("content-type", "application/json")
                            .header("X-Hub-Signature-256", fake_providers::hub_signature("soak-app-secret", &raw))
                            .body(raw)
                            .send()
                            .await;
                        ("inbound", r.map(|r| r.status().as_u16()).unwrap_or(0))
                    }
                };
                *counts.lock().await.entry(format!("{label} {status}")).or_default() += 1;
            }
        }));
    }

    // Memory samples every second; the webhook backlog every five.
    let mut samples = Vec::new();
    let mut backlog: Vec<f64> = Vec::new();
    let mut tick = 0u64;
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        tick += 1;
        if let Some(mb) = rss_mb(pid) {
            samples.push((started.elapsed().as_secs_f64(), mb));
        }
        if tick % 5 == 0 {
            if let Some(due) = due_deliveries(&server).await {
                backlog.push(due);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();

    // Every delivery to the active endpoints settles: nothing stays pending or retrying. (The
    // failing endpoint is disabled after its consecutive failures and holds what it had.)
    let mut settled = false;
    let mut open = 0;
    for _ in 0..300 {
        open = 0;
        for status in ["pending", "retrying"] {
            for ep in &healthy {
                let r = server
                    .get(&format!("/api/v1/integrations/webhook-deliveries?status={status}&endpoint_uuid={ep}&limit=200"), &seed.key)
                    .await
                    .expect(200);
                open += r.body["data"].as_array().unwrap().len();
            }
        }
        if open == 0 {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let counts = counts.lock().await.clone();
    let total: u64 = counts.values().sum();
    let warm = samples
        .iter()
        .find(|(t, _)| *t >= elapsed / 4.0)
        .map(|s| s.1)
        .unwrap_or(0.0);
    let peak = samples.iter().map(|s| s.1).fold(0.0, f64::max);
    let last = samples.last().map(|s| s.1).unwrap_or(0.0);
    let failing = server
        .get("/api/v1/integrations/webhook-endpoints", &seed.key)
        .await
        .expect(200);
    let disabled = failing.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["status"] == "disabled")
        .count();
    let backlog_max = backlog.iter().copied().fold(0.0, f64::max);
    let backlog_last = backlog.last().copied().unwrap_or(0.0);
    eprintln!(
        "soak ({:?}): {disabled} endpoint(s) disabled; {total} requests in {elapsed:.0} s ({:.0}/s); {counts:?}; RSS after warm-up {warm:.1} MiB, peak {peak:.1} MiB, end {last:.1} MiB; deliveries due (sampled every 5 s) max {backlog_max}, last {backlog_last}; provider calls {}",
        backend,
        total as f64 / elapsed,
        graph.arrivals()
    );

    assert!(total > 100, "the soak ran: {counts:?}");
    for (k, n) in &counts {
        let status: u16 = k.rsplit(' ').next().unwrap().parse().unwrap();
        assert!((200..300).contains(&status), "{n} requests ended with {k}");
    }
    assert!(
        settled,
        "{open} deliveries still pending or retrying after the soak"
    );
    assert!(
        last <= warm * 1.5 + 16.0,
        "memory grew from {warm:.1} MiB after warm-up to {last:.1} MiB"
    );
    // The only error lines are the automatic disabling of the failing endpoint (an ERROR by
    // design: an operator should hear of it).
    let logs = server.logs();
    let errors: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("\"level\":\"ERROR\""))
        .filter(|l| !l.contains("webhook endpoint disabled automatically"))
        .collect();
    assert!(
        errors.is_empty() && !logs.contains("panicked"),
        "errors were logged:\n{}",
        errors.join("\n")
    );
    assert_eq!(
        logs.matches("webhook endpoint disabled automatically")
            .count(),
        disabled,
        "one error line per disabled endpoint"
    );
}

/// The `switchboard_webhook_deliveries_due` gauge from `/metrics`.
async fn due_deliveries(server: &crate::support::Server) -> Option<f64> {
    let text = server
        .client
        .get(server.url("/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    text.lines()
        .find(|l| l.starts_with("switchboard_webhook_deliveries_due "))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
