//! Field management: server-side apply and `metadata.managedFields`, as kube-apiserver does
//! them with sigs.k8s.io/structured-merge-diff, written for JSON objects.
//!
//! A [`FieldManager`] holds one type's compiled schema (the [`PatchSchema`] strategic merge
//! patch also uses, so one declaration of a field's list semantics serves both). Every write
//! that is not an apply goes through [`FieldManager::update`], which records in the new
//! object's `managedFields` what the writer changed; an apply goes through
//! [`FieldManager::apply`], which merges the configuration into the live object, removes
//! what the applier stopped applying, and refuses (409) to take fields other managers set
//! to other values unless forced.
//!
//! ```
//! use extension_apiserver_machinery::fieldmanager::{FieldManager, FieldOwner};
//! use extension_apiserver_machinery::patch::PatchSchema;
//! use serde_json::json;
//!
//! let fm = FieldManager::new(PatchSchema::empty());
//! let owner = |m| FieldOwner::new(m, "wardle.example.com/v1alpha1", "2024-05-01T10:00:00Z");
//! let config = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
//!                     "metadata": {"name": "f"}, "spec": {"reference": "a"}});
//! let live = fm.apply(None, &config, &owner("kubectl"), false).unwrap();
//! assert_eq!(live["metadata"]["managedFields"][0]["manager"], "kubectl");
//!
//! let other = json!({"apiVersion": "wardle.example.com/v1alpha1", "kind": "Flunder",
//!                    "metadata": {"name": "f"}, "spec": {"reference": "b"}});
//! let refused = fm.apply(Some(&live), &other, &owner("kube-rs"), false).unwrap_err();
//! assert_eq!(refused.code(), 409);
//! assert_eq!(refused.message(),
//!            "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.reference");
//! ```
//!
//! Where kube-apiserver calls its field manager, and so where a store calls this one:
//! - create: `update(None, new)` on the decoded object, before admission and the strategy;
//! - update and patch: `update(Some(live), new)` inside the retry loop, on the object after
//!   the patch and before the strategy's `prepare_for_update` (so a retry recomputes it);
//! - apply: `apply(live, config)` as the patch step (`None` when it creates), then the same
//!   path as a patch; `force` from the request, the manager from `fieldManager` (required
//!   for apply) or [`manager_from_user_agent`] for other verbs;
//! - subresources: the owner's [`FieldOwner::subresource`], and the fields the strategy
//!   resets as [`FieldOwner::reset_fields`].

mod conflict;
mod managed;
mod path;
mod scale;
mod set;
mod typed;
mod versions;

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::patch::PatchSchema;

pub use conflict::{ApplyConflicts, Conflict};
pub use path::{Path, PathElement};
pub use scale::ScaleHandler;
pub use set::{FieldSet, FieldsV1Error};
pub use versions::VersionConverter;

use managed::{Entry, Managed, ManagerId, Operation};
use typed::{atomics, compare, merge, remove_unkept, to_field_set};
use versions::Changes;

/// A MutatingAdmissionPolicy's apply configuration `config` merged into `object` as kube's
/// `ApplyStructuredMergeDiff` does: structured-merge-diff's merge by `schema` (maps and
/// structs member by member, list maps by key, sets by value), without field ownership. A
/// configuration that sets an atomic list, map or struct is refused, as kube refuses it, in
/// kube's words (`invalid ApplyConfiguration: may not mutate atomic arrays, maps or
/// structs: .spec.tags`).
///
/// ```
/// use extension_apiserver_machinery::fieldmanager::merge_apply_configuration;
/// use extension_apiserver_machinery::patch::PatchSchema;
/// use serde_json::json;
///
/// let live = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"n": 1}});
/// let config = json!({"metadata": {"labels": {"y": "2"}}});
/// let merged = merge_apply_configuration(&PatchSchema::empty(), &live, &config).unwrap();
/// assert_eq!(merged["metadata"]["labels"], json!({"x": "1", "y": "2"}));
/// assert_eq!(merged["spec"]["n"], 1);
/// ```
pub fn merge_apply_configuration(
    schema: &PatchSchema,
    object: &Value,
    config: &Value,
) -> std::result::Result<Value, String> {
    let mut found = Vec::new();
    atomics(config, schema.root(), &mut String::new(), &mut found);
    if !found.is_empty() {
        return Err(format!(
            "invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: {}",
            found.join(", ")
        ));
    }
    Ok(merge(Some(object), config, schema.root()))
}

