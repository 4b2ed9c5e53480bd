//! The channels endpoint, channel defaults and updates, keys' default channels.

use serde_json::{Value, json};

use crate::both_backends;
use crate::support::{Backend, TestEnv};

both_backends!(
    channels_list_every_field_and_no_secret,
    channel_defaults_and_updates,
    admin_key_list_and_default_channels,
);

async fn channels_list_every_field_and_no_secret(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    let secret = "EAAG-very-secret-access-token-XYZ";
    let wa = env
        .admin(&[
            "channel", "create", "--org", &org, "--type", "whatsapp_cloud", "--name", "Sales WhatsApp", "--slug", "sales",
            "--provider-config", &json!({"phone_number_id": "1098765", "access_token": secret, "app_secret": "app-secret-abc"}).to_string(),
        ])
        .await;
    assert_eq!(
        wa["identifier"], "1098765",
        "the provider's phone number id is the identifier"
    );
    env.admin(&[
        "channel",
        "create",
        "--org",
        &org,
        "--type",
        "lead_ingestion",
        "--name",
        "Leads",
        "--inactive",
    ])
    .await;
    let server = env.start(&[]).await;
    let r = server
        .get("/api/v1/integrations/channels", &seed.key)
        .await
        .expect(200);
    assert!(
        !r.text.contains(secret) && !r.text.contains("app-secret-abc"),
        "no provider secret in {}",
        r.text
    );
    assert_eq!(r.body["has_more"], false);
    assert_eq!(r.body["next_cursor"], Value::Null);
    let data = r.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    for c in data {
        for field in [
            "id",
            "uuid",
            "slug",
            "type",
            "name",
            "identifier",
            "can_send_messages",
            "status",
            "supports_media",
        ] {
            assert!(!c[field].is_null(), "field {field} in {c}");
        }
    }
    let sandbox = &data[0];
    assert_eq!(sandbox["type"], "sandbox");
    assert_eq!(sandbox["slug"], "sandbox");
    assert_eq!(sandbox["status"], "active");
    assert_eq!(sandbox["can_send_messages"], true);
    let sales = data.iter().find(|c| c["slug"] == "sales").unwrap();
    assert_eq!(sales["type"], "whatsapp_cloud");
    assert_eq!(sales["name"], "Sales WhatsApp");
    let leads = data.iter().find(|c| c["type"] == "lead_ingestion").unwrap();
    assert_eq!(leads["can_send_messages"], false);
    assert_eq!(leads["supports_media"], false);
    assert_eq!(leads["status"], "inactive");
    assert_eq!(leads["slug"], "leads");
}
async fn channel_defaults_and_updates(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    let second = env
        .admin(&[
            "channel", "create", "--org", &org, "--type", "sandbox", "--name", "Sandbox",
        ])
        .await;
    assert_eq!(second["slug"], "sandbox-2", "a derived slug is made unique");
    let dup = env
        .admin_raw(&[
            "channel", "create", "--org", &org, "--type", "sandbox", "--name", "x", "--slug",
            "sandbox",
        ])
        .await;
    assert!(
        !dup.success && dup.stderr.contains("already used"),
        "{}",
        dup.stderr
    );
    // The same slug in another organization is fine.
    let other = env.admin(&["org", "create", "--name", "Other"]).await;
    env.admin(&[
        "channel",
        "create",
        "--org",
        &other["id"].to_string(),
        "--type",
        "sandbox",
        "--name",
        "x",
        "--slug",
        "sandbox",
    ])
    .await;

    let updated = env
        .admin(&[
            "channel",
            "update",
            &second["id"].to_string(),
            "--default",
            "--inactive",
            "--name",
            "Renamed",
        ])
        .await;
    assert_eq!(updated["status"], "inactive");
    assert_eq!(updated["name"], "Renamed");
    assert_eq!(updated["is_default"], true);
    let server = env.start(&[]).await;
    let r = server
        .get("/api/v1/integrations/channels", &seed.key)
        .await
        .expect(200);
    let defaults: Vec<i64> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["is_default"] == true)
        .map(|c| c["id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        defaults,
        vec![second["id"].as_i64().unwrap()],
        "one default per organization"
    );
    let back = env
        .admin(&["channel", "update", &second["id"].to_string(), "--active"])
        .await;
    assert_eq!(back["status"], "active");
}
async fn admin_key_list_and_default_channels(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let org = seed.org_id.to_string();
    let expired = env
        .admin(&[
            "key",
            "create",
            "--org",
            &org,
            "--scopes",
            "*",
            "--expires-at",
            "2020-01-01T00:00:00Z",
        ])
        .await;
    let revoked = env
        .admin(&["key", "create", "--org", &org, "--scopes", "*"])
        .await;
    env.admin(&["key", "revoke", &revoked["id"].to_string()])
        .await;
    let list = env.admin(&["key", "list", "--org", &org]).await;
    let status = |id: &Value| {
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["id"] == *id)
            .map(|k| k["status"].clone())
            .unwrap()
    };
    assert_eq!(status(&expired["id"]), "expired");
    assert_eq!(status(&revoked["id"]), "revoked");
    assert_eq!(status(&json!(seed.key_id)), "active");

    // A key's default channel must be one that can send.
    let leads = env
        .admin(&[
            "channel",
            "create",
            "--org",
            &org,
            "--type",
            "lead_ingestion",
            "--name",
            "Leads",
        ])
        .await;
    let refused = env
        .admin_raw(&[
            "key",
            "create",
            "--org",
            &org,
            "--default-channel",
            &leads["id"].to_string(),
            "--scopes",
            "*",
        ])
        .await;
    assert!(!refused.success);
    assert!(
        refused.stderr.contains("cannot send messages"),
        "{}",
        refused.stderr
    );
    // Two channels created together get different identifiers.
    let a = env
        .admin(&[
            "channel", "create", "--org", &org, "--type", "sandbox", "--name", "A",
        ])
        .await;
    let b = env
        .admin(&[
            "channel", "create", "--org", &org, "--type", "sandbox", "--name", "B",
        ])
        .await;
    assert_ne!(a["identifier"], b["identifier"]);
}
