//! Pacing of provider sends, shared across instances through Redis when it is configured, else
//! per process: the rules are `switchboard_domain::pacing`; this keeps their state. A channel's
//! slot is taken only by a send that goes (within the bound); a recipient's next time is set by
//! the same atomic step, so that two instances never both send to one recipient within the
//! interval.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use switchboard_domain::pacing::{
    Pace, PaceState, channel_interval_us, pace, recipient_interval_us,
};

use crate::shared_redis::{Fallback, SharedRedis};

/// The Redis side of [`pace`]: KEYS[1] = the channel's slot, KEYS[2] = the recipient's next
/// time; ARGV = channel interval, recipient interval, the bound (µs). Returns {go (0|1), µs}.
const PACE_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ci = tonumber(ARGV[1])
local ri = tonumber(ARGV[2])
local bound = tonumber(ARGV[3])
local rnext = tonumber(redis.call('GET', KEYS[2]) or now)
if rnext < now then rnext = now end
if rnext - now > bound then return {0, rnext - now} end
local slot = tonumber(redis.call('GET', KEYS[1]) or now)
if slot < rnext then slot = rnext end
if slot - now > bound then return {0, slot - now} end
redis.call('SET', KEYS[1], string.format('%d', slot + ci), 'PX', math.floor((slot + ci - now) / 1000) + 1000)
if ri > 0 then
  redis.call('SET', KEYS[2], string.format('%d', slot + ri), 'PX', math.floor((slot + ri - now) / 1000) + 1000)
end
return {1, slot - now}
"#;

/// How long until the next send on a channel to a recipient may go, by the shared state:
/// KEYS as for [`PACE_LUA`]; returns µs (0: now). Reserves nothing.
const WAIT_LUA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local slot = tonumber(redis.call('GET', KEYS[1]) or now)
local rnext = tonumber(redis.call('GET', KEYS[2]) or now)
local w = math.max(slot, rnext) - now
if w < 0 then w = 0 end
return w
"#;

/// Where the state of the pace lives.
pub struct Pacer {
    recipient_interval_us: i64,
    local: Mutex<LocalPace>,
    redis: Option<(SharedRedis, redis::Script, Fallback)>,
}

#[derive(Default)]
struct LocalPace {
    channels: HashMap<i64, i64>,
    recipients: HashMap<(i64, String), i64>,
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

impl Pacer {
    /// A pacer whose state is this process's.
    pub fn local(recipient_interval: Duration) -> Pacer {
        Pacer {
            recipient_interval_us: recipient_interval_us(recipient_interval),
            local: Mutex::default(),
            redis: None,
        }
    }

    /// A pacer whose state is in Redis (this process's own while Redis fails).
    pub fn shared(recipient_interval: Duration, redis: SharedRedis) -> Pacer {
        Pacer {
            redis: Some((redis, redis::Script::new(PACE_LUA), Fallback::default())),
            ..Pacer::local(recipient_interval)
        }
    }

    /// How long until a send on `channel_id` to `recipient` may go (zero when it may go now),
    /// by the shared state when Redis is configured (every instance's sends count), else (or
    /// while Redis fails) by this instance's own. Reserves nothing.
    pub async fn wait_for(&self, channel_id: i64, recipient: &str) -> Duration {
        if let Some((redis, _, fallback)) = &self.redis {
            if fallback.use_redis(now_us() / 1000) {
                let script = redis::Script::new(WAIT_LUA);
                let mut invocation = script.key(self.channel_key(redis, channel_id));
                invocation.key(self.recipient_key(redis, channel_id, recipient));
                match redis.invoke::<i64>(&invocation).await {
                    Ok(us) => return Duration::from_micros(u64::try_from(us).unwrap_or(0)),
                    Err(e) => {
                        fallback.failed(now_us() / 1000);
                        metrics::counter!("switchboard_pacing_redis_errors_total").increment(1);
                        tracing::warn!(error = %e, "Redis pacing state could not be read; answering from this instance's own");
                    }
                }
            }
        }
        self.local_wait(channel_id, recipient)
    }

    fn channel_key(&self, redis: &SharedRedis, channel_id: i64) -> String {
        format!("switchboard:{}:pace:ch:{channel_id}", redis.namespace)
    }

    fn recipient_key(&self, redis: &SharedRedis, channel_id: i64, recipient: &str) -> String {
        format!(
            "switchboard:{}:pace:to:{channel_id}:{recipient}",
            redis.namespace
        )
    }

    fn local_wait(&self, channel_id: i64, recipient: &str) -> Duration {
        let now = now_us();
        let local = self.local.lock().expect("the pace state is never poisoned");
        let channel = local.channels.get(&channel_id).copied().unwrap_or(0);
        let to = local
            .recipients
            .get(&(channel_id, recipient.to_owned()))
            .copied()
            .unwrap_or(0);
        Duration::from_micros(u64::try_from(channel.max(to) - now).unwrap_or(0))
    }

    /// The recipient interval kept (with its margin).
    pub fn recipient_interval(&self) -> Duration {
        Duration::from_micros(self.recipient_interval_us as u64)
    }

    /// Asks for a send on `channel_id` at `max_per_second` to `recipient`, going within
    /// `bound`: `Go` reserves the slot (the caller waits `wait_us`, then sends), `Later` reserves
    /// nothing.
    pub async fn reserve(
        &self,
        channel_id: i64,
        max_per_second: u32,
        recipient: &str,
        bound: Duration,
    ) -> Pace {
        let ci = channel_interval_us(max_per_second);
        let bound_us = i64::try_from(bound.as_micros()).unwrap_or(i64::MAX / 4);
        if let Some((redis, script, fallback)) = &self.redis {
            let now_ms = now_us() / 1000;
            if fallback.use_redis(now_ms) {
                let mut invocation = script.key(self.channel_key(redis, channel_id));
                invocation
                    .key(self.recipient_key(redis, channel_id, recipient))
                    .arg(ci)
                    .arg(self.recipient_interval_us)
                    .arg(bound_us);
                match redis.invoke::<(i64, i64)>(&invocation).await {
                    Ok((1, wait_us)) => return Pace::Go { wait_us },
                    Ok((_, after_us)) => return Pace::Later { after_us },
                    Err(e) => {
                        fallback.failed(now_ms);
                        metrics::counter!("switchboard_pacing_redis_errors_total").increment(1);
                        tracing::warn!(error = %e, "Redis pacing failed; pacing with this instance's own state for a few seconds");
                    }
                }
            }
        }
        self.reserve_local(channel_id, ci, recipient, bound_us)
    }

    fn reserve_local(&self, channel_id: i64, ci: i64, recipient: &str, bound_us: i64) -> Pace {
        let now = now_us();
        let mut local = self.local.lock().expect("the pace state is never poisoned");
        if local.recipients.len() > 100_000 {
            local.recipients.retain(|_, t| *t > now);
        }
        let key = (channel_id, recipient.to_owned());
        let state = PaceState {
            channel_tat: local.channels.get(&channel_id).copied(),
            recipient_next: local.recipients.get(&key).copied(),
        };
        let (decision, next) = pace(state, now, ci, self.recipient_interval_us, bound_us);
        if let Pace::Go { .. } = decision {
            if let Some(t) = next.channel_tat {
                local.channels.insert(channel_id, t);
            }
            if let Some(t) = next
                .recipient_next
                .filter(|_| self.recipient_interval_us > 0)
            {
                local.recipients.insert(key, t);
            }
        }
        decision
    }
}
