//! Black-box tests: the real `switchboard` binary on a random port, spoken to over HTTP, on
//! SQLite and (when `SWITCHBOARD_TEST_POSTGRES_URL` is set) on PostgreSQL. One file per area.
//! The harness is `switchboard_testkit` (`harness = false`): a test this machine cannot run
//! (no PostgreSQL, Redis, Chromium, Node or Python library) is reported as skipped.

// Support: processes, databases, receivers, fake providers, a fault-injection proxy.
mod db_peek;
mod fake_providers;
mod fault_proxy;
mod media_server;
mod receivers;
mod support;

// Areas.
mod auth;
mod batches;
mod channels;
mod console;
mod destinations;
mod destinations_brokers;
mod destinations_mtls;
mod disk_full;
mod event_feed;
mod faults;
mod idempotency;
mod initiation;
mod integrator;
mod ledger;
mod legacy_routes;
mod media;
mod message_kinds;
mod operators;
mod ordering;
mod org_data;
mod org_features;
mod partitions;
mod readme;
mod recovery;
mod reliability;
mod replies;
mod scale;
mod sending;
mod service;
mod signatures;
mod soak;
mod tracing;
mod webhooks;

fn main() {
    switchboard_testkit::main()
}