/// The annotation client-side `kubectl apply` keeps its last configuration in.
pub const LAST_APPLIED_CONFIG_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The manager whose server-side applies take over client-side apply's fields (kube's
/// `lastAppliedManager` and `lastAppliedUpdater` act for it alone).
const KUBECTL: &str = "kubectl";

/// kube's `FieldManagerMaxLength`: the longest manager name, in bytes.
pub const FIELD_MANAGER_MAX_LENGTH: usize = 128;

/// Who writes, through which version and subresource, and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldOwner {
    /// The manager: the `fieldManager` parameter, else [`manager_from_user_agent`].
    pub manager: String,
    /// The `apiVersion` of the request (`group/version`), which the fields are in.
    pub api_version: String,
    /// `status`, `scale`, … for a subresource write.
    pub subresource: Option<String>,
    /// The write's time, RFC 3339 in UTC to the second (`2024-05-01T10:00:00Z`).
    pub time: String,
    /// Fields the strategy resets on this path, which no entry records and no apply
    /// conflicts on (kube's `GetResetFields`; for a custom resource `status` on the main
    /// resource and `spec` on `status`).
    pub reset_fields: FieldSet,
}

impl FieldOwner {
    /// A write of the main resource.
    pub fn new(manager: &str, api_version: &str, time: &str) -> Self {
        Self {
            manager: manager.to_owned(),
            api_version: api_version.to_owned(),
            subresource: None,
            time: time.to_owned(),
            reset_fields: FieldSet::new(),
        }
    }

    /// The same write, with the fields its strategy resets.
    pub fn reset_fields(mut self, fields: FieldSet) -> Self {
        self.reset_fields = fields;
        self
    }

    /// The same write through a subresource (`status`, `scale`).
    pub fn subresource(mut self, subresource: &str) -> Self {
        self.subresource = Some(subresource.to_owned()).filter(|s| !s.is_empty());
        self
    }

    fn id(&self, operation: Operation) -> ManagerId {
        let sub = self.subresource.as_deref();
        ManagerId::new(&self.manager, operation, &self.api_version, sub)
    }
}

/// The fields kube never records as managed (its `stripMetaManager`).
fn strip_set() -> &'static FieldSet {
    static STRIPPED: std::sync::LazyLock<FieldSet> = std::sync::LazyLock::new(stripped);
    &STRIPPED
}

fn stripped() -> FieldSet {
    let mut set = FieldSet::new();
    let f = |s: &str| PathElement::Field(s.to_owned());
    set.insert(&[f("apiVersion")]);
    set.insert(&[f("kind")]);
    set.insert(&[f("metadata")]);
    for field in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        set.insert(&[f("metadata"), f(field)]);
    }
    set
}

/// Field management for one resource type.
#[derive(Clone, Default)]
pub struct FieldManager {
    schema: Arc<PatchSchema>,
    converter: Option<Arc<dyn VersionConverter>>,
}

impl std::fmt::Debug for FieldManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FieldManager")
            .field("schema", &self.schema)
            .field("converter", &self.converter.is_some())
            .finish()
    }
}

impl FieldManager {
    /// Field management by this schema (the type's [`PatchSchema`], shared with patch:
    /// `RestStorage::patch_schema` will do).
    pub fn new(schema: impl Into<Arc<PatchSchema>>) -> Self {
        Self {
            schema: schema.into(),
            converter: None,
        }
    }

    /// Compares the fields of managers that wrote through other versions in their version,
    /// converted by `converter` (its schema is taken to be this one's).
    pub fn with_converter(mut self, converter: Arc<dyn VersionConverter>) -> Self {
        self.converter = Some(converter);
        self
    }

    /// Field management by `T`'s JSON schema.
    pub fn for_type<T: schemars::JsonSchema>() -> Self {
        Self::new(PatchSchema::for_type::<T>())
    }

    /// The fields an object (an applied configuration) sets, as SMD's `ToFieldSet`, less
    /// the fields kube never records (`apiVersion`, `kind`, `metadata.name`, …).
    pub fn field_set(&self, object: &Value) -> FieldSet {
        to_field_set(object, self.schema.root()).difference(strip_set())
    }

