//! Rate limits per credential and class (specification 8, CONVENTIONS.md "Rate limits").
//!
//! The algorithm is GCRA (the generic cell rate algorithm): a limit of `q` requests per 60 s
//! admits a burst of `q` and then one request every `60/q` s, so a client never sees a
//! window boundary. The state of a bucket is one number, its *theoretical arrival time*
//! (TAT). In-process by default; with `SWITCHBOARD_REDIS_URL` the TAT lives in Redis and is
//! updated by one Lua script using Redis's clock, so every instance enforces one budget. If
//! Redis fails, the instance falls back to its own limits (with a warning and a metric)
//! instead of refusing traffic or letting it through unlimited.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, Method};
use dashmap::DashMap;

use crate::shared_redis::{Fallback, SharedRedis};
use switchboard_domain::clock::SharedClock;

/// One minute, in microseconds.
const WINDOW_US: i64 = 60_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitClass {
    Reads,
    Sends,
    Tests,
    /// The items of batch sends (counted by the batch handler, a batch's cost its item count).
    BatchItems,
}

impl LimitClass {
    pub const fn policy(self) -> &'static str {
        match self {
            LimitClass::Reads => "reads",
            LimitClass::Sends => "sends",
            LimitClass::Tests => "tests",
            LimitClass::BatchItems => "batch_items",
        }
    }

    /// The class of a request, from its method and matched route template.
    pub fn of(method: &Method, route: &str) -> LimitClass {
        if method == Method::POST {
            if matches!(
                route,
                "/api/v1/integrations/messages"
                    | "/api/v1/integrations/messages/media"
                    | "/api/v1/integrations/messages/template"
                    | "/api/v1/integrations/messages/batch"
                    | "/api/send"
                    | "/api/send/media"
                    | "/api/send/template"
                    | "/api/flows/{id}/trigger"
            ) {
                return LimitClass::Sends;
            }
            if matches!(
                route,
                "/api/v1/integrations/webhook-endpoints/{uuid}/test"
                    | "/api/v1/integrations/webhook-events/{name}/trigger"
            ) {
                return LimitClass::Tests;
            }
        }
        LimitClass::Reads
    }
}

/// The outcome of one check, with everything the response headers need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub class: LimitClass,
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    /// Seconds until the bucket is full again.
    pub reset_secs: u64,
    /// Seconds until a request will be admitted (0 when allowed).
    pub retry_after_secs: u64,
}

impl Decision {
    /// Computes the decision from the TAT offset (`tat - now`, µs) after the check.
    fn from_offset(class: LimitClass, limit: u32, allowed: bool, offset_us: i64) -> Decision {
        let interval = WINDOW_US / i64::from(limit.max(1));
        let offset_us = offset_us.max(0);
        let remaining = if allowed {
            ((WINDOW_US - offset_us).max(0) / interval.max(1)) as u32
        } else {
            0
        };
        let retry_after_us = if allowed {
            0
        } else {
            (offset_us + interval - WINDOW_US).max(0)
        };
        Decision {
            class,
            allowed,
            limit,
            remaining: remaining.min(limit),
            reset_secs: ceil_secs(offset_us),
            retry_after_secs: ceil_secs(retry_after_us).max(u64::from(!allowed)),
        }
    }

    /// Adds the rate-limit headers to a response.
    pub fn apply(&self, headers: &mut HeaderMap) {
        let policy = self.class.policy();
        let mut set = |name: &'static str, value: String| {
            if let Ok(v) = HeaderValue::from_str(&value) {
                headers.insert(name, v);
            }
        };
        set("ratelimit-limit", self.limit.to_string());
        set("ratelimit-remaining", self.remaining.to_string());
        set("ratelimit-reset", self.reset_secs.to_string());
        set(
            "ratelimit-policy",
            format!("\"{policy}\";q={};w=60", self.limit),
        );
        set(
            "ratelimit",
            format!("\"{policy}\";r={};t={}", self.remaining, self.reset_secs),
        );
        if !self.allowed {
            set("retry-after", self.retry_after_secs.to_string());
        }
    }
}

