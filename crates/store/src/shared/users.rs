use async_trait::async_trait;
use sqlx::QueryBuilder;
use uuid::Uuid;

use super::{Backend, Db, push_in_list};
use crate::{
    EffectsFn, Member, MemberChange, MemberQuery, NewMember, StoreError, StoreResult, UserRecord,
    UserStore,
};
use switchboard_domain::Timestamp;
use switchboard_domain::permission::{OverrideEffect, Overrides, Permission, Role};
use switchboard_domain::user::MembershipStatus;

const SELECT_MEMBERS: &str =
    "SELECT m.id AS membership_id, m.org_id, m.role, m.status, m.created_at, m.updated_at,
        u.id AS user_id, u.uuid AS user_uuid, u.email AS user_email, u.name AS user_name,
        u.created_at AS user_created_at, u.updated_at AS user_updated_at
 FROM memberships m JOIN users u ON u.id = m.user_id ";

#[derive(sqlx::FromRow)]
struct MemberRow {
    membership_id: i64,
    org_id: i64,
    role: String,
    status: String,
    created_at: Timestamp,
    updated_at: Timestamp,
    user_id: i64,
    user_uuid: Uuid,
    user_email: String,
    user_name: Option<String>,
    user_created_at: Timestamp,
    user_updated_at: Timestamp,
}

#[derive(sqlx::FromRow)]
struct OverrideRow {
    membership_id: i64,
    permission: String,
    effect: String,
}

