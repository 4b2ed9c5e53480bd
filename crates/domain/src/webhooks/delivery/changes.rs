//! What changes a delivery's status outside an attempt (docs/webhooks.md, "Retries" and
//! "Recovery"): a manual retry, a bulk retry, a recovery and its endpoint's deletion. The store
//! builds its SQL (`CASE status WHEN ... END`, `status IN (...)`) from these functions, over
//! [`DeliveryStatus::ALL`].

use super::DeliveryStatus;

/// A manual retry of one delivery (not in flight, its endpoint not deleted): a finished
/// delivery starts again as `pending`; an unfinished one keeps its status. Either way it is
/// due at once.
pub const fn retry(status: DeliveryStatus) -> DeliveryStatus {
    if status.is_final() {
        DeliveryStatus::INITIAL
    } else {
        status
    }
}

/// A bulk retry: `None` for a delivery it leaves alone (one that was delivered), else the
/// status the delivery is due at once in (as [`retry`]).
pub const fn bulk_retry(status: DeliveryStatus) -> Option<DeliveryStatus> {
    match status {
        DeliveryStatus::Delivered => None,
        s => Some(retry(s)),
    }
}

/// Whether a recovery queues a new delivery of an event to an endpoint that already has a
/// delivery of it in `existing`: only when that delivery ended without success. One that was
/// delivered or is still unfinished covers its event.
pub const fn recovery_requeues(existing: DeliveryStatus) -> bool {
    matches!(
        existing,
        DeliveryStatus::Failed | DeliveryStatus::RetriesExhausted
    )
}

/// What an endpoint's deletion does to one of its deliveries that is not in flight: an
/// unfinished one ends `failed` (with `ENDPOINT_DELETED`); `None` leaves a finished one as it
/// is. (One in flight ends when its outcome is recorded: `after_attempt`.)
pub const fn on_endpoint_deleted(status: DeliveryStatus) -> Option<DeliveryStatus> {
    if status.is_final() {
        None
    } else {
        Some(DeliveryStatus::Failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DeliveryStatus::*;

    #[test]
    fn a_manual_retry_restarts_finished_deliveries_only() {
        assert_eq!(retry(Delivered), Pending);
        assert_eq!(retry(Failed), Pending);
        assert_eq!(retry(RetriesExhausted), Pending);
        assert_eq!(retry(Pending), Pending);
        assert_eq!(retry(Retrying), Retrying);
    }

    #[test]
    fn a_bulk_retry_leaves_delivered_alone_and_else_retries() {
        assert_eq!(bulk_retry(Delivered), None);
        for s in DeliveryStatus::ALL.into_iter().filter(|s| *s != Delivered) {
            assert_eq!(bulk_retry(s), Some(retry(s)), "{s}");
        }
        assert_eq!(bulk_retry(Failed), Some(Pending));
        assert_eq!(bulk_retry(Retrying), Some(Retrying));
    }

    #[test]
    fn a_recovery_requeues_events_whose_delivery_ended_unsuccessfully() {
        let requeued: Vec<_> = DeliveryStatus::ALL
            .into_iter()
            .filter(|s| recovery_requeues(*s))
            .collect();
        assert_eq!(requeued, [Failed, RetriesExhausted]);
    }

    #[test]
    fn a_deleted_endpoint_fails_its_unfinished_deliveries() {
        for s in DeliveryStatus::UNFINISHED {
            assert_eq!(on_endpoint_deleted(s), Some(Failed));
        }
        for s in DeliveryStatus::FINAL {
            assert_eq!(on_endpoint_deleted(s), None);
        }
    }

    #[test]
    fn the_sets_partition_the_statuses() {
        for s in DeliveryStatus::ALL {
            assert_eq!(DeliveryStatus::FINAL.contains(&s), s.is_final(), "{s}");
            assert_eq!(
                DeliveryStatus::UNFINISHED.contains(&s),
                !s.is_final(),
                "{s}"
            );
        }
        assert!(!DeliveryStatus::INITIAL.is_final());
    }
}
