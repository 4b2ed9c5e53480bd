//! Webhooks in the store, by aggregate: the fan-out of outbox events into deliveries
//! (`fan_out`, called by `write_effects_tx`), endpoints and their held deliveries
//! (`endpoints`), the dispatcher's claims (`claims`) and the outcomes of attempts
//! (`deliveries`), and the delivery ledger (`ledger`); the chains of ordered endpoints
//! (`chains`); the attempt log (`attempts`).
//!
//! The rules stay in the domain: status names, the sets of statuses a statement selects and
//! the status changes its `CASE` makes are built from `delivery` (see [`sql`]), never written
//! here as literals (`tests/architecture.rs` checks it).

mod attempts;
mod chains;
mod claims;
mod deliveries;
mod endpoints;
mod fan_out;
mod ledger;
mod recovery;

use super::{Backend, Conn, Db, dialect, push_in_list};

pub(super) use fan_out::{FanOut, insert_events};

/// SQL text made from the domain's constants (never from input), for statements built once
/// (`LazyLock`): their text is the same at every call, so they stay prepared and cached.
mod sql {
    use std::sync::LazyLock;

    use switchboard_domain::webhooks::delivery::DeliveryStatus;
    use switchboard_domain::webhooks::endpoint::EndpointStatus;

    /// `'name'`.
    pub(super) fn name(name: &str) -> String {
        format!("'{name}'")
    }

    /// `('a', 'b')`.
    pub(super) fn list<I: IntoIterator<Item = &'static str>>(names: I) -> String {
        let names: Vec<String> = names.into_iter().map(name).collect();
        format!("({})", names.join(", "))
    }

    /// The statuses for which `pred` holds, as a list.
    pub(super) fn statuses(pred: impl Fn(DeliveryStatus) -> bool) -> String {
        list(
            DeliveryStatus::ALL
                .into_iter()
                .filter(|s| pred(*s))
                .map(DeliveryStatus::as_str),
        )
    }

    /// `CASE status WHEN 'a' THEN 'b' ... ELSE status END`: the status change `change`
    /// makes (the statuses it keeps or leaves alone are not listed).
    pub(super) fn status_case(change: impl Fn(DeliveryStatus) -> Option<DeliveryStatus>) -> String {
        let mut case = String::from("CASE status");
        for s in DeliveryStatus::ALL {
            if let Some(to) = change(s).filter(|to| *to != s) {
                case.push_str(&format!(
                    " WHEN {} THEN {}",
                    name(s.as_str()),
                    name(to.as_str())
                ));
            }
        }
        case.push_str(" ELSE status END");
        case
    }

    /// `DeliveryStatus::UNFINISHED`, as a list.
    pub(super) static UNFINISHED: LazyLock<String> =
        LazyLock::new(|| list(DeliveryStatus::UNFINISHED.map(DeliveryStatus::as_str)));
    /// `DeliveryStatus::INITIAL`, the status of a new delivery.
    pub(super) static INITIAL: LazyLock<String> =
        LazyLock::new(|| name(DeliveryStatus::INITIAL.as_str()));
    /// `EndpointStatus::Active`.
    pub(super) static ACTIVE: LazyLock<String> =
        LazyLock::new(|| name(EndpointStatus::Active.as_str()));
    /// `EndpointStatus::Disabled`.
    pub(super) static DISABLED: LazyLock<String> =
        LazyLock::new(|| name(EndpointStatus::Disabled.as_str()));

    #[cfg(test)]
    mod tests {
        use super::*;
        use switchboard_domain::webhooks::delivery;

        #[test]
        fn lists_and_cases_are_built_from_the_domain() {
            assert_eq!(*UNFINISHED, "('pending', 'retrying')");
            assert_eq!(*INITIAL, "'pending'");
            assert_eq!(*ACTIVE, "'active'");
            assert_eq!(*DISABLED, "'disabled'");
            assert_eq!(
                statuses(delivery::recovery_requeues),
                "('failed', 'retries_exhausted')"
            );
            assert_eq!(
                status_case(|s| Some(delivery::retry(s))),
                "CASE status WHEN 'delivered' THEN 'pending' WHEN 'failed' THEN 'pending' \
                 WHEN 'retries_exhausted' THEN 'pending' ELSE status END"
            );
            assert_eq!(
                status_case(delivery::on_endpoint_deleted),
                "CASE status WHEN 'pending' THEN 'failed' WHEN 'retrying' THEN 'failed' ELSE status END"
            );
        }
    }
}