    /// Records a create, update or patch (`operation: Update`) in `new`'s `managedFields`:
    /// the writer's entry for its version and subresource gains what it added or changed,
    /// every manager loses what was removed, and the others lose what the writer changed.
    ///
    /// `managedFields` the client sent in `new` are taken as given when they are valid,
    /// reset when they are `[]` or `[{}]`, and replaced by `live`'s otherwise or on a
    /// subresource, as kube does. `live` is `None` on create.
    pub fn update(&self, live: Option<&Value>, new: &mut Value, owner: &FieldOwner) {
        let mut managed = self.managed_for_update(live, new, owner.subresource.is_some());
        // The walks below pass `metadata.managedFields` by: `live` is compared as it is.
        let empty = Value::Object(Map::new());
        let live = live.unwrap_or(&empty);
        let root = self.schema.root();
        let (reset, version) = (&owner.reset_fields, owner.api_version.as_str());
        // Unknown fields (warned about or refused by the typed decode later) are never
        // owned: compared on a pruned copy, made only when there are any.
        let pruned = typed::has_unknown(new, root).then(|| {
            let mut pruned = new.clone();
            typed::prune_unknown(&mut pruned, root);
            pruned
        });
        let seen = pruned.as_ref().unwrap_or(new);
        let mut changes = Changes::new(live, seen, root, self.converter.as_ref(), reset, version);
        changes.take_from(&mut managed, None);
        let mut mine = changes.into_own_changed();
        mine.remove_all(strip_set());
        if !mine.is_empty() {
            let id = owner.id(Operation::Update);
            let set = match managed.remove(&id) {
                Some(previous) => mine.union(&previous.set),
                None => mine,
            };
            let entry = Entry::new(set, owner.api_version.clone(), Some(owner.time.clone()));
            managed.insert(id, entry);
        }
        managed::cap_update_managers(&mut managed, managed::MAX_UPDATE_MANAGERS);
        set_managed_fields(new, managed);
    }

    /// kube's `decodeLiveOrNew`: the entries the update starts from, taken out of `new`.
    /// Entries that are the stored object's own (sent back as read, or read from `live`)
    /// keep their JSON, written back unless the write changes them.
    fn managed_for_update(
        &self,
        live: Option<&Value>,
        new: &mut Value,
        subresource: bool,
    ) -> Managed {
        let sent = take_managed_fields(new);
        let stored = live.and_then(managed_fields);
        let from_live = || managed::decode_stored(stored.cloned().unwrap_or(Value::Null));
        if subresource {
            return from_live().unwrap_or_default();
        }
        if managed::is_reset(sent.as_ref()) {
            return Managed::new();
        }
        let decoded = match sent {
            // What a patch or a read-modify-write carries over: the stored entries.
            Some(sent) if Some(&sent) == stored => managed::decode_stored(sent),
            sent => managed::decode(sent.as_ref()),
        };
        match decoded {
            Ok(m) if !m.is_empty() => m,
            _ => from_live().unwrap_or_default(),
        }
    }

