//! The SQLite backend: the embedded, persistent default (no server to run).
//!
//! History is one `log` table, a row per revision; `current` points each live key at its
//! latest row. WAL with `synchronous=FULL` makes a write that returned Ok survive a crash.
//! SQLite calls run on the blocking pool: one connection writes, others serve reads/watches.
//! Writes that wait while a commit holds the writing connection go together into the next
//! transaction (group commit), so that they share its sync to disk.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use rusqlite::{Connection, ErrorCode, OptionalExtension, Row, TransactionBehavior, params};
use tokio::sync::Semaphore;

use super::backend::{
    Backend, Event, EventType, KeyValue, ListRequest, ListResult, ProgressStream, Revision,
    StorageError,
};
use super::mvcc::{self, KeyRange, LogRow, Pending, Write};
use super::notify::{EventBatch, EventSource, Notifier, SCAN_WINDOW};

const SCHEMA_VERSION: i64 = 1;

/// Read-only connections kept open: enough for the blocking pool to serve reads on every core
/// of a small machine while watch scans run, few enough that each keeps its statement cache.
const READERS: usize = 4;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS log (
    revision INTEGER PRIMARY KEY,
    key BLOB NOT NULL,
    value BLOB,
    create_revision INTEGER NOT NULL,
    prev_revision INTEGER,
    deleted INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS log_key_revision ON log (key, revision);
CREATE TABLE IF NOT EXISTS current (
    key BLOB PRIMARY KEY,
    revision INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
";

const MAX_REVISION: &str = "SELECT COALESCE(MAX(revision), 0) FROM log";
const COMPACTED: &str = "SELECT value FROM meta WHERE name = 'compacted'";
const GET: &str = "SELECT c.key, l.value, l.create_revision, l.revision
    FROM current c JOIN log l ON l.revision = c.revision WHERE c.key = ?1";
const LIST_LATEST: &str = "SELECT c.key, l.value, l.create_revision, l.revision
    FROM current c JOIN log l ON l.revision = c.revision
    WHERE c.key >= ?1 AND c.key < ?2 ORDER BY c.key LIMIT ?3";
const COUNT_LATEST: &str = "SELECT COUNT(*) FROM current WHERE key >= ?1 AND key < ?2";
/// A key's row visible at `?3`: its newest row at or before `?3`, unless that is a delete.
macro_rules! visible_at {
    () => {
        "l.key >= ?1 AND l.key < ?2 AND l.revision <= ?3 AND l.deleted = 0
        AND NOT EXISTS (SELECT 1 FROM log n
            WHERE n.key = l.key AND n.revision > l.revision AND n.revision <= ?3)"
    };
}
const LIST_AT: &str = concat!(
    "SELECT l.key, l.value, l.create_revision, l.revision FROM log l WHERE ",
    visible_at!(),
    " ORDER BY l.key LIMIT ?4"
);
const COUNT_AT: &str = concat!("SELECT COUNT(*) FROM log l WHERE ", visible_at!());
const INSERT_LOG: &str = "INSERT INTO log
    (revision, key, value, create_revision, prev_revision, deleted)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
const SET_CURRENT: &str = "INSERT INTO current (key, revision) VALUES (?1, ?2)
    ON CONFLICT (key) DO UPDATE SET revision = excluded.revision";
/// `+l.key`: scan by revision, bounded by the window, never by key over all history.
const EVENTS: &str = "SELECT l.revision, l.key, l.value, l.create_revision, l.deleted,
        p.value, p.create_revision, p.revision
    FROM log l LEFT JOIN log p ON p.revision = l.prev_revision
    WHERE l.revision > ?1 AND l.revision <= ?2 AND +l.key >= ?3 AND +l.key < ?4
    ORDER BY l.revision LIMIT ?5";
/// Keeps, below the compacted revision `?1`, only each key's newest row: reads at `?1` need
/// it, and so does the key's first later event (as its previous value).
const COMPACT: [&str; 3] = [
    "DELETE FROM log WHERE revision < ?1 AND EXISTS (SELECT 1 FROM log n
        WHERE n.key = log.key AND n.revision > log.revision AND n.revision < ?1)",
    "DELETE FROM log WHERE revision < ?1 AND deleted = 1",
    "INSERT INTO meta (name, value) VALUES ('compacted', ?1)
        ON CONFLICT (name) DO UPDATE SET value = excluded.value",
];

/// A [`Backend`] stored in one SQLite database file.
///
/// Open a file with one `SqliteBackend` at a time: writes through another handle (or process)
/// are stored correctly but do not wake this handle's watchers.
#[derive(Debug)]
pub struct SqliteBackend {
    db: Arc<Db>,
    notifier: Notifier,
}

impl SqliteBackend {
    /// Opens (or creates) the database at `path`. The store continues at the revision it had.
    ///
    /// This does blocking file I/O; call it at start-up, not from a busy async task.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StorageError> {
        Self::open_db(path.as_ref()).map_err(StorageError::from)
    }

    fn open_db(path: &Path) -> Result<Self, Fail> {
        let mut writer = connect(path)?;
        migrate(&mut writer)?;
        let readers = (0..READERS)
            .map(|_| {
                let reader = connect(path)?;
                reader.pragma_update(None, "query_only", true)?;
                Ok(reader)
            })
            .collect::<Result<Vec<_>, Fail>>()?;
        let revision = writer.query_row(MAX_REVISION, [], |row| row.get(0))?;
        Ok(Self {
            db: Arc::new(Db {
                writer: Mutex::new(writer),
                readers: ReaderPool::new(readers),
                waiting: Mutex::new(VecDeque::new()),
            }),
            notifier: Notifier::new(revision),
        })
    }

    /// Queues the write and starts a job on the blocking pool that commits, once it has the
    /// writing connection, every write waiting then ([`Db::commit_waiting`]): writes that
    /// arrive while another commit holds the connection share the next transaction and its
    /// flush to disk (group commit). A job that finds its write taken by an earlier one ends.
    async fn write(&self, key: &str, write: Write) -> Result<KeyValue, StorageError> {
        let (pending, outcome) = Pending::new(key, write);
        lock(&self.db.waiting).push_back(pending);
        let (db, notifier) = (Arc::clone(&self.db), self.notifier.clone());
        // Not awaited: it runs to its end even when this caller stops waiting.
        tokio::task::spawn_blocking(move || db.commit_waiting(&notifier));
        match outcome.await {
            Ok(result) => result.map(|event| event.kv),
            Err(_) => Err(StorageError::Internal(
                "sqlite: the write's task failed".to_owned(),
            )),
        }
    }
}

