//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): the `traceparent` a request
//! arrives with, the one Switchboard sends on the calls it makes, and the one it keeps with
//! an outbox event so that deliveries made later (after a restart, on another instance) join
//! the same trace.
//!
//! Only version `00` is produced; a later version is accepted as the specification asks
//! (its first four fields read, the rest ignored). An invalid header starts a new trace.

use std::fmt;

/// One span's place in a trace: the trace, the span, and whether the caller samples it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

impl TraceContext {
    /// A new trace (sampled), with its first span.
    pub fn new_root() -> TraceContext {
        TraceContext {
            trace_id: nonzero(rand::random()),
            span_id: nonzero(rand::random()),
            sampled: true,
        }
    }

    /// A span inside this one's trace, with this one as its parent.
    pub fn child(&self) -> TraceContext {
        TraceContext {
            span_id: nonzero(rand::random()),
            ..*self
        }
    }

    /// Parses a `traceparent` header value; `None` when it is not valid (all-zero ids, the
    /// forbidden version `ff`, wrong lengths, upper-case hex).
    pub fn parse(header: &str) -> Option<TraceContext> {
        let header = header.trim_matches(|c| c == ' ' || c == '\t');
        let mut parts = header.split('-');
        let version = parts.next()?;
        let trace_id = parts.next()?;
        let span_id = parts.next()?;
        let flags = parts.next()?;
        let rest = parts.next();
        if version.len() != 2 || !lower_hex(version) || version == "ff" {
            return None;
        }
        // Version 00 has exactly four fields; a later version may add more.
        if version == "00" && rest.is_some() {
            return None;
        }
        if trace_id.len() != 32 || span_id.len() != 16 || flags.len() != 2 {
            return None;
        }
        if !(lower_hex(trace_id) && lower_hex(span_id) && lower_hex(flags)) {
            return None;
        }
        let mut t = [0u8; 16];
        let mut s = [0u8; 8];
        hex::decode_to_slice(trace_id, &mut t).ok()?;
        hex::decode_to_slice(span_id, &mut s).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        if t == [0; 16] || s == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id: t,
            span_id: s,
            sampled: flags & 1 == 1,
        })
    }

    /// The trace id as 32 lower-case hex digits (what logs and tracing systems show).
    pub fn trace_id_hex(&self) -> String {
        hex::encode(self.trace_id)
    }

    pub fn span_id_hex(&self) -> String {
        hex::encode(self.span_id)
    }
}

/// The `traceparent` header value: `00-{trace id}-{span id}-{flags}`.
impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            self.trace_id_hex(),
            self.span_id_hex(),
            u8::from(self.sampled)
        )
    }
}

fn lower_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Ids are never all zero (the specification's invalid value).
fn nonzero<const N: usize>(mut id: [u8; N]) -> [u8; N] {
    if id.iter().all(|b| *b == 0) {
        id[N - 1] = 1;
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_header_round_trips() {
        let t = TraceContext::parse(VALID).unwrap();
        assert_eq!(t.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.span_id_hex(), "00f067aa0ba902b7");
        assert!(t.sampled);
        assert_eq!(t.to_string(), VALID);
        let unsampled =
            TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!unsampled.sampled);
    }

    #[test]
    fn invalid_headers_are_refused() {
        for bad in [
            "",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_later_version_is_read_for_its_known_fields() {
        let t = TraceContext::parse(
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future-stuff",
        )
        .unwrap();
        assert_eq!(t.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        // What we send is always version 00.
        assert!(t.to_string().starts_with("00-"));
    }

    #[test]
    fn children_keep_the_trace_and_get_a_new_span() {
        let root = TraceContext::new_root();
        let child = root.child();
        assert_eq!(child.trace_id, root.trace_id);
        assert_ne!(child.span_id, root.span_id);
        assert_eq!(TraceContext::parse(&child.to_string()), Some(child));
    }
}
