//! Switchboard: a self-hostable implementation of the Integrations API v1.
//!
//! The crate is laid out by architectural layer:
//!
//! * [`domain`]: types that parse and validate (API keys, scopes, channels, times, ...).
//!   Rules live here and nowhere else.
//! * [`store`]: persistence behind one [`store::Store`] interface, with a SQLite and a
//!   PostgreSQL implementation that share their SQL text where the dialects agree.
//! * [`http`]: the axum router, extractors (authentication, JSON bodies, pagination),
//!   rate limits, errors and one module per resource.
//! * [`webhooks`]: event catalogue, signing, URL safety and the dispatcher.
//! * [`providers`]: one adapter per channel type behind one trait.
//! * [`cli`]: the `switchboard` command line (`serve`, `migrate`, `admin ...`).
//! * [`config`], [`telemetry`], [`crypto`], [`clock`]: process-wide concerns.

pub mod app;
pub mod cache;
pub mod cli;
pub mod clock;
pub mod config;
pub mod crypto;
pub mod domain;
pub mod http;
pub mod ops;
pub mod providers;
pub mod store;
pub mod telemetry;
pub mod webhooks;
