//! The revision rules shared by the backends that keep their own history (memory, sqlite,
//! postgres).
//!
//! Each keeps its own history but all must agree on what a write may do and which revisions a
//! read or watch may ask for, so that the conformance suite sees one behaviour.

use std::collections::HashMap;

use bytes::Bytes;
use tokio::sync::oneshot;

use super::backend::{Event, EventType, KeyValue, Revision, StorageError};

/// One write, before it is checked against the key's current value.
#[derive(Debug)]
pub(crate) enum Write {
    /// The key must not exist.
    Create(Bytes),
    /// The key must exist with this `mod_revision`.
    Update(Bytes, Revision),
    /// The key must exist, and when a revision is given have this `mod_revision`.
    Delete(Option<Revision>),
}

impl Write {
    /// Checks the write against `current` (the key's latest value) and, if it may proceed,
    /// returns the event it makes at `revision`.
    pub(crate) fn apply(
        self,
        key: &str,
        current: Option<KeyValue>,
        revision: Revision,
    ) -> Result<Event, StorageError> {
        match (self, current) {
            (Write::Create(value), None) => Ok(Event {
                event_type: EventType::Put,
                kv: KeyValue {
                    key: key.to_owned(),
                    value,
                    create_revision: revision,
                    mod_revision: revision,
                },
                prev_kv: None,
            }),
            (Write::Create(_), Some(_)) => Err(StorageError::KeyExists(key.to_owned())),
            (_, None) => Err(StorageError::NotFound(key.to_owned())),
            (Write::Update(value, expected), Some(prev)) => {
                check_expected(&prev, Some(expected))?;
                let kv = KeyValue {
                    value,
                    mod_revision: revision,
                    ..prev.clone()
                };
                Ok(Event {
                    event_type: EventType::Put,
                    kv,
                    prev_kv: Some(prev),
                })
            }
            (Write::Delete(expected), Some(prev)) => {
                check_expected(&prev, expected)?;
                let kv = KeyValue {
                    mod_revision: revision,
                    ..prev.clone()
                };
                Ok(Event {
                    event_type: EventType::Delete,
                    kv,
                    prev_kv: Some(prev),
                })
            }
        }
    }
}

/// A write waiting for its backend's writer, which commits the writes that wait together in
/// one transaction (group commit: the SQL backends' commits are serialized, and each pays a
/// flush of the log to disk and, on PostgreSQL, round trips under the schema's lock).
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) key: String,
    pub(crate) write: Write,
    /// Where its outcome goes; closed when its caller stopped waiting.
    pub(crate) reply: Reply,
}

/// At most this many writes share one transaction...
pub(crate) const BATCH_WRITES: usize = 128;

/// ...and at most about this many bytes of keys and values (a batch takes at least one write).
pub(crate) const BATCH_BYTES: usize = 4 << 20;

impl Pending {
    /// A write of `key` and where its outcome will come.
    pub(crate) fn new(
        key: &str,
        write: Write,
    ) -> (Self, oneshot::Receiver<Result<Event, StorageError>>) {
        let (reply, outcome) = oneshot::channel();
        let key = key.to_owned();
        (Self { key, write, reply }, outcome)
    }

    /// The bytes it adds to a batch.
    fn bytes(&self) -> usize {
        self.key.len()
            + match &self.write {
                Write::Create(value) | Write::Update(value, _) => value.len(),
                Write::Delete(_) => 0,
            }
    }
}

/// A batch of waiting writes: `first` and what `next` gives after it, within
/// [`BATCH_WRITES`] and [`BATCH_BYTES`], without the writes whose callers stopped waiting
/// (a request cancelled before its turn is not made after it). Also returns the write taken
/// from `next` that did not fit, the first of the next batch.
pub(crate) fn take_batch(
    first: Pending,
    mut next: impl FnMut() -> Option<Pending>,
) -> (Vec<Pending>, Option<Pending>) {
    let mut bytes = first.bytes();
    let mut batch = vec![first];
    let mut rest = None;
    while batch.len() < BATCH_WRITES {
        let Some(pending) = next() else { break };
        bytes += pending.bytes();
        if bytes > BATCH_BYTES {
            rest = Some(pending);
            break;
        }
        batch.push(pending);
    }
    batch.retain(|pending| !pending.reply.is_closed());
    (batch, rest)
}

/// A batch's writes, and where their outcomes go.
pub(crate) fn split(batch: Vec<Pending>) -> (Vec<(String, Write)>, Vec<Reply>) {
    batch
        .into_iter()
        .map(|pending| ((pending.key, pending.write), pending.reply))
        .unzip()
}

/// The outcome of a batch: each write's event or the rule it broke, or the failure of the
/// whole transaction.
pub(crate) type Outcome = Result<Vec<Result<Event, StorageError>>, StorageError>;