    /// Server-side apply of `config` onto `live` (`None`: the object is created): the
    /// merged object with its `managedFields`, or 409 with every conflict. `force` takes
    /// contested fields from their managers.
    ///
    /// The configuration must be of `owner`'s version and of `live`'s kind, and carry no
    /// `managedFields` (400 otherwise, in kube's words).
    ///
    /// Like kube, an apply by `kubectl` onto an object `kubectl apply` last wrote
    /// client-side (with the `last-applied-configuration` annotation) does not conflict on
    /// the fields that annotation set and the object still holds, and keeps the annotation
    /// up to date.
    pub fn apply(
        &self,
        live: Option<&Value>,
        config: &Value,
        owner: &FieldOwner,
        force: bool,
    ) -> Result<Value> {
        let kind = live.and_then(|l| l.get("kind")).and_then(Value::as_str);
        check_config(config, &owner.api_version, kind)?;
        let stored = live.and_then(managed_fields).cloned();
        let managed = managed::decode_stored(stored.unwrap_or(Value::Null))
            .map_err(|e| Error::internal(format!("failed to decode managed fields: {e}")))?;
        // The walks pass `metadata.managedFields` by, and the merged object's are replaced
        // at the end: `live` is merged into as it is.
        let empty = Value::Object(Map::new());
        let live = live.unwrap_or(&empty);
        let id = owner.id(Operation::Apply);
        // Kept, without the stored JSON of the entries, for the one retry after conflicts
        // (by `kubectl`, unforced): no copy for the applies that cannot retry.
        let retries = !force && owner.manager == KUBECTL;
        let kept = retries.then(|| managed::without_encoded(&managed));
        let (mut object, mut managed) =
            match self.merge_apply(live, config, managed, &id, owner, force) {
                Ok(done) => done,
                Err(conflicts) => self.after_conflicts(live, config, kept, owner, conflicts)?,
            };
        if let Some(entry) = managed.get_mut(&id) {
            entry.set_fields(entry.set.difference(strip_set()));
            // As kube: the time moves only when the object changed (a first apply that
            // changes nothing has none).
            if !same_but_managed_fields(&object, live) {
                entry.set_time(Some(owner.time.clone()));
            }
        }
        managed.retain(|_, e| !e.set.is_empty());
        if owner.manager == KUBECTL {
            update_last_applied(&mut object, config);
        }
        set_managed_fields(&mut object, managed);
        Ok(object)
    }

    /// kube's `lastAppliedManager`: conflicts of `kubectl` on fields its client-side
    /// apply set are no conflicts; the apply is then forced, from the entries `kept` before
    /// the first attempt (`None` for an applier other than `kubectl`).
    fn after_conflicts(
        &self,
        live: &Value,
        config: &Value,
        kept: Option<Managed>,
        owner: &FieldOwner,
        conflicts: Vec<(ManagerId, Path)>,
    ) -> Result<(Value, Managed)> {
        let retry = kept.and_then(|managed| {
            let allowed = self.client_side_applied(live, &owner.api_version)?;
            Some((allowed, managed))
        });
        let Some((allowed, managed)) = retry else {
            return Err(into_conflicts(conflicts).into());
        };
        let left: Vec<_> = conflicts
            .into_iter()
            .filter(|(_, p)| !allowed.has(&p.0))
            .collect();
        if !left.is_empty() {
            return Err(into_conflicts(left).into());
        }
        let id = owner.id(Operation::Apply);
        self.merge_apply(live, config, managed, &id, owner, true)
            .map_err(|c| into_conflicts(c).into())
    }

    /// The fields `live`'s last-applied annotation sets and `live` still holds as set.
    fn client_side_applied(&self, live: &Value, api_version: &str) -> Option<FieldSet> {
        let text = live
            .pointer("/metadata/annotations")?
            .get(LAST_APPLIED_CONFIG_ANNOTATION)?
            .as_str()
            .filter(|t| !t.is_empty())?;
        let last: Value = serde_json::from_str(text).ok()?;
        if last.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
            return None;
        }
        let root = self.schema.root();
        let differ = compare(Some(&last), Some(live), root);
        let set = to_field_set(&last, root);
        Some(
            set.difference(&differ.modified)
                .difference(&differ.added)
                .difference(&differ.removed),
        )
    }

    /// SMD's `Updater.Apply`: merge, record the applied set, prune what the applier no
    /// longer applies, then take changed fields from the other managers (or list them as
    /// conflicts).
    fn merge_apply(
        &self,
        live: &Value,
        config: &Value,
        mut managed: Managed,
        id: &ManagerId,
        owner: &FieldOwner,
        force: bool,
    ) -> std::result::Result<(Value, Managed), Vec<(ManagerId, Path)>> {
        let root = self.schema.root();
        let merged = merge(Some(live), config, root);
        let applied = to_field_set(config, root).recursive_difference(&owner.reset_fields);
        let previous = managed.remove(id);
        let object = match &previous {
            Some(last) => self.prune(merged, last, &managed, &applied, owner),
            None => merged,
        };
        let entry = Entry::new(
            applied,
            owner.api_version.clone(),
            previous.and_then(|p| p.time),
        );
        let (reset, version) = (&owner.reset_fields, owner.api_version.as_str());
        let mut changes =
            Changes::new(live, &object, root, self.converter.as_ref(), reset, version);
        let conflicts = changes.take_from(&mut managed, None);
        if !force && !conflicts.is_empty() {
            return Err(conflicts);
        }
        managed.insert(id.clone(), entry);
        managed.retain(|_, e| !e.set.is_empty());
        Ok((object, managed))
    }
}

