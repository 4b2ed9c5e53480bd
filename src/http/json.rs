//! Request bodies: JSON only, at most 1 MiB, with errors in the API's format.
//!
//! * not JSON at all (syntax, truncation, invalid UTF-8, nesting deeper than 128): 400
//!   `malformed_json`;
//! * JSON of the wrong shape (wrong type, missing field, number out of range): 422
//!   `validation_failed` with the field's path;
//! * a `Content-Type` other than JSON: 415; a body over the limit: 413.

use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use bytes::Bytes;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// The largest request body accepted.
pub const BODY_LIMIT: usize = 1024 * 1024;

/// A JSON request body, deserialized into `T`.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        check_content_type(&req)?;
        let bytes = read_body(req, state).await?;
        parse(&bytes).map(JsonBody)
    }
}

/// The raw body (for endpoints that also need the exact bytes, such as provider signatures or
/// idempotency fingerprints), with the same limit and content-type rules.
pub struct RawJson(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawJson {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        check_content_type(&req)?;
        read_body(req, state).await.map(RawJson)
    }
}

fn check_content_type(req: &Request) -> Result<(), ApiError> {
    let Some(ct) = req.headers().get(CONTENT_TYPE) else {
        // Be lenient with clients that omit the header: the body must still be JSON.
        return Ok(());
    };
    let ct = ct
        .to_str()
        .map_err(|_| ApiError::unsupported_media_type())?;
    let essence = ct
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
    {
        Ok(())
    } else {
        Err(ApiError::unsupported_media_type())
    }
}

async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::payload_too_large(BODY_LIMIT)
        } else if super::deadline::is_deadline(&rejection) {
            ApiError::request_timeout()
        } else {
            ApiError::malformed_json(format!("The request body could not be read: {rejection}"))
        }
    })
}

/// Parses a JSON body into `T`, classifying failures as described in the module docs.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if std::str::from_utf8(bytes).is_err() {
        return Err(ApiError::malformed_json(
            "The request body is not valid UTF-8.",
        ));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::malformed_json(
            "The request body is empty; send a JSON object.",
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    match serde_path_to_error::deserialize::<_, T>(de) {
        Ok(v) => {
            // Trailing characters after the value are a syntax error too.
            let mut de =
                serde_json::Deserializer::from_slice(bytes).into_iter::<serde::de::IgnoredAny>();
            de.next();
            if de.next().is_some() {
                return Err(ApiError::malformed_json(
                    "The request body has characters after the JSON value.",
                ));
            }
            // Every request body of the API is an object (serde would also read a struct
            // from an array of its fields).
            if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
                return Err(ApiError::validation_field("body", "must be a JSON object"));
            }
            Ok(v)
        }
        Err(e) => {
            let path = e.path().to_string();
            let inner = e.into_inner();
            match inner.classify() {
                serde_json::error::Category::Data => Err(shape_error(&path, &inner)),
                _ => Err(ApiError::malformed_json(format!(
                    "The request body is not valid JSON: {inner}"
                ))),
            }
        }
    }
}