#[async_trait]
impl Backend for SqliteBackend {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
        let key = key.to_owned();
        self.db.read(move |conn| latest(conn, &key)).await
    }

    async fn list(&self, request: &ListRequest) -> Result<ListResult, StorageError> {
        let request = request.clone();
        self.db.read(move |conn| list(conn, &request)).await
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StorageError> {
        self.write(key, Write::Create(value)).await
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StorageError> {
        self.write(key, Write::Update(value, expected)).await
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<KeyValue, StorageError> {
        self.write(key, Write::Delete(expected)).await
    }

    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: Revision,
    ) -> Result<ProgressStream, StorageError> {
        self.notifier.watch(self.db.clone(), prefix, after).await
    }

    async fn current_revision(&self) -> Result<Revision, StorageError> {
        // Every write goes through this handle and publishes its revision once committed.
        Ok(self.notifier.latest())
    }

    fn local_revision(&self) -> Option<Revision> {
        Some(self.notifier.latest())
    }

    /// Whether the database answers a query.
    async fn ready(&self) -> Result<(), StorageError> {
        self.db
            .read(|conn| Ok(conn.query_row(MAX_REVISION, [], |row| row.get::<_, Revision>(0))?))
            .await
            .map(drop)
    }

    async fn compact(&self, revision: Revision) -> Result<(), StorageError> {
        self.db.write(move |conn| compact(conn, revision)).await
    }
}

/// The writer and the readers; shared with watchers as their [`EventSource`].
#[derive(Debug)]
struct Db {
    writer: Mutex<Connection>,
    readers: ReaderPool,
    /// Writes waiting for the writer, in the order they came.
    waiting: Mutex<VecDeque<Pending>>,
}

impl Db {
    /// Takes the writing connection, then commits the writes waiting at that moment (a batch,
    /// [`mvcc::take_batch`]) in one transaction and answers each, publishing the revisions
    /// before it answers, so that a caller gone after the commit still wakes the watchers.
    fn commit_waiting(&self, notifier: &Notifier) {
        let mut conn = lock(&self.writer);
        let batch = {
            let mut waiting = lock(&self.waiting);
            let Some(first) = waiting.pop_front() else {
                return;
            };
            let (batch, rest) = mvcc::take_batch(first, || waiting.pop_front());
            waiting.extend(rest);
            batch
        };
        if batch.is_empty() {
            return;
        }
        let (writes, replies) = mvcc::split(batch);
        let outcome = commit_writes(&mut conn, writes).map_err(StorageError::from);
        drop(conn);
        if let Some(last) = mvcc::last_revision(&outcome) {
            notifier.publish(last);
        }
        mvcc::answer(replies, outcome);
    }

    /// Runs `f` on the blocking pool with the one writing connection.
    async fn write<T, F>(self: &Arc<Self>, f: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, Fail> + Send + 'static,
    {
        let db = Arc::clone(self);
        blocking(move || f(&mut lock(&db.writer))).await
    }

    /// Runs `f` on the blocking pool with an idle read-only connection, waiting (without
    /// holding a blocking thread) while all of them are busy.
    async fn read<T, F>(self: &Arc<Self>, f: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, Fail> + Send + 'static,
    {
        let permit =
            self.readers.permits.acquire().await.map_err(|_| {
                StorageError::Internal("sqlite: the reader pool is closed".to_owned())
            })?;
        let db = Arc::clone(self);
        let result = blocking(move || f(&mut db.readers.take())).await;
        drop(permit);
        result
    }
}

/// Read-only connections, each used by one call at a time. A permit of `permits` is held for
/// every connection taken, so `take` always finds one idle.
#[derive(Debug)]
struct ReaderPool {
    idle: Mutex<Vec<Connection>>,
    permits: Semaphore,
}

impl ReaderPool {
    fn new(readers: Vec<Connection>) -> Self {
        Self {
            permits: Semaphore::new(readers.len()),
            idle: Mutex::new(readers),
        }
    }

    /// An idle connection, given back when the returned guard drops (also when the call
    /// panics: a read transaction rolls back, so the connection stays usable).
    fn take(&self) -> PooledReader<'_> {
        let conn = lock(&self.idle).pop();
        PooledReader {
            pool: self,
            conn: Some(conn.expect("a reader permit is held for every connection taken")),
        }
    }
}

struct PooledReader<'a> {
    pool: &'a ReaderPool,
    conn: Option<Connection>,
}

impl std::ops::Deref for PooledReader<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn.as_ref().expect("taken until drop")
    }
}

