//! Request bodies: JSON only, at most 1 MiB, with errors in the API's format.
//!
//! * not JSON at all (syntax, truncation, invalid UTF-8, nesting deeper than 128 anywhere):
//!   400 `malformed_json`;
//! * JSON of the wrong shape (not an object, wrong type, missing field, number out of range,
//!   a NUL character in any string): 422 `validation_failed` with the field's path;
//! * a `Content-Type` other than JSON: 415; a body over the limit: 413.

use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use switchboard_domain::ValidationErrors;
use utoipa::openapi::{RefOr, Schema};

use super::error::ApiError;

/// The largest request body accepted.
pub const BODY_LIMIT: usize = 1024 * 1024;

/// A v1 JSON request body, deserialized into `T` strictly: a field `T` does not know is a 422
/// ([`parse_strict`]).
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + utoipa::PartialSchema> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        check_content_type(&req)?;
        let bytes = read_body(req, state).await?;
        parse_strict(&bytes).map(JsonBody)
    }
}

/// A legacy `/api` JSON request body: as [`JsonBody`], but fields `T` does not know are ignored
/// (the legacy routes stay lenient).
pub struct LenientJsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for LenientJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        check_content_type(&req)?;
        let bytes = read_body(req, state).await?;
        parse(&bytes).map(LenientJsonBody)
    }
}

/// An optional v1 JSON request body: no body (or only whitespace) is `T::default()`; anything
/// else is read like [`JsonBody`].
pub struct OptionalJsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + utoipa::PartialSchema + Default> FromRequest<S>
    for OptionalJsonBody<T>
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        check_content_type(&req)?;
        let bytes = read_body(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJsonBody(T::default()));
        }
        parse_strict(&bytes).map(OptionalJsonBody)
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

/// The deepest nesting of arrays and objects accepted anywhere in a body.
pub const MAX_DEPTH: usize = 128;

/// Parses a JSON body into `T`, classifying failures as described in the module docs. Fields
/// `T` does not know are ignored: the reading of the legacy `/api` routes, which stay lenient.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let read = read::<T>(bytes, Fields::Lenient)?;
    match read.value {
        Some(v) if read.errors.is_empty() => Ok(v),
        _ => Err(ApiError::validation(read.errors)),
    }
}

/// Parses a v1 request body into `T`: as [`parse`], and a field `T` does not know is refused
/// (issue `unknown_field`), every one of them at once, with every required field that is missing
/// (CONVENTIONS: v1 bodies are strict; one 422 names every broken field).
pub fn parse_strict<T: DeserializeOwned + utoipa::PartialSchema>(
    bytes: &[u8],
) -> Result<T, ApiError> {
    let read = read_strict::<T>(bytes)?;
    match read.value {
        Some(v) if read.errors.is_empty() => Ok(v),
        _ => Err(ApiError::validation(read.errors)),
    }
}

/// A v1 body read field by field, for handlers that add their own field checks to the same 422:
/// syntax errors are the `Err` (a 400, or a 422 for a body that is not an object); every field
/// problem (unknown, missing, of the wrong type) is in `errors`, and `value` is the body when it
/// could be built.
pub fn read_strict<T: DeserializeOwned + utoipa::PartialSchema>(
    bytes: &[u8],
) -> Result<Read<T>, ApiError> {
    read::<T>(bytes, Fields::Strict(&required_fields::<T>))
}

/// A body read leniently ([`parse`]), for handlers that add their own field checks.
pub fn read_lenient<T: DeserializeOwned>(bytes: &[u8]) -> Result<Read<T>, ApiError> {
    read::<T>(bytes, Fields::Lenient)
}

/// What a body read found: the value when it could be built, and every field problem.
pub struct Read<T> {
    pub value: Option<T>,
    pub errors: ValidationErrors,
}

pub use switchboard_domain::validation::UNKNOWN_FIELD;

/// At most this many unknown fields are named in one answer.
const MAX_UNKNOWN_NAMED: usize = 50;

/// Whether fields the type does not know are refused, and which fields are required.
#[derive(Clone, Copy)]
enum Fields<'a> {
    Lenient,
    Strict(&'a dyn Fn() -> Vec<String>),
}

