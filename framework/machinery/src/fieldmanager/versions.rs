//! Managers whose fields are in other versions than the write's: their fields are compared
//! in their own version, as structured-merge-diff converts objects for each manager.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::managed::{Managed, ManagerId};
use super::path::Path;
use super::set::FieldSet;
use super::typed::{Comparison, compare};
use crate::patch::schema::At;

/// Converts an object to another version of its type, so that a manager's fields are
/// compared in the version it wrote them in (kube's `Converter` for structured-merge-diff).
///
/// Without one, every version is taken to have the same field paths. It is never asked for
/// the version an object is already in: that object is taken as it is, as kube's converter
/// returns it.
pub trait VersionConverter: Send + Sync {
    /// `object` as `api_version` (`group/version`); `None` when that version is not served
    /// any more, and then the entries in it are dropped, as kube drops them. `object` is in
    /// the version its own `apiVersion` names, which is not always the write's: the field
    /// manager also converts back to the write's version what it read in a manager's.
    fn convert(&self, object: &Value, api_version: &str) -> Option<Value>;
}

impl<F> VersionConverter for F
where
    F: Fn(&Value, &str) -> Option<Value> + Send + Sync,
{
    fn convert(&self, object: &Value, api_version: &str) -> Option<Value> {
        self(object, api_version)
    }
}

/// The changes of one write, in each version a manager recorded fields in.
pub(crate) struct Changes<'a> {
    old: &'a Value,
    new: &'a Value,
    root: At<'a>,
    converter: Option<&'a Arc<dyn VersionConverter>>,
    reset: &'a FieldSet,
    own_version: &'a str,
    by_version: BTreeMap<String, Option<Compared>>,
}

/// A comparison with what it added or modified, made once for every manager of its version.
pub(crate) struct Compared {
    pub(crate) comparison: Comparison,
    /// `added` ∪ `modified` when the write modified anything (else `added` is all of it).
    union: Option<FieldSet>,
}

impl Compared {
    fn new(comparison: Comparison) -> Self {
        let union =
            (!comparison.modified.is_empty()).then(|| comparison.added.union(&comparison.modified));
        Self { comparison, union }
    }

    /// `added` ∪ `modified`: what the write sets anew.
    pub(crate) fn changed(&self) -> &FieldSet {
        self.union.as_ref().unwrap_or(&self.comparison.added)
    }

    /// [`changed`](Self::changed), moved out.
    fn into_changed(self) -> FieldSet {
        self.union.unwrap_or(self.comparison.added)
    }
}

impl<'a> Changes<'a> {
    pub(crate) fn new(
        old: &'a Value,
        new: &'a Value,
        root: At<'a>,
        converter: Option<&'a Arc<dyn VersionConverter>>,
        reset: &'a FieldSet,
        own_version: &'a str,
    ) -> Self {
        let own = Compared::new(compare(Some(old), Some(new), root).without(reset));
        let by_version = BTreeMap::from([(own_version.to_owned(), Some(own))]);
        Self {
            old,
            new,
            root,
            converter,
            reset,
            own_version,
            by_version,
        }
    }

    /// The write's changes in its own version.
    pub(crate) fn own(&self) -> &Compared {
        self.by_version[self.own_version]
            .as_ref()
            .expect("own version compared")
    }

    /// What the write sets anew in its own version, moved out (the comparisons are done
    /// with).
    pub(crate) fn into_own_changed(mut self) -> FieldSet {
        self.by_version
            .remove(self.own_version)
            .flatten()
            .expect("own version compared")
            .into_changed()
    }

    /// The changes in `version`; `None` when it cannot be converted to.
    fn in_version(&mut self, version: &str) -> Option<&Compared> {
        let Some(converter) = self.converter else {
            return Some(self.own());
        };
        if !self.by_version.contains_key(version) {
            let compared = converter.convert(self.old, version).and_then(|old| {
                let new = converter.convert(self.new, version)?;
                let compared = compare(Some(&old), Some(&new), self.root).without(self.reset);
                Some(Compared::new(compared))
            });
            self.by_version.insert(version.to_owned(), compared);
        }
        self.by_version[version].as_ref()
    }

    /// Takes what this write added or changed from every manager but `except` (returning
    /// what they lose as conflicts) and what it removed from all of them; entries in a
    /// version gone, and entries left empty, are dropped.
    pub(crate) fn take_from(
        &mut self,
        managed: &mut Managed,
        except: Option<&ManagerId>,
    ) -> Vec<(ManagerId, Path)> {
        let mut conflicts = Vec::new();
        let mut gone = Vec::new();
        for (id, entry) in managed.iter_mut() {
            if Some(id) == except {
                continue;
            }
            let Some(changes) = self.in_version(&entry.api_version) else {
                gone.push(id.clone());
                continue;
            };
            let contested = entry.set.intersection(changes.changed());
            let removed = entry.set.intersection(&changes.comparison.removed);
            if contested.is_empty() && removed.is_empty() {
                // Untouched by this write: the entry stays as it was read.
                continue;
            }
            conflicts.extend(contested.paths().into_iter().map(|p| (id.clone(), p)));
            let left = entry.set.difference(&contested).difference(&removed);
            entry.set_fields(left);
        }
        for id in gone {
            managed.remove(&id);
        }
        managed.retain(|_, e| !e.set.is_empty());
        conflicts
    }
}