impl std::ops::DerefMut for PooledReader<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        self.conn.as_mut().expect("taken until drop")
    }
}

impl Drop for PooledReader<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            lock(&self.pool.idle).push(conn);
        }
    }
}

/// A panic inside a transaction rolls it back, so a poisoned lock's connection is usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs a SQLite call on the blocking pool.
async fn blocking<T, F>(f: F) -> Result<T, StorageError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, Fail> + Send + 'static,
{
    tokio::task::spawn_blocking(move || f().map_err(StorageError::from))
        .await
        .map_err(|e| StorageError::Internal(format!("sqlite task failed: {e}")))?
}

impl EventSource for Db {
    fn events_after(
        self: Arc<Self>,
        prefix: String,
        after: Revision,
        limit: usize,
    ) -> BoxFuture<'static, Result<EventBatch, StorageError>> {
        Box::pin(async move {
            self.read(move |conn| events_after(conn, &prefix, after, limit))
                .await
        })
    }
}

/// A failure inside a blocking call: SQLite's own, or a storage rule that refused the call.
#[derive(Debug)]
enum Fail {
    Sqlite(rusqlite::Error),
    Storage(StorageError),
}

impl From<rusqlite::Error> for Fail {
    fn from(e: rusqlite::Error) -> Self {
        Fail::Sqlite(e)
    }
}

impl From<StorageError> for Fail {
    fn from(e: StorageError) -> Self {
        Fail::Storage(e)
    }
}

impl From<Fail> for StorageError {
    fn from(fail: Fail) -> Self {
        match fail {
            Fail::Storage(e) => e,
            Fail::Sqlite(e) => match e.sqlite_error_code() {
                Some(
                    ErrorCode::DatabaseBusy
                    | ErrorCode::DatabaseLocked
                    | ErrorCode::SystemIoFailure
                    | ErrorCode::DiskFull
                    | ErrorCode::CannotOpen,
                ) => StorageError::Unavailable(format!("sqlite: {e}")),
                _ => StorageError::Internal(format!("sqlite: {e}")),
            },
        }
    }
}

