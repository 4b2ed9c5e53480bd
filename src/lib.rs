//! Switchboard: a self-hostable implementation of the Integrations API v1.
//!
//! This crate is the service, the top layer of the workspace. Below it:
//!
//! * `switchboard_domain`: types that parse and validate, and the pure rules (webhook
//!   catalogue, subscriptions, retry classes, signing). Rules live there and nowhere else.
//! * `switchboard_store`: persistence behind one `Store` interface, with a SQLite and a
//!   PostgreSQL implementation that share their SQL text where the dialects agree.
//!
//! Here:
//!
//! * [`ops`]: use cases shared by the HTTP API and the admin tools.
//! * [`http`]: the axum router, extractors (authentication, JSON bodies, pagination),
//!   rate limits, errors, view types and one module per resource.
//! * [`webhooks`]: the dispatcher, recoveries, endpoint throttles and client certificates.
//! * [`url_safety`]: the rules for outbound URLs (webhook endpoints, brokers, token URLs,
//!   media), checked when given and again at connect time; below `webhooks`, `media` and
//!   `providers`, which all use it.
//! * [`providers`]: one adapter per channel type behind one trait.
//! * [`media`]: fetching media files for uploads, under the same URL rules.
//! * [`cli`]: the `switchboard` command line (`serve`, `migrate`, `admin ...`).
//! * [`views`]: the JSON representation of each resource, shared by responses, event data
//!   and the admin tools' `--json` output.
//! * [`app`], [`config`], [`telemetry`], [`crypto`], [`cache`]: process-wide concerns.

pub mod app;
pub mod cache;
pub mod cli;
pub mod config;
pub mod crypto;
pub mod http;
pub mod media;
pub mod ops;
pub mod providers;
pub mod shared_redis;
pub mod telemetry;
pub mod trace;
pub mod url_safety;
pub mod views;
pub mod webhooks;
pub mod workers;