/// Where a waiting write's outcome goes.
pub(crate) type Reply = oneshot::Sender<Result<Event, StorageError>>;

/// The newest revision a batch made, which its backend publishes to its watchers.
pub(crate) fn last_revision(outcome: &Outcome) -> Option<Revision> {
    let results = outcome.as_ref().ok()?;
    results.iter().flatten().map(Event::revision).max()
}

/// Checks `writes` in their order, each against its key's value after the writes before it
/// (`read` gives a key's stored value, asked once per key), as if each had a transaction of
/// its own after the last: those that may proceed take the revisions after `revision` in
/// turn. Returns each write's event, or the rule it broke.
pub(crate) fn apply_in_turn<E>(
    writes: Vec<(String, Write)>,
    mut revision: Revision,
    mut read: impl FnMut(&str) -> Result<Option<KeyValue>, E>,
) -> Result<Vec<Result<Event, StorageError>>, E> {
    let mut latest: HashMap<String, Option<KeyValue>> = HashMap::new();
    let mut results = Vec::with_capacity(writes.len());
    for (key, write) in writes {
        let current = match latest.get(&key) {
            Some(current) => current.clone(),
            None => {
                let current = read(&key)?;
                latest.insert(key.clone(), current.clone());
                current
            }
        };
        let result = write.apply(&key, current, revision + 1);
        if let Ok(event) = &result {
            revision = event.revision();
            let live = (event.event_type != EventType::Delete).then(|| event.kv.clone());
            latest.insert(key, live);
        }
        results.push(result);
    }
    Ok(results)
}

/// Sends each caller its write's outcome, or `failed` to all when the batch failed.
pub(crate) fn answer(replies: Vec<Reply>, outcome: Outcome) {
    match outcome {
        Ok(results) => {
            for (reply, result) in replies.into_iter().zip(results) {
                let _ = reply.send(result);
            }
        }
        Err(failed) => {
            for reply in replies {
                let _ = reply.send(Err(failed.clone()));
            }
        }
    }
}

fn check_expected(current: &KeyValue, expected: Option<Revision>) -> Result<(), StorageError> {
    match expected {
        Some(expected) if expected != current.mod_revision => Err(StorageError::Conflict {
            key: current.key.clone(),
            expected,
            actual: current.mod_revision,
        }),
        _ => Ok(()),
    }
}

/// The revision a read asking for `requested` (0 = latest) is served at.
pub(crate) fn read_revision(
    requested: Revision,
    current: Revision,
    compacted: Revision,
) -> Result<Revision, StorageError> {
    if requested <= 0 {
        Ok(current)
    } else if requested > current {
        Err(StorageError::FutureRevision { requested, current })
    } else if requested < compacted {
        Err(StorageError::Compacted {
            requested,
            compacted,
        })
    } else {
        Ok(requested)
    }
}

/// Fails when a watch needing the events after `after` would miss compacted ones.
pub(crate) fn check_watch_start(after: Revision, compacted: Revision) -> Result<(), StorageError> {
    // After compact(R) the event at R is still kept, so `after = R - 1` is the oldest start.
    if after < compacted - 1 {
        Err(StorageError::Compacted {
            requested: after + 1,
            compacted,
        })
    } else {
        Ok(())
    }
}

/// The byte range of keys a list covers, compared bytewise: as SQLite compares BLOBs,
/// PostgreSQL `bytea`, and Rust `str`.
pub(crate) struct KeyRange {
    pub(crate) start: Vec<u8>,
    pub(crate) end: Vec<u8>,
}

impl KeyRange {
    /// The keys under `prefix`, after `start_after` when given.
    pub(crate) fn new(prefix: &str, start_after: Option<&str>) -> Self {
        // 0xFF never occurs in UTF-8, so `prefix + 0xFF` is above every key with the prefix
        // and below every other key above the prefix.
        let mut end = prefix.as_bytes().to_vec();
        end.push(0xFF);
        let range = Self {
            start: prefix.as_bytes().to_vec(),
            end,
        };
        match start_after {
            Some(key) if key >= prefix => range.after(key),
            _ => range,
        }
    }

    /// The same range, from just after `key`.
    pub(crate) fn after(&self, key: &str) -> Self {
        // `key + 0x00` is the smallest byte string greater than `key`.
        let mut start = key.as_bytes().to_vec();
        start.push(0);
        Self {
            start,
            end: self.end.clone(),
        }
    }
}

/// One row of a history log, as a backend that keeps one reads it back for a watch.
pub(crate) struct LogRow {
    pub(crate) revision: Revision,
    pub(crate) key: String,
    /// The value written; `None` for a delete, which stores none.
    pub(crate) value: Option<Bytes>,
    pub(crate) create_revision: Revision,
    /// The key's previous row (absent for a create).
    pub(crate) prev: Option<KeyValue>,
}