/// The required top-level fields of a request type, from its schema (the derive knows which
/// fields are `Option` or have defaults).
fn required_fields<T: utoipa::PartialSchema>() -> Vec<String> {
    match T::schema() {
        RefOr::T(Schema::Object(o)) => o.required,
        _ => Vec::new(),
    }
}

fn read<T: DeserializeOwned>(bytes: &[u8], fields: Fields<'_>) -> Result<Read<T>, ApiError> {
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
    // Every request body of the API is an object (serde would also read a struct from an
    // array of its fields): any other JSON value is a 422, anything else a 400.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
            Ok(_) => Err(ApiError::validation_field("body", "must be a JSON object")),
            Err(e) => Err(ApiError::malformed_json(format!(
                "The request body is not valid JSON: {e}"
            ))),
        };
    }
    let mut unknown = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let mut track = serde_path_to_error::Track::new();
    let result = {
        let de = serde_path_to_error::Deserializer::new(&mut de, &mut track);
        match fields {
            Fields::Lenient => T::deserialize(de),
            Fields::Strict(_) => serde_ignored::deserialize(de, |path| {
                if unknown.len() < MAX_UNKNOWN_NAMED {
                    unknown.push(ignored_path(&path));
                }
            }),
        }
    };
    let mut errors = ValidationErrors::new();
    let value = match result {
        Ok(v) => {
            // Trailing characters after the value are a syntax error too.
            if de.end().is_err() {
                return Err(ApiError::malformed_json(
                    "The request body has characters after the JSON value.",
                ));
            }
            let scan = scan(bytes);
            if scan.max_depth > MAX_DEPTH {
                return Err(ApiError::malformed_json(format!(
                    "The request body nests arrays and objects deeper than {MAX_DEPTH} levels."
                )));
            }
            if scan.nul {
                // No text of the API may hold a NUL character (PostgreSQL cannot store one):
                // name the first field that does.
                let field = serde_json::from_slice::<serde_json::Value>(bytes)
                    .ok()
                    .and_then(|v| nul_path(&v, String::new()))
                    .unwrap_or_else(|| "body".to_owned());
                errors.add(field, "must not contain a NUL character");
                None
            } else {
                Some(v)
            }
        }
        Err(inner) => {
            let path = track.path().to_string();
            match inner.classify() {
                serde_json::error::Category::Data => {
                    let (field, issue) = shape_issue(&path, &inner);
                    errors.add(field, issue);
                    if let Fields::Strict(required) = fields {
                        missing_fields(bytes, &required(), &mut errors);
                    }
                }
                // Valid JSON that still failed (a number too large for any type, such as
                // 1e400) is of the wrong shape; too deep a nesting stays a syntax error.
                serde_json::error::Category::Syntax
                    if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
                        && scan(bytes).max_depth <= MAX_DEPTH =>
                {
                    let field = if path == "." || path.is_empty() {
                        "body"
                    } else {
                        &path
                    };
                    errors.add(field, "is a number out of range for this field");
                }
                _ => {
                    return Err(ApiError::malformed_json(format!(
                        "The request body is not valid JSON: {inner}"
                    )));
                }
            }
            None
        }
    };
    for field in unknown {
        errors.add(field, UNKNOWN_FIELD);
    }
    Ok(Read { value, errors })
}

/// Adds "is required" for every required top-level field the body lacks (serde reports only
/// the first one), except those already named.
fn missing_fields(bytes: &[u8], required: &[String], errors: &mut ValidationErrors) {
    if required.is_empty() {
        return;
    }
    let Ok(present) =
        serde_json::from_slice::<std::collections::HashMap<String, serde::de::IgnoredAny>>(bytes)
    else {
        return;
    };
    for name in required {
        if !present.contains_key(name) && !errors.0.iter().any(|e| &e.field == name) {
            errors.add(name.clone(), "is required");
        }
    }
}

/// A path of serde_ignored in the API's field notation (`a.b[2].c`).
fn ignored_path(path: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match path {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", ignored_path(parent)),
        Path::Map { parent, key } => {
            let base = ignored_path(parent);
            if base.is_empty() {
                key.clone()
            } else {
                format!("{base}.{key}")
            }
        }
        Path::Some { parent }
        | Path::NewtypeStruct { parent }
        | Path::NewtypeVariant { parent } => ignored_path(parent),
    }
}

