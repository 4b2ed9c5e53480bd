//! Issue 32: `reply_to` on every send path (CONVENTIONS "Every kind of message, in and out"):
//! text, media and template sends and batch items quote a message of the same contact, as
//! WhatsApp (`context.message_id`) and Telegram (`reply_parameters`) take it; the outbound
//! message shows what it replies to; a reply to anything else is a 422 naming `reply_to`, and
//! nothing is sent.

use serde_json::{Value, json};

use crate::both_backends;
use crate::db_peek;
use crate::fake_providers::{Fake, wa_text, wa_webhook};
use crate::message_kinds::{
    MESSAGES, PHONE_DIGITS, PHONE_NUMBER_ID, fields, find, inbound_by_provider_id, send_body,
    telegram_channel, tg_update, unix_now, wa_callback, whatsapp_channel,
};
use crate::support::{Backend, Resp, Seed, Server, TestEnv};

both_backends!(replies_quote_the_message_on_every_send_path);

const WA_TOKEN: &str = "EAAG-fake-access-token";
const TG_TOKEN: &str = "123456789:AAFakeBotTokenForTests_xyz";

async fn post(server: &Server, seed: &Seed, path: &str, body: Value) -> Resp {
    server
        .post_with(
            path,
            &seed.key,
            &body,
            &[("Idempotency-Key", &uuid::Uuid::new_v4().to_string())],
        )
        .await
}

fn merged(base: &Value, extra: Value) -> Value {
    let mut b = base.clone();
    b.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    b
}

