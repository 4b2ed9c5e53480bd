//! How [`Timestamp`] is stored (feature `sqlx`, enabled by the store crate only): one Rust
//! type, the native column type of each backend. This is encoding, not I/O; it lives here
//! because Rust's orphan rule puts a foreign trait's impl beside the type.
//!
//! [`Timestamp`] is an `INTEGER` of Unix milliseconds on SQLite (exact, sortable) and a
//! `TIMESTAMPTZ` on PostgreSQL.

use chrono::{DateTime, Utc};
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::{Database, Decode, Encode, Postgres, Sqlite, Type};

use crate::Timestamp;

impl Type<Sqlite> for Timestamp {
    fn type_info() -> <Sqlite as Database>::TypeInfo {
        <i64 as Type<Sqlite>>::type_info()
    }
    fn compatible(ty: &<Sqlite as Database>::TypeInfo) -> bool {
        <i64 as Type<Sqlite>>::compatible(ty)
    }
}

impl<'q> Encode<'q, Sqlite> for Timestamp {
    fn encode_by_ref(
        &self,
        buf: &mut <Sqlite as Database>::ArgumentBuffer<'q>,
    ) -> Result<IsNull, BoxDynError> {
        <i64 as Encode<'q, Sqlite>>::encode_by_ref(&self.millis(), buf)
    }
}

impl<'r> Decode<'r, Sqlite> for Timestamp {
    fn decode(value: <Sqlite as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Timestamp::from_millis(<i64 as Decode<'r, Sqlite>>::decode(
            value,
        )?))
    }
}

impl Type<Postgres> for Timestamp {
    fn type_info() -> <Postgres as Database>::TypeInfo {
        <DateTime<Utc> as Type<Postgres>>::type_info()
    }
    fn compatible(ty: &<Postgres as Database>::TypeInfo) -> bool {
        <DateTime<Utc> as Type<Postgres>>::compatible(ty)
    }
}

impl<'q> Encode<'q, Postgres> for Timestamp {
    fn encode_by_ref(
        &self,
        buf: &mut <Postgres as Database>::ArgumentBuffer<'q>,
    ) -> Result<IsNull, BoxDynError> {
        <DateTime<Utc> as Encode<'q, Postgres>>::encode_by_ref(&self.to_datetime(), buf)
    }
}

impl<'r> Decode<'r, Postgres> for Timestamp {
    fn decode(value: <Postgres as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(Timestamp::from_datetime(<DateTime<Utc> as Decode<
            'r,
            Postgres,
        >>::decode(value)?))
    }
}
