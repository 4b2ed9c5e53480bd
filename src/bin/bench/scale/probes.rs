//! Copies of the dispatcher's claim query and of the history page query, run alone against the
//! seeded tables: their plans and their median time.

use super::*;

/// A value bound to a probed query, as the store binds it.
#[derive(Clone, Copy, Debug)]
pub(super) enum Bind {
    Int(i64),
    /// A time in ms: an integer on SQLite, a `timestamptz` on PostgreSQL.
    Time(i64),
}

/// A probed query: its text with `$n` placeholders and their values.
pub(super) struct Probe {
    sql: String,
    binds: Vec<Bind>,
}

impl Probe {
    fn new(sql: &str) -> Probe {
        Probe {
            sql: sql.to_owned(),
            binds: Vec::new(),
        }
    }

    /// Appends a placeholder for `b`.
    fn bind(&mut self, b: Bind) -> &mut Probe {
        self.binds.push(b);
        self.sql.push_str(&format!("${}", self.binds.len()));
        self
    }

    fn push(&mut self, s: &str) -> &mut Probe {
        self.sql.push_str(s);
        self
    }

    fn sqlite<'q>(
        &self,
        sql: &'q str,
    ) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
        let mut q = sqlx::query(sql);
        for b in &self.binds {
            q = match *b {
                Bind::Int(v) | Bind::Time(v) => q.bind(v),
            };
        }
        q
    }

    fn postgres<'q>(
        &self,
        sql: &'q str,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        let mut q = sqlx::query(sql);
        for b in &self.binds {
            q = match *b {
                Bind::Int(v) => q.bind(v),
                Bind::Time(ms) => q.bind(chrono::DateTime::from_timestamp_millis(ms)),
            };
        }
        q
    }
}

/// A copy of the dispatcher's claim query (`claim_deliveries` in
/// crates/store/src/shared/webhooks/deliveries.rs) for 64 free slots (a scan of 256), with
/// `busy` endpoints at their limit.
pub(super) fn claim_query(backend: Backend, now: i64, busy: &[i64]) -> Probe {
    let mut p = Probe::new(
        "SELECT id, endpoint_id, attempts, lease_token, last_attempt_at FROM webhook_deliveries
         WHERE due_at IS NOT NULL AND due_at <= ",
    );
    p.bind(Bind::Time(now));
    p.push(" AND (lease_token IS NULL OR COALESCE(lease_until, due_at) <= ")
        .bind(Bind::Time(now))
        .push(")");
    if !busy.is_empty() {
        p.push(" AND (endpoint_id IS NULL OR endpoint_id NOT IN (");
        for (i, id) in busy.iter().enumerate() {
            if i > 0 {
                p.push(", ");
            }
            p.bind(Bind::Int(*id));
        }
        p.push("))");
    }
    p.push(" ORDER BY due_at, id LIMIT ").bind(Bind::Int(256));
    if let Backend::Postgres = backend {
        p.push(" FOR UPDATE SKIP LOCKED");
    }
    p
}

/// A copy of the history page query (`list_messages` in crates/store/src/shared/messages.rs)
/// without filters, for a page of 50 (51 rows fetched), after `after` (time in ms, id).
pub(super) fn page_query(org_id: i64, after: Option<(i64, i64)>) -> Probe {
    let mut p = Probe::new(
        "SELECT m.id, m.uuid, m.org_id, m.channel_id, ch.uuid AS channel_uuid, ch.slug AS channel_slug,
                ch.type AS channel_type, ch.name AS channel_name, ch.identifier AS channel_identifier,
                m.contact_id, ct.uuid AS contact_uuid, m.conversation_id, cv.uuid AS conversation_uuid,
                m.api_key_id, m.direction, m.type, m.status, m.content, m.provider_message_id, m.error,
                m.created_at, m.updated_at, cs.uuid AS consent_uuid, m.trace
         FROM messages m
         JOIN channels ch ON ch.id = m.channel_id
         JOIN contacts ct ON ct.id = m.contact_id
         LEFT JOIN conversations cv ON cv.id = m.conversation_id
         LEFT JOIN consents cs ON cs.id = m.consent_id WHERE m.org_id = ",
    );
    p.bind(Bind::Int(org_id));
    if let Some((ms, id)) = after {
        p.push(" AND (m.created_at, m.id) < (")
            .bind(Bind::Time(ms))
            .push(", ")
            .bind(Bind::Int(id))
            .push(")");
    }
    p.push(" ORDER BY m.created_at DESC, m.id DESC LIMIT ")
        .bind(Bind::Int(51));
    p
}

/// The plan of a query and its median time over 5 runs (after one to warm the cache).
pub(super) async fn probe(
    db: &Database,
    backend: Backend,
    p: &Probe,
) -> anyhow::Result<QueryProbe> {
    let mut times = Vec::new();
    let explain;
    let plan = match backend {
        Backend::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&db.url).await?;
            explain = format!("EXPLAIN QUERY PLAN {}", p.sql);
            let rows = p.sqlite(&explain).fetch_all(&mut c).await?;
            // Indented by depth, as the sqlite3 shell shows it.
            let mut depth = std::collections::HashMap::new();
            let mut plan = Vec::new();
            for row in rows {
                use sqlx::Row;
                let (id, parent): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
                let d = depth.get(&parent).map_or(0, |d| d + 1);
                depth.insert(id, d);
                plan.push(format!(
                    "{}{}",
                    "  ".repeat(d),
                    row.try_get::<String, _>(3)?
                ));
            }
            for _ in 0..6 {
                let t = Instant::now();
                p.sqlite(&p.sql).fetch_all(&mut c).await?;
                times.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            c.close().await?;
            plan
        }
        Backend::Postgres => {
            let mut c = sqlx::PgConnection::connect(&db.url).await?;
            explain = format!("EXPLAIN {}", p.sql);
            let rows = p.postgres(&explain).fetch_all(&mut c).await?;
            let plan = rows
                .iter()
                .map(|row| sqlx::Row::try_get::<String, _>(row, 0))
                .collect::<Result<Vec<_>, _>>()?;
            for _ in 0..6 {
                let t = Instant::now();
                p.postgres(&p.sql).fetch_all(&mut c).await?;
                times.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            c.close().await?;
            plan
        }
    };
    times.remove(0);
    times.sort_by(f64::total_cmp);
    Ok(QueryProbe {
        ms_median: times[times.len() / 2],
        plan,
    })
}
