//! Group commit of sends' records (`MessageStore::record_outbound_grouped`).
//!
//! A send's record (its contact and conversation, the message, the completion of its
//! idempotency claim, its outbox events and their webhook deliveries) is handed to a
//! committer task through a bounded queue. A committer takes every record waiting (up to
//! [`MAX_GROUP`]) and writes them in one transaction with a number of statements that does not
//! grow with the group (`outbound_group::write_outbound_group`): one `BEGIN`; one read of the
//! recipients' contacts and one of their open conversations (only missing ones are created,
//! one at a time); one multi-row `INSERT` of the messages (not read back: the records are
//! built from what it wrote); one endpoint lookup per organization for the fan-out; one
//! multi-row statement each for the outbox events, their deliveries and the completions of the
//! idempotency claims; one wake-up `NOTIFY`; one commit (one WAL flush). Records the send queue
//! takes over (a batch's items) are written one after another in the group's transaction
//! instead. Each sender is answered only after that commit, so a send's durability is
//! unchanged. Under light load a group is one record and nothing waits; under load, records
//! queue while a group is being written and the next group takes them all.
//!
//! Errors stay per record: when any record of a group fails, the whole group is rolled back
//! and its records are written again one per transaction, so that the failing one fails alone
//! with its own error (a lost idempotency claim, say) and the others are unaffected. Records
//! are written in the order of their organization and recipient, so that two groups (or a
//! group and any other transaction that takes the same rows in the same order) cannot
//! deadlock on contacts and conversations.
//!
//! SQLite, whose one writer connection serializes every write anyway, has one committer;
//! PostgreSQL has [`dialect::GROUP_COMMITTERS`] (two), so that a group can be written while the
//! previous one commits. On PostgreSQL each committer keeps its connection between groups
//! ([`Kept`]).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::completions::Completion;
use super::messages::write_outbound_in;
use super::outbound_group::{GroupRecord, groupable, write_outbound_group};
use super::write::WriteTx;
use super::{Backend, dialect};
use crate::{GroupedOutbound, RecipientRef, RecordedOutbound, StoreError, StoreResult};

/// The most records written in one transaction.
const MAX_GROUP: usize = 64;
/// Records waiting for a committer at most (senders wait beyond it).
const QUEUE: usize = 4096;
/// A committer lets its kept connection go after this long without a group.
const KEEP_IDLE: Duration = Duration::from_secs(1);

/// The connection a records committer keeps between its groups on PostgreSQL
/// ([`dialect::KEEP_COMMITTER_CONNECTION`]): a group's transaction then begins with no round
/// trip to check a pooled connection, and ends with none to check it again (the pool checks a
/// connection when it is taken and when it is returned), which under light load is two of a
/// send's round trips between its record and its deliveries. It is let go after [`KEEP_IDLE`]
/// without a group and whenever the pool has no idle connection left; a kept connection that
/// the database closed meanwhile is replaced before anything is written (`Backend::write_kept`).
type Kept = Option<sqlx::pool::PoolConnection<super::Db>>;

/// One record to write and where its answer goes.
pub(crate) struct Job {
    store: Backend,
    record: GroupedOutbound,
    /// The `traceparent` of the send (its events join its trace; the transaction's span too).
    trace: Option<String>,
    reply: oneshot::Sender<StoreResult<RecordedOutbound>>,
}

/// The group committers of one store: sends' records and idempotency claims.
#[derive(Clone, Default)]
pub(crate) struct GroupSlot {
    records: Queue<Job>,
    claims: Queue<ClaimJob>,
}

impl std::fmt::Debug for GroupSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GroupSlot")
    }
}

/// A bounded queue and its committer tasks, started on first use (and again if its tasks
/// ended with the runtime they ran on).
struct Queue<J>(Arc<Mutex<Option<mpsc::Sender<J>>>>);

impl<J> Clone for Queue<J> {
    fn clone(&self) -> Self {
        Queue(self.0.clone())
    }
}

