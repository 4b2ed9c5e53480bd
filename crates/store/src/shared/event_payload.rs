//! An event's payload as stored: once, in the envelope (docs/benchmarks.md, "An event's
//! payload stored once"). Below both the writers of events (`fan_out`) and their readers
//! (`events`, `webhooks`).

use serde_json::Value;
use sqlx::types::Json;

use crate::{StoreError, StoreResult};

/// What an event row's `data` column holds for an event written with its envelope: JSON `null`,
/// the payload being in the envelope (stored once, not twice: the envelope's bytes are what
/// every delivery sends and the feed serves, so they are kept whole).
pub(super) const DATA_IN_ENVELOPE: Json<&Value> = Json(&Value::Null);

/// An event's data from its row: `data` itself for a row written before the envelope held it
/// (or without an envelope), else the envelope's `data`.
pub(super) fn event_data(data: Value, envelope: Option<&str>) -> StoreResult<Value> {
    #[derive(serde::Deserialize)]
    struct Envelope {
        #[serde(default)]
        data: Value,
    }
    match (data, envelope) {
        (Value::Null, Some(text)) => serde_json::from_str::<Envelope>(text)
            .map(|e| e.data)
            .map_err(|e| StoreError::Other(format!("an event's stored envelope: {e}"))),
        (data, _) => Ok(data),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_payload_comes_from_the_envelope_when_the_row_holds_none() {
        let envelope =
            r#"{"event":"message.sent","data":{"message":{"id":"m"}},"metadata":{"test":true}}"#;
        assert_eq!(
            event_data(Value::Null, Some(envelope)).unwrap(),
            json!({"message": {"id": "m"}})
        );
        // An envelope whose data is null (or absent) gives null back.
        assert_eq!(
            event_data(Value::Null, Some(r#"{"data":null}"#)).unwrap(),
            Value::Null
        );
        assert_eq!(event_data(Value::Null, Some("{}")).unwrap(), Value::Null);
        assert!(event_data(Value::Null, Some("not json")).is_err());
    }

    #[test]
    fn rows_written_before_keep_their_data() {
        let old = json!({"old": true});
        assert_eq!(
            event_data(old.clone(), Some(r#"{"data":{}}"#)).unwrap(),
            old
        );
        assert_eq!(event_data(old.clone(), None).unwrap(), old);
        assert_eq!(event_data(Value::Null, None).unwrap(), Value::Null);
    }
}