impl FieldManager {
    /// SMD's `prune`: removes from `merged` what the applier applied last time (`last`)
    /// and no longer applies, unless a manager (or the new configuration) keeps it. The
    /// removal happens in `last`'s version; then, version by version, what the managers
    /// of that version keep is put back (`addBackOwnedItems`).
    fn prune(
        &self,
        merged: Value,
        last: &Entry,
        others: &Managed,
        applied: &FieldSet,
        owner: &FieldOwner,
    ) -> Value {
        let root = self.schema.root();
        let own = owner.api_version.as_str();
        let keep_at = |version: &str| {
            let same = |v: &str| self.converter.is_none() || v == version;
            let keep = if same(own) {
                strip_set().union(applied)
            } else {
                strip_set().clone()
            };
            others
                .values()
                .filter(|e| same(&e.api_version))
                .fold(keep, |k, e| k.union(&e.set))
        };
        let Some(converter) = &self.converter else {
            let mut object = merged;
            remove_unkept(&mut object, &last.set, &keep_at(own), root);
            return object;
        };
        let converter = converter.as_ref();
        let last_version = last.api_version.as_str();
        let pruned = in_version(converter, &merged, own, last_version).and_then(|in_last| {
            let mut in_last = in_last.into_owned();
            remove_unkept(&mut in_last, &last.set, &keep_at(last_version), root);
            into_version(converter, in_last, last_version, own)
        });
        let Some(mut pruned) = pruned else {
            return merged;
        };
        let mut versions: Vec<&str> = others.values().map(|e| e.api_version.as_str()).collect();
        versions.push(own);
        versions.sort_unstable();
        versions.dedup();
        // The merged object is read once per version: the last reading takes it.
        let (mut merged, readings) = (Some(merged), versions.len());
        for (reading, version) in versions.into_iter().enumerate() {
            let all = match reading + 1 == readings {
                true => merged
                    .take()
                    .and_then(|m| into_version(converter, m, own, version)),
                false => merged
                    .as_ref()
                    .and_then(|m| in_version(converter, m, own, version))
                    .map(Cow::into_owned),
            };
            let back = all.and_then(|mut all| {
                let still = to_field_set(&*in_version(converter, &pruned, own, version)?, root);
                let removed = to_field_set(&all, root).difference(&still);
                remove_unkept(&mut all, &removed, &keep_at(version).union(&still), root);
                into_version(converter, all, version, own)
            });
            if let Some(back) = back {
                pruned = back;
            }
        }
        pruned
    }
}

/// `object`, which is in version `from`, as version `to`: as it is when they are the same,
/// as kube's converter returns it (a conversion to the object's own version would be a
/// copy of it, or a round trip through the storage version).
fn in_version<'v>(
    converter: &dyn VersionConverter,
    object: &'v Value,
    from: &str,
    to: &str,
) -> Option<Cow<'v, Value>> {
    match from == to {
        true => Some(Cow::Borrowed(object)),
        false => converter.convert(object, to).map(Cow::Owned),
    }
}

/// [`in_version`] of an object moved in.
fn into_version(
    converter: &dyn VersionConverter,
    object: Value,
    from: &str,
    to: &str,
) -> Option<Value> {
    match from == to {
        true => Some(object),
        false => converter.convert(&object, to),
    }
}

fn into_conflicts(conflicts: Vec<(ManagerId, Path)>) -> ApplyConflicts {
    let list = conflicts
        .into_iter()
        .map(|(id, path)| Conflict {
            manager: id.manager,
            operation: id.operation.as_str().to_owned(),
            api_version: id.api_version,
            subresource: id.subresource,
            path,
        })
        .collect();
    ApplyConflicts::new(list)
}

