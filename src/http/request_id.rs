//! Request ids: echo a valid inbound `X-Request-Id`, else generate one; available to every
//! log line (the request span) and every error body (a task-local) of the request.

use axum::http::HeaderMap;

tokio::task_local! {
    static REQUEST_ID: String;
}

pub const HEADER: &str = "x-request-id";

/// The id of the request being handled, if any.
pub fn current() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// Runs `f` with `id` as the current request id.
pub async fn scope<F: Future>(id: String, f: F) -> F::Output {
    REQUEST_ID.scope(id, f).await
}

/// A client-supplied id is echoed if it is 1 to 128 characters of `A-Za-z0-9._:-`.
pub fn from_headers(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(HEADER)?.to_str().ok()?;
    let ok = !v.is_empty()
        && v.len() <= 128
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    ok.then(|| v.to_owned())
}

pub fn generate() -> String {
    format!("req_{}", uuid::Uuid::now_v7().simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoes_only_safe_ids() {
        let mut h = HeaderMap::new();
        h.insert(HEADER, "abc-123_x.y:z".parse().unwrap());
        assert_eq!(from_headers(&h).as_deref(), Some("abc-123_x.y:z"));
        h.insert(HEADER, "has space".parse().unwrap());
        assert_eq!(from_headers(&h), None);
        h.insert(HEADER, "a".repeat(129).parse().unwrap());
        assert_eq!(from_headers(&h), None);
        assert!(generate().starts_with("req_"));
    }
}