fn ceil_secs(us: i64) -> u64 {
    (us.max(0) as u64).div_ceil(1_000_000)
}

/// One GCRA step for `cost` requests. Returns (allowed, new TAT).
fn gcra(tat_us: Option<i64>, now_us: i64, limit: u32, cost: u32) -> (bool, i64) {
    let interval = WINDOW_US / i64::from(limit.max(1)) * i64::from(cost.max(1));
    let tat = tat_us.unwrap_or(now_us).max(now_us);
    let new_tat = tat + interval;
    if new_tat - now_us > WINDOW_US {
        (false, tat)
    } else {
        (true, new_tat)
    }
}

/// Bucket key: credential id and class.
type BucketKey = (i64, LimitClass);

pub struct RateLimiter {
    clock: SharedClock,
    local: DashMap<BucketKey, i64>,
    redis: Option<RedisLimiter>,
}

struct RedisLimiter {
    redis: SharedRedis,
    script: redis::Script,
    fallback: Fallback,
}

/// The Redis side of GCRA. KEYS[1] = bucket, ARGV[1] = interval (µs), ARGV[2] = window (µs).
/// Returns {allowed (0|1), tat - now (µs)}.
const GCRA_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
if new_tat - now > window then
  return {0, tat - now}
end
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.floor(window / 1000) + 1000)
return {1, new_tat - now}
"#;

impl RateLimiter {
    pub fn local(clock: SharedClock) -> Arc<RateLimiter> {
        Arc::new(RateLimiter {
            clock,
            local: DashMap::new(),
            redis: None,
        })
    }

    /// A limiter that shares its buckets through Redis (see [`SharedRedis`]).
    pub fn with_redis(clock: SharedClock, redis: SharedRedis) -> Arc<RateLimiter> {
        Arc::new(RateLimiter {
            clock,
            local: DashMap::new(),
            redis: Some(RedisLimiter {
                redis,
                script: redis::Script::new(GCRA_LUA),
                fallback: Fallback::default(),
            }),
        })
    }

    pub fn is_shared(&self) -> bool {
        self.redis.is_some()
    }

    /// Counts one request of `class` for credential `key_id` against `limit` per minute.
    pub async fn check(&self, key_id: i64, class: LimitClass, limit: u32) -> Decision {
        self.check_cost(key_id, class, limit, 1).await
    }

    /// Counts `cost` requests at once (a batch's items); all or none are admitted.
    pub async fn check_cost(
        &self,
        key_id: i64,
        class: LimitClass,
        limit: u32,
        cost: u32,
    ) -> Decision {
        if let Some(redis) = &self.redis {
            let now_ms = self.clock.now().millis();
            if redis.fallback.use_redis(now_ms) {
                match self.check_redis(redis, key_id, class, limit, cost).await {
                    Ok(d) => return d,
                    Err(e) => {
                        redis.fallback.failed(now_ms);
                        metrics::counter!("switchboard_rate_limit_redis_errors_total").increment(1);
                        tracing::warn!(error = %e, "Redis rate limiting failed; using this instance's own limits for a few seconds");
                    }
                }
            }
            metrics::counter!("switchboard_rate_limit_local_fallback_total").increment(1);
        }
        self.check_local(key_id, class, limit, cost)
    }

    fn check_local(&self, key_id: i64, class: LimitClass, limit: u32, cost: u32) -> Decision {
        let now_us = self.clock.now().millis() * 1000;
        let mut entry = self.local.entry((key_id, class)).or_insert(now_us);
        let (allowed, tat) = gcra(Some(*entry), now_us, limit, cost);
        *entry = tat;
        Decision::from_offset(class, limit, allowed, tat - now_us)
    }

    async fn check_redis(
        &self,
        redis: &RedisLimiter,
        key_id: i64,
        class: LimitClass,
        limit: u32,
        cost: u32,
    ) -> Result<Decision, String> {
        let interval = WINDOW_US / i64::from(limit.max(1)) * i64::from(cost.max(1));
        let key = format!(
            "switchboard:{}:rl:{}:{key_id}",
            redis.redis.namespace,
            class.policy()
        );
        let mut invocation = redis.script.key(key);
        invocation.arg(interval).arg(WINDOW_US);
        let (allowed, offset): (i64, i64) = redis.redis.invoke(&invocation).await?;
        Ok(Decision::from_offset(class, limit, allowed == 1, offset))
    }

