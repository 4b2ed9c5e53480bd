//! The event feed and the event stream (CONVENTIONS "Recovery, replay and the event feed"):
//! pages that never skip or repeat an event while several writers (and, on PostgreSQL, two
//! instances) write; envelopes byte-for-byte the delivered bodies; cursors bound to the feed
//! and its filters; the stream resuming from `Last-Event-ID`.

use std::collections::HashSet;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use crate::both_backends;
use crate::receivers::Receiver;
use crate::recovery::{send, settings};
use crate::support::{Backend, Server, TestEnv};
use crate::webhooks::Api;

const FEED: &str = "/api/v1/integrations/event-feed";
const STREAM: &str = "/api/v1/integrations/event-stream";
const WAIT: Duration = Duration::from_secs(60);

both_backends!(
    the_feed_never_skips_or_repeats_while_events_are_written,
    feed_envelopes_are_the_delivered_bytes,
    feed_cursors_and_parameters_are_checked,
    the_stream_resumes_from_last_event_id,
);

fn ids(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["metadata"]["event_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Reads the feed from `cursor` to its current end; returns the event ids and the last cursor.
async fn drain(
    server: &Server,
    key: &str,
    query: &str,
    mut cursor: Option<String>,
) -> (Vec<String>, Option<String>) {
    let mut out = Vec::new();
    loop {
        let mut q = format!("{FEED}?{query}");
        if let Some(c) = &cursor {
            q.push_str(&format!("&after={c}"));
        }
        let page = server.get(&q, key).await.expect(200).body;
        out.extend(ids(&page));
        let next = page["next_cursor"]
            .as_str()
            .expect("next_cursor on every page");
        cursor = Some(next.to_owned());
        if page["has_more"] != true {
            return (out, cursor);
        }
    }
}

/// Waits until the whole feed holds at least `n` events named `name`. On PostgreSQL an event
/// is served once every transaction older than its own has ended, in any database of the
/// cluster (the tests of other databases run beside this one): a moment after its commit.
async fn wait_feed(server: &Server, key: &str, name: &str, n: usize) {
    let end = tokio::time::Instant::now() + WAIT;
    loop {
        let page = server
            .get(&format!("{FEED}?limit=1000&events={name}"), key)
            .await
            .expect(200)
            .body;
        if page["data"].as_array().unwrap().len() >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "the feed never had {n} {name}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn the_feed_never_skips_or_repeats_while_events_are_written(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let config = settings(&[]);
    let a = env.start(&config).await;
    let b = match backend {
        Backend::Postgres => Some(env.start(&config).await),
        Backend::Sqlite => None,
    };
    let writers: Vec<&Server> = [Some(&a), b.as_ref()].into_iter().flatten().collect();

    // Four writers (spread over the instances) and one reader paging at the same time.
    let write = async {
        let tasks = (0..4).map(|w| {
            let server = writers[w % writers.len()];
            let key = seed.key.clone();
            async move {
                for i in 0..12 {
                    send(
                        server,
                        &key,
                        &format!("+4915123470{w}{i:02}"),
                        &format!("w{w}-{i}"),
                    )
                    .await;
                }
            }
        });
        futures::future::join_all(tasks).await;
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    let read = async {
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let finished = done.load(std::sync::atomic::Ordering::SeqCst);
            if finished {
                // Every write has committed; wait until all are readable, then read the rest.
                wait_feed(&a, &seed.key, "message.sent", 48).await;
            }
            let (got, next) = drain(&a, &seed.key, "limit=7", cursor).await;
            seen.extend(got);
            cursor = next;
            if finished {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    };
    let (_, seen) = tokio::join!(
        async {
            write.await;
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        },
        read
    );
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no event twice");
    // A fresh read of the whole feed, after the writers stopped, has exactly the same events.
    wait_feed(&a, &seed.key, "message.sent", 48).await;
    let (all, _) = drain(&a, &seed.key, "limit=1000", None).await;
    let all_set: HashSet<&String> = all.iter().collect();
    assert_eq!(all_set.len(), all.len());
    assert_eq!(unique, all_set, "no event skipped");
    // 48 sends: 48 message.sent, 48 contact.created at least.
    assert!(all.len() >= 96, "{} events", all.len());
}

async fn feed_envelopes_are_the_delivered_bytes(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&settings(&[])).await;
    let rx = Receiver::start().await;
    Api::new(&server, &seed.key)
        .create(&rx.url("/all"), &["*"])
        .await;
    send(
        &server,
        &seed.key,
        "+4915123480001",
        "bytes \u{e9}\u{1f600} \"quoted\"",
    )
    .await;
    let delivered = rx.wait_for("/all", 2, WAIT).await;
    wait_feed(&server, &seed.key, "message.sent", 1).await;
    let feed = server
        .get(&format!("{FEED}?limit=1000"), &seed.key)
        .await
        .expect(200);
    assert!(
        feed.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    for r in &delivered {
        let body = std::str::from_utf8(&r.body).unwrap();
        assert!(
            feed.text.contains(body),
            "the feed carries the delivered bytes of {}:\n{body}\n---\n{}",
            r.event(),
            feed.text
        );
    }
    // Oldest first.
    let names: Vec<&str> = feed.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    let contact = names.iter().position(|n| *n == "contact.created").unwrap();
    let sent = names.iter().position(|n| *n == "message.sent").unwrap();
    assert!(contact < sent, "{names:?}");
    // A filter keeps its events only.
    let only = server
        .get(&format!("{FEED}?events=message.*"), &seed.key)
        .await
        .expect(200);
    let only: Vec<&str> = only.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert!(
        !only.is_empty() && only.iter().all(|n| n.starts_with("message.")),
        "{only:?}"
    );
}

async fn feed_cursors_and_parameters_are_checked(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&settings(&[])).await;
    for i in 0..3 {
        send(&server, &seed.key, &format!("+49151234900{i:02}"), "x").await;
    }
    wait_feed(&server, &seed.key, "message.sent", 3).await;
    let page = server
        .get(&format!("{FEED}?limit=2&events=message.sent"), &seed.key)
        .await
        .expect(200)
        .body;
    assert_eq!(page["has_more"], true);
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    server
        .get(
            &format!("{FEED}?limit=2&events=message.sent&after={cursor}"),
            &seed.key,
        )
        .await
        .expect(200);
    // Another filter, an altered cursor, another list's cursor: 400 invalid_cursor.
    server
        .get(
            &format!("{FEED}?events=contact.created&after={cursor}"),
            &seed.key,
        )
        .await
        .expect_error(400, "invalid_cursor");
    let mut altered = cursor.clone().into_bytes();
    let last = altered.len() - 3;
    altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    server
        .get(
            &format!("{FEED}?events=message.sent&after={altered}"),
            &seed.key,
        )
        .await
        .expect_error(400, "invalid_cursor");
    let messages = server
        .get("/api/v1/integrations/messages?limit=1", &seed.key)
        .await
        .expect(200)
        .body;
    let other = messages["next_cursor"].as_str().unwrap();
    server
        .get(&format!("{FEED}?after={other}"), &seed.key)
        .await
        .expect_error(400, "invalid_cursor");
    server
        .get(
            &format!("/api/v1/integrations/messages?cursor={cursor}"),
            &seed.key,
        )
        .await
        .expect_error(400, "invalid_cursor");
    // Limits and names.
    for bad in ["limit=0", "limit=1001", "limit=ten", "events=no%20such"] {
        let r = server.get(&format!("{FEED}?{bad}"), &seed.key).await;
        assert_eq!(r.status.as_u16(), 400, "{bad}: {}", r.text);
    }
    server
        .get(&format!("{FEED}?limit=1000"), &seed.key)
        .await
        .expect(200);
    // Scopes: webhooks:read.
    let reader = env.key(seed.org_id, "messages:read").await;
    server
        .get(FEED, &reader)
        .await
        .expect_error(403, "insufficient_scope");
    // Another organization sees none of these events.
    let other = env.admin(&["org", "create", "--name", "Other"]).await;
    let other_key = env.key(other["id"].as_i64().unwrap(), "*").await;
    let theirs = server.get(FEED, &other_key).await.expect(200).body;
    assert!(
        theirs["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["event"] != "message.sent"),
        "{theirs:#}"
    );
}

/// One Server-Sent Event: its `id:` and `data:`.
struct SseEvent {
    id: String,
    data: Value,
}

/// Reads `n` events from the stream (with `Last-Event-ID` when given).
async fn read_stream(server: &Server, key: &str, last: Option<&str>, n: usize) -> Vec<SseEvent> {
    read_events(open_stream(server, key, last).await, n).await
}

/// Opens the stream: once the headers are here, its starting position is fixed.
async fn open_stream(server: &Server, key: &str, last: Option<&str>) -> reqwest::Response {
    let mut req = server
        .client
        .get(server.url(STREAM))
        .bearer_auth(key)
        .timeout(WAIT);
    if let Some(id) = last {
        req = req.header("Last-Event-ID", id);
    }
    let resp = req.send().await.expect("stream");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    resp
}

async fn read_events(resp: reqwest::Response, n: usize) -> Vec<SseEvent> {
    let mut body = resp.bytes_stream();
    let mut buf = String::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while out.len() < n {
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .expect("events arrive in time")
            .expect("the stream stays open")
            .expect("chunk");
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (mut id, mut data) = (None, None);
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data = Some(serde_json::from_str(v.trim()).unwrap());
                }
            }
            if let (Some(id), Some(data)) = (id, data) {
                out.push(SseEvent { id, data });
            }
        }
    }
    out.truncate(n);
    out
}

async fn the_stream_resumes_from_last_event_id(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let server = env.start(&settings(&[])).await;
    for i in 0..3 {
        send(&server, &seed.key, &format!("+49151234910{i:02}"), "s").await;
    }
    wait_feed(&server, &seed.key, "message.sent", 3).await;
    let (all, _) = drain(&server, &seed.key, "limit=1000", None).await;
    assert!(all.len() >= 6);
    // Last-Event-ID takes a feed cursor: resume after the second event.
    let page = server
        .get(&format!("{FEED}?limit=2"), &seed.key)
        .await
        .expect(200)
        .body;
    let after_second = page["next_cursor"].as_str().unwrap().to_owned();
    let rest = read_stream(&server, &seed.key, Some(&after_second), all.len() - 2).await;
    let got: Vec<String> = rest
        .iter()
        .map(|e| e.data["metadata"]["event_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        got,
        all[2..].to_vec(),
        "oldest first, as the feed, none skipped"
    );
    // Without one, the stream starts with new events; an event written now arrives live.
    let live = open_stream(&server, &seed.key, None).await;
    send(&server, &seed.key, "+4915123491099", "live").await;
    let events = read_events(live, 1).await;
    assert_eq!(
        events[0].data["event"], "contact.created",
        "{}",
        events[0].data
    );
    assert_eq!(events[0].data["data"]["contact"]["phone"], "+4915123491099");
    // Its id resumes after it: the same send's later events follow, none repeated.
    let next = read_stream(&server, &seed.key, Some(&events[0].id), 1).await;
    assert_ne!(
        next[0].data["metadata"]["event_id"],
        events[0].data["metadata"]["event_id"]
    );
    assert_eq!(
        next[0].data["data"]["contact_uuid"],
        events[0].data["data"]["contact_uuid"]
    );
    // A tampered Last-Event-ID is refused.
    let r = server
        .client
        .get(server.url(STREAM))
        .bearer_auth(&seed.key)
        .header("Last-Event-ID", "not-a-cursor")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
}
