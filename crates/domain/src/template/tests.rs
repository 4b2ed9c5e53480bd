use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::{Timestamp, ValidationErrors};

fn fields(e: &ValidationErrors) -> Vec<&str> {
    e.0.iter().map(|f| f.field.as_str()).collect()
}

fn def(v: Value) -> TemplateDefinition {
    parse_definition(&v, "components").unwrap().unwrap()
}

fn def_err(v: Value) -> Vec<String> {
    parse_definition(&v, "components")
        .unwrap_err()
        .0
        .into_iter()
        .map(|f| format!("{}: {}", f.field, f.issue))
        .collect()
}

#[test]
fn enums_round_trip() {
    assert_eq!(
        "marketing".parse::<TemplateCategory>(),
        Ok(TemplateCategory::Marketing)
    );
    assert!("MARKETING".parse::<TemplateCategory>().is_err());
    assert_eq!(
        "paused".parse::<TemplateStatus>(),
        Ok(TemplateStatus::Paused)
    );
    assert_eq!(ConsentSource::ALL.len(), 6);
    assert_eq!(
        "in_person".parse::<ConsentSource>(),
        Ok(ConsentSource::InPerson)
    );
    assert!("newsletter".parse::<ConsentPurpose>().is_err());
}

#[test]
fn purposes_match_categories_exactly() {
    use ConsentPurpose as P;
    use TemplateCategory as C;
    for p in P::ALL {
        for c in C::ALL {
            assert_eq!(
                purpose_allows(*p, *c),
                p.as_str() == c.as_str(),
                "{p} / {c}"
            );
        }
    }
}

#[test]
fn provider_events_map_to_statuses() {
    assert_eq!(
        status_of_provider_event("APPROVED"),
        Some(TemplateStatus::Approved)
    );
    assert_eq!(
        status_of_provider_event("rejected"),
        Some(TemplateStatus::Rejected)
    );
    assert_eq!(
        status_of_provider_event("PAUSED"),
        Some(TemplateStatus::Paused)
    );
    assert_eq!(
        status_of_provider_event("DISABLED"),
        Some(TemplateStatus::Disabled)
    );
    assert_eq!(
        status_of_provider_event("PENDING"),
        Some(TemplateStatus::Pending)
    );
    assert_eq!(
        status_of_provider_event("REINSTATED"),
        Some(TemplateStatus::Approved)
    );
    assert_eq!(status_of_provider_event("FLAGGED"), None);
    assert_eq!(status_of_provider_event(""), None);
}

#[test]
fn names_languages_and_provider_ids() {
    assert!(validate_name("order_update").is_ok());
    assert!(validate_name("").is_err());
    assert!(validate_name(" x").is_err());
    assert!(validate_name("a\u{7}").is_err());
    assert!(validate_name(&"x".repeat(513)).is_err());
    assert!(validate_language("en_US").is_ok());
    assert!(validate_language("english please").is_err());
    assert!(same_language("en_US", "en-us"));
    assert!(!same_language("en_US", "en_GB"));
    assert!(validate_provider_id("1234567890").is_ok());
    assert!(validate_provider_id("has space").is_err());
    assert!(validate_provider_id("").is_err());
}

#[test]
fn definitions_derive_their_parameters() {
    let d = def(json!([
        {"type": "HEADER", "format": "TEXT", "text": "Order {{1}}"},
        {"type": "BODY", "text": "Hi {{1}}, order {{2}} ships {{3}}. Thanks {{1}}!"},
        {"type": "FOOTER", "text": "Acme"},
        {"type": "BUTTONS", "buttons": [
            {"type": "URL", "text": "Track", "url": "https://x.test/t/{{1}}"},
            {"type": "QUICK_REPLY", "text": "Stop"},
            {"type": "PHONE_NUMBER", "text": "Call", "phone_number": "+4915123456789"}
        ]}
    ]));
    assert_eq!(d.header, HeaderDef::Text { parameters: 1 });
    assert_eq!(d.body_parameters, 3);
    assert_eq!(d.header_parameters(), 1);
    assert_eq!(d.button_parameters(), 1);
    assert_eq!(d.buttons[1].allowed, 1);
    assert_eq!(d.buttons[2].allowed, 0);
    // Lower case works too; no placeholders at all is fine.
    let plain = def(json!([{"type": "body", "text": "Your appointment is confirmed."}]));
    assert_eq!(plain.body_parameters, 0);
    assert_eq!(plain.header, HeaderDef::None);
    let media = def(json!([{"type": "HEADER", "format": "image"}, {"type": "BODY", "text": "x"}]));
    assert_eq!(media.header, HeaderDef::Media("image"));
    // Not defined.
    assert_eq!(parse_definition(&json!([]), "c").unwrap(), None);
    assert_eq!(parse_definition(&Value::Null, "c").unwrap(), None);
}

