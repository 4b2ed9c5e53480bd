//! Pacing of provider sends (CONVENTIONS "WhatsApp depth"): a channel's sends never exceed its
//! `max_per_second`, spread evenly (no burst), and a recipient gets at most one message per
//! recipient interval from a channel. A send that would exceed either waits (up to a bound) or,
//! in a batch, is scheduled; a provider's throttling answer puts the message off with backoff.
//!
//! The rules are pure: the state is two times (µs), the channel's *theoretical arrival time*
//! (GCRA with no burst: the time its next send may go) and the recipient's next allowed time.
//! The service keeps the state in Redis (one Lua script that mirrors [`pace`]) or in process.

use std::time::Duration;

/// The default `max_per_second` of a WhatsApp Cloud channel.
pub const DEFAULT_MAX_PER_SECOND: u32 = 80;
/// The highest `max_per_second` accepted (WhatsApp's highest tier is 1 000 messages/s).
pub const MAX_MAX_PER_SECOND: u32 = 1_000;

/// The spacing of a channel's sends at `max_per_second`, 5 % wider than the exact rate: the
/// margin absorbs the jitter between a reserved slot and the request's arrival at the provider,
/// so that no one-second window the provider sees holds more than the rate (a send woken more
/// than a moment after its slot takes a new one instead of going late).
pub fn channel_interval_us(max_per_second: u32) -> i64 {
    let rate = i64::from(max_per_second.clamp(1, MAX_MAX_PER_SECOND));
    1_000_000 * 105 / 100 / rate
}

/// The recipient interval actually kept: 2 % and 250 ms more than configured, for the same
/// jitter (none when the interval is zero).
pub fn recipient_interval_us(interval: Duration) -> i64 {
    let us = i64::try_from(interval.as_micros()).unwrap_or(i64::MAX / 4);
    if us == 0 { 0 } else { us * 102 / 100 + 250_000 }
}

/// What a send may do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// Go after `wait_us` (a slot is reserved at `now + wait_us`).
    Go { wait_us: i64 },
    /// Not within the bound: try again in `after_us` (nothing is reserved).
    Later { after_us: i64 },
}

/// The pace state of one channel and one of its recipients (µs since the epoch; `None` when
/// unknown, that is free).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaceState {
    pub channel_tat: Option<i64>,
    pub recipient_next: Option<i64>,
}

/// Decides a send at `now`: the recipient must be free within `max_wait_us`, then the channel's
/// next slot (at or after the recipient's time) must be within `max_wait_us`. On `Go` the new
/// state reserves the slot: the channel's next slot one interval later, the recipient's next
/// time one recipient interval after the slot.
pub fn pace(
    state: PaceState,
    now: i64,
    channel_interval_us: i64,
    recipient_interval_us: i64,
    max_wait_us: i64,
) -> (Pace, PaceState) {
    let recipient_free = state.recipient_next.unwrap_or(now).max(now);
    if recipient_free - now > max_wait_us {
        return (
            Pace::Later {
                after_us: recipient_free - now,
            },
            state,
        );
    }
    let slot = state.channel_tat.unwrap_or(now).max(recipient_free);
    if slot - now > max_wait_us {
        return (
            Pace::Later {
                after_us: slot - now,
            },
            state,
        );
    }
    (
        Pace::Go {
            wait_us: slot - now,
        },
        PaceState {
            channel_tat: Some(slot + channel_interval_us),
            recipient_next: Some(slot + recipient_interval_us),
        },
    )
}

/// How long a message the provider throttled waits before its next attempt: 1 s, 2 s, 4 s ...
/// up to 60 s, and at least `floor` (the recipient interval, for a per-recipient throttle).
pub fn throttle_backoff(attempts: i64, floor: Duration) -> Duration {
    let exp = attempts.clamp(0, 6) as u32;
    Duration::from_secs(2u64.pow(exp).min(60)).max(floor)
}