    /// Forgets local buckets that are full again (called periodically).
    pub fn prune(&self) {
        let now_us = self.clock.now().millis() * 1000;
        self.local.retain(|_, tat| *tat > now_us);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use switchboard_domain::Timestamp;
    use switchboard_domain::clock::ManualClock;

    #[tokio::test]
    async fn admits_a_burst_then_refills_steadily() {
        let clock = ManualClock::new(Timestamp::from_millis(1_000_000));
        let limiter = RateLimiter::local(clock.clone());
        for i in 0..5 {
            let d = limiter.check(1, LimitClass::Reads, 5).await;
            assert!(d.allowed, "request {i}");
            assert_eq!(d.remaining, 4 - i);
        }
        let d = limiter.check(1, LimitClass::Reads, 5).await;
        assert!(!d.allowed);
        assert_eq!(d.remaining, 0);
        assert_eq!(d.retry_after_secs, 12);
        assert_eq!(d.reset_secs, 60);
        // Other classes and other keys have their own buckets.
        assert!(limiter.check(1, LimitClass::Sends, 5).await.allowed);
        assert!(limiter.check(2, LimitClass::Reads, 5).await.allowed);
        // One interval later, exactly one more request is admitted.
        clock.advance(Duration::from_secs(12));
        assert!(limiter.check(1, LimitClass::Reads, 5).await.allowed);
        assert!(!limiter.check(1, LimitClass::Reads, 5).await.allowed);
        // After a full window the bucket is full again.
        clock.advance(Duration::from_secs(60));
        assert_eq!(limiter.check(1, LimitClass::Reads, 5).await.remaining, 4);
    }

    #[test]
    fn headers_follow_the_conventions() {
        let d = Decision::from_offset(LimitClass::Reads, 120, true, 1_500_000);
        assert_eq!(d.remaining, 117);
        let mut h = HeaderMap::new();
        d.apply(&mut h);
        assert_eq!(h["ratelimit-policy"], "\"reads\";q=120;w=60");
        assert_eq!(h["ratelimit"], "\"reads\";r=117;t=2");
        assert_eq!(h["ratelimit-limit"], "120");
        assert_eq!(h["ratelimit-remaining"], "117");
        assert_eq!(h["ratelimit-reset"], "2");
        assert!(h.get("retry-after").is_none());
    }

    #[test]
    fn classes_by_route() {
        assert_eq!(
            LimitClass::of(&Method::POST, "/api/v1/integrations/messages"),
            LimitClass::Sends
        );
        assert_eq!(
            LimitClass::of(&Method::POST, "/api/send/template"),
            LimitClass::Sends
        );
        assert_eq!(
            LimitClass::of(&Method::GET, "/api/v1/integrations/messages"),
            LimitClass::Reads
        );
        assert_eq!(
            LimitClass::of(
                &Method::POST,
                "/api/v1/integrations/webhook-endpoints/{uuid}/test"
            ),
            LimitClass::Tests
        );
        assert_eq!(
            LimitClass::of(&Method::POST, "/api/v1/integrations/webhook-endpoints"),
            LimitClass::Reads
        );
    }

    #[tokio::test]
    async fn falls_back_to_local_limits_when_redis_is_unreachable() {
        let clock = ManualClock::new(Timestamp::from_millis(1_000_000));
        let limiter = RateLimiter::with_redis(
            clock,
            SharedRedis::connect("redis://127.0.0.1:1", "t")
                .await
                .unwrap(),
        );
        let results: Vec<bool> = {
            let mut v = Vec::new();
            for _ in 0..4 {
                v.push(limiter.check(7, LimitClass::Tests, 3).await.allowed);
            }
            v
        };
        assert_eq!(
            results,
            vec![true, true, true, false],
            "local limits still apply"
        );
        assert!(SharedRedis::connect("not a url", "t").await.is_err());
    }
}