#[test]
fn definitions_are_checked() {
    assert_eq!(
        def_err(json!({"type": "BODY"})),
        vec!["components: must be a JSON array of component objects"]
    );
    assert_eq!(
        def_err(json!([{"type": "FOOTER", "text": "x"}])),
        vec!["components: must have a BODY component with its text"]
    );
    assert!(def_err(json!([{"type": "BODY"}]))[0].starts_with("components[0].text: is required"));
    assert!(def_err(json!([{"type": "BODY", "text": "  "}]))[0].starts_with("components[0].text"));
    assert!(def_err(json!([{"type": "CAROUSEL"}]))[0].starts_with("components[0].type: must be"));
    assert!(def_err(json!([{"text": "x"}]))[0].starts_with("components[0].type: is required"));
    assert!(def_err(json!([1]))[0].starts_with("components[0]: must be an object"));
    let gaps = def_err(json!([{"type": "BODY", "text": "{{1}} and {{3}}"}]));
    assert!(gaps[0].contains("missing {{2}}"), "{gaps:?}");
    let zero = def_err(json!([{"type": "BODY", "text": "{{0}}"}]));
    assert!(zero[0].contains("only numbered placeholders"), "{zero:?}");
    let named = def_err(json!([{"type": "BODY", "text": "Hi {{first_name}}"}]));
    assert!(named[0].contains("{{first_name}}"), "{named:?}");
    let header2 = def_err(
        json!([{"type": "HEADER", "format": "TEXT", "text": "{{1}} {{2}}"}, {"type": "BODY", "text": "x"}]),
    );
    assert!(
        header2[0].starts_with("components[0].text: may have at most 1"),
        "{header2:?}"
    );
    let footer =
        def_err(json!([{"type": "BODY", "text": "x"}, {"type": "FOOTER", "text": "{{1}}"}]));
    assert!(footer[0].starts_with("components[1].text"), "{footer:?}");
    let twice = def_err(json!([{"type": "BODY", "text": "x"}, {"type": "body", "text": "y"}]));
    assert!(twice[0].contains("more than once"), "{twice:?}");
    let fmt = def_err(json!([{"type": "HEADER", "format": "GIF"}, {"type": "BODY", "text": "x"}]));
    assert!(fmt[0].starts_with("components[0].format"), "{fmt:?}");
    let nobuttons =
        def_err(json!([{"type": "BODY", "text": "x"}, {"type": "BUTTONS", "buttons": []}]));
    assert!(
        nobuttons[0].starts_with("components[1].buttons"),
        "{nobuttons:?}"
    );
    let nourl = def_err(
        json!([{"type": "BODY", "text": "x"}, {"type": "BUTTONS", "buttons": [{"type": "URL", "text": "a"}]}]),
    );
    assert!(
        nourl[0].starts_with("components[1].buttons[0].url"),
        "{nourl:?}"
    );
    let long = def_err(json!([{"type": "BODY", "text": "x".repeat(1025)}]));
    assert!(long[0].contains("at most 1024"), "{long:?}");
    assert!(!def_err(json!([{"type": "BODY", "text": "a\u{0}b"}])).is_empty());
    // An unclosed brace is text, not a placeholder.
    assert_eq!(
        def(json!([{"type": "BODY", "text": "{{1}} costs {{ 2 }} {{"}])).body_parameters,
        2
    );
}

fn fit(def_json: Value, components: Value) -> Vec<String> {
    let d = def(def_json);
    fit_parameters(&d, components.as_array().unwrap())
        .0
        .into_iter()
        .map(|f| format!("{}: {}", f.field, f.issue))
        .collect()
}

