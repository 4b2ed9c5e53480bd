//! Whether the database takes writes: a full disk or a storage I/O error is a state of the
//! process, not an error of one request.
//!
//! Every storage failure the store meets (`SQLITE_FULL` and the `SQLITE_IOERR` family;
//! PostgreSQL `53100 disk_full` and `58030 io_error`), wherever it surfaces, marks writes as
//! failing ([`write_fault`]); a [`crate::SystemStore::probe_write`] that commits clears the
//! mark (not just any commit: a transaction that writes nothing commits on a full disk too). The service's observer hears of both
//! ([`crate::observe::StoreObserver::storage_failed`] and `storage_recovered`): it logs, counts
//! and reports the instance not ready meanwhile. Nothing here retries: each request tries its
//! own write, and writes resume by themselves once the storage takes them again.

use std::sync::atomic::{AtomicU8, Ordering};

pub use crate::observe::StorageFault;

/// What a database error code means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CodeClass {
    /// The storage is full.
    Full,
    /// The storage failed (an I/O error).
    Io,
    /// The database is busy, unreachable or short of another resource: a temporary condition.
    Unavailable,
    /// Anything else (a bug, a constraint the store does not map).
    Other,
}

/// Classifies a database error code: PostgreSQL's SQLSTATE (five characters), SQLite's
/// extended result codes (decimal, at most four digits).
pub(crate) fn classify(code: &str) -> CodeClass {
    // SQLite: the primary result code is the low byte of the extended code.
    if let Some(n) = (code.len() < 5).then(|| code.parse::<i64>().ok()).flatten() {
        return match n & 0xff {
            13 => CodeClass::Full,           // SQLITE_FULL
            10 => CodeClass::Io,             // SQLITE_IOERR and its extended codes
            5 | 6 => CodeClass::Unavailable, // SQLITE_BUSY, SQLITE_LOCKED (and extended)
            _ => CodeClass::Other,
        };
    }
    match code {
        "53100" => CodeClass::Full,
        "58030" => CodeClass::Io,
        // Other insufficient resources (53xxx: out of memory, too many connections,
        // configuration limits), admin shutdown (57P01..57P03), connection exceptions (08xxx).
        c if c.starts_with("53") || c.starts_with("08") => CodeClass::Unavailable,
        "57P01" | "57P02" | "57P03" => CodeClass::Unavailable,
        _ => CodeClass::Other,
    }
}

/// 0: writes succeed; 1: full; 2: I/O errors.
static FAULT: AtomicU8 = AtomicU8::new(0);

/// Why writes fail now, if they do.
pub fn write_fault() -> Option<StorageFault> {
    match FAULT.load(Ordering::Relaxed) {
        1 => Some(StorageFault::Full),
        2 => Some(StorageFault::Io),
        _ => None,
    }
}

/// A storage failure: writes are failing (told to the observer each time, with whether it is
/// the first since they last succeeded).
pub(crate) fn failed(fault: StorageFault, error: &str) {
    let value = match fault {
        StorageFault::Full => 1,
        StorageFault::Io => 2,
    };
    let before = FAULT.swap(value, Ordering::Relaxed);
    crate::observe::storage_failed(fault, error, before == 0);
}

/// A probe write committed: writes succeed again (told to the observer once).
pub(crate) fn succeeded() {
    if FAULT.load(Ordering::Relaxed) != 0 && FAULT.swap(0, Ordering::Relaxed) != 0 {
        crate::observe::storage_recovered();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_classified() {
        assert_eq!(classify("13"), CodeClass::Full);
        for io in ["10", "266", "522", "778", "1034", "3338"] {
            assert_eq!(classify(io), CodeClass::Io, "{io}");
        }
        for busy in ["5", "6", "261", "517"] {
            assert_eq!(classify(busy), CodeClass::Unavailable, "{busy}");
        }
        assert_eq!(classify("19"), CodeClass::Other);
        assert_eq!(classify("2067"), CodeClass::Other);
        assert_eq!(classify("53100"), CodeClass::Full);
        assert_eq!(classify("58030"), CodeClass::Io);
        for unavailable in ["53200", "53300", "53400", "08006", "57P01"] {
            assert_eq!(
                classify(unavailable),
                CodeClass::Unavailable,
                "{unavailable}"
            );
        }
        assert_eq!(classify("23505"), CodeClass::Other);
        assert_eq!(classify("42P01"), CodeClass::Other);
        assert_eq!(classify(""), CodeClass::Other);
    }
}