impl<J> Default for Queue<J> {
    fn default() -> Self {
        Queue(Arc::default())
    }
}

impl<J: Send + 'static> Queue<J> {
    fn sender<F, Fut>(&self, write: F) -> mpsc::Sender<J>
    where
        F: Fn(Vec<J>, Kept) -> Fut + Copy + Send + Sync + 'static,
        Fut: Future<Output = Kept> + Send + 'static,
    {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match &*slot {
            Some(s) if !s.is_closed() => s.clone(),
            _ => {
                let (tx, rx) = mpsc::channel(QUEUE);
                let rx = Arc::new(tokio::sync::Mutex::new(rx));
                for _ in 0..dialect::GROUP_COMMITTERS {
                    tokio::spawn(committer(rx.clone(), write));
                }
                *slot = Some(tx.clone());
                tx
            }
        }
    }

    /// Queues the job `make` builds around its reply and waits for the answer.
    async fn submit<T, F, Fut>(
        &self,
        write: F,
        make: impl FnOnce(oneshot::Sender<StoreResult<T>>) -> J,
    ) -> StoreResult<T>
    where
        F: Fn(Vec<J>, Kept) -> Fut + Copy + Send + Sync + 'static,
        Fut: Future<Output = Kept> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.sender(write)
            .send(make(reply))
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

fn stopped() -> StoreError {
    StoreError::Unavailable("the group committer stopped".into())
}

impl Backend {
    /// Queues a record for the committers and waits for its transaction to commit.
    pub(super) async fn record_grouped(
        &self,
        record: GroupedOutbound,
    ) -> StoreResult<RecordedOutbound> {
        let trace = crate::observe::current_trace();
        self.group
            .records
            .submit(commit_group, |reply| Job {
                store: self.clone(),
                record,
                trace,
                reply,
            })
            .await
    }

    /// The common case of an idempotency claim, a new key, by group commit: the claims of
    /// concurrent requests are inserted by one multi-row `INSERT ... ON CONFLICT DO NOTHING`.
    /// `Some(record id)` when this claim's row was inserted; `None` when the key exists (the
    /// caller decides under a transaction of its own).
    pub(super) async fn claim_new_grouped(&self, claim: NewClaim) -> StoreResult<Option<i64>> {
        self.group
            .claims
            .submit(insert_claims, |reply| ClaimJob {
                store: self.clone(),
                claim,
                reply,
            })
            .await
    }
}

/// Takes every job waiting (at least one, at most [`MAX_GROUP`]) and writes them as a group,
/// until the store is dropped. The group's work runs in a task of its own, so that a panic
/// fails only its group (and lets its kept connection go).
async fn committer<J, F, Fut>(rx: Arc<tokio::sync::Mutex<mpsc::Receiver<J>>>, write: F)
where
    J: Send + 'static,
    F: Fn(Vec<J>, Kept) -> Fut,
    Fut: Future<Output = Kept> + Send + 'static,
{
    let mut kept: Kept = None;
    loop {
        let jobs = match kept {
            Some(_) => match tokio::time::timeout(KEEP_IDLE, next_group(&rx)).await {
                Ok(jobs) => jobs,
                Err(_) => {
                    kept = None;
                    next_group(&rx).await
                }
            },
            None => next_group(&rx).await,
        };
        let Some(jobs) = jobs else { return };
        kept = tokio::spawn(write(jobs, kept)).await.unwrap_or(None);
    }
}

/// Every job waiting, at least one (waiting for it) and at most [`MAX_GROUP`]; `None` when the
/// queue is closed. Cancelling it loses no job.
async fn next_group<J>(rx: &tokio::sync::Mutex<mpsc::Receiver<J>>) -> Option<Vec<J>> {
    let mut rx = rx.lock().await;
    let mut jobs = vec![rx.recv().await?];
    while jobs.len() < MAX_GROUP {
        match rx.try_recv() {
            Ok(job) => jobs.push(job),
            Err(_) => break,
        }
    }
    Some(jobs)
}