/// A 422 for JSON of the wrong shape, naming the field.
fn shape_error(path: &str, e: &serde_json::Error) -> ApiError {
    // serde's messages end with " at line L column C"; drop that part.
    let full = e.to_string();
    let issue = full
        .rsplit_once(" at line ")
        .map(|(m, _)| m.to_owned())
        .unwrap_or(full);
    let mut field = if path == "." || path.is_empty() {
        String::new()
    } else {
        path.to_owned()
    };
    // For a missing field the path is that of the enclosing object: append the field's name.
    if let Some(name) = issue
        .strip_prefix("missing field `")
        .and_then(|r| r.strip_suffix('`'))
    {
        field = if field.is_empty() {
            name.to_owned()
        } else {
            format!("{field}.{name}")
        };
    }
    if field.is_empty() {
        field = "body".to_owned();
    }
    ApiError::validation_field(&field, issue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Inner {
        name: String,
    }

    #[derive(Deserialize, Debug)]
    #[allow(dead_code)]
    struct Body {
        count: i64,
        inner: Option<Inner>,
        extra: Option<serde_json::Value>,
    }

    fn code(bytes: &[u8]) -> (&'static str, Option<serde_json::Value>) {
        let e = parse::<Body>(bytes).unwrap_err();
        (e.code, e.details)
    }

    #[test]
    fn syntax_errors_are_400() {
        assert_eq!(code(b"{").0, "malformed_json");
        assert_eq!(code(b"").0, "malformed_json");
        assert_eq!(code(b"nope").0, "malformed_json");
        assert_eq!(code(b"{\"count\": 1} x").0, "malformed_json");
        assert_eq!(code(b"{\"count\": 1, \"s\": \"\xff\"}").0, "malformed_json");
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(
            code(format!("{{\"count\": 1, \"extra\": {deep}}}").as_bytes()).0,
            "malformed_json"
        );
        // Deep nesting in an ignored field is skipped without recursion (no stack overflow).
        let deeper = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse::<Body>(format!("{{\"count\": 1, \"x\": {deeper}}}").as_bytes()).is_ok());
    }

    #[test]
    fn shape_errors_are_422_with_the_field() {
        let (c, d) = code(b"{\"count\": \"one\"}");
        assert_eq!(c, "validation_failed");
        assert_eq!(d.unwrap()["fields"][0]["field"], "count");
        let (c, d) = code(b"{\"count\": 99999999999999999999999}");
        assert_eq!(c, "validation_failed");
        assert_eq!(d.unwrap()["fields"][0]["field"], "count");
        let (_, d) = code(b"{\"count\": 1, \"inner\": {}}");
        assert_eq!(d.unwrap()["fields"][0]["field"], "inner.name");
        let (_, d) = code(b"{}");
        assert_eq!(d.unwrap()["fields"][0]["field"], "count");
        let (c, _) = code(b"[1, 2]");
        assert_eq!(c, "validation_failed");
        // An array of the fields in order would fit the struct: still not an object.
        let (c, d) = code(b" [3, null, null]");
        assert_eq!(c, "validation_failed");
        assert_eq!(d.unwrap()["fields"][0]["field"], "body");
    }

    #[test]
    fn good_bodies_parse() {
        let b: Body = parse(b" {\"count\": 3, \"unknown\": true} ").unwrap();
        assert_eq!(b.count, 3);
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn arbitrary_bytes_are_a_4xx_never_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
                match parse::<super::Body>(&bytes) {
                    Ok(_) => {}
                    Err(e) => prop_assert!(e.status.is_client_error()),
                }
                let _ = parse::<serde_json::Value>(&bytes);
            }

            #[test]
            fn arbitrary_json_values_are_a_4xx_never_a_panic(v in arb_json()) {
                let bytes = serde_json::to_vec(&v).unwrap();
                if let Err(e) = parse::<super::Body>(&bytes) {
                    prop_assert!(e.status.is_client_error());
                }
            }
        }

        fn arb_json() -> impl Strategy<Value = serde_json::Value> {
            let leaf = prop_oneof![
                Just(serde_json::Value::Null),
                any::<bool>().prop_map(serde_json::Value::from),
                any::<i64>().prop_map(serde_json::Value::from),
                any::<f64>()
                    .prop_filter("finite", |f| f.is_finite())
                    .prop_map(serde_json::Value::from),
                "\\PC{0,20}".prop_map(serde_json::Value::from),
            ];
            leaf.prop_recursive(4, 32, 6, |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..6)
                        .prop_map(serde_json::Value::from),
                    proptest::collection::btree_map(
                        prop_oneof![
                            Just("count".to_owned()),
                            Just("inner".to_owned()),
                            Just("name".to_owned()),
                            "[a-z]{1,6}"
                        ],
                        inner,
                        0..6
                    )
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
                ]
            })
        }
    }
}
