//! Views: the JSON representation of each resource, defined once and shared by the API's
//! responses (`http`), the `data` of the events a change writes in its own transaction
//! (`ops`) and the admin tools' `--json` output (`cli`). Plain data with `Serialize` and the
//! OpenAPI schema; nothing here imports `ops`, `http` or `cli` (see `tests/architecture.rs`).
//!
//! The answers of sends and batches (`sends`) are here too: they are rendered from what the
//! sends' idempotency claims keep, the first time and on every replay. Request bodies and
//! response envelopes that only the HTTP API has (page envelopes, error bodies) live with
//! their handlers in `http`.

pub mod campaigns;
pub mod groups;
pub mod messages;
pub mod sends;
pub mod templates;
