//! The Redis connection shared state goes through (rate limits, provider pacing), when
//! `SWITCHBOARD_REDIS_URL` is set: one reconnecting connection manager per process. A malformed
//! URL is an error; an unreachable Redis is not: the instance starts with its own state
//! (warning) and keeps trying to connect in the background. Users fall back to their local
//! state while Redis fails (see [`Fallback`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

/// How long one Redis call may take before the caller falls back to its local state.
pub const REDIS_TIMEOUT: Duration = Duration::from_millis(250);
/// After a Redis failure, how long to use the local state before trying Redis again.
const REDIS_BACKOFF_MS: i64 = 5_000;

/// A Redis connection (once connected) and the deployment's key namespace.
#[derive(Clone)]
pub struct SharedRedis {
    /// Set once the first connection succeeds; the manager reconnects by itself afterwards.
    conn: Arc<std::sync::OnceLock<redis::aio::ConnectionManager>>,
    /// Distinguishes deployments that share one Redis: `switchboard:{namespace}:...`.
    pub namespace: String,
}

impl SharedRedis {
    pub async fn connect(url: &str, namespace: &str) -> Result<SharedRedis, String> {
        let client = redis::Client::open(url).map_err(|e| format!("SWITCHBOARD_REDIS_URL: {e}"))?;
        let conn = Arc::new(std::sync::OnceLock::new());
        match Self::open(&client).await {
            Ok(c) => {
                let _ = conn.set(c);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot connect to Redis; rate limits and pacing are per instance until it is reachable");
                let slot = conn.clone();
                tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        if let Ok(c) = Self::open(&client).await {
                            let _ = slot.set(c);
                            tracing::info!(
                                "connected to Redis; rate limits and pacing are shared again"
                            );
                            return;
                        }
                    }
                });
            }
        }
        Ok(SharedRedis {
            conn,
            namespace: namespace.to_owned(),
        })
    }

    async fn open(client: &redis::Client) -> Result<redis::aio::ConnectionManager, String> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Duration::from_secs(2))
            .set_response_timeout(Duration::from_secs(1))
            .set_number_of_retries(1);
        tokio::time::timeout(
            Duration::from_secs(3),
            redis::aio::ConnectionManager::new_with_config(client.clone(), config),
        )
        .await
        .map_err(|_| "timed out".to_owned())?
        .map_err(|e| e.to_string())
    }

    /// The connection, once connected.
    pub fn connection(&self) -> Result<redis::aio::ConnectionManager, String> {
        self.conn
            .get()
            .cloned()
            .ok_or_else(|| "not connected".to_owned())
    }

    /// Runs a script with a timeout.
    pub async fn invoke<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, String> {
        let mut conn = self.connection()?;
        tokio::time::timeout(REDIS_TIMEOUT, invocation.invoke_async(&mut conn))
            .await
            .map_err(|_| "timed out".to_owned())?
            .map_err(|e| e.to_string())
    }
}

/// When to skip Redis after a failure.
#[derive(Default)]
pub struct Fallback {
    /// While now < this (ms), skip Redis and use the local state.
    skip_until_ms: AtomicI64,
}

impl Fallback {
    pub fn use_redis(&self, now_ms: i64) -> bool {
        now_ms >= self.skip_until_ms.load(Ordering::Relaxed)
    }

    pub fn failed(&self, now_ms: i64) {
        self.skip_until_ms
            .store(now_ms + REDIS_BACKOFF_MS, Ordering::Relaxed);
    }
}