/// A new idempotency record to insert (the values of `claim_idempotency`'s insert).
pub(super) struct NewClaim {
    pub api_key_id: i64,
    pub key: String,
    pub method: String,
    pub path: String,
    pub fingerprint: Vec<u8>,
    pub owner: uuid::Uuid,
    pub locked_until: switchboard_domain::Timestamp,
    pub now: switchboard_domain::Timestamp,
    pub expires_at: switchboard_domain::Timestamp,
}

pub(crate) struct ClaimJob {
    store: Backend,
    claim: NewClaim,
    reply: oneshot::Sender<StoreResult<Option<i64>>>,
}

/// Inserts a group of claims with one statement; when it fails (a key deleted meanwhile, say),
/// each claim alone, so that each gets its own answer. (On a pooled connection: a claim is one
/// statement outside a transaction, which a connection closed meanwhile would fail.)
async fn insert_claims(jobs: Vec<ClaimJob>, kept: Kept) -> Kept {
    insert_claim_group(jobs).await;
    kept
}

async fn insert_claim_group(jobs: Vec<ClaimJob>) {
    let store = jobs[0].store.clone();
    if jobs.len() > 1 {
        let claims: Vec<&NewClaim> = jobs.iter().map(|j| &j.claim).collect();
        if let Ok(inserted) = insert_claim_rows(&store, &claims).await {
            for job in jobs {
                let id = inserted
                    .iter()
                    .find(|(_, owner)| *owner == job.claim.owner)
                    .map(|(id, _)| *id);
                let _ = job.reply.send(Ok(id));
            }
            return;
        }
    }
    for job in jobs {
        let result = insert_claim_rows(&store, &[&job.claim])
            .await
            .map(|rows| rows.first().map(|(id, _)| *id));
        let _ = job.reply.send(result);
    }
}

/// `(id, owner)` of the rows inserted (a key that exists, or that an earlier row of the same
/// statement took, is skipped).
async fn insert_claim_rows(
    store: &Backend,
    claims: &[&NewClaim],
) -> StoreResult<Vec<(i64, uuid::Uuid)>> {
    let mut qb = sqlx::QueryBuilder::<super::Db>::new(
        "INSERT INTO idempotency_records (api_key_id, idempotency_key, method, path, fingerprint, state, owner,
                                          locked_until, created_at, expires_at) ",
    );
    qb.push_values(claims, |mut b, c| {
        b.push_bind(c.api_key_id)
            .push_bind(c.key.as_str())
            .push_bind(c.method.as_str())
            .push_bind(c.path.as_str())
            .push_bind(c.fingerprint.as_slice())
            .push_bind("in_progress")
            .push_bind(c.owner)
            .push_bind(c.locked_until)
            .push_bind(c.now)
            .push_bind(c.expires_at);
    });
    qb.push(" ON CONFLICT (api_key_id, idempotency_key) DO NOTHING RETURNING id, owner");
    Ok(qb.build_query_as().fetch_all(store.writer()).await?)
}

/// The order in which a group writes its records (and so takes their rows' locks).
fn lock_order(job: &Job) -> (i64, u8, String) {
    let new = &job.record.new;
    match &new.recipient {
        RecipientRef::Contact(id) => (new.org_id, 0, format!("{id:020}")),
        RecipientRef::Phone(p) => (new.org_id, 1, p.as_str().to_owned()),
    }
}

async fn commit_group(mut jobs: Vec<Job>, mut kept: Kept) -> Kept {
    let store = jobs[0].store.clone();
    if jobs.len() > 1 {
        jobs.sort_by_key(lock_order);
        if let Ok(recorded) = write_group(&store, &jobs, &mut kept).await {
            crate::observe::group(jobs.len());
            for (job, r) in jobs.into_iter().zip(recorded) {
                let _ = job.reply.send(Ok(r));
            }
            return keep(&store, kept);
        }
    }
    // One record, or a group that failed: one transaction per record.
    for job in jobs {
        crate::observe::group(1);
        let result = write_alone(&store, &job, &mut kept).await;
        let _ = job.reply.send(result);
    }
    keep(&store, kept)
}

