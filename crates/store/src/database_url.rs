//! Which database a process uses.

use std::path::PathBuf;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// An embedded SQLite database at this path.
    Sqlite { path: PathBuf },
    /// A PostgreSQL connection URL.
    Postgres { url: String },
}

impl DatabaseUrl {
    pub fn parse(s: &str) -> Result<Self, String> {
        if let Some(rest) = s
            .strip_prefix("sqlite://")
            .or_else(|| s.strip_prefix("sqlite:"))
        {
            let path = rest.split('?').next().unwrap_or_default();
            if path.is_empty() || path == ":memory:" {
                return Err("expected sqlite://PATH with a file path (in-memory databases are not supported)".into());
            }
            Ok(DatabaseUrl::Sqlite {
                path: PathBuf::from(path),
            })
        } else if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            url::Url::parse(s).map_err(|e| format!("not a valid PostgreSQL URL: {e}"))?;
            Ok(DatabaseUrl::Postgres { url: s.to_owned() })
        } else {
            Err("expected sqlite://PATH or postgres://USER@HOST:PORT/DATABASE".into())
        }
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self, DatabaseUrl::Postgres { .. })
    }

    /// A description safe for logs (no password).
    pub fn redacted(&self) -> String {
        match self {
            DatabaseUrl::Sqlite { path } => format!("sqlite://{}", path.display()),
            DatabaseUrl::Postgres { url } => match url::Url::parse(url) {
                Ok(mut u) => {
                    if u.password().is_some() {
                        let _ = u.set_password(Some("***"));
                    }
                    u.to_string()
                }
                Err(_) => "postgres://(unparseable)".into(),
            },
        }
    }
}
