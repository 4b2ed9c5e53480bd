//! The one way a change is written: [`WriteTx`].
//!
//! Every write transaction of the store is a `WriteTx` (`Backend::write`, or
//! `Backend::write_org` for changes serialized per organization). A change writes its rows
//! through it (it dereferences to the connection), then `commit(effects)` writes the change's
//! outbox events and log entries in the same transaction (the outbox, with the fan-out into
//! webhook deliveries), commits, and wakes the dispatchers: this process's after the commit,
//! and on PostgreSQL every instance's (`NOTIFY`, delivered on commit) when deliveries were
//! written or scheduled. Dropping a `WriteTx` without committing rolls everything back.

use std::ops::{Deref, DerefMut};

use sqlx::pool::PoolConnection;
use sqlx::{Database, Transaction, TransactionManager};
use switchboard_domain::event::Effects;

use super::{Backend, Conn, Db, dialect};
use crate::StoreResult;

/// A write transaction of the store and what it has to wake on commit.
pub(super) struct WriteTx<'s> {
    store: &'s Backend,
    tx: Tx<'s>,
    /// Outbox events were written: this process's dispatcher is woken after the commit.
    events: bool,
    /// Deliveries were written or scheduled: every instance's dispatcher is woken.
    deliveries: bool,
    /// When the transaction began (for its span).
    started: std::time::SystemTime,
    /// The fan-out's state kept across `write_effects` calls (a group commit: the
    /// organizations' endpoints are read once per group, not once per record).
    shared_fan: Option<super::fan_out::FanOut>,
    /// A group commit's outbox events, written together (with their deliveries) just before
    /// the commit.
    deferred: Option<Vec<switchboard_domain::event::NewEvent>>,
    /// Deliveries written leased to this process's dispatcher, passed to it after the commit
    /// (given back to its offer if the transaction does not commit).
    handed: crate::handoff::Uncommitted,
}

/// The connection of a write transaction: taken from the pool for it (and given back after),
/// or kept by its caller between transactions.
enum Tx<'s> {
    Pooled(Transaction<'static, Db>),
    Kept(KeptTx<'s>),
}

/// A transaction on a connection its caller keeps (`home`), where the connection goes back when
/// the transaction ends; dropped before its commit, it rolls back (sent with the connection's
/// next statement, as sqlx's own transactions do).
struct KeptTx<'s> {
    conn: Option<PoolConnection<Db>>,
    home: &'s mut Option<PoolConnection<Db>>,
}

type Manager = <Db as Database>::TransactionManager;

impl Tx<'_> {
    async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Pooled(tx) => tx.commit().await,
            Tx::Kept(mut kept) => Manager::commit(&mut kept).await,
        }
    }

    async fn rollback(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Pooled(tx) => tx.rollback().await,
            Tx::Kept(mut kept) => Manager::rollback(&mut kept).await,
        }
    }
}

impl Drop for KeptTx<'_> {
    fn drop(&mut self) {
        if let Some(mut conn) = self.conn.take() {
            if Manager::get_transaction_depth(&conn) > 0 {
                Manager::start_rollback(&mut conn);
            }
            *self.home = Some(conn);
        }
    }
}

impl Deref for KeptTx<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn
            .as_ref()
            .expect("a kept transaction has its connection")
    }
}

impl DerefMut for KeptTx<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        self.conn
            .as_mut()
            .expect("a kept transaction has its connection")
    }
}

impl Deref for Tx<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        match self {
            Tx::Pooled(tx) => tx,
            Tx::Kept(kept) => kept,
        }
    }
}

impl DerefMut for Tx<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        match self {
            Tx::Pooled(tx) => tx,
            Tx::Kept(kept) => kept,
        }
    }
}

impl Backend {
    /// Starts a write transaction.
    pub(super) async fn write(&self) -> StoreResult<WriteTx<'_>> {
        Ok(self.write_in(Tx::Pooled(self.begin().await?)))
    }

    /// Starts a write transaction on the connection kept in `home` (taking one from the pool,
    /// checked, when none is kept), which goes back to `home` when the transaction ends. A kept
    /// connection that cannot begin (the database closed it meanwhile) is let go, and the
    /// transaction begins on one from the pool: nothing was written, so nothing fails.
    pub(super) async fn write_kept<'s>(
        &'s self,
        home: &'s mut Option<PoolConnection<Db>>,
    ) -> StoreResult<WriteTx<'s>> {
        let begin = || Some(std::borrow::Cow::Borrowed(dialect::BEGIN_WRITE));
        let mut conn = None;
        if let Some(mut kept) = home.take() {
            match Manager::begin(&mut kept, begin()).await {
                Ok(()) => conn = Some(kept),
                // Closed (in the background), not returned to the pool.
                Err(_) => kept.close_on_drop(),
            }
        }
        let conn = match conn {
            Some(conn) => conn,
            None => {
                let mut fresh = self.writer().acquire().await?;
                Manager::begin(&mut fresh, begin()).await?;
                fresh
            }
        };
        Ok(self.write_in(Tx::Kept(KeptTx {
            conn: Some(conn),
            home,
        })))
    }

    fn write_in<'s>(&'s self, tx: Tx<'s>) -> WriteTx<'s> {
        WriteTx {
            store: self,
            tx,
            events: false,
            deliveries: false,
            started: std::time::SystemTime::now(),
            shared_fan: None,
            deferred: None,
            handed: crate::handoff::Uncommitted::new(self.hooks.handoff.clone()),
        }
    }

    /// Starts a write transaction holding the organization's lock (see [`WriteTx::lock_org`]).
    pub(super) async fn write_org(&self, org_id: i64) -> StoreResult<WriteTx<'_>> {
        let mut tx = self.write().await?;
        tx.lock_org(org_id).await?;
        Ok(tx)
    }
}