impl MemberRow {
    fn into_member(self, overrides: Overrides) -> StoreResult<Member> {
        Ok(Member {
            membership_id: self.membership_id,
            org_id: self.org_id,
            user: UserRecord {
                id: self.user_id,
                uuid: self.user_uuid,
                email: self.user_email,
                name: self.user_name,
                created_at: self.user_created_at,
                updated_at: self.user_updated_at,
            },
            role: self
                .role
                .parse::<Role>()
                .map_err(|e| StoreError::Other(format!("stored role: {e}")))?,
            status: self
                .status
                .parse::<MembershipStatus>()
                .map_err(StoreError::Other)?,
            overrides,
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// Parses stored overrides. A permission that the catalogue no longer has is skipped (with a
/// warning) rather than failing every read of the membership.
fn parse_override(row: &OverrideRow) -> Option<(Permission, OverrideEffect)> {
    match (
        row.permission.parse::<Permission>(),
        row.effect.parse::<OverrideEffect>(),
    ) {
        (Ok(p), Ok(e)) => Some((p, e)),
        _ => {
            tracing::warn!(
                membership_id = row.membership_id,
                permission = %row.permission,
                "ignoring a stored permission override the catalogue does not know"
            );
            None
        }
    }
}

async fn fetch_overrides<'e, E>(conn: E, membership_ids: &[i64]) -> StoreResult<Vec<OverrideRow>>
where
    E: sqlx::Executor<'e, Database = Db>,
{
    if membership_ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut q: QueryBuilder<'_, Db> = QueryBuilder::new(
        "SELECT membership_id, permission, effect FROM membership_permissions WHERE membership_id",
    );
    push_in_list(&mut q, membership_ids);
    q.push(" ORDER BY membership_id, permission");
    Ok(q.build_query_as().fetch_all(conn).await?)
}

fn assemble(rows: Vec<MemberRow>, overrides: Vec<OverrideRow>) -> StoreResult<Vec<Member>> {
    rows.into_iter()
        .map(|r| {
            let mut own: Overrides = overrides
                .iter()
                .filter(|o| o.membership_id == r.membership_id)
                .filter_map(parse_override)
                .collect();
            own.sort_by_key(|(p, _)| *p);
            r.into_member(own)
        })
        .collect()
}

async fn fetch_member(
    conn: &mut <Db as sqlx::Database>::Connection,
    org_id: i64,
    email_normalized: &str,
) -> StoreResult<Member> {
    let sql = format!("{SELECT_MEMBERS} WHERE m.org_id = $1 AND u.email_normalized = $2");
    let row: MemberRow = sqlx::query_as(&sql)
        .bind(org_id)
        .bind(email_normalized)
        .fetch_one(&mut *conn)
        .await?;
    let overrides = fetch_overrides(&mut *conn, &[row.membership_id]).await?;
    Ok(assemble(vec![row], overrides)?.remove(0))
}

#[async_trait]
impl UserStore for Backend {
    async fn add_member(
        &self,
        new: NewMember,
        effects: EffectsFn<'_, Member>,
    ) -> StoreResult<Member> {
        let mut tx = self.write_org(new.org_id).await?;
        // Create the user unless one has the address (in any case); concurrent creations of
        // the same address agree on one row.
        sqlx::query(
            "INSERT INTO users (uuid, email, email_normalized, name, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $5)
             ON CONFLICT (email_normalized) DO NOTHING",
        )
        .bind(Uuid::now_v7())
        .bind(new.email.as_str())
        .bind(new.email.normalized())
        .bind(&new.name)
        .bind(new.now)
        .execute(&mut *tx)
        .await?;
        let (user_id, name): (i64, Option<String>) =
            sqlx::query_as("SELECT id, name FROM users WHERE email_normalized = $1")
                .bind(new.email.normalized())
                .fetch_one(&mut *tx)
                .await?;
        if new.name.is_some() && new.name != name {
            sqlx::query("UPDATE users SET name = $1, updated_at = $2 WHERE id = $3")
                .bind(&new.name)
                .bind(new.now)
                .bind(user_id)
                .execute(&mut *tx)
                .await?;
        }
        let inserted = sqlx::query(
            "INSERT INTO memberships (org_id, user_id, role, status, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $5)
             ON CONFLICT (org_id, user_id) DO NOTHING",
        )
        .bind(new.org_id)
        .bind(user_id)
        .bind(new.role.as_str())
        .bind(MembershipStatus::Active.as_str())
        .bind(new.now)
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(StoreError::Conflict(format!(
                "{} is already a member of organization {}",
                new.email, new.org_id
            )));
        }
        let member = fetch_member(&mut tx, new.org_id, new.email.normalized()).await?;
        tx.commit(effects(&member)).await?;
        Ok(member)
    }

    async fn get_member(&self, org_id: i64, email_normalized: &str) -> StoreResult<Member> {
        let mut conn = self.reader().acquire().await?;
        fetch_member(&mut conn, org_id, email_normalized).await
    }

    async fn list_members(&self, org_id: i64, query: &MemberQuery) -> StoreResult<Vec<Member>> {
        let mut q: QueryBuilder<'_, Db> = QueryBuilder::new(SELECT_MEMBERS);
        q.push("WHERE m.org_id = ").push_bind(org_id);
        if let Some(role) = query.role {
            q.push(" AND m.role = ").push_bind(role.as_str());
        }
        if let Some((at, id)) = query.after {
            q.push(" AND (m.created_at, m.id) > (")
                .push_bind(at)
                .push(", ")
                .push_bind(id)
                .push(")");
        }
        q.push(" ORDER BY m.created_at, m.id LIMIT ")
            .push_bind(query.limit);
        let mut conn = self.reader().acquire().await?;
        let rows: Vec<MemberRow> = q.build_query_as().fetch_all(&mut *conn).await?;
        let ids: Vec<i64> = rows.iter().map(|r| r.membership_id).collect();
        let overrides = fetch_overrides(&mut *conn, &ids).await?;
        assemble(rows, overrides)
    }

    async fn set_member_role(
        &self,
        org_id: i64,
        email_normalized: &str,
        role: Role,
        now: Timestamp,
        effects: EffectsFn<'_, MemberChange>,
    ) -> StoreResult<MemberChange> {
        let mut tx = self.write_org(org_id).await?;
        let before = fetch_member(&mut tx, org_id, email_normalized).await?;
        if before.role != role {
            sqlx::query("UPDATE memberships SET role = $1, updated_at = $2 WHERE id = $3")
                .bind(role.as_str())
                .bind(now)
                .bind(before.membership_id)
                .execute(&mut *tx)
                .await?;
        }
        let after = fetch_member(&mut tx, org_id, email_normalized).await?;
        let change = MemberChange { before, after };
        tx.commit(effects(&change)).await?;
        Ok(change)
    }

    async fn set_member_permission(
        &self,
        org_id: i64,
        email_normalized: &str,
        permission: Permission,
        effect: Option<OverrideEffect>,
        now: Timestamp,
        effects: EffectsFn<'_, MemberChange>,
    ) -> StoreResult<MemberChange> {
        let mut tx = self.write_org(org_id).await?;
        let before = fetch_member(&mut tx, org_id, email_normalized).await?;
        if before.override_of(permission) != effect {
            match effect {
                Some(effect) => {
                    sqlx::query(
                        "INSERT INTO membership_permissions (membership_id, permission, effect, created_at)
                         VALUES ($1, $2, $3, $4)
                         ON CONFLICT (membership_id, permission)
                         DO UPDATE SET effect = excluded.effect, created_at = excluded.created_at",
                    )
                    .bind(before.membership_id)
                    .bind(permission.as_str())
                    .bind(effect.as_str())
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                }
                None => {
                    sqlx::query(
                        "DELETE FROM membership_permissions WHERE membership_id = $1 AND permission = $2",
                    )
                    .bind(before.membership_id)
                    .bind(permission.as_str())
                    .execute(&mut *tx)
                    .await?;
                }
            }
            sqlx::query("UPDATE memberships SET updated_at = $1 WHERE id = $2")
                .bind(now)
                .bind(before.membership_id)
                .execute(&mut *tx)
                .await?;
        }
        let after = fetch_member(&mut tx, org_id, email_normalized).await?;
        let change = MemberChange { before, after };
        tx.commit(effects(&change)).await?;
        Ok(change)
    }

    async fn remove_member(
        &self,
        org_id: i64,
        email_normalized: &str,
        effects: EffectsFn<'_, Member>,
    ) -> StoreResult<Member> {
        let mut tx = self.write_org(org_id).await?;
        let member = fetch_member(&mut tx, org_id, email_normalized).await?;
        sqlx::query("DELETE FROM membership_permissions WHERE membership_id = $1")
            .bind(member.membership_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM memberships WHERE id = $1")
            .bind(member.membership_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "DELETE FROM users WHERE id = $1
               AND NOT EXISTS (SELECT 1 FROM memberships WHERE user_id = $1)",
        )
        .bind(member.user.id)
        .execute(&mut *tx)
        .await?;
        tx.commit(effects(&member)).await?;
        Ok(member)
    }
}