async fn replies_quote_the_message_on_every_send_path(backend: Backend) {
    let env = TestEnv::new(backend).await;
    let seed = env.seed().await;
    let graph = Fake::graph(WA_TOKEN).await;
    let bot = Fake::telegram(TG_TOKEN).await;
    let wa_uuid = whatsapp_channel(&env, &seed, &graph).await;
    let tg_uuid = telegram_channel(&env, &seed, &bot).await;
    let server = env.start(&[]).await;
    let now = unix_now();
    let hook = wa_webhook(
        PHONE_NUMBER_ID,
        vec![
            wa_text(PHONE_DIGITS, "wamid.ASK", now - 5, "Where is my order?"),
            wa_text("4915123456700", "wamid.OTHER", now - 5, "Hello"),
        ],
        vec![],
    );
    wa_callback(&server, &wa_uuid, &hook).await.expect(200);
    let all = inbound_by_provider_id(&server, &seed.key).await;
    let asked = find(&all, "wamid.ASK").clone();
    let other = find(&all, "wamid.OTHER").clone();
    let to = json!({"channel_slug": "wa", "contact_uuid": asked["contact_uuid"]});
    let sends_before = graph.received().await.len();

    // Bad replies: a clear 422 naming reply_to, and nothing is sent.
    for (reply_to, why) in [
        (other["uuid"].clone(), "another contact's message"),
        (json!("not-a-uuid"), "not a UUID"),
        (
            json!(uuid::Uuid::new_v4()),
            "no message of the organization",
        ),
    ] {
        let r = send_body(
            &server,
            &seed,
            merged(&to, json!({"message": "On its way", "reply_to": reply_to})),
        )
        .await
        .expect_error(422, "validation_failed");
        assert_eq!(fields(&r), ["reply_to"], "{why}: {}", r.text);
    }
    let reaction = send_body(
        &server,
        &seed,
        merged(
            &to,
            json!({"reaction": {"message_uuid": asked["uuid"], "emoji": "👍"}}),
        ),
    )
    .await
    .expect(201);
    let r = send_body(
        &server,
        &seed,
        merged(
            &to,
            json!({"message": "x", "reply_to": reaction.body["message"]["uuid"]}),
        ),
    )
    .await
    .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), ["reply_to"], "a reaction: {}", r.text);
    assert_eq!(
        graph.received().await[sends_before..]
            .iter()
            .filter(|r| r.path.ends_with("/messages"))
            .count(),
        1,
        "only the reaction was sent"
    );

    // A text reply: WhatsApp gets context.message_id; the message shows what it quotes, in the
    // answer, the API and its message.sent event.
    let quoted = json!({"message_uuid": asked["uuid"], "provider_message_id": "wamid.ASK"});
    let r = send_body(
        &server,
        &seed,
        merged(
            &to,
            json!({"message": "It ships today", "reply_to": asked["uuid"]}),
        ),
    )
    .await
    .expect(201);
    let reply = r.body["message"].clone();
    assert_eq!(reply["reply_to"], quoted, "{}", r.text);
    let one = server
        .get(
            &format!("{MESSAGES}/{}", reply["uuid"].as_str().unwrap()),
            &seed.key,
        )
        .await
        .expect(200);
    assert_eq!(one.body["reply_to"], quoted);
    let events = db_peek::events_named(&env, seed.org_id, "message.sent").await;
    let event = events
        .iter()
        .find(|e| e.data["message_uuid"] == reply["uuid"])
        .expect("message.sent of the reply");
    assert_eq!(event.data["message"]["reply_to"], quoted);
    // A message sent without reply_to says nothing of replies.
    let plain = send_body(&server, &seed, merged(&to, json!({"message": "Thanks"})))
        .await
        .expect(201);
    assert!(
        plain.body["message"].get("reply_to").is_none(),
        "{}",
        plain.text
    );

    // A template reply, and a reply to one of our own messages.
    post(
        &server,
        &seed,
        &format!("{MESSAGES}/template"),
        merged(
            &to,
            json!({"template": {"name": "order_update", "language": "en_US", "components": []},
                   "reply_to": asked["uuid"]}),
        ),
    )
    .await
    .expect(201);
    let ours = reply["provider_message_id"].as_str().unwrap().to_owned();
    send_body(
        &server,
        &seed,
        merged(
            &to,
            json!({"message": "As I said", "reply_to": reply["uuid"]}),
        ),
    )
    .await
    .expect(201);

    // A batch item (sent later by the send worker) quotes it too.
    let batch = post(
        &server,
        &seed,
        &format!("{MESSAGES}/batch"),
        json!({"messages": [merged(&to, json!({"message": "Batched", "reply_to": asked["uuid"]}))]}),
    )
    .await
    .expect(202);
    assert_eq!(batch.body["total"], 1);
    let id = batch.body["batch_id"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let b = server
            .get(&format!("{MESSAGES}/batches/{id}"), &seed.key)
            .await
            .expect(200);
        if b.body["status"] == "completed" {
            assert_eq!(b.body["counts"], json!({"sent": 1}), "{}", b.text);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the batch: {}",
            b.text
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    let sent: Vec<Value> = graph.received().await[sends_before..]
        .iter()
        .filter(|r| r.path.ends_with("/messages"))
        .map(|r| r.body.clone())
        .collect();
    assert_eq!(sent.len(), 6, "{sent:?}");
    let contexts: Vec<&Value> = sent.iter().map(|b| &b["context"]).collect();
    assert_eq!(
        contexts,
        [
            &Value::Null, // the reaction
            &json!({"message_id": "wamid.ASK"}),
            &Value::Null, // "Thanks"
            &json!({"message_id": "wamid.ASK"}),
            &json!({"message_id": ours}),
            &json!({"message_id": "wamid.ASK"}),
        ]
    );
    assert_eq!(sent[3]["type"], "template");
    assert_eq!(sent[5]["text"]["body"], "Batched");

    // Telegram: text and media replies carry reply_parameters with the message's id in the chat.
    let update = json!({"update_id": 9, "message": {"message_id": 41, "date": now,
        "chat": {"id": 777, "type": "private"}, "from": {"id": 777, "first_name": "Lin"},
        "text": "Send me the invoice"}});
    tg_update(&server, &tg_uuid, &update).await.expect(200);
    let all = inbound_by_provider_id(&server, &seed.key).await;
    let tg_msg = find(&all, "777:41").clone();
    let tg_to = json!({"channel_slug": "bot", "contact_uuid": tg_msg["contact_uuid"]});
    let calls_before = bot.received().await.len();
    let r = send_body(
        &server,
        &seed,
        merged(
            &tg_to,
            json!({"message": "Here it is", "reply_to": tg_msg["uuid"]}),
        ),
    )
    .await
    .expect(201);
    assert_eq!(
        r.body["message"]["reply_to"],
        json!({"message_uuid": tg_msg["uuid"], "provider_message_id": "777:41"})
    );
    post(
        &server,
        &seed,
        &format!("{MESSAGES}/media"),
        merged(
            &tg_to,
            json!({"media_type": "document", "media_url": "https://files.example.com/invoice.pdf",
                   "file_name": "invoice.pdf", "reply_to": tg_msg["uuid"]}),
        ),
    )
    .await
    .expect(201);
    // A Telegram reply to a WhatsApp contact's message is another contact's: refused.
    let r = send_body(
        &server,
        &seed,
        merged(&tg_to, json!({"message": "x", "reply_to": asked["uuid"]})),
    )
    .await
    .expect_error(422, "validation_failed");
    assert_eq!(fields(&r), ["reply_to"]);
    let calls: Vec<_> = bot.received().await[calls_before..].to_vec();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(calls[0].path.ends_with("/sendMessage"), "{}", calls[0].path);
    assert!(
        calls[1].path.ends_with("/sendDocument"),
        "{}",
        calls[1].path
    );
    for c in &calls {
        assert_eq!(
            c.body["reply_parameters"],
            json!({"message_id": 41, "allow_sending_without_reply": true})
        );
    }
}