fn connect(path: &Path) -> Result<Connection, Fail> {
    let conn = Connection::open(path)?;
    // Another process or a checkpoint holding a lock makes a call wait, not fail at once.
    conn.busy_timeout(Duration::from_secs(5))?;
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StorageError::Internal(format!("sqlite: journal mode {mode}, not wal")).into());
    }
    // FULL: a commit is on disk before it returns, so an Ok write survives power loss.
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(conn)
}

fn migrate(conn: &mut Connection) -> Result<(), Fail> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if version > SCHEMA_VERSION {
        let message = format!("sqlite: schema version {version} is newer than this build's");
        return Err(StorageError::Internal(message).into());
    }
    tx.execute_batch(SCHEMA)?;
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(())
}

/// Commits `writes` in one transaction, each checked in turn against what the writes before
/// it left ([`mvcc::apply_in_turn`]). Returns each write's event or the rule it broke; fails
/// as a whole when the database does.
fn commit_writes(
    conn: &mut Connection,
    writes: Vec<(String, Write)>,
) -> Result<Vec<Result<Event, StorageError>>, Fail> {
    // IMMEDIATE: take the write lock before reading, so the checks and the writes are atomic.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let revision: Revision = tx.query_row(MAX_REVISION, [], |row| row.get(0))?;
    let results = mvcc::apply_in_turn(writes, revision, |key| latest(&tx, key))?;
    for event in results.iter().flatten() {
        let key = event.kv.key.as_bytes();
        let deleted = event.event_type == EventType::Delete;
        tx.prepare_cached(INSERT_LOG)?.execute(params![
            event.revision(),
            key,
            (!deleted).then_some(event.kv.value.as_ref()),
            event.kv.create_revision,
            event.prev_kv.as_ref().map(|prev| prev.mod_revision),
            deleted,
        ])?;
        if deleted {
            let sql = "DELETE FROM current WHERE key = ?1";
            tx.prepare_cached(sql)?.execute([key])?;
        } else {
            tx.prepare_cached(SET_CURRENT)?
                .execute(params![key, event.revision()])?;
        }
    }
    tx.commit()?;
    Ok(results)
}

fn latest(conn: &Connection, key: &str) -> Result<Option<KeyValue>, Fail> {
    let mut statement = conn.prepare_cached(GET)?;
    Ok(statement
        .query_row([key.as_bytes()], key_value)
        .optional()?)
}

fn list(conn: &mut Connection, request: &ListRequest) -> Result<ListResult, Fail> {
    // One read transaction: the revision and the rows come from the same snapshot.
    let tx = conn.transaction()?;
    let current: Revision = tx.query_row(MAX_REVISION, [], |row| row.get(0))?;
    let revision = mvcc::read_revision(request.revision, current, compacted(&tx)?)?;
    let range = KeyRange::new(&request.prefix, request.start_after.as_deref());
    let reader = RangeReader {
        conn: &tx,
        revision: (revision < current).then_some(revision),
    };
    if request.skip_count && request.limit > 0 {
        // One row past the page says whether more follow, without counting them all.
        let mut items = reader.items(&range, request.limit + 1)?;
        let more = items.len() > request.limit;
        items.truncate(request.limit);
        return Ok(ListResult {
            items,
            revision,
            more,
            remaining: None,
        });
    }
    let items = reader.items(&range, request.limit)?;
    let remaining = match items.last() {
        Some(last) if items.len() == request.limit => reader.count(&range.after(&last.key))?,
        _ => 0,
    };
    Ok(ListResult {
        items,
        revision,
        more: remaining > 0,
        remaining: Some(remaining),
    })
}

/// Reads a key range at the latest revision (`revision: None`) or at an older one.
struct RangeReader<'a> {
    conn: &'a Connection,
    revision: Option<Revision>,
}

