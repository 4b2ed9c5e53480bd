//! Retention by partition (PostgreSQL): the webhook tables (events, deliveries, attempts) are
//! split into partitions of consecutive ids. The newest one, the *live* partition, takes every
//! new row; once its oldest row is a *span* old, a new live partition starts (the partition
//! *rolls*). A closed partition is dropped whole once every row in it is past the retention.
//!
//! So a record is kept at least the retention, and at most the retention plus one span (plus
//! the purge interval): never purged early, and a day of traffic goes with one `DROP TABLE`
//! instead of millions of row deletes. The span is a fifteenth of the retention, within
//! [`MIN_SPAN`] and [`MAX_SPAN`]: 6 days for the default 90, so about sixteen partitions per
//! table are kept and a query that no id bounds (the claim's `due_at` scan, a ledger page)
//! visits that many small indexes.

use std::time::Duration;

use crate::Timestamp;

/// The shortest span (retentions shorter than 15 s, as tests configure, roll every second).
pub const MIN_SPAN: Duration = Duration::from_secs(1);
/// The longest span: a week, whatever the retention.
pub const MAX_SPAN: Duration = Duration::from_secs(7 * 86_400);
/// Partitions kept per retention (its fraction of the retention is one span).
pub const SPANS_PER_RETENTION: u32 = 15;

/// How long a live partition takes rows before it rolls, for a retention.
pub fn partition_span(retention: Duration) -> Duration {
    (retention / SPANS_PER_RETENTION).clamp(MIN_SPAN, MAX_SPAN)
}

/// Whether the live partition rolls now: it has rows, and its oldest is a span old.
pub fn rolls(oldest: Option<Timestamp>, now: Timestamp, span: Duration) -> bool {
    oldest.is_some_and(|o| o <= now.saturating_sub(span))
}

/// Whether a closed partition may be dropped: nothing in it is as recent as the cutoff, no
/// attempt of it is in flight, and (events) no delivery kept elsewhere refers to it.
pub fn droppable(newest: Option<Timestamp>, cutoff: Timestamp, held: bool) -> bool {
    !held && newest.is_none_or(|n| n < cutoff)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400;

    #[test]
    fn the_span_is_a_fifteenth_of_the_retention_within_bounds() {
        assert_eq!(
            partition_span(Duration::from_secs(90 * DAY)),
            Duration::from_secs(6 * DAY)
        );
        assert_eq!(
            partition_span(Duration::from_secs(15 * DAY)),
            Duration::from_secs(DAY)
        );
        assert_eq!(partition_span(Duration::from_secs(365 * DAY)), MAX_SPAN);
        assert_eq!(partition_span(Duration::from_secs(2)), MIN_SPAN);
        assert_eq!(partition_span(Duration::ZERO), MIN_SPAN);
    }

    #[test]
    fn a_partition_rolls_once_its_oldest_row_is_a_span_old() {
        let span = Duration::from_secs(10);
        let now = Timestamp::from_millis(100_000);
        assert!(!rolls(None, now, span), "an empty partition never rolls");
        assert!(!rolls(Some(Timestamp::from_millis(90_001)), now, span));
        assert!(rolls(Some(Timestamp::from_millis(90_000)), now, span));
        assert!(rolls(Some(Timestamp::from_millis(0)), now, span));
    }

    #[test]
    fn a_partition_is_dropped_only_when_all_of_it_is_past_the_cutoff_and_nothing_holds_it() {
        let cutoff = Timestamp::from_millis(1_000);
        assert!(droppable(None, cutoff, false), "an empty closed partition");
        assert!(droppable(Some(Timestamp::from_millis(999)), cutoff, false));
        assert!(!droppable(
            Some(Timestamp::from_millis(1_000)),
            cutoff,
            false
        ));
        assert!(!droppable(Some(Timestamp::from_millis(5)), cutoff, true));
    }
}
