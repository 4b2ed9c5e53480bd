//! SQL text of the webhook statements made from the domain's constants (never from input): the
//! delivery and endpoint statuses a statement selects and the status changes its `CASE` makes
//! come from `switchboard_domain::webhooks` (`tests/architecture.rs` checks that the webhook SQL
//! names no status of its own). Built once (`LazyLock`), so the text is the same at every call
//! and the statements stay prepared and cached. Below both the fan-out (`fan_out`) and the
//! webhook aggregates (`webhooks`).

use std::sync::LazyLock;

use switchboard_domain::webhooks::delivery::DeliveryStatus;
use switchboard_domain::webhooks::endpoint::EndpointStatus;

/// `'name'`.
pub(crate) fn name(name: &str) -> String {
    format!("'{name}'")
}

/// `('a', 'b')`.
pub(crate) fn list<I: IntoIterator<Item = &'static str>>(names: I) -> String {
    let names: Vec<String> = names.into_iter().map(name).collect();
    format!("({})", names.join(", "))
}

/// The statuses for which `pred` holds, as a list.
pub(crate) fn statuses(pred: impl Fn(DeliveryStatus) -> bool) -> String {
    list(
        DeliveryStatus::ALL
            .into_iter()
            .filter(|s| pred(*s))
            .map(DeliveryStatus::as_str),
    )
}

/// `CASE status WHEN 'a' THEN 'b' ... ELSE status END`: the status change `change`
/// makes (the statuses it keeps or leaves alone are not listed).
pub(crate) fn status_case(change: impl Fn(DeliveryStatus) -> Option<DeliveryStatus>) -> String {
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
pub(crate) static UNFINISHED: LazyLock<String> =
    LazyLock::new(|| list(DeliveryStatus::UNFINISHED.map(DeliveryStatus::as_str)));
/// `DeliveryStatus::INITIAL`, the status of a new delivery.
pub(crate) static INITIAL: LazyLock<String> =
    LazyLock::new(|| name(DeliveryStatus::INITIAL.as_str()));
/// `EndpointStatus::Active`.
pub(crate) static ACTIVE: LazyLock<String> =
    LazyLock::new(|| name(EndpointStatus::Active.as_str()));
/// `EndpointStatus::Disabled`.
pub(crate) static DISABLED: LazyLock<String> =
    LazyLock::new(|| name(EndpointStatus::Disabled.as_str()));

/// `DeliveryStatus::Delivered`: the status the index of the ledger by status leaves out
/// (`webhook_deliveries_org_undelivered`, migration 0054).
pub(crate) static DELIVERED: LazyLock<String> =
    LazyLock::new(|| name(DeliveryStatus::Delivered.as_str()));

/// ` AND {col} = $n`, with the predicate of the index by status (` AND {col} <> ` and
/// [`DELIVERED`]) for any other status, so that both planners see that the partial index
/// applies (neither can tell that a bound status differs from a constant; both match the
/// predicate's own term).
pub(crate) fn push_status_filter<'a>(
    qb: &mut sqlx::QueryBuilder<'a, super::Db>,
    col: &str,
    status: DeliveryStatus,
) {
    if status != DeliveryStatus::Delivered {
        qb.push(format!(" AND {col} <> {}", *DELIVERED));
    }
    qb.push(format!(" AND {col} = ")).push_bind(status.as_str());
}

/// The organizations with rows in `table`, one probe of its `(org_id, ...)` index each (a loose
/// index scan, which neither backend makes of `SELECT DISTINCT`), as the CTE `orgs(id)`.
pub(crate) fn orgs_of(table: &str) -> String {
    format!(
        "WITH RECURSIVE orgs(id) AS (
             SELECT (SELECT org_id FROM {table} ORDER BY org_id LIMIT 1)
             UNION ALL
             SELECT (SELECT t.org_id FROM {table} t WHERE t.org_id > orgs.id ORDER BY t.org_id LIMIT 1)
             FROM orgs WHERE orgs.id IS NOT NULL)"
    )
}

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
        assert_eq!(*DELIVERED, "'delivered'");
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
