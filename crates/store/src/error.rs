//! [`StoreError`]: a storage failure, the same on both backends, and how database errors map
//! onto it (storage faults also mark writes failing: [`crate::health`]).

use crate::health;

/// A storage failure, the same on both backends.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    /// A unique constraint was violated (the constraint or index name when known).
    #[error("unique constraint violated{}", .0.as_deref().map(|c| format!(" ({c})")).unwrap_or_default())]
    UniqueViolation(Option<String>),
    #[error("foreign key violated")]
    ForeignKeyViolation,
    /// The database cannot be reached or is overloaded, or its storage failed (an I/O error):
    /// a temporary condition (503).
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The database's storage is full (SQLite `SQLITE_FULL`, PostgreSQL `53100 disk_full`):
    /// nothing was written; writes resume once space is freed (507).
    #[error("the database's storage is full: {0}")]
    StorageFull(String),
    /// The operation's own precondition failed (message for people).
    #[error("{0}")]
    Conflict(String),
    /// The idempotency claim the change was to complete is no longer this request's (another
    /// request took the key over after the claim's lease ran out): nothing was written.
    #[error("the idempotency claim was lost to another request")]
    ClaimLost,
    #[error("database error: {0}")]
    Other(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        use sqlx::error::ErrorKind;
        match e {
            sqlx::Error::RowNotFound => StoreError::NotFound,
            sqlx::Error::Database(db) => match db.kind() {
                ErrorKind::UniqueViolation => {
                    StoreError::UniqueViolation(db.constraint().map(str::to_owned))
                }
                ErrorKind::ForeignKeyViolation => StoreError::ForeignKeyViolation,
                _ => {
                    let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
                    match health::classify(&code) {
                        health::CodeClass::Full => {
                            health::failed(health::StorageFault::Full, db.message());
                            StoreError::StorageFull(db.message().to_owned())
                        }
                        health::CodeClass::Io => {
                            health::failed(health::StorageFault::Io, db.message());
                            StoreError::Unavailable(db.message().to_owned())
                        }
                        health::CodeClass::Unavailable => {
                            StoreError::Unavailable(db.message().to_owned())
                        }
                        health::CodeClass::Other => {
                            StoreError::Other(format!("{} (code {code})", db.message()))
                        }
                    }
                }
            },
            sqlx::Error::PoolTimedOut => {
                StoreError::Unavailable("timed out waiting for a database connection".into())
            }
            sqlx::Error::PoolClosed => {
                StoreError::Unavailable("the connection pool is closed".into())
            }
            sqlx::Error::Io(e) => StoreError::Unavailable(format!("I/O error: {e}")),
            sqlx::Error::Tls(e) => StoreError::Unavailable(format!("TLS error: {e}")),
            sqlx::Error::WorkerCrashed => {
                StoreError::Unavailable("the database worker crashed".into())
            }
            other => StoreError::Other(other.to_string()),
        }
    }
}
