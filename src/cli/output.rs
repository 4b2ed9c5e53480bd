//! What an admin command prints: one JSON object with `--json`, else a readable line. Each
//! `admin_*` module returns it; `admin` prints it.

use serde_json::Value;

/// What a command prints.
pub struct Output {
    pub json: Value,
    pub text: String,
}
