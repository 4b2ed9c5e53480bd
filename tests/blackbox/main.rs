//! Black-box tests: the real `switchboard` binary on a random port, spoken to over HTTP, on
//! SQLite and (when `SWITCHBOARD_TEST_POSTGRES_URL` is set) on PostgreSQL.

mod support;

mod foundation;
mod receivers;
mod webhooks;