impl LogRow {
    /// The event the row records: a put carries its value; a delete carries the value it
    /// removed, at the delete's revision.
    pub(crate) fn into_event(self) -> Result<Event, StorageError> {
        let Some(value) = self.value else {
            let kv = self.prev.clone().ok_or_else(|| {
                StorageError::Internal(format!(
                    "delete at revision {} has no previous value",
                    self.revision
                ))
            })?;
            return Ok(Event {
                event_type: EventType::Delete,
                kv: KeyValue {
                    mod_revision: self.revision,
                    ..kv
                },
                prev_kv: self.prev,
            });
        };
        Ok(Event {
            event_type: EventType::Put,
            kv: KeyValue {
                key: self.key,
                value,
                create_revision: self.create_revision,
                mod_revision: self.revision,
            },
            prev_kv: self.prev,
        })
    }
}

/// Whether `compact(requested)` has work to do; asking for a future revision is an error.
pub(crate) fn compaction_needed(
    requested: Revision,
    current: Revision,
    compacted: Revision,
) -> Result<bool, StorageError> {
    if requested > current {
        return Err(StorageError::FutureRevision { requested, current });
    }
    Ok(requested > compacted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str) -> Bytes {
        Bytes::copy_from_slice(text.as_bytes())
    }

    fn stored(key: &str, text: &str, revision: Revision) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: value(text),
            create_revision: revision,
            mod_revision: revision,
        }
    }

    /// Each write is checked against what the writes before it left, as if each had a
    /// transaction of its own; those refused take no revision; a key is read once.
    #[test]
    fn writes_in_turn_see_those_before_them() {
        let writes = vec![
            ("/a".to_owned(), Write::Create(value("1"))),
            ("/a".to_owned(), Write::Create(value("2"))),
            ("/a".to_owned(), Write::Update(value("3"), 11)),
            ("/s".to_owned(), Write::Update(value("4"), 9)),
            ("/s".to_owned(), Write::Update(value("5"), 5)),
            ("/s".to_owned(), Write::Delete(Some(13))),
            ("/s".to_owned(), Write::Delete(None)),
            ("/s".to_owned(), Write::Create(value("6"))),
        ];
        let mut reads = Vec::new();
        let results = apply_in_turn(writes, 10, |key| {
            reads.push(key.to_owned());
            Ok::<_, ()>((key == "/s").then(|| stored("/s", "0", 5)))
        })
        .unwrap();
        assert_eq!(reads, ["/a", "/s"]);
        let outcomes: Vec<_> = results
            .iter()
            .map(|result| match result {
                Ok(event) => Ok((event.event_type, event.revision(), event.kv.create_revision)),
                Err(error) => Err(error.clone()),
            })
            .collect();
        assert_eq!(
            outcomes,
            vec![
                Ok((EventType::Put, 11, 11)),
                Err(StorageError::KeyExists("/a".into())),
                Ok((EventType::Put, 12, 11)),
                Err(StorageError::Conflict {
                    key: "/s".into(),
                    expected: 9,
                    actual: 5
                }),
                Ok((EventType::Put, 13, 5)),
                Ok((EventType::Delete, 14, 5)),
                Err(StorageError::NotFound("/s".into())),
                Ok((EventType::Put, 15, 15)),
            ]
        );
        let prev = results[4].as_ref().unwrap().prev_kv.as_ref().unwrap();
        assert_eq!((prev.value.clone(), prev.mod_revision), (value("0"), 5));
    }

    /// A batch stops at its bounds, leaves out the writes whose callers are gone, and hands
    /// back the write that did not fit.
    #[test]
    fn batches_keep_their_bounds() {
        let mut outcomes = Vec::new();
        let mut pending = |key: &str, size: usize| {
            let (pending, outcome) = Pending::new(key, Write::Create(Bytes::from(vec![0; size])));
            outcomes.push(outcome);
            pending
        };
        let mut queue: std::collections::VecDeque<_> = (0..BATCH_WRITES + 5)
            .map(|i| pending(&format!("/{i}"), 1))
            .collect();
        let first = queue.pop_front().unwrap();
        let (batch, rest) = take_batch(first, || queue.pop_front());
        assert_eq!(
            (batch.len(), rest.is_none(), queue.len()),
            (BATCH_WRITES, true, 5)
        );

        let large = pending("/large", BATCH_BYTES - 100);
        let mut queue =
            std::collections::VecDeque::from([pending("/gone", 1), pending("/next", 100)]);
        drop(outcomes.swap_remove(outcomes.len() - 2));
        let (batch, rest) = take_batch(large, || queue.pop_front());
        let keys: Vec<_> = batch.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["/large"], "the cancelled write is left out");
        assert_eq!(rest.map(|p| p.key), Some("/next".to_owned()));
    }
}
