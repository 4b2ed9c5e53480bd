//! A file server on a loopback port for media sends: serves named files (with a
//! `Content-Length`), endless bodies without one (chunked), and counts the requests per path.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The smallest valid PNG (1x1, transparent).
pub const PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE,
    0x42, 0x60, 0x82,
];

/// A PDF header followed by `size` bytes in all.
pub fn pdf(size: usize) -> Vec<u8> {
    let mut v = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n".to_vec();
    v.resize(size.max(v.len()), b'x');
    v
}

/// A WebP (RIFF/WEBP) header followed by `size` bytes in all.
pub fn webp(size: usize) -> Vec<u8> {
    let mut v = b"RIFF\x24\0\0\0WEBPVP8 \x18\0\0\0\x30\x01\0\x9d\x01\x2a".to_vec();
    v.resize(size.max(v.len()), 0);
    v
}

#[derive(Clone)]
enum Item {
    File(Arc<Vec<u8>>, &'static str),
    /// A body with no `Content-Length` that repeats this chunk up to `total` bytes.
    Endless(Arc<Vec<u8>>, u64),
    Status(u16),
    /// Never answers.
    Hang,
}

#[derive(Default)]
struct Inner {
    items: Mutex<HashMap<String, Item>>,
    hits: Mutex<HashMap<String, u64>>,
}

/// A running media server.
#[derive(Clone)]
pub struct MediaServer {
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    inner: Arc<Inner>,
}

impl MediaServer {
    pub async fn start() -> MediaServer {
        let inner = Arc::new(Inner::default());
        let app = Router::new()
            .route("/{*path}", get(serve))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        MediaServer {
            base_url: format!("http://{addr}"),
            inner,
        }
    }

    /// The URL of `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// Serves `bytes` at `path` with this content type and a `Content-Length`.
    pub fn file(&self, path: &str, bytes: Vec<u8>, content_type: &'static str) {
        self.put(path, Item::File(Arc::new(bytes), content_type));
    }

    /// Serves at `path` a chunked body (no `Content-Length`) that starts with `head` and goes
    /// on up to `total` bytes.
    pub fn endless(&self, path: &str, head: &[u8], total: u64) {
        let mut chunk = head.to_vec();
        chunk.resize(64 * 1024, 0);
        self.put(path, Item::Endless(Arc::new(chunk), total));
    }

    /// Answers `status` at `path`.
    pub fn status(&self, path: &str, status: u16) {
        self.put(path, Item::Status(status));
    }

    /// Never answers at `path` (the client's time limit ends the request).
    pub fn hang(&self, path: &str) {
        self.put(path, Item::Hang);
    }

    /// How many requests `path` got.
    pub fn hits(&self, path: &str) -> u64 {
        self.inner
            .hits
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    fn put(&self, path: &str, item: Item) {
        self.inner
            .items
            .lock()
            .unwrap()
            .insert(path.to_owned(), item);
    }
}

async fn serve(State(inner): State<Arc<Inner>>, Path(path): Path<String>) -> Response {
    let path = format!("/{path}");
    *inner.hits.lock().unwrap().entry(path.clone()).or_default() += 1;
    let item = inner.items.lock().unwrap().get(&path).cloned();
    match item {
        None => StatusCode::NOT_FOUND.into_response(),
        Some(Item::Status(s)) => StatusCode::from_u16(s).unwrap().into_response(),
        Some(Item::Hang) => std::future::pending().await,
        Some(Item::File(bytes, content_type)) => (
            [("content-type", content_type)],
            Body::from(bytes.as_ref().clone()),
        )
            .into_response(),
        Some(Item::Endless(chunk, total)) => {
            let n = total.div_ceil(chunk.len() as u64);
            let stream =
                futures::stream::iter((0..n).map(move |_| {
                    Ok::<_, std::io::Error>(axum::body::Bytes::copy_from_slice(&chunk))
                }));
            (
                [("content-type", "application/octet-stream")],
                Body::from_stream(stream),
            )
                .into_response()
        }
    }
}
