//! Black-box tests: the real `switchboard` binary on a random port, spoken to over HTTP, on
//! SQLite and (when `SWITCHBOARD_TEST_POSTGRES_URL` is set) on PostgreSQL.

mod faults;
mod support;

mod db_peek;
mod fake_providers;

mod foundation;
mod initiation;
mod legacy_api;
mod legacy_data;
mod messaging;
mod org_data;
mod receivers;
mod reliability;
mod scale;
mod soak;
mod webhooks;