/// What one pass over a syntactically valid body finds.
struct Scan {
    max_depth: usize,
    /// Some string (a key or a value) holds the escape `\u0000`.
    nul: bool,
}

/// One pass over the bytes of valid JSON: the deepest nesting (also inside fields the
/// endpoint ignores, which serde skips without counting) and whether a string holds a NUL
/// (in valid JSON a NUL can only be written as the escape `\u0000`).
fn scan(bytes: &[u8]) -> Scan {
    let mut out = Scan {
        max_depth: 0,
        nul: false,
    };
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
                if b == b'u' && bytes.get(i + 1..i + 5) == Some(b"0000") {
                    out.nul = true;
                }
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => {
                    depth += 1;
                    out.max_depth = out.max_depth.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    out
}

/// The path (`a.b[2]`) of the first string value holding a NUL character, or of the object
/// whose key holds one.
fn nul_path(v: &serde_json::Value, at: String) -> Option<String> {
    let here = || {
        if at.is_empty() {
            "body".to_owned()
        } else {
            at.clone()
        }
    };
    match v {
        serde_json::Value::String(s) if s.contains('\0') => Some(here()),
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| nul_path(item, format!("{}[{i}]", here()))),
        serde_json::Value::Object(map) => map.iter().find_map(|(k, item)| {
            let path = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            if k.contains('\0') {
                // Not the key itself: the error would carry the NUL on.
                Some(here())
            } else {
                nul_path(item, path)
            }
        }),
        _ => None,
    }
}

/// serde's wording of what was expected ("expected i64", "expected struct Template") in the
/// terms of JSON, for the people who read the message.
fn in_json_terms(issue: &str) -> String {
    let Some((head, expected)) = issue.rsplit_once(", expected ") else {
        return issue.to_owned();
    };
    let expected = match expected {
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" | "u8" | "u16" | "u32" | "u64" | "u128"
        | "usize" => "a whole number",
        "f32" | "f64" => "a number",
        "a sequence" => "an array",
        "a map" => "an object",
        e if e.starts_with("struct ") => "an object",
        e => e,
    };
    format!("{head}, expected {expected}")
}

