//! Per-endpoint throttle (`max_per_second`): an endpoint's attempts are spread evenly, one per
//! `switchboard_domain::webhooks::endpoint::throttle_interval_us` (10 % wider than the exact
//! rate), so that no one-second window holds more than the rate. The state is one time per
//! endpoint (the theoretical arrival time of its next attempt: GCRA with no burst, the rule of
//! `switchboard_domain::pacing::pace`), shared across instances through Redis when it is
//! configured, else this process's own (and this process's own for a few seconds after a Redis
//! failure).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use uuid::Uuid;

use crate::shared_redis::{Fallback, SharedRedis};
use switchboard_domain::pacing::{Pace, PaceState, pace};
use switchboard_domain::webhooks::endpoint::throttle_interval_us;

/// The Redis side of [`pace`] without a recipient: KEYS[1] = the endpoint's next slot; ARGV =
/// the interval, the bound (µs). Returns {go (0|1), µs}.
const THROTTLE_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local bound = tonumber(ARGV[2])
local slot = tonumber(redis.call('GET', KEYS[1]) or now)
if slot < now then slot = now end
if slot - now > bound then return {0, slot - now} end
redis.call('SET', KEYS[1], string.format('%d', slot + interval), 'PX', math.floor((slot + interval - now) / 1000) + 1000)
return {1, slot - now}
"#;

/// Where the throttle's state lives.
pub struct Throttle {
    local: Mutex<HashMap<Uuid, i64>>,
    redis: Option<(SharedRedis, redis::Script, Fallback)>,
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX / 4))
        .unwrap_or(0)
}

impl Throttle {
    /// A throttle whose state is this process's.
    pub fn local() -> Throttle {
        Throttle {
            local: Mutex::default(),
            redis: None,
        }
    }

    /// A throttle whose state is in Redis (this process's own while Redis fails).
    pub fn shared(redis: SharedRedis) -> Throttle {
        Throttle {
            redis: Some((redis, redis::Script::new(THROTTLE_LUA), Fallback::default())),
            ..Throttle::local()
        }
    }

    /// Asks for an attempt to `endpoint` at `max_per_second`, going within `bound`: `Go`
    /// reserves the slot (the caller waits `wait_us`, then makes the attempt), `Later`
    /// reserves nothing.
    pub async fn reserve(&self, endpoint: Uuid, max_per_second: u32, bound: Duration) -> Pace {
        let interval = throttle_interval_us(max_per_second);
        let bound_us = i64::try_from(bound.as_micros()).unwrap_or(i64::MAX / 4);
        if let Some((redis, script, fallback)) = &self.redis {
            let now_ms = now_us() / 1000;
            if fallback.use_redis(now_ms) {
                let mut invocation = script.key(format!(
                    "switchboard:{}:throttle:ep:{endpoint}",
                    redis.namespace
                ));
                invocation.arg(interval).arg(bound_us);
                match redis.invoke::<(i64, i64)>(&invocation).await {
                    Ok((1, wait_us)) => return Pace::Go { wait_us },
                    Ok((_, after_us)) => return Pace::Later { after_us },
                    Err(e) => {
                        fallback.failed(now_ms);
                        metrics::counter!("switchboard_webhook_throttle_redis_errors_total")
                            .increment(1);
                        tracing::warn!(error = %e, "Redis throttling failed; throttling endpoints with this instance's own state for a few seconds");
                    }
                }
            }
        }
        self.reserve_local(endpoint, interval, bound_us)
    }

    fn reserve_local(&self, endpoint: Uuid, interval: i64, bound_us: i64) -> Pace {
        let now = now_us();
        let mut local = self
            .local
            .lock()
            .expect("the throttle state is never poisoned");
        if local.len() > 10_000 {
            local.retain(|_, t| *t > now);
        }
        let state = PaceState {
            channel_tat: local.get(&endpoint).copied(),
            recipient_next: None,
        };
        let (decision, next) = pace(state, now, interval, 0, bound_us);
        if let (Pace::Go { .. }, Some(t)) = (decision, next.channel_tat) {
            local.insert(endpoint, t);
        }
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn local_slots_are_spread_at_the_rate() {
        let t = Throttle::local();
        let e = Uuid::new_v4();
        let bound = Duration::from_secs(5);
        let mut waits = Vec::new();
        for _ in 0..5 {
            match t.reserve(e, 4, bound).await {
                Pace::Go { wait_us } => waits.push(wait_us),
                later => panic!("within the bound: {later:?}"),
            }
        }
        // One slot every 1.1 / 4 s, the first at once.
        let step = throttle_interval_us(4);
        assert!(waits[0] <= 1_000, "{waits:?}");
        for pair in waits.windows(2) {
            let gap = pair[1] - pair[0];
            assert!((step - 1_000..=step + 1_000).contains(&gap), "{waits:?}");
        }
        // Beyond the bound: nothing reserved.
        match t.reserve(e, 4, Duration::from_millis(100)).await {
            Pace::Later { after_us } => assert!(after_us > 100_000),
            go => panic!("beyond the bound: {go:?}"),
        }
        // Another endpoint is not held up.
        assert!(matches!(
            t.reserve(Uuid::new_v4(), 4, Duration::ZERO).await,
            Pace::Go { wait_us } if wait_us <= 1_000
        ));
    }
}