#[test]
fn parameters_must_fit() {
    let body2 = json!([{"type": "BODY", "text": "Hi {{1}}, order {{2}}"}]);
    let text = |t: &str| json!({"type": "text", "text": t});
    assert!(
        fit(
            body2.clone(),
            json!([{"type": "body", "parameters": [text("Ada"), text("42")]}])
        )
        .is_empty()
    );
    let few = fit(
        body2.clone(),
        json!([{"type": "body", "parameters": [text("Ada")]}]),
    );
    assert_eq!(
        few,
        vec![
            "template.components[0].parameters: the template's body takes 2 parameter(s), 1 given"
        ]
    );
    let many = fit(
        body2.clone(),
        json!([{"type": "body", "parameters": [text("a"), text("b"), text("c")]}]),
    );
    assert_eq!(many.len(), 1);
    let none = fit(body2.clone(), json!([]));
    assert!(
        none[0].starts_with("template.components: the template's body takes 2"),
        "{none:?}"
    );
    let empty_text = fit(
        body2.clone(),
        json!([{"type": "body", "parameters": [text(""), text("x")]}]),
    );
    assert_eq!(
        empty_text,
        vec!["template.components[0].parameters[0].text: is required for a text parameter"]
    );
    let image_in_body = fit(
        body2.clone(),
        json!([{"type": "body", "parameters": [{"type": "image", "image": {"link": "https://x.test/a.png"}}, text("x")]}]),
    );
    assert!(image_in_body[0].ends_with("must be text, currency or date_time in a body"));
    // A template without parameters takes none.
    let plain = json!([{"type": "BODY", "text": "Hello"}]);
    assert!(fit(plain.clone(), json!([])).is_empty());
    assert_eq!(
        fit(
            plain.clone(),
            json!([{"type": "body", "parameters": [text("x")]}])
        )
        .len(),
        1
    );
    assert_eq!(
        fit(
            plain.clone(),
            json!([{"type": "header", "parameters": [text("x")]}])
        )
        .len(),
        1
    );
    assert_eq!(
        fit(
            plain,
            json!([{"type": "footer", "parameters": [text("x")]}])
        )
        .len(),
        1
    );
    // Headers.
    let media = json!([{"type": "HEADER", "format": "DOCUMENT"}, {"type": "BODY", "text": "x"}]);
    assert!(fit(media.clone(), json!([{"type": "header", "parameters": [{"type": "document", "document": {"link": "https://x.test/a.pdf"}}]}])).is_empty());
    assert_eq!(
        fit(
            media.clone(),
            json!([{"type": "header", "parameters": [text("x")]}])
        ),
        vec![
            "template.components[0].parameters[0].type: must be document: the template's header is of that format"
        ]
    );
    assert!(fit(media, json!([]))[0].contains("header takes 1 parameter"));
    // Buttons.
    let buttons = json!([{"type": "BODY", "text": "x"}, {"type": "BUTTONS", "buttons": [
        {"type": "URL", "text": "Track", "url": "https://x.test/{{1}}"}, {"type": "QUICK_REPLY", "text": "Stop"}]}]);
    let url =
        json!({"type": "button", "sub_type": "url", "index": "0", "parameters": [text("abc")]});
    assert!(fit(buttons.clone(), json!([url.clone()])).is_empty());
    assert!(fit(buttons.clone(), json!([url.clone(), {"type": "button", "sub_type": "quick_reply", "index": 1, "parameters": [{"type": "payload", "payload": "STOP"}]}])).is_empty());
    assert!(fit(buttons.clone(), json!([]))[0].contains("URL button 0 takes 1"));
    assert!(
        fit(
            buttons.clone(),
            json!([url.clone(), {"type": "button", "index": "5", "parameters": []}])
        )[0]
        .contains("index 5 does not exist")
    );
    assert!(fit(buttons.clone(), json!([url.clone(), url.clone()]))[0].contains("more than once"));
    assert!(
        fit(
            buttons.clone(),
            json!([{"type": "button", "parameters": [text("a")]}])
        )[0]
        .starts_with("template.components[0].index")
    );
    assert!(
        fit(
            buttons,
            json!([{"type": "button", "index": "0", "parameters": []}])
        )[0]
        .contains("takes 1 parameter(s), 0 given")
    );
}

#[test]
fn request_templates_are_parsed() {
    assert_eq!(parse_request_template(None).unwrap(), None);
    let t = parse_request_template(Some(
        &json!({"name": "order_update", "language": {"code": "en_US"}}),
    ))
    .unwrap()
    .unwrap();
    assert_eq!(t.name.as_deref(), Some("order_update"));
    assert_eq!(t.language.as_deref(), Some("en_US"));
    let only_components = parse_request_template(Some(
        &json!({"components": [{"type": "body", "parameters": []}]}),
    ))
    .unwrap()
    .unwrap();
    assert_eq!(only_components.name, None);
    assert_eq!(only_components.components.len(), 1);
    let e = parse_request_template(Some(
        &json!({"name": 5, "language": "english please", "components": [{"type": "nope"}]}),
    ))
    .unwrap_err();
    assert_eq!(
        fields(&e),
        vec![
            "template.name",
            "template.language",
            "template.components[0].type"
        ]
    );
    assert_eq!(
        fields(&parse_request_template(Some(&json!("x"))).unwrap_err()),
        vec!["template"]
    );
}

