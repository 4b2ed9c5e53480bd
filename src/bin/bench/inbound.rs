//! `--scenario inbound`: WhatsApp Cloud callbacks per second, signed as Meta signs them, posted
//! to `/inbound/{channel}` in closed loops: one mix of plain texts and one mix of every kind
//! (media, interactive and Flow replies, reactions, locations, contacts, orders, quoted and
//! forwarded texts, unsupported), each callback one new message from one of 100 customers.
//! With `--baseline-bin`, an earlier build is measured in the same rounds, alternated, so that
//! what the typed parsing of every kind costs is the difference on the same machine.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::report::Rate;
use crate::server::{Backend, Database, Server};
use crate::{Args, load};

const APP_SECRET: &str = "bench-app-secret";
const PHONE_NUMBER_ID: &str = "1098765";

#[derive(Debug, serde::Serialize)]
pub struct InboundResults {
    pub rounds: usize,
    pub connections: usize,
    /// Callbacks per second with one text message each.
    pub texts_per_sec: f64,
    /// Callbacks per second with one message each, cycling through every kind.
    pub kinds_per_sec: f64,
    pub texts_p50_ms: f64,
    pub kinds_p50_ms: f64,
    /// The `--baseline-bin` build, the same loops.
    pub texts_per_sec_baseline: Option<f64>,
    pub kinds_per_sec_baseline: Option<f64>,
    /// Requests that were not answered 200.
    pub failed: usize,
}

/// One message of each kind, as the Cloud API sends them (`n` makes its id unique).
fn message(kind: usize, n: u64, from: &str) -> Value {
    let id = format!("wamid.BENCH{n}");
    let ts = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 1)
    .to_string();
    let mut m = json!({"from": from, "id": id, "timestamp": ts});
    let (t, member) = match kind % 10 {
        0 => ("text", json!({"body": "Where is my order?"})),
        1 => (
            "image",
            json!({"id": "1013859600285441", "mime_type": "image/jpeg", "sha256": "abc", "caption": "the box"}),
        ),
        2 => (
            "interactive",
            json!({"type": "button_reply", "button_reply": {"id": "yes", "title": "Yes please"}}),
        ),
        3 => (
            "interactive",
            json!({"type": "nfm_reply", "nfm_reply": {"name": "flow", "body": "Sent",
                   "response_json": "{\"flow_token\": \"FT-9\", \"size\": \"M\", \"count\": 2}"}}),
        ),
        4 => (
            "reaction",
            json!({"message_id": format!("wamid.BENCH{}", n.saturating_sub(1)), "emoji": "👍"}),
        ),
        5 => (
            "location",
            json!({"latitude": 52.52, "longitude": 13.405, "name": "Office", "address": "Main St 1"}),
        ),
        6 => (
            "contacts",
            json!([{"name": {"formatted_name": "Ann Lee", "first_name": "Ann"},
                    "phones": [{"phone": "+1 555 010 0100", "type": "CELL", "wa_id": "15550100100"}]}]),
        ),
        7 => (
            "order",
            json!({"catalog_id": "cat-77", "text": "for Friday", "product_items": [
                {"product_retailer_id": "sku-1", "quantity": 2, "item_price": 10.5, "currency": "EUR"},
                {"product_retailer_id": "sku-2", "quantity": 1, "item_price": 3, "currency": "EUR"}]}),
        ),
        8 => {
            m["context"] = json!({"from": "15550001111", "id": format!("wamid.BENCH{}", n.saturating_sub(2)),
                                  "forwarded": true});
            ("text", json!({"body": "Replying to that"}))
        }
        _ => {
            m["errors"] = json!([{"code": 131051, "title": "Message type unknown"}]);
            ("unsupported", json!({"type": "pool"}))
        }
    };
    m["type"] = json!(t);
    m[t] = member;
    m
}

fn callback(kind: Option<usize>, n: u64) -> Vec<u8> {
    let from = format!("49151{:08}", n % 100);
    let msg = match kind {
        Some(k) => message(k, n, &from),
        None => message(0, n, &from),
    };
    let body = json!({"object": "whatsapp_business_account", "entry": [{"id": "WABA", "changes": [{
        "field": "messages",
        "value": {"messaging_product": "whatsapp",
                  "metadata": {"display_phone_number": "15550000000", "phone_number_id": PHONE_NUMBER_ID},
                  "contacts": [{"profile": {"name": "Customer"}, "wa_id": from}],
                  "messages": [msg]}}]}]});
    serde_json::to_vec(&body).expect("JSON")
}