impl WriteTx<'_> {
    /// Takes the organization's lock (PostgreSQL; SQLite serializes writers anyway) for the
    /// rest of the transaction: changes that derive values from the organization's other rows
    /// (slugs, the default channel, memberships) run one at a time.
    pub(super) async fn lock_org(&mut self, org_id: i64) -> StoreResult<()> {
        sqlx::query(dialect::LOCK_ORG)
            .bind(org_id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    /// Writes effects now, inside the transaction (for changes that write several, each after
    /// its own part of the change; the last ones go to [`WriteTx::commit`]).
    pub(super) async fn write_effects(&mut self, effects: &Effects) -> StoreResult<()> {
        let mut own = self.fan_out();
        let fan = self.shared_fan.as_mut().unwrap_or(&mut own);
        let written =
            super::events::write_effects_tx(&mut self.tx, effects, fan, self.deferred.as_mut())
                .await?;
        fan.take_handed(&mut self.handed);
        self.events |= written.events;
        self.deliveries |= written.deliveries;
        Ok(())
    }

    /// A fan-out that hands deliveries to this process's dispatcher (see `crate::handoff`).
    fn fan_out(&self) -> super::fan_out::FanOut {
        super::fan_out::FanOut::with_handoff(self.store.hooks.handoff.clone())
    }

    /// Makes this the transaction of a group commit, whose records cannot change endpoints:
    /// the fan-out's endpoint lists are kept for the rest of the transaction, and the outbox
    /// events of every `write_effects` are written together, with their deliveries, by a few
    /// multi-row statements just before the commit (nothing in the transaction reads them
    /// back before then).
    pub(super) fn group_mode(&mut self) {
        self.shared_fan = Some(self.fan_out());
        self.deferred = Some(Vec::new());
    }

    /// Records that this transaction scheduled deliveries by other means than effects (a test
    /// delivery, a manual retry, an endpoint re-enabled), so that the commit wakes dispatchers.
    pub(super) fn deliveries_scheduled(&mut self) {
        self.deliveries = true;
    }

    /// Writes `effects`, commits, then wakes the dispatchers if anything is for them.
    pub(super) async fn commit(self, effects: Effects) -> StoreResult<()> {
        let started = self.started;
        let result = self.commit_inner(effects).await;
        crate::observe::transaction(started, result.is_ok());
        result
    }

    /// Commits (with no further effects) a transaction written on behalf of other tasks' work:
    /// its span goes to each of their traces.
    pub(super) async fn commit_for<'t>(
        self,
        traces: impl Iterator<Item = &'t str>,
    ) -> StoreResult<()> {
        let started = self.started;
        let result = self.commit_inner(Effects::none()).await;
        for t in traces {
            crate::observe::transaction_in(t, started, result.is_ok());
        }
        result
    }

    async fn commit_inner(mut self, effects: Effects) -> StoreResult<()> {
        self.write_effects(&effects).await?;
        if let Some(events) = self.deferred.take() {
            let mut own = self.fan_out();
            let fan = self.shared_fan.as_mut().unwrap_or(&mut own);
            self.deliveries |= super::events::write_events_tx(&mut self.tx, &events, fan).await?;
            fan.take_handed(&mut self.handed);
        }
        // Only deliveries for a claim wake dispatchers: handed ones are this process's already.
        if self.deliveries && !dialect::NOTIFY_DELIVERIES.is_empty() {
            sqlx::query(dialect::NOTIFY_DELIVERIES)
                .execute(&mut *self.tx)
                .await?;
        }
        self.tx.commit().await?;
        self.handed.send();
        if self.deliveries {
            self.store.hooks.outbox_written();
        } else if self.events {
            self.store.hooks.events_written();
        }
        Ok(())
    }

    /// Rolls back explicitly (dropping the transaction does the same).
    pub(super) async fn rollback(self) -> StoreResult<()> {
        Ok(self.tx.rollback().await?)
    }
}

impl Deref for WriteTx<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        &self.tx
    }
}

impl DerefMut for WriteTx<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        &mut self.tx
    }
}