impl RangeReader<'_> {
    fn items(&self, range: &KeyRange, limit: usize) -> Result<Vec<KeyValue>, Fail> {
        // LIMIT -1: no limit.
        let limit = if limit == 0 { -1 } else { limit as i64 };
        let rows = match self.revision {
            None => self
                .conn
                .prepare_cached(LIST_LATEST)?
                .query_map(params![range.start, range.end, limit], key_value)?
                .collect::<Result<_, _>>(),
            Some(revision) => self
                .conn
                .prepare_cached(LIST_AT)?
                .query_map(params![range.start, range.end, revision, limit], key_value)?
                .collect::<Result<_, _>>(),
        };
        Ok(rows?)
    }

    fn count(&self, range: &KeyRange) -> Result<i64, Fail> {
        let count = match self.revision {
            None => self
                .conn
                .prepare_cached(COUNT_LATEST)?
                .query_row(params![range.start, range.end], |row| row.get(0)),
            Some(revision) => self
                .conn
                .prepare_cached(COUNT_AT)?
                .query_row(params![range.start, range.end, revision], |row| row.get(0)),
        };
        Ok(count?)
    }
}

fn events_after(
    conn: &mut Connection,
    prefix: &str,
    after: Revision,
    limit: usize,
) -> Result<EventBatch, Fail> {
    let tx = conn.transaction()?;
    mvcc::check_watch_start(after, compacted(&tx)?)?;
    let current: Revision = tx.query_row(MAX_REVISION, [], |row| row.get(0))?;
    let window_end = current.min(after.saturating_add(SCAN_WINDOW));
    let range = KeyRange::new(prefix, None);
    let events: Vec<Event> = tx
        .prepare_cached(EVENTS)?
        .query_map(
            params![after, window_end, range.start, range.end, limit as i64],
            event,
        )?
        .collect::<Result<_, _>>()?;
    let scanned_to = match events.last() {
        Some(last) if events.len() == limit => last.revision(),
        _ => window_end.max(after),
    };
    Ok(EventBatch { events, scanned_to })
}

fn compact(conn: &mut Connection, revision: Revision) -> Result<(), Fail> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let current: Revision = tx.query_row(MAX_REVISION, [], |row| row.get(0))?;
    if mvcc::compaction_needed(revision, current, compacted(&tx)?)? {
        for sql in COMPACT {
            tx.execute(sql, [revision])?;
        }
        tx.commit()?;
    }
    Ok(())
}

fn compacted(conn: &Connection) -> Result<Revision, Fail> {
    let value = conn.query_row(COMPACTED, [], |row| row.get(0)).optional()?;
    Ok(value.unwrap_or(0))
}

/// A row of (key, value, create_revision, mod_revision).
fn key_value(row: &Row<'_>) -> rusqlite::Result<KeyValue> {
    Ok(KeyValue {
        key: key_at(row, 0)?,
        value: row.get::<_, Vec<u8>>(1)?.into(),
        create_revision: row.get(2)?,
        mod_revision: row.get(3)?,
    })
}

/// A row of [`EVENTS`]: the log row, then its previous row's value, create and mod revision.
fn event(row: &Row<'_>) -> rusqlite::Result<Event> {
    let key = key_at(row, 1)?;
    let prev = match row.get::<_, Option<Revision>>(7)? {
        Some(mod_revision) => Some(KeyValue {
            key: key.clone(),
            value: row.get::<_, Vec<u8>>(5)?.into(),
            create_revision: row.get(6)?,
            mod_revision,
        }),
        None => None,
    };
    let deleted: bool = row.get(4)?;
    let value = if deleted {
        None
    } else {
        Some(row.get::<_, Vec<u8>>(2)?.into())
    };
    let log_row = LogRow {
        revision: row.get(0)?,
        key,
        value,
        create_revision: row.get(3)?,
        prev,
    };
    log_row.into_event().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(4, rusqlite::types::Type::Integer, e.into())
    })
}

