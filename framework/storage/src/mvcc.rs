//! The revision rules shared by the backends that keep their own history (memory, sqlite,
//! postgres).
//!
//! Each keeps its own history but all must agree on what a write may do and which revisions a
//! read or watch may ask for, so that the conformance suite sees one behaviour.

use bytes::Bytes;

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