/// kube refuses an apply of another kind or version (its `versionCheckManager`, which
/// runs first) or that carries `managedFields`.
fn check_config(config: &Value, api_version: &str, kind: Option<&str>) -> Result<()> {
    if !config.is_object() {
        return Err(Error::bad_request("apply patch must be an object"));
    }
    let text = |k: &str| config.get(k).and_then(Value::as_str).unwrap_or_default();
    let (sent_version, sent_kind) = (text("apiVersion"), text("kind"));
    if sent_version != api_version || kind.is_some_and(|k| k != sent_kind) || sent_kind.is_empty() {
        // Go prints a GroupVersionKind as `group/version, Kind=kind`.
        let (group, version) = sent_version.rsplit_once('/').unwrap_or(("", sent_version));
        return Err(Error::bad_request(format!(
            "invalid object type: {group}/{version}, Kind={sent_kind}"
        )));
    }
    if managed_fields(config).is_some_and(|m| !m.is_null()) {
        return Err(Error::bad_request("metadata.managedFields must be nil"));
    }
    Ok(())
}

/// kube's `lastAppliedUpdater`: when `kubectl` applies an object that carries the
/// client-side annotation, the annotation becomes this configuration (without itself), so
/// a later client-side apply sees what was applied last.
fn update_last_applied(object: &mut Value, config: &Value) {
    let Some(annotations) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let present = annotations
        .get(LAST_APPLIED_CONFIG_ANNOTATION)
        .and_then(Value::as_str)
        .is_some_and(|t| !t.is_empty());
    if !present {
        return;
    }
    let mut config = config.clone();
    if let Some(own) = config
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        own.remove(LAST_APPLIED_CONFIG_ANNOTATION);
    }
    // Go's encoder ends the document with a newline, and kubectl's annotation has it too.
    let text = format!("{config}\n");
    annotations.insert(LAST_APPLIED_CONFIG_ANNOTATION.to_owned(), text.into());
}

fn managed_fields(object: &Value) -> Option<&Value> {
    object.get("metadata")?.get("managedFields")
}

fn take_managed_fields(object: &mut Value) -> Option<Value> {
    object
        .get_mut("metadata")?
        .as_object_mut()?
        .remove("managedFields")
}

/// Whether two objects are equal but for their `metadata.managedFields`.
fn same_but_managed_fields(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let members = |m: &'_ Map<String, Value>| m.len();
    if members(a) != members(b) {
        return false;
    }
    a.iter()
        .all(|(key, value)| match (key.as_str(), b.get(key)) {
            ("metadata", Some(other)) => match (value.as_object(), other.as_object()) {
                (Some(ma), Some(mb)) => {
                    let rest = |m: &'_ Map<String, Value>| {
                        m.iter()
                            .filter(|(k, _)| k.as_str() != "managedFields")
                            .count()
                    };
                    rest(ma) == rest(mb)
                        && ma
                            .iter()
                            .filter(|(k, _)| k.as_str() != "managedFields")
                            .all(|(k, v)| mb.get(k) == Some(v))
                }
                _ => value == other,
            },
            (_, Some(other)) => value == other,
            (_, None) => false,
        })
}

fn set_managed_fields(object: &mut Value, managed: Managed) {
    let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    match managed::encode(managed) {
        Some(list) => meta.insert("managedFields".into(), list),
        None => meta.remove("managedFields"),
    };
}

/// The manager of a write that names none: the `User-Agent` up to its first `/`, without
/// unprintable characters, cut to [`FIELD_MANAGER_MAX_LENGTH`] bytes (kube's
/// `prefixFromUserAgent`).
///
/// ```
/// use extension_apiserver_machinery::fieldmanager::manager_from_user_agent;
/// assert_eq!(manager_from_user_agent("kubectl/v1.33.0 (linux/amd64) kubernetes/abc"), "kubectl");
/// ```
pub fn manager_from_user_agent(user_agent: &str) -> String {
    let prefix = user_agent.split('/').next().unwrap_or_default();
    let mut out = String::new();
    for c in prefix.chars().filter(|c| is_printable(*c)) {
        if out.len() + c.len_utf8() > FIELD_MANAGER_MAX_LENGTH {
            break;
        }
        out.push(c);
    }
    out
}

/// Go's `unicode.IsPrint`: graphic characters and the ASCII space.
fn is_printable(c: char) -> bool {
    c == ' ' || !(c.is_control() || c.is_whitespace())
}

#[cfg(test)]
mod tests;
