//! The organization log entries of endpoint changes (`webhook_endpoint.*`): what changed,
//! never a secret, a header value or the credentials of a URL.

use std::collections::BTreeMap;

use serde_json::json;

use crate::url_safety;
use switchboard_domain::event::{Actor, Effects};
use switchboard_domain::webhooks::endpoint::EndpointStatus;
use switchboard_domain::webhooks::events as wh_events;
use switchboard_store::webhooks::EndpointRecord;

/// The log entry of a new endpoint or legacy record (`webhook_endpoint.created`): never its
/// secret, nor its header values or the credentials of its URL.
pub(super) fn created_effects(
    e: &EndpointRecord,
    actor: Actor,
    now: switchboard_domain::Timestamp,
) -> Effects {
    let mut details = json!({
        "name": e.name,
        "url": url_safety::redacted(&e.url),
        "events": e.events,
        "status": e.status,
    });
    if e.legacy {
        details["legacy"] = json!(true);
    } else {
        details["header_names"] = json!(header_names(&e.headers));
    }
    Effects::none().log(wh_events::endpoint_log(
        e.org_id, "created", e.uuid, actor, details, now,
    ))
}

fn header_names(h: &BTreeMap<String, String>) -> Vec<&str> {
    h.keys().map(String::as_str).collect()
}

pub(super) fn update_effects(
    old: &EndpointRecord,
    new: &EndpointRecord,
    actor: Actor,
    now: switchboard_domain::Timestamp,
) -> Effects {
    let mut changed = Vec::new();
    let mut details = serde_json::Map::new();
    if old.name != new.name {
        changed.push("name");
        details.insert("name".into(), json!(new.name));
    }
    if old.url != new.url {
        changed.push("url");
        details.insert("url".into(), json!(url_safety::redacted(&new.url)));
    }
    if old.events != new.events {
        changed.push("events");
        details.insert("events".into(), json!(new.events));
    }
    if old.headers != new.headers {
        changed.push("headers");
        details.insert("header_names".into(), json!(header_names(&new.headers)));
    }
    if old.controls.filter != new.controls.filter {
        changed.push("filter");
    }
    if old.controls.auth != new.controls.auth
        || old.controls.sealed_auth_secret != new.controls.sealed_auth_secret
    {
        changed.push("auth");
    }
    if old.controls.target != new.controls.target
        || old.controls.sealed_target_url != new.controls.sealed_target_url
    {
        changed.push("target");
    }
    if old.controls.timeout_ms != new.controls.timeout_ms {
        changed.push("timeout");
    }
    if old.controls.retry_delays_ms != new.controls.retry_delays_ms {
        changed.push("retry_delays");
    }
    if old.controls.max_per_second != new.controls.max_per_second {
        changed.push("max_per_second");
        details.insert("max_per_second".into(), json!(new.controls.max_per_second));
    }
    let mut effects = Effects::none();
    if !changed.is_empty() {
        details.insert("changed".into(), json!(changed));
        effects = effects.log(wh_events::endpoint_log(
            new.org_id,
            "updated",
            new.uuid,
            actor.clone(),
            serde_json::Value::Object(details),
            now,
        ));
    }
    match (old.status, new.status) {
        (EndpointStatus::Active, EndpointStatus::Disabled) => {
            effects = effects.log(wh_events::endpoint_log(
                new.org_id,
                "disabled",
                new.uuid,
                actor,
                json!({ "automatic": false, "disabled_reason": new.disabled_reason }),
                now,
            ));
        }
        (EndpointStatus::Disabled, EndpointStatus::Active) => {
            effects = effects.log(wh_events::endpoint_log(
                new.org_id,
                "enabled",
                new.uuid,
                actor,
                json!({
                    "previous_disabled_reason": old.disabled_reason,
                    "previous_consecutive_failures": old.consecutive_failures,
                }),
                now,
            ));
        }
        _ => {}
    }
    effects
}