/// The field and the issue of JSON of the wrong shape.
fn shape_issue(path: &str, e: &serde_json::Error) -> (String, String) {
    // serde's messages end with " at line L column C"; drop that part.
    let full = e.to_string();
    let issue = full
        .rsplit_once(" at line ")
        .map(|(m, _)| m.to_owned())
        .unwrap_or(full);
    let issue = in_json_terms(&issue);
    let mut field = if path == "." || path.is_empty() {
        String::new()
    } else {
        path.to_owned()
    };
    // For a missing field the path is that of the enclosing object: append the field's name,
    // and say it as the other checks do.
    if let Some(name) = issue
        .strip_prefix("missing field `")
        .and_then(|r| r.strip_suffix('`'))
    {
        field = if field.is_empty() {
            name.to_owned()
        } else {
            format!("{field}.{name}")
        };
        return (field, "is required".to_owned());
    }
    if field.is_empty() {
        field = "body".to_owned();
    }
    (field, issue)
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
        // Deep nesting in an ignored field is skipped without recursion (no stack overflow),
        // and still refused.
        let deeper = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(
            code(format!("{{\"count\": 1, \"x\": {deeper}}}").as_bytes()).0,
            "malformed_json"
        );
        // Brackets inside strings do not count.
        let text = "[".repeat(300);
        assert!(parse::<Body>(format!("{{\"count\": 1, \"x\": \"{text}\"}}").as_bytes()).is_ok());
    }

    #[test]
    fn shape_errors_are_422_with_the_field() {
        let (c, d) = code(b"{\"count\": \"one\"}");
        assert_eq!(c, "validation_failed");
        let d = d.unwrap();
        assert_eq!(d["fields"][0]["field"], "count");
        assert_eq!(
            d["fields"][0]["issue"],
            "invalid type: string \"one\", expected a whole number"
        );
        let (_, d) = code(b"{\"count\": 1, \"inner\": 5}");
        assert_eq!(
            d.unwrap()["fields"][0]["issue"],
            "invalid type: integer `5`, expected an object"
        );
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
    fn nul_characters_are_422_naming_the_field() {
        let (c, d) = code(br#"{"count": 1, "inner": {"name": "a\u0000b"}}"#);
        assert_eq!(c, "validation_failed");
        assert_eq!(d.unwrap()["fields"][0]["field"], "inner.name");
        let (_, d) = code(br#"{"count": 1, "extra": [1, {"k\u0000": 2}]}"#);
        assert_eq!(d.unwrap()["fields"][0]["field"], "extra[1]");
        // An escaped backslash followed by "u0000" is text, not a NUL.
        assert!(parse::<Body>(br#"{"count": 1, "extra": "a\\u0000"}"#).is_ok());
    }

    #[test]
    fn numbers_out_of_range_are_422() {
        let (c, d) = code(br#"{"count": 1e400}"#);
        assert_eq!(c, "validation_failed");
        assert_eq!(d.unwrap()["fields"][0]["field"], "count");
    }

    #[test]
    fn good_bodies_parse() {
        let b: Body = parse(b" {\"count\": 3, \"unknown\": true} ").unwrap();
        assert_eq!(b.count, 3);
    }

    #[derive(Deserialize, Debug, utoipa::ToSchema)]
    #[allow(dead_code)]
    struct Strict {
        to: String,
        events: Vec<String>,
        name: Option<String>,
        inner: Option<StrictInner>,
    }

    #[derive(Deserialize, Debug, utoipa::ToSchema)]
    #[allow(dead_code)]
    struct StrictInner {
        name: String,
    }

    fn fields(e: ApiError) -> Vec<(String, String)> {
        assert_eq!(e.code, "validation_failed");
        e.details.unwrap()["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["field"].as_str().unwrap().to_owned(),
                    f["issue"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn strict_bodies_name_every_unknown_field_at_any_depth() {
        let e = parse_strict::<Strict>(
            br#"{"to": "x", "events": [], "enabled": false, "inner": {"name": "n", "nmae": 1}}"#,
        )
        .unwrap_err();
        assert_eq!(
            fields(e),
            [
                ("enabled".to_owned(), UNKNOWN_FIELD.to_owned()),
                ("inner.nmae".to_owned(), UNKNOWN_FIELD.to_owned()),
            ]
        );
        // The lenient reading of the legacy routes ignores them.
        assert!(
            parse::<Strict>(br#"{"to": "x", "events": [], "enabled": false}"#).is_ok(),
            "lenient"
        );
        assert!(parse_strict::<Strict>(br#"{"to": "x", "events": ["a"], "name": null}"#).is_ok());
    }

    #[test]
    fn strict_bodies_name_every_missing_field_with_the_unknown_ones() {
        let e = parse_strict::<Strict>(br#"{"text": "hi"}"#).unwrap_err();
        let mut got = fields(e);
        got.sort();
        assert_eq!(
            got,
            [
                ("events".to_owned(), "is required".to_owned()),
                ("text".to_owned(), UNKNOWN_FIELD.to_owned()),
                ("to".to_owned(), "is required".to_owned()),
            ]
        );
        // A wrong type and a missing field, both named.
        let mut got = fields(parse_strict::<Strict>(br#"{"to": 5}"#).unwrap_err());
        got.sort();
        assert_eq!(got[0].0, "events");
        assert_eq!(got[1].0, "to");
        assert!(got[1].1.contains("expected a string"), "{got:?}");
    }

    #[test]
    fn read_strict_keeps_the_value_beside_unknown_fields() {
        let read = read_strict::<Strict>(br#"{"to": "x", "events": [], "extra": 1}"#).unwrap();
        assert_eq!(read.value.unwrap().to, "x");
        assert_eq!(
            read.errors.0,
            [switchboard_domain::FieldError::new("extra", UNKNOWN_FIELD)]
        );
        // Syntax errors stay 400s.
        assert_eq!(
            read_strict::<Strict>(b"{\"to\": ").err().unwrap().code,
            "malformed_json"
        );
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
