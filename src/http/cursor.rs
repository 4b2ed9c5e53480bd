//! Signed cursors (CONVENTIONS "Lists"): a cursor is opaque and bound to the list and the
//! filters that issued it. It is `base64url(payload) . base64url(mac)`, where the MAC is the
//! first 16 bytes of HMAC-SHA256 (a key derived from the master key) over the list's name, its
//! canonical filters and the payload: a cursor that was altered, or is used on another list or
//! with other filters, does not verify and is a 400 `invalid_cursor`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::error::ApiError;

const MAC_LEN: usize = 16;

fn mac(key: &[u8; 32], list: &str, filters: &str, payload: &[u8]) -> Vec<u8> {
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC accepts keys of any length");
    mac.update(list.as_bytes());
    mac.update(&[0]);
    mac.update(filters.as_bytes());
    mac.update(&[0]);
    mac.update(payload);
    mac.finalize().into_bytes()[..MAC_LEN].to_vec()
}

/// Signs `payload` (the position, in the list's own text form) for `list` with `filters`.
pub fn sign(key: &[u8; 32], list: &str, filters: &str, payload: &str) -> String {
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(payload),
        URL_SAFE_NO_PAD.encode(mac(key, list, filters, payload.as_bytes()))
    )
}

/// The payload of a cursor issued for `list` with `filters`, or a 400 `invalid_cursor`.
pub fn verify(key: &[u8; 32], list: &str, filters: &str, cursor: &str) -> Result<String, ApiError> {
    let bad = || {
        ApiError::invalid_cursor(
            "The cursor is not valid for this list and these filters; use next_cursor from a page of the same list with the same filters.",
        )
    };
    if cursor.is_empty() || cursor.len() > 300 {
        return Err(bad());
    }
    let (payload, tag) = cursor.split_once('.').ok_or_else(bad)?;
    let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| bad())?;
    let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| bad())?;
    let expected = mac(key, list, filters, &payload);
    if tag.len() != MAC_LEN || !bool::from(subtle::ConstantTimeEq::ct_eq(&tag[..], &expected[..])) {
        return Err(bad());
    }
    String::from_utf8(payload).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];

    #[test]
    fn a_cursor_verifies_only_for_its_list_and_filters() {
        let c = sign(&KEY, "event-feed", "events=message.*", "12.34");
        assert_eq!(
            verify(&KEY, "event-feed", "events=message.*", &c).unwrap(),
            "12.34"
        );
        assert!(verify(&KEY, "event-feed", "events=", &c).is_err());
        assert!(verify(&KEY, "messages", "events=message.*", &c).is_err());
        assert!(verify(&[8; 32], "event-feed", "events=message.*", &c).is_err());
        let (payload, tag) = c.split_once('.').unwrap();
        let forged = format!("{}.{tag}", URL_SAFE_NO_PAD.encode("12.35"));
        assert!(verify(&KEY, "event-feed", "events=message.*", &forged).is_err());
        assert!(verify(&KEY, "event-feed", "events=message.*", payload).is_err());
        assert!(verify(&KEY, "event-feed", "events=message.*", "").is_err());
    }
}