/// A batch's status from its counts: `completed` when no item is queued any more, `queued`
/// while no item has started, `sending` in between.
pub fn batch_status(total: i64, queued: i64, in_progress: i64) -> &'static str {
    if queued == 0 {
        "completed"
    } else if queued == total && in_progress == 0 {
        "queued"
    } else {
        "sending"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000;

    /// Sends as fast as `pace` admits them; the times they go.
    fn run(n: usize, rate: u32, recipients: usize, interval: i64) -> Vec<(i64, usize)> {
        let ci = channel_interval_us(rate);
        let mut channel_tat = None;
        let mut next = vec![None; recipients];
        let mut out = Vec::new();
        let mut now = 0;
        let mut i = 0;
        while out.len() < n {
            let r = i % recipients;
            let (p, s) = pace(
                PaceState {
                    channel_tat,
                    recipient_next: next[r],
                },
                now,
                ci,
                interval,
                10 * S,
            );
            match p {
                Pace::Go { wait_us } => {
                    out.push((now + wait_us, r));
                    channel_tat = s.channel_tat;
                    next[r] = s.recipient_next;
                    now += wait_us;
                    i += 1;
                }
                Pace::Later { after_us } => now += after_us,
            }
        }
        out
    }

    #[test]
    fn no_one_second_window_holds_more_than_the_rate() {
        let sends = run(500, 50, 200, 0);
        for (i, (t, _)) in sends.iter().enumerate() {
            let in_window = sends[i..].iter().take_while(|(u, _)| *u < t + S).count();
            assert!(in_window <= 50, "{in_window} sends in the second from {t}");
        }
        // And it is not much slower than the rate: 500 sends at 50/s take about 10 s.
        let last = sends.last().unwrap().0;
        assert!(last < 12 * S && last > 9 * S, "{last}");
    }

    #[test]
    fn a_recipient_waits_its_interval() {
        let sends = run(6, 80, 2, 6 * S);
        let times_of = |r: usize| -> Vec<i64> {
            sends
                .iter()
                .filter(|(_, x)| *x == r)
                .map(|(t, _)| *t)
                .collect()
        };
        for r in 0..2 {
            let t = times_of(r);
            for w in t.windows(2) {
                assert!(w[1] - w[0] >= 6 * S, "{t:?}");
            }
        }
    }

    #[test]
    fn beyond_the_bound_nothing_is_reserved() {
        let state = PaceState {
            channel_tat: Some(0),
            recipient_next: Some(20 * S),
        };
        let (p, s) = pace(state, 0, 1000, 6 * S, 10 * S);
        assert_eq!(p, Pace::Later { after_us: 20 * S });
        assert_eq!(s, state);
        let busy = PaceState {
            channel_tat: Some(11 * S),
            recipient_next: None,
        };
        assert_eq!(
            pace(busy, 0, 1000, 0, 10 * S).0,
            Pace::Later { after_us: 11 * S }
        );
        assert_eq!(
            pace(busy, 2 * S, 1000, 0, 10 * S).0,
            Pace::Go { wait_us: 9 * S }
        );
    }

    #[test]
    fn intervals_and_backoff() {
        assert_eq!(channel_interval_us(50), 21_000);
        assert_eq!(channel_interval_us(0), 1_050_000);
        assert_eq!(recipient_interval_us(Duration::ZERO), 0);
        assert_eq!(recipient_interval_us(Duration::from_secs(6)), 6_370_000);
        assert_eq!(throttle_backoff(0, Duration::ZERO), Duration::from_secs(1));
        assert_eq!(throttle_backoff(3, Duration::ZERO), Duration::from_secs(8));
        assert_eq!(
            throttle_backoff(30, Duration::ZERO),
            Duration::from_secs(60)
        );
        assert_eq!(
            throttle_backoff(0, Duration::from_secs(6)),
            Duration::from_secs(6)
        );
    }

    #[test]
    fn batch_statuses() {
        assert_eq!(batch_status(3, 3, 0), "queued");
        assert_eq!(batch_status(3, 3, 1), "sending");
        assert_eq!(batch_status(3, 1, 0), "sending");
        assert_eq!(batch_status(3, 0, 0), "completed");
    }
}
