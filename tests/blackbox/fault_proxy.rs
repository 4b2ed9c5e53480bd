//! Fault injection: a TCP proxy in front of a dependency (PostgreSQL, Redis) that a test can
//! take down (every connection is cut and new ones are refused) and bring back, or freeze
//! (connections stay open, new ones are accepted, nothing is forwarded) and thaw.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub addr: std::net::SocketAddr,
    down: Arc<AtomicBool>,
    cut: watch::Sender<u64>,
    frozen: watch::Sender<bool>,
}

impl Proxy {
    /// Starts a proxy on a random local port forwarding to `target` (`host:port`).
    pub async fn start(target: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let down = Arc::new(AtomicBool::new(false));
        let (cut, _) = watch::channel(0u64);
        let (frozen, _) = watch::channel(false);
        let target = target.to_owned();
        let is_down = down.clone();
        let cut_rx = cut.subscribe();
        let frozen_rx = frozen.subscribe();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if is_down.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let target = target.clone();
                let mut cut_rx = cut_rx.clone();
                let mut frozen_rx = frozen_rx.clone();
                // Only cuts that happen after this connection was accepted apply to it.
                cut_rx.borrow_and_update();
                tokio::spawn(async move {
                    let frozen = *frozen_rx.borrow_and_update();
                    if frozen {
                        // Frozen: the connection is accepted and answered by nothing.
                        let _held = client;
                        let _ = cut_rx.changed().await;
                        return;
                    }
                    let Ok(upstream) = TcpStream::connect(&target).await else {
                        return;
                    };
                    let (mut a, mut b) = (client, upstream);
                    let froze = tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut a, &mut b) => false,
                        _ = cut_rx.changed() => false,
                        r = frozen_rx.wait_for(|f| *f) => r.is_ok(),
                    };
                    if froze {
                        // Frozen: both ends stay open, nothing more is forwarded.
                        let _ = cut_rx.changed().await;
                    }
                });
            }
        });
        Proxy {
            addr,
            down,
            cut,
            frozen,
        }
    }

    /// Stops forwarding without closing anything: open connections hang, new ones are accepted
    /// and hang too (a dependency that is up but frozen).
    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    /// Ends a freeze: the hung connections are closed, new ones are forwarded again.
    pub fn thaw(&self) {
        self.frozen.send_replace(false);
        self.cut.send_modify(|n| *n += 1);
    }

    /// Cuts every connection and refuses new ones.
    pub fn take_down(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }

    pub fn bring_up(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

/// Rewrites the host and port of a URL to go through `proxy`.
pub fn via(url: &str, proxy: &Proxy) -> String {
    let mut u = url::Url::parse(url).unwrap();
    u.set_host(Some("127.0.0.1")).unwrap();
    u.set_port(Some(proxy.addr.port())).unwrap();
    u.to_string()
}
