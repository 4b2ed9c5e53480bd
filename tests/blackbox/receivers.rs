//! Real HTTP receivers for webhook tests: a server on a random local port that records every
//! request (path, headers, raw body, arrival time) and answers as told, per path: any status,
//! with a `Retry-After`, after a delay, with a huge body, with a redirect, by hanging, or by
//! closing the connection without an answer.

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Notify;

/// How a receiver answers one request.
#[derive(Clone, Debug)]
pub enum Behaviour {
    /// This status with a short body.
    Status(u16),
    /// This status and a `Retry-After` header.
    RetryAfter(u16, String),
    /// This status after a delay.
    Slow(Duration, u16),
    /// 200 with a body of this many bytes.
    HugeBody(usize),
    /// This redirect status with a `Location`.
    Redirect(u16, String),
    /// Never answers (the connection stays open).
    Hang,
    /// Reads the request, then closes the connection without an answer.
    Close,
}

/// One request as received.
#[derive(Clone, Debug)]
pub struct ReceivedRequest {
    pub path: String,
    pub method: String,
    /// Header names in lower case.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    pub at: SystemTime,
    pub instant: Instant,
}

impl ReceivedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("the body is JSON")
    }

    pub fn attempt(&self) -> u32 {
        self.header("x-switchboard-attempt")
            .and_then(|a| a.parse().ok())
            .expect("X-Switchboard-Attempt")
    }

    pub fn delivery(&self) -> String {
        self.header("x-switchboard-delivery")
            .expect("X-Switchboard-Delivery")
            .to_owned()
    }

    pub fn event(&self) -> String {
        self.header("x-switchboard-event")
            .expect("X-Switchboard-Event")
            .to_owned()
    }
}

#[derive(Default)]
struct State {
    defaults: HashMap<String, Behaviour>,
    scripts: HashMap<String, VecDeque<Behaviour>>,
    /// Per path: requests whose body contains the text get the behaviour (before scripts and
    /// defaults).
    rules: HashMap<String, Vec<(String, Behaviour)>>,
    requests: Vec<ReceivedRequest>,
}

/// A running receiver; it stops when dropped.
pub struct Receiver {
    pub port: u16,
    state: Arc<Mutex<State>>,
    arrived: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// Starts a receiver on `127.0.0.1` and a random port. Every path answers 200 unless told
    /// otherwise.
    pub async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let arrived = Arc::new(Notify::new());
        let (s, a) = (state.clone(), arrived.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (s, a) = (s.clone(), a.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req| handle(req, s.clone(), a.clone()));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Receiver {
            port,
            state,
            arrived,
            task,
        }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// How `path` answers from now on (after any script).
    pub fn respond(&self, path: &str, b: Behaviour) {
        self.state
            .lock()
            .unwrap()
            .defaults
            .insert(path.to_owned(), b);
    }

    /// How the next requests to `path` are answered, in order (then the default).
    /// Requests to `path` whose body contains `needle` get `b` (until `clear_rules`).
    pub fn when_body_contains(&self, path: &str, needle: &str, b: Behaviour) {
        self.state
            .lock()
            .unwrap()
            .rules
            .entry(path.to_owned())
            .or_default()
            .push((needle.to_owned(), b));
    }

    pub fn clear_rules(&self, path: &str) {
        self.state.lock().unwrap().rules.remove(path);
    }

    pub fn script(&self, path: &str, bs: Vec<Behaviour>) {
        self.state
            .lock()
            .unwrap()
            .scripts
            .entry(path.to_owned())
            .or_default()
            .extend(bs);
    }

    /// The requests received on `path`, in arrival order.
    pub fn requests(&self, path: &str) -> Vec<ReceivedRequest> {
        self.state
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    /// Every request received.
    pub fn all(&self) -> Vec<ReceivedRequest> {
        self.state.lock().unwrap().requests.clone()
    }

    /// Waits until `path` has received at least `n` requests; panics after `deadline`.
    pub async fn wait_for(&self, path: &str, n: usize, deadline: Duration) -> Vec<ReceivedRequest> {
        self.wait_until(deadline, |all| {
            all.iter().filter(|r| r.path == path).count() >= n
        })
        .await;
        self.requests(path)
    }

    /// Waits until `pred` holds for the requests received; panics after `deadline`.
    pub async fn wait_until(
        &self,
        deadline: Duration,
        pred: impl Fn(&[ReceivedRequest]) -> bool,
    ) -> Vec<ReceivedRequest> {
        let end = tokio::time::Instant::now() + deadline;
        loop {
            let notified = self.arrived.notified();
            {
                let all = self.all();
                if pred(&all) {
                    return all;
                }
            }
            if tokio::time::timeout_at(end, notified).await.is_err() {
                let all = self.all();
                if pred(&all) {
                    return all;
                }
                let summary: Vec<String> = all
                    .iter()
                    .map(|r| {
                        format!(
                            "{} {} attempt={:?}",
                            r.path,
                            r.header("x-switchboard-event").unwrap_or("-"),
                            r.header("x-switchboard-attempt")
                        )
                    })
                    .collect();
                panic!(
                    "the receiver did not get the expected requests within {deadline:?}; got {}: {summary:#?}",
                    all.len()
                );
            }
        }
    }
}

fn next_behaviour(state: &Mutex<State>, path: &str, body: &[u8]) -> Behaviour {
    let mut s = state.lock().unwrap();
    let text = String::from_utf8_lossy(body);
    if let Some((_, b)) = s.rules.get(path).and_then(|rules| {
        rules
            .iter()
            .find(|(needle, _)| text.contains(needle.as_str()))
    }) {
        return b.clone();
    }
    if let Some(b) = s.scripts.get_mut(path).and_then(VecDeque::pop_front) {
        return b;
    }
    s.defaults
        .get(path)
        .cloned()
        .unwrap_or(Behaviour::Status(200))
}

fn reply(status: u16, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    r
}

async fn handle(
    req: Request<Incoming>,
    state: Arc<Mutex<State>>,
    arrived: Arc<Notify>,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    let path = req.uri().path().to_owned();
    let method = req.method().to_string();
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    let behaviour = next_behaviour(&state, &path, &body);
    state.lock().unwrap().requests.push(ReceivedRequest {
        path,
        method,
        headers,
        body,
        at: SystemTime::now(),
        instant: Instant::now(),
    });
    arrived.notify_waiters();
    match behaviour {
        Behaviour::Status(s) => Ok(reply(s, Bytes::from_static(b"{\"received\":true}"))),
        Behaviour::RetryAfter(s, after) => {
            let mut r = reply(s, Bytes::from_static(b"slow down"));
            r.headers_mut()
                .insert("retry-after", after.parse().expect("header value"));
            Ok(r)
        }
        Behaviour::Slow(d, s) => {
            tokio::time::sleep(d).await;
            Ok(reply(s, Bytes::from_static(b"slow answer")))
        }
        Behaviour::HugeBody(n) => Ok(reply(200, Bytes::from(vec![b'x'; n]))),
        Behaviour::Redirect(s, to) => {
            let mut r = reply(s, Bytes::new());
            r.headers_mut()
                .insert("location", to.parse().expect("header value"));
            Ok(r)
        }
        Behaviour::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok(reply(200, Bytes::new()))
        }
        Behaviour::Close => Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "closing without an answer",
        )),
    }
}
