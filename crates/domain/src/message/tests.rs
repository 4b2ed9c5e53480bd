use super::*;

fn fields(e: &ValidationErrors) -> Vec<&str> {
    e.0.iter().map(|f| f.field.as_str()).collect()
}

#[test]
fn statuses_move_forward_only() {
    use MessageStatus::*;
    assert!(Queued.can_advance_to(Sent));
    assert!(Sent.can_advance_to(Delivered));
    assert!(Sent.can_advance_to(Read), "read implies delivered");
    assert!(Delivered.can_advance_to(Read));
    assert!(Sent.can_advance_to(Failed));
    assert!(Queued.can_advance_to(Failed));
    assert!(!Delivered.can_advance_to(Sent));
    assert!(!Read.can_advance_to(Delivered));
    assert!(!Read.can_advance_to(Read), "a duplicate is not a move");
    assert!(!Delivered.can_advance_to(Failed));
    assert!(!Failed.can_advance_to(Delivered));
    assert!(!Received.can_advance_to(Read));
    assert_eq!(MessageStatus::predecessors(Delivered), vec![Queued, Sent]);
    assert_eq!(MessageStatus::predecessors(Failed), vec![Queued, Sent]);
    assert_eq!(parse_reported_status("read"), Some(Read));
    assert_eq!(parse_reported_status("played"), Some(Read));
    assert_eq!(parse_reported_status("received"), None);
}

