//! A local webhook receiver that answers 200 at once and records when each delivery arrived.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;

use crate::report::Latency;

#[derive(Default)]
struct Inner {
    /// Event-to-arrival times in milliseconds.
    latencies: Vec<f64>,
    count: usize,
    first: Option<std::time::Instant>,
    last: Option<std::time::Instant>,
    sample: Option<Vec<u8>>,
}

#[derive(Clone)]
pub struct Receiver {
    addr: std::net::SocketAddr,
    inner: Arc<Mutex<Inner>>,
}

async fn receive(State(inner): State<Arc<Mutex<Inner>>>, body: Bytes) -> &'static str {
    let now = chrono::Utc::now();
    let occurred = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v["metadata"]["occurred_at"]
                .as_str()
                .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        });
    let arrived = std::time::Instant::now();
    let mut i = inner.lock().unwrap();
    i.count += 1;
    i.first.get_or_insert(arrived);
    i.last = Some(arrived);
    if let Some(at) = occurred {
        i.latencies.push(
            (now - at.with_timezone(&chrono::Utc))
                .num_microseconds()
                .unwrap_or(0) as f64
                / 1000.0,
        );
    }
    if i.sample.is_none() {
        i.sample = Some(body.to_vec());
    }
    "ok"
}

impl Receiver {
    pub async fn start() -> anyhow::Result<Receiver> {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let app = Router::new()
            .route("/hook/{n}", post(receive))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Receiver { addr, inner })
    }

    /// The URL of the receiver's `n`th hook (each endpoint gets its own URL).
    pub fn url(&self, n: usize) -> String {
        format!("http://{}/hook/{n}", self.addr)
    }

    pub fn reset(&self) {
        let mut i = self.inner.lock().unwrap();
        i.latencies.clear();
        i.count = 0;
        i.first = None;
        i.last = None;
    }

    pub fn count(&self) -> usize {
        self.inner.lock().unwrap().count
    }

    pub fn sample_body(&self) -> Option<Vec<u8>> {
        self.inner.lock().unwrap().sample.clone()
    }

    /// Waits until `n` deliveries arrived or `deadline` passed.
    pub async fn wait_for(&self, n: usize, deadline: Duration) -> bool {
        let end = tokio::time::Instant::now() + deadline;
        while tokio::time::Instant::now() < end {
            if self.count() >= n {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    }

    /// Arrivals per second between the first and the last arrival since the last reset.
    pub fn arrival_rate(&self) -> Option<f64> {
        let i = self.inner.lock().unwrap();
        let span = i.last?.duration_since(i.first?).as_secs_f64();
        (span > 0.0 && i.count > 1).then(|| (i.count - 1) as f64 / span)
    }

    /// Arrivals since the last reset, and the time from the first to the last of them, read
    /// together.
    pub fn arrivals(&self) -> (usize, Duration) {
        let i = self.inner.lock().unwrap();
        let span = match (i.first, i.last) {
            (Some(first), Some(last)) => last.duration_since(first),
            _ => Duration::ZERO,
        };
        (i.count, span)
    }

    pub fn latency_summary(&self) -> Option<Latency> {
        Latency::from_samples(self.inner.lock().unwrap().latencies.clone())
    }
}