/// The committer's connection for its next group, unless the pool has no idle connection left
/// (others may be waiting for one).
fn keep(store: &Backend, kept: Kept) -> Kept {
    kept.filter(|_| store.writer().num_idle() > 0)
}

/// A group's transaction: on the committer's kept connection where the backend keeps one.
async fn begin<'s>(store: &'s Backend, kept: &'s mut Kept) -> StoreResult<WriteTx<'s>> {
    if dialect::KEEP_COMMITTER_CONNECTION {
        store.write_kept(kept).await
    } else {
        store.write().await
    }
}

async fn write_group(
    store: &Backend,
    jobs: &[Job],
    kept: &mut Kept,
) -> StoreResult<Vec<RecordedOutbound>> {
    let mut tx = begin(store, kept).await?;
    tx.group_mode();
    let mut completions = Vec::new();
    let recorded = if jobs.iter().all(|j| groupable(&j.record.new)) {
        // The records with a few statements for the whole group, then each one's effects.
        let records: Vec<GroupRecord<'_>> = jobs
            .iter()
            .map(|j| GroupRecord {
                new: &j.record.new,
                trace: j.trace.as_deref(),
            })
            .collect();
        let recorded = write_outbound_group(&mut tx, &records).await?;
        for (job, r) in jobs.iter().zip(&recorded) {
            finish_record(&mut tx, job, r, Some(&mut completions)).await?;
        }
        recorded
    } else {
        let mut recorded = Vec::with_capacity(jobs.len());
        for job in jobs {
            recorded.push(write_record(&mut tx, job, Some(&mut completions)).await?);
        }
        recorded
    };
    super::completions::complete_many_tx(&mut tx, &completions).await?;
    tx.commit_for(jobs.iter().filter_map(|j| j.trace.as_deref()))
        .await?;
    Ok(recorded)
}

async fn write_alone(store: &Backend, job: &Job, kept: &mut Kept) -> StoreResult<RecordedOutbound> {
    let mut tx = begin(store, kept).await?;
    tx.group_mode();
    let recorded = write_record(&mut tx, job, None).await?;
    tx.commit_for(job.trace.as_deref().into_iter()).await?;
    Ok(recorded)
}

/// Writes one record into the group's transaction: what `record_outbound` writes, in the
/// send's trace (the message and its events keep it), then [`finish_record`].
async fn write_record(
    tx: &mut WriteTx<'_>,
    job: &Job,
    completions: Option<&mut Vec<Completion>>,
) -> StoreResult<RecordedOutbound> {
    let recorded = crate::observe::on_behalf_of(
        job.trace.clone(),
        write_outbound_in(tx, job.record.new.clone(), None, None),
    )
    .await?;
    finish_record(tx, job, &recorded, completions).await?;
    Ok(recorded)
}

/// The rest of a record, in its send's trace: the completion of its idempotency claim (written
/// now, or added to `completions` for the group to write with one statement) and its effects.
async fn finish_record(
    tx: &mut WriteTx<'_>,
    job: &Job,
    recorded: &RecordedOutbound,
    completions: Option<&mut Vec<Completion>>,
) -> StoreResult<()> {
    crate::observe::on_behalf_of(job.trace.clone(), async {
        let record = &job.record;
        if let Some(c) = &record.completion {
            let completion = Completion::send(c, recorded)?;
            match completions {
                Some(group) => group.push(completion),
                None => super::completions::complete_tx(tx, &completion).await?,
            }
        }
        tx.write_effects(&(record.effects)(recorded)).await
    })
    .await
}
