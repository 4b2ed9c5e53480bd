//! URLs as they may appear in logs, events and the ledger.

use url::Url;

/// The URL as it may appear in logs and events: scheme, host, port and path, without the
/// query (which may carry a token) or fragment.
pub fn redacted(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut u) => {
            u.set_query(None);
            u.set_fragment(None);
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Err(_) => "(invalid URL)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_drops_query_and_credentials() {
        assert_eq!(
            redacted("https://u:p@example.com/hook?token=secret#x"),
            "https://example.com/hook"
        );
    }
}
