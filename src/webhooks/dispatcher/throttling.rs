//! The dispatcher's side of an endpoint's `max_per_second`: an attempt waits for its slot in
//! the endpoint's throttle (`super::super::throttle`), or is handed back when no slot comes
//! within its lease.

use super::*;

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use switchboard_store::webhooks::ClaimedDelivery;

use switchboard_domain::pacing::Pace;

impl Dispatcher {
    /// Waits for the delivery's slot in its endpoint's throttle (`max_per_second`), as long as
    /// its lease still covers the attempt after the wait. `false`: no slot within that time
    /// (the endpoint is then not claimed until it has one) or the hard stop came; the
    /// delivery is to be handed back.
    pub(super) async fn wait_for_throttle(
        &self,
        d: &ClaimedDelivery,
        hard_stop: &CancellationToken,
    ) -> bool {
        let Some(endpoint) = d.endpoint.as_ref() else {
            return true;
        };
        let Some(rate) = endpoint
            .controls
            .max_per_second
            .and_then(|n| u32::try_from(n).ok())
        else {
            return true;
        };
        loop {
            let now = self.clock.now();
            let latest = d
                .lease_until
                .saturating_sub(self.timeout_of(d) + START_MARGIN);
            let bound = if latest > now {
                latest.since(now)
            } else {
                Duration::ZERO
            };
            match self.throttle.reserve(endpoint.uuid, rate, bound).await {
                Pace::Go { wait_us } => {
                    let slot_at =
                        tokio::time::Instant::now() + Duration::from_micros(wait_us.unsigned_abs());
                    if wait_us > 0 {
                        metrics::counter!("switchboard_webhook_throttle_waits_total").increment(1);
                        tokio::select! {
                            _ = tokio::time::sleep_until(slot_at) => {}
                            _ = hard_stop.cancelled() => return false,
                        }
                    }
                    // Woken late (a busy machine), the attempt would come closer to the ones
                    // after it than the rate allows: it takes a new slot instead.
                    if tokio::time::Instant::now().duration_since(slot_at) <= THROTTLE_LATE {
                        return true;
                    }
                    metrics::counter!("switchboard_webhook_throttle_late_total").increment(1);
                }
                Pace::Later { after_us } => {
                    metrics::counter!("switchboard_webhook_throttle_handed_back_total")
                        .increment(1);
                    self.slots.lock().unwrap().throttled.insert(
                        endpoint.id,
                        Instant::now() + Duration::from_micros(after_us.unsigned_abs()),
                    );
                    return false;
                }
            }
        }
    }

    /// The time limit of a delivery's attempt: its endpoint's own, or the deployment's.
    pub(super) fn timeout_of(&self, d: &ClaimedDelivery) -> Duration {
        d.endpoint
            .as_ref()
            .and_then(|e| e.controls.timeout())
            .unwrap_or(self.timeout)
    }
}