fn key_at(row: &Row<'_>, index: usize) -> rusqlite::Result<String> {
    String::from_utf8(row.get(index)?).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(index, rusqlite::types::Type::Blob, e.into())
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use futures::StreamExt;

    use super::*;
    use crate::notify::tests;

    fn open(path: &Path) -> SqliteBackend {
        SqliteBackend::open(path).expect("open sqlite")
    }

    fn list_request(revision: Revision) -> ListRequest {
        ListRequest {
            prefix: "/t/".into(),
            revision,
            ..ListRequest::default()
        }
    }

    /// Holds one read-only connection of `backend` busy until `release` is sent or dropped.
    fn hold_reader(backend: &SqliteBackend) -> std::sync::mpsc::Sender<()> {
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let (taken, has_taken) = std::sync::mpsc::channel();
        let db = backend.db.clone();
        tokio::spawn(async move {
            let _ = db
                .read(move |_conn| {
                    taken.send(()).expect("the test waits");
                    let _ = wait.recv();
                    Ok(())
                })
                .await;
        });
        has_taken.recv().expect("the reader was taken");
        release
    }

    /// The rows a batch writes are those of its writes that proceed, at consecutive
    /// revisions, each with the previous value the writes before it left.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_writes_the_rows_of_each_write_in_turn() {
        let dir = tempfile::tempdir().unwrap();
        let backend = open(&dir.path().join("db.sqlite"));
        let value = |text: &str| Bytes::copy_from_slice(text.as_bytes());
        let start = backend
            .create("/other", value("x"))
            .await
            .unwrap()
            .mod_revision;
        let writes = vec![
            ("/b/a".to_owned(), Write::Create(value("1"))),
            ("/b/a".to_owned(), Write::Create(value("2"))),
            ("/b/a".to_owned(), Write::Update(value("3"), start + 1)),
            ("/b/c".to_owned(), Write::Create(value("4"))),
            ("/b/c".to_owned(), Write::Delete(Some(start + 3))),
        ];
        let results = commit_writes(&mut lock(&backend.db.writer), writes).unwrap();
        let made: Vec<_> = results.iter().map(Result::is_ok).collect();
        assert_eq!(made, [true, false, true, true, true]);
        let a = backend.get("/b/a").await.unwrap().unwrap();
        assert_eq!(
            (a.value, a.create_revision, a.mod_revision),
            (value("3"), start + 1, start + 2)
        );
        assert_eq!(backend.get("/b/c").await.unwrap(), None);
        let mut stream = backend.watch("/b/", start).await.unwrap();
        let mut seen = Vec::new();
        for _ in 0..4 {
            let event = stream.next().await.unwrap().unwrap();
            seen.push((
                event.event_type,
                event.revision(),
                event.prev_kv.map(|p| p.mod_revision),
            ));
        }
        assert_eq!(
            seen,
            [
                (EventType::Put, start + 1, None),
                (EventType::Put, start + 2, Some(start + 1)),
                (EventType::Put, start + 3, None),
                (EventType::Delete, start + 4, Some(start + 3)),
            ]
        );
    }

    /// A write whose caller stopped waiting while another commit held the writing
    /// connection is never made; the writes around it are.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_given_up_before_its_turn_is_not_made() {
        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(open(&dir.path().join("db.sqlite")));
        // A commit in progress: the writing connection held on a thread of its own.
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let (held, is_held) = std::sync::mpsc::channel();
        let db = Arc::clone(&backend.db);
        let holder = std::thread::spawn(move || {
            let _conn = lock(&db.writer);
            held.send(()).unwrap();
            let _ = wait.recv();
        });
        is_held.recv().unwrap();
        let release = async move {
            release.send(()).unwrap();
            holder.join().unwrap();
        };
        tests::a_write_given_up_before_its_turn_is_not_made(Arc::clone(&backend), release).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_run_beside_a_busy_reader_and_wait_when_all_are_busy() {
        let dir = tempfile::tempdir().expect("tempdir");
        let backend = open(&dir.path().join("db"));
        backend
            .create("/t/a", Bytes::from_static(b"1"))
            .await
            .expect("create");

        // A long scan on one connection does not hold up a get on another.
        let one = hold_reader(&backend);
        let got = tokio::time::timeout(Duration::from_secs(10), backend.get("/t/a")).await;
        assert!(
            got.expect("a get beside a busy reader")
                .expect("get")
                .is_some()
        );

        // With every reader busy a get waits, and goes on as soon as one is free.
        let rest: Vec<_> = (1..READERS).map(|_| hold_reader(&backend)).collect();
        let waiting = tokio::time::timeout(Duration::from_millis(200), backend.get("/t/a")).await;
        assert!(
            waiting.is_err(),
            "a get found a reader while all {READERS} were busy"
        );
        drop(one);
        let got = tokio::time::timeout(Duration::from_secs(10), backend.get("/t/a")).await;
        assert!(
            got.expect("a get once a reader is free")
                .expect("get")
                .is_some()
        );
        drop(rest);
        assert!(backend.ready().await.is_ok());
    }

    #[tokio::test]
    async fn reopening_keeps_data_revision_and_history() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let store = open(&path);
        let a = store.create("/t/a", "a1".into()).await.unwrap();
        let old = store
            .create("/t/b", "b1".into())
            .await
            .unwrap()
            .mod_revision;
        store
            .update("/t/a", "a2".into(), a.mod_revision)
            .await
            .unwrap();
        store.delete("/t/b", None).await.unwrap();
        let before = store.list(&list_request(0)).await.unwrap();
        let history = store.list(&list_request(old)).await.unwrap();
        drop(store);

        let store = open(&path);
        assert_eq!(store.current_revision().await.unwrap(), 4);
        assert_eq!(store.list(&list_request(0)).await.unwrap(), before);
        assert_eq!(store.list(&list_request(old)).await.unwrap(), history);
        let mut replay = store.watch("/t/", 0).await.unwrap();
        for revision in 1..=4 {
            let event = replay.next().await.unwrap().unwrap();
            assert_eq!(event.revision(), revision);
        }
        let c = store.create("/t/c", "c1".into()).await.unwrap();
        assert_eq!(c.mod_revision, 5);
    }

    #[tokio::test]
    async fn compacted_revision_persists() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let store = open(&path);
        let mut kv = store.create("/t/a", "0".into()).await.unwrap();
        for value in ["1", "2", "3"] {
            kv = store
                .update("/t/a", value.into(), kv.mod_revision)
                .await
                .unwrap();
        }
        store.compact(3).await.unwrap();
        drop(store);

        let store = open(&path);
        let too_old = store.list(&list_request(2)).await;
        let compacted = StorageError::Compacted {
            requested: 2,
            compacted: 3,
        };
        assert_eq!(too_old, Err(compacted));
        assert!(store.watch("/t/", 1).await.is_err());
        let at = store.list(&list_request(3)).await.unwrap();
        assert_eq!(at.items[0].value, Bytes::from("2"));
        assert_eq!(store.get("/t/a").await.unwrap(), Some(kv));
    }

    #[tokio::test]
    async fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        drop(open(&path));
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        drop(conn);
        assert!(matches!(
            SqliteBackend::open(&path),
            Err(StorageError::Internal(_))
        ));
    }

    #[tokio::test]
    async fn opening_a_directory_fails() {
        let dir = tempfile::tempdir().unwrap();
        assert!(SqliteBackend::open(dir.path()).is_err());
    }

    /// Set in the child process of [`acknowledged_writes_survive_kill`]: the database path.
    const CRASH_CHILD: &str = "APISERVER_SQLITE_CRASH_CHILD";

    /// A process killed with SIGKILL mid-stream loses no write it had been told succeeded.
    #[test]
    fn acknowledged_writes_survive_kill() {
        if let Ok(path) = std::env::var(CRASH_CHILD) {
            return write_until_killed(Path::new(&path));
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "sqlite::tests::acknowledged_writes_survive_kill"])
            .args(["--nocapture", "--test-threads=1"])
            .env(CRASH_CHILD, &path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let acknowledged: Revision = std::io::BufRead::lines(stdout)
            .map_while(Result::ok)
            .filter_map(|line| line.strip_prefix("ack ")?.parse().ok())
            .take(100)
            .last()
            .expect("the child acknowledged writes");
        child.kill().unwrap();
        child.wait().unwrap();

        let runtime = tokio::runtime::Runtime::new().unwrap();
        let kv = runtime
            .block_on(open(&path).get("/t/counter"))
            .unwrap()
            .unwrap();
        assert!(
            kv.mod_revision >= acknowledged,
            "lost writes up to {acknowledged}"
        );
        assert_eq!(kv.value, Bytes::from(kv.mod_revision.to_string()));
    }

    /// The child: writes and acknowledges each write on stdout, until killed (or a bound, so
    /// an orphaned child cannot run forever).
    fn write_until_killed(path: &Path) {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let store = open(path);
            let mut kv = store.create("/t/counter", "1".into()).await.unwrap();
            for _ in 0..10_000 {
                println!("ack {}", kv.mod_revision);
                let next = Bytes::from((kv.mod_revision + 1).to_string());
                kv = store
                    .update("/t/counter", next, kv.mod_revision)
                    .await
                    .unwrap();
            }
        });
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lagging_watcher_is_compacted() {
        let dir = tempfile::tempdir().unwrap();
        tests::lagging_watcher_is_compacted(&open(&dir.path().join("store.db"))).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn quiet_prefix_crosses_scan_windows() {
        let dir = tempfile::tempdir().unwrap();
        tests::quiet_prefix_crosses_scan_windows(&open(&dir.path().join("store.db"))).await;
    }
}