fn signature(body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(APP_SECRET.as_bytes()).expect("key");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// A fresh database seeded by `bin` with a WhatsApp Cloud channel; its uuid.
async fn prepare(
    args: &Args,
    bin: &std::path::Path,
    backend: Backend,
) -> anyhow::Result<(Database, String)> {
    let db = Database::create(backend, &args.postgres_url).await?;
    let org = db.admin(bin, &["org", "create", "--name", "Bench"]).await?;
    let config = json!({"phone_number_id": PHONE_NUMBER_ID, "access_token": "EAAG-bench",
                        "app_secret": APP_SECRET, "verify_token": "bench",
                        "api_base_url": "http://127.0.0.1:9"});
    let channel = db
        .admin(
            bin,
            &[
                "channel",
                "create",
                "--org",
                &org["id"].to_string(),
                "--type",
                "whatsapp_cloud",
                "--name",
                "WhatsApp",
                "--provider-config",
                &config.to_string(),
            ],
        )
        .await?;
    let uuid = channel["uuid"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("no channel uuid"))?
        .to_owned();
    Ok((db, uuid))
}

/// The two loops (texts, every kind) against one server of `bin`; `counter` numbers the
/// messages across runs (provider ids stay unique in the database).
async fn measure(
    args: &Args,
    bin: &std::path::Path,
    db: &Database,
    channel: &str,
    counter: &Arc<AtomicU64>,
) -> anyhow::Result<(Rate, Rate)> {
    let srv = Server::start(bin, db).await?;
    let client = load::client();
    let url = srv.url(&format!("/inbound/{channel}"));
    let mut rates = Vec::new();
    for kinds in [false, true] {
        let (url, counter) = (url.clone(), counter.clone());
        let rate = load::closed_loop(&client, args, move |_, _| {
            let n = counter.fetch_add(1, Ordering::Relaxed);
            let body = callback(kinds.then_some(n as usize), n);
            load::Req::Signed {
                url: url.clone(),
                header: ("x-hub-signature-256", signature(&body)),
                body,
            }
        })
        .await;
        rates.push(rate);
    }
    srv.stop().await;
    let kinds = rates.pop().expect("two runs");
    Ok((rates.pop().expect("two runs"), kinds))
}

pub async fn inbound(
    args: &Args,
    bin: &std::path::Path,
    backend: Backend,
) -> anyhow::Result<InboundResults> {
    let (db, channel) = prepare(args, bin, backend).await?;
    // The baseline build gets a database of its own (it does not know the newer migrations).
    let baseline = match &args.baseline_bin {
        Some(b) => Some((b, prepare(args, b, backend).await?)),
        None => None,
    };
    let counter = Arc::new(AtomicU64::new(0));
    let rounds = 2;
    let (mut now, mut base) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        if let Some((bin, (db, channel))) = &baseline {
            eprintln!("  round {}: the baseline build", round + 1);
            base.push(measure(args, bin, db, channel, &counter).await?);
        }
        eprintln!("  round {}: this build", round + 1);
        now.push(measure(args, bin, &db, &channel, &counter).await?);
    }
    let mean = |runs: &[(Rate, Rate)], pick: fn(&(Rate, Rate)) -> f64| {
        runs.iter().map(pick).sum::<f64>() / runs.len() as f64
    };
    let failed = now
        .iter()
        .chain(&base)
        .map(|(a, b)| a.failed + b.failed)
        .sum();
    let results = InboundResults {
        rounds,
        connections: args.connections,
        texts_per_sec: mean(&now, |r| r.0.per_sec),
        kinds_per_sec: mean(&now, |r| r.1.per_sec),
        texts_p50_ms: mean(&now, |r| r.0.latency.as_ref().map_or(0.0, |l| l.p50_ms)),
        kinds_p50_ms: mean(&now, |r| r.1.latency.as_ref().map_or(0.0, |l| l.p50_ms)),
        texts_per_sec_baseline: (!base.is_empty()).then(|| mean(&base, |r| r.0.per_sec)),
        kinds_per_sec_baseline: (!base.is_empty()).then(|| mean(&base, |r| r.1.per_sec)),
        failed,
    };
    db.drop_database().await;
    if let Some((_, (db, _))) = baseline {
        db.drop_database().await;
    }
    Ok(results)
}