fn now() -> Timestamp {
    Timestamp::parse_rfc3339("2026-08-14T09:30:00Z").unwrap()
}

fn consent(v: Value) -> Result<Consent, ValidationErrors> {
    parse_consent(Some(&v), now(), &ConsentRules::default())
}

fn good() -> Value {
    json!({"confirmed": true, "purpose": "utility", "source": "customer_request",
           "reference": "form-123", "captured_at": "2026-08-14T09:00:00Z"})
}

#[test]
fn consent_is_parsed() {
    let c = consent(good()).unwrap();
    assert_eq!(c.purpose, ConsentPurpose::Utility);
    assert_eq!(c.source, ConsentSource::CustomerRequest);
    assert_eq!(c.reference, "form-123");
    assert_eq!(
        c.captured_at,
        Timestamp::parse_rfc3339("2026-08-14T09:00:00Z").unwrap()
    );
    // Any offset, converted to UTC.
    let mut v = good();
    v["captured_at"] = json!("2026-08-14T11:29:00+02:00");
    assert_eq!(
        consent(v).unwrap().captured_at,
        Timestamp::parse_rfc3339("2026-08-14T09:29:00Z").unwrap()
    );
}

#[test]
fn bad_consent_names_every_field() {
    assert_eq!(
        fields(&parse_consent(None, now(), &ConsentRules::default()).unwrap_err()),
        vec!["consent"]
    );
    assert_eq!(fields(&consent(json!("yes")).unwrap_err()), vec!["consent"]);
    assert_eq!(
        fields(&consent(json!({})).unwrap_err()),
        vec![
            "consent.confirmed",
            "consent.purpose",
            "consent.source",
            "consent.reference",
            "consent.captured_at"
        ]
    );
    for (key, value) in [
        ("confirmed", json!(false)),
        ("confirmed", json!("true")),
        ("purpose", json!("newsletter")),
        ("purpose", json!(1)),
        ("source", json!("carrier_pigeon")),
        ("reference", json!("")),
        ("reference", json!("   ")),
        ("reference", json!("x".repeat(257))),
        ("reference", json!("a\nb")),
        ("reference", json!(42)),
        ("captured_at", json!("yesterday")),
        ("captured_at", json!("2026-08-14")),
        ("captured_at", json!(1786000000)),
        ("captured_at", json!("2026-08-14T09:36:00Z")),
        ("captured_at", json!("2027-01-01T00:00:00Z")),
        ("captured_at", json!("1969-12-31T23:59:59Z")),
    ] {
        let mut v = good();
        v[key] = value.clone();
        let e = consent(v).unwrap_err();
        assert_eq!(
            fields(&e),
            [format!("consent.{key}").as_str()],
            "{key} = {value}"
        );
    }
    // By default a second ahead is in the future; now itself is not.
    let mut ahead = good();
    ahead["captured_at"] = json!("2026-08-14T09:30:01Z");
    assert_eq!(
        fields(&consent(ahead.clone()).unwrap_err()),
        ["consent.captured_at"]
    );
    let mut edge = good();
    edge["captured_at"] = json!("2026-08-14T09:30:00Z");
    assert!(consent(edge).is_ok());
    // An operator may allow clock skew: exactly at its edge is accepted.
    let skew = ConsentRules {
        clock_skew: Duration::from_secs(300),
        max_age: None,
    };
    assert!(parse_consent(Some(&ahead), now(), &skew).is_ok());
    let mut edge = good();
    edge["captured_at"] = json!("2026-08-14T09:35:00Z");
    assert!(parse_consent(Some(&edge), now(), &skew).is_ok());
    edge["captured_at"] = json!("2026-08-14T09:35:01Z");
    assert!(parse_consent(Some(&edge), now(), &skew).is_err());
}

#[test]
fn consent_max_age_is_optional() {
    let rules = ConsentRules {
        clock_skew: Duration::from_secs(300),
        max_age: Some(Duration::from_secs(365 * 86400)),
    };
    let mut old = good();
    old["captured_at"] = json!("2024-01-01T00:00:00Z");
    assert!(parse_consent(Some(&old), now(), &ConsentRules::default()).is_ok());
    let e = parse_consent(Some(&old), now(), &rules).unwrap_err();
    assert!(e.0[0].issue.contains("too old"), "{e:?}");
    assert!(parse_consent(Some(&good()), now(), &rules).is_ok());
}