#[test]
fn text_rules() {
    let ok = validate_text(&TextInput {
        message: Some("hello"),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(ok.message_type(), MessageType::Text);
    assert_eq!(ok.to_json(), json!({"body": "hello"}));
    let long = "é".repeat(4096);
    assert!(
        validate_text(&TextInput {
            message: Some(&long),
            ..Default::default()
        })
        .is_ok(),
        "4096 characters, not bytes"
    );
    let too_long = "a".repeat(4097);
    for (input, field) in [
        (TextInput::default(), "message"),
        (
            TextInput {
                message: Some("  "),
                ..Default::default()
            },
            "message",
        ),
        (
            TextInput {
                message: Some(&too_long),
                ..Default::default()
            },
            "message",
        ),
        (
            TextInput {
                message: Some("a\0b"),
                ..Default::default()
            },
            "message",
        ),
        (
            TextInput {
                message: Some("x"),
                kind: Some("video"),
                ..Default::default()
            },
            "type",
        ),
    ] {
        let e = validate_text(&input).unwrap_err();
        assert_eq!(fields(&e), vec![field], "{input:?}");
    }
}

fn interactive(v: Value) -> Result<Content, ValidationErrors> {
    validate_text(&TextInput {
        kind: Some("interactive"),
        interactive: Some(&v),
        ..Default::default()
    })
}

#[test]
fn reply_buttons() {
    let ok = interactive(json!({
        "type": "button",
        "body": {"text": "Pick one"},
        "footer": {"text": "thanks"},
        "action": {"buttons": [
            {"type": "reply", "reply": {"id": "yes", "title": "Yes"}},
            {"type": "reply", "reply": {"id": "no", "title": "No"}}
        ]},
        "unknown": 1
    }))
    .unwrap();
    let Content::Interactive(v) = ok else {
        panic!()
    };
    assert_eq!(v["action"]["buttons"][1]["reply"]["id"], "no");
    assert!(v.get("unknown").is_none());

    let four = json!({"type": "button", "body": {"text": "x"}, "action": {"buttons": [
        {"type": "reply", "reply": {"id": "1", "title": "a"}},
        {"type": "reply", "reply": {"id": "2", "title": "b"}},
        {"type": "reply", "reply": {"id": "3", "title": "c"}},
        {"type": "reply", "reply": {"id": "4", "title": "d"}}
    ]}});
    assert_eq!(
        fields(&interactive(four).unwrap_err()),
        vec!["interactive.action.buttons"]
    );
    let none = json!({"type": "button", "body": {"text": "x"}, "action": {"buttons": []}});
    assert_eq!(
        fields(&interactive(none).unwrap_err()),
        vec!["interactive.action.buttons"]
    );
    let bad = json!({"type": "button", "action": {"buttons": [
        {"type": "reply", "reply": {"id": "1", "title": "a title longer than twenty"}},
        {"type": "reply", "reply": {"id": "1", "title": "b"}},
        {"type": "url", "reply": {"title": "c"}}
    ]}});
    assert_eq!(
        fields(&interactive(bad).unwrap_err()),
        vec![
            "interactive.body.text",
            "interactive.action.buttons[0].reply.title",
            "interactive.action.buttons[1].reply.id",
            "interactive.action.buttons[2].type",
            "interactive.action.buttons[2].reply.id",
        ]
    );
    // The body may come from `message`.
    let from_message = validate_text(&TextInput {
        message: Some("Body from message"),
        kind: Some("interactive"),
        interactive: Some(&json!({"type": "button", "action": {"buttons": [
            {"type": "reply", "reply": {"id": "1", "title": "a"}}]}})),
        ..Default::default()
    })
    .unwrap();
    let Content::Interactive(v) = from_message else {
        panic!()
    };
    assert_eq!(v["body"]["text"], "Body from message");
    assert_eq!(
        fields(
            &validate_text(&TextInput {
                kind: Some("interactive"),
                ..Default::default()
            })
            .unwrap_err()
        ),
        vec!["interactive"]
    );
    assert_eq!(
        fields(&interactive(json!({"type": "carousel", "body": {"text": "x"}})).unwrap_err()),
        vec!["interactive.type"]
    );
    assert_eq!(
        fields(&interactive(json!("button")).unwrap_err()),
        vec!["interactive"]
    );
}

#[test]
fn lists() {
    let row = |i: usize| json!({"id": format!("r{i}"), "title": format!("Row {i}")});
    let ok = json!({"type": "list", "header": {"type": "text", "text": "Menu"},
    "body": {"text": "Choose"}, "action": {"button": "Options", "sections": [
        {"title": "A", "rows": (0..5).map(row).collect::<Vec<_>>()},
        {"title": "B", "rows": (5..10).map(row).collect::<Vec<_>>()}
    ]}});
    assert!(interactive(ok).is_ok());
    let eleven = json!({"type": "list", "body": {"text": "Choose"}, "action": {"button": "Options",
        "sections": [{"rows": (0..11).map(row).collect::<Vec<_>>()}]}});
    assert_eq!(
        fields(&interactive(eleven).unwrap_err()),
        vec!["interactive.action.sections"]
    );
    let bad = json!({"type": "list", "header": {"type": "image", "image": {"link": "https://x.test/a.png"}},
    "body": {"text": "Choose"}, "action": {"button": "A button label too long",
    "sections": [
        {"rows": [{"id": "a", "title": "a row title that is too long"}]},
        {"title": "two", "rows": [{"id": "a", "title": "dup"}]}
    ]}});
    assert_eq!(
        fields(&interactive(bad).unwrap_err()),
        vec![
            "interactive.header.type",
            "interactive.action.button",
            "interactive.action.sections[0].title",
            "interactive.action.sections[0].rows[0].title",
            "interactive.action.sections[1].rows[0].id",
        ]
    );
}

#[test]
fn media_rules() {
    let ok = validate_media(&MediaInput {
        media_type: Some("document"),
        media_url: Some("https://cdn.example.com/invoice.pdf"),
        caption: Some("Your invoice"),
        file_name: Some("invoice.pdf"),
    })
    .unwrap();
    assert_eq!(
        ok.to_json(),
        json!({"media_type": "document", "media_url": "https://cdn.example.com/invoice.pdf",
               "caption": "Your invoice", "file_name": "invoice.pdf"})
    );
    let e = validate_media(&MediaInput {
        media_type: Some("pdf"),
        media_url: Some("ftp://example.com/x"),
        caption: None,
        file_name: Some("../etc/passwd"),
    })
    .unwrap_err();
    assert_eq!(fields(&e), vec!["media_type", "media_url", "file_name"]);
    let e = validate_media(&MediaInput {
        media_type: Some("audio"),
        media_url: Some("/relative.mp3"),
        caption: Some("no"),
        file_name: None,
    })
    .unwrap_err();
    assert_eq!(fields(&e), vec!["media_url", "caption"]);
    let e = validate_media(&MediaInput::default()).unwrap_err();
    assert_eq!(fields(&e), vec!["media_type", "media_url"]);
    for bad in [
        "https://user:pw@example.com/a",
        "http://",
        "javascript:alert(1)",
        "example.com/a.pdf",
    ] {
        assert!(check_media_url(bad).is_err(), "{bad}");
    }
}

#[test]
fn template_rules() {
    let ok = validate_template(Some(&json!({"name": "order_update", "language": "en_US",
        "components": [{"type": "body", "parameters": [{"type": "text", "text": "42"}]}]})))
    .unwrap();
    let Content::Template(t) = ok else { panic!() };
    assert_eq!(
        (t.name.as_str(), t.language.as_str()),
        ("order_update", "en_US")
    );
    let ok = validate_template(Some(&json!({"name": "x", "language": {"code": "pt_BR"}}))).unwrap();
    let Content::Template(t) = ok else { panic!() };
    assert_eq!(t.language, "pt_BR");
    assert!(t.components.is_empty());

    assert_eq!(
        fields(&validate_template(None).unwrap_err()),
        vec!["template"]
    );
    assert_eq!(
        fields(&validate_template(Some(&json!({}))).unwrap_err()),
        vec!["template.name", "template.language"]
    );
    let e = validate_template(Some(&json!({"name": "", "language": "english please",
        "components": [{"type": "sidebar"}, 3, {"type": "body", "parameters": [{}]}]})))
    .unwrap_err();
    assert_eq!(
        fields(&e),
        vec![
            "template.name",
            "template.language",
            "template.components[0].type",
            "template.components[1]",
            "template.components[2].parameters[0].type",
        ]
    );
    assert_eq!(
        fields(
            &validate_template(Some(
                &json!({"name": "x", "language": "en", "components": {}})
            ))
            .unwrap_err()
        ),
        vec!["template.components"]
    );
}

#[test]
fn nul_characters_are_found_anywhere() {
    assert!(contains_nul(&json!({"a": [1, {"b": "x\u{0}"}]})));
    assert!(contains_nul(&json!({"k\u{0}": 1})));
    assert!(!contains_nul(&json!({"a": [1, {"b": "x"}]})));
}

#[test]
fn stored_content_reads_back() {
    let contents = [
        Content::Text {
            body: "hi".into(),
            preview_url: true,
        },
        Content::Interactive(serde_json::json!({"type": "button", "body": {"text": "b"}})),
        Content::Media(Media {
            media_type: MediaType::Document,
            media_url: "https://x.test/a.pdf".into(),
            caption: Some("c".into()),
            file_name: Some("a.pdf".into()),
            media_id: None,
        }),
        Content::Template(Template {
            name: "order_update".into(),
            language: "en_US".into(),
            components: vec![serde_json::json!({"type": "body", "parameters": []})],
        }),
        Content::Reaction(ReactionMember {
            emoji: Some("👍".into()),
            message_uuid: Some(uuid::Uuid::nil()),
            provider_message_id: "wamid.X".into(),
        }),
        Content::Location(validate_location(Some(1.0), Some(2.0), Some("n"), None).unwrap()),
        Content::Contacts(
            validate_contacts(Some(
                &serde_json::json!([{"name": {"formatted_name": "A"}}]),
            ))
            .unwrap(),
        ),
    ];
    for c in contents {
        assert_eq!(
            Content::from_stored(c.message_type(), &c.to_json()),
            Some(c.clone())
        );
    }
    assert_eq!(
        Content::from_stored(MessageType::Text, &serde_json::json!({"nobody": 1})),
        None
    );
}
