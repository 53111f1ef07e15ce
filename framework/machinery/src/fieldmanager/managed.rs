//! `metadata.managedFields` read into sets by manager, and written back as kube writes it
//! (k8s.io/apimachinery `managedfields/internal/managedfields.go`, `capmanagers.go`).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::set::FieldSet;

/// `Apply` or `Update`, in kube's sort order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Operation {
    Apply,
    Update,
}

impl Operation {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Apply => "Apply",
            Self::Update => "Update",
        }
    }
}

/// Who an entry belongs to, as kube's manager identifier: an applier is one entry whatever
/// version it used; an updater is one entry per version.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ManagerId {
    pub manager: String,
    pub operation: Operation,
    /// Only for `Update`.
    pub api_version: Option<String>,
    pub subresource: Option<String>,
}

impl ManagerId {
    pub(crate) fn new(
        manager: &str,
        operation: Operation,
        api_version: &str,
        subresource: Option<&str>,
    ) -> Self {
        Self {
            manager: manager.to_owned(),
            operation,
            api_version: (operation == Operation::Update).then(|| api_version.to_owned()),
            subresource: subresource.filter(|s| !s.is_empty()).map(str::to_owned),
        }
    }

    /// kube's identifier string (`BuildManagerIdentifier`: the entry's JSON without
    /// fields, time and an applier's version), which breaks ties when capping.
    fn identifier(&self) -> String {
        let mut out = Map::new();
        let mut put = |k: &str, v: &str| {
            if !v.is_empty() {
                out.insert(k.to_owned(), v.into());
            }
        };
        put("manager", &self.manager);
        put("operation", self.operation.as_str());
        put(
            "apiVersion",
            self.api_version.as_deref().unwrap_or_default(),
        );
        put(
            "subresource",
            self.subresource.as_deref().unwrap_or_default(),
        );
        // Go writes the members in struct order.
        let order = ["manager", "operation", "apiVersion", "subresource"];
        let members: Vec<String> = order
            .iter()
            .filter_map(|k| Some(format!("{}:{}", json!(k), out.get(*k)?)))
            .collect();
        format!("{{{}}}", members.join(","))
    }
}

/// One manager's fields, the version they are in and when it last changed them.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub set: FieldSet,
    pub api_version: String,
    pub time: Option<String>,
    /// The entry as the stored object holds it, while nothing above has changed: written
    /// back as it is instead of encoded again (a write changes one manager's entry, the
    /// others stay). Cleared by every change made through [`Entry::set_fields`] and
    /// [`Entry::set_time`]; only entries this crate encoded (kube's form) keep it.
    encoded: Option<Value>,
}

/// Entries are equal by what they say, whichever way they were read.
impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        (&self.set, &self.api_version, &self.time) == (&other.set, &other.api_version, &other.time)
    }
}

impl Eq for Entry {}

impl Entry {
    pub(crate) fn new(set: FieldSet, api_version: String, time: Option<String>) -> Self {
        Self {
            set,
            api_version,
            time,
            encoded: None,
        }
    }

    /// Replaces the fields (the entry is encoded anew).
    pub(crate) fn set_fields(&mut self, set: FieldSet) {
        self.set = set;
        self.encoded = None;
    }

    /// Replaces the time (the entry is encoded anew).
    pub(crate) fn set_time(&mut self, time: Option<String>) {
        self.time = time;
        self.encoded = None;
    }
}

/// Every manager's entry.
pub(crate) type Managed = BTreeMap<ManagerId, Entry>;

/// Reads `managedFields` (an absent or null list is empty), refusing entries kube refuses.
pub(crate) fn decode(entries: Option<&Value>) -> Result<Managed, String> {
    let list = match entries {
        None | Some(Value::Null) => return Ok(Managed::new()),
        Some(Value::Array(list)) => list,
        Some(_) => return Err("managedFields must be a list".into()),
    };
    list.iter()
        .enumerate()
        .map(|(i, e)| decode_entry(i, e))
        .collect()
}

/// [`decode`] of the `managedFields` of a stored object (which this crate encoded, in kube's
/// form), moved in: each entry keeps its JSON, to be written back as it is while it does not
/// change.
pub(crate) fn decode_stored(entries: Value) -> Result<Managed, String> {
    let list = match entries {
        Value::Null => return Ok(Managed::new()),
        Value::Array(list) => list,
        _ => return Err("managedFields must be a list".into()),
    };
    list.into_iter()
        .enumerate()
        .map(|(i, e)| {
            let (id, mut entry) = decode_entry(i, &e)?;
            entry.encoded = Some(e);
            Ok((id, entry))
        })
        .collect()
}

fn decode_entry(i: usize, entry: &Value) -> Result<(ManagerId, Entry), String> {
    let text = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or_default();
    let operation = match text("operation") {
        "Apply" => Operation::Apply,
        "Update" => Operation::Update,
        _ => return Err("operation must be `Apply` or `Update`".into()),
    };
    if text("apiVersion").is_empty() {
        return Err("apiVersion must not be empty".into());
    }
    match text("fieldsType") {
        "FieldsV1" => {}
        "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
        other => {
            return Err(format!(
                "invalid fieldsType {other:?} in managed fields entry {i}"
            ));
        }
    }
    let set = match entry.get("fieldsV1") {
        None | Some(Value::Null) => FieldSet::new(),
        Some(fields) => FieldSet::from_fields_v1(fields).map_err(|e| e.to_string())?,
    };
    let subresource = entry.get("subresource").and_then(Value::as_str);
    let id = ManagerId::new(text("manager"), operation, text("apiVersion"), subresource);
    let time = entry.get("time").and_then(Value::as_str).map(str::to_owned);
    let api_version = text("apiVersion").to_owned();
    Ok((id, Entry::new(set, api_version, time)))
}

/// A copy of `managed` whose entries will all be encoded anew.
pub(crate) fn without_encoded(managed: &Managed) -> Managed {
    let entry = |e: &Entry| Entry::new(e.set.clone(), e.api_version.clone(), e.time.clone());
    managed
        .iter()
        .map(|(id, e)| (id.clone(), entry(e)))
        .collect()
}

/// Whether a client's `managedFields` asks to clear them: an empty list or one empty entry.
pub(crate) fn is_reset(entries: Option<&Value>) -> bool {
    match entries.and_then(Value::as_array).map(Vec::as_slice) {
        Some([]) => true,
        Some([only]) => only.as_object().is_some_and(Map::is_empty),
        _ => false,
    }
}

/// `managedFields` as kube writes them: by operation, time, manager, version, subresource;
/// `None` when no manager is left (kube then omits the field). An entry read from the stored
/// object and not changed since is written back as it was read.
pub(crate) fn encode(managed: Managed) -> Option<Value> {
    if managed.is_empty() {
        return None;
    }
    let mut entries: Vec<(ManagerId, Entry)> = managed.into_iter().collect();
    entries.sort_by(|(a, ae), (b, be)| {
        fn time(e: &Entry) -> &str {
            e.time.as_deref().unwrap_or_default()
        }
        (
            a.operation,
            time(ae),
            &a.manager,
            &ae.api_version,
            &a.subresource,
        )
            .cmp(&(
                b.operation,
                time(be),
                &b.manager,
                &be.api_version,
                &b.subresource,
            ))
    });
    let list = entries
        .into_iter()
        .map(|(id, e)| match e.encoded {
            Some(encoded) => encoded,
            None => encode_entry(&id, &e),
        })
        .collect();
    Some(Value::Array(list))
}

fn encode_entry(id: &ManagerId, entry: &Entry) -> Value {
    let mut out = Map::new();
    if !id.manager.is_empty() {
        out.insert("manager".into(), id.manager.clone().into());
    }
    out.insert("operation".into(), id.operation.as_str().into());
    out.insert("apiVersion".into(), entry.api_version.clone().into());
    if let Some(time) = &entry.time {
        out.insert("time".into(), time.clone().into());
    }
    out.insert("fieldsType".into(), "FieldsV1".into());
    out.insert("fieldsV1".into(), entry.set.to_fields_v1());
    if let Some(sub) = &id.subresource {
        out.insert("subresource".into(), sub.clone().into());
    }
    Value::Object(out)
}

/// kube's cap on `Update` entries (`DefaultMaxUpdateManagers`).
pub(crate) const MAX_UPDATE_MANAGERS: usize = 10;

/// The bucket the oldest updates merge into.
const ANCIENT_CHANGES: &str = "ancient-changes";

/// Merges the oldest `Update` entries into one `ancient-changes` entry per version until at
/// most `max` remain, as kube's `capUpdateManagers` does after every update.
pub(crate) fn cap_update_managers(managed: &mut Managed, max: usize) {
    let mut updaters: Vec<ManagerId> = managed
        .keys()
        .filter(|id| id.operation == Operation::Update)
        .cloned()
        .collect();
    if updaters.len() <= max {
        return;
    }
    let seconds = |id: &ManagerId| managed[id].time.clone().unwrap_or_default();
    updaters.sort_by_cached_key(|id| (seconds(id), id.identifier()));
    let mut first_of_version: BTreeMap<String, ManagerId> = BTreeMap::new();
    let mut length = updaters.len();
    for id in updaters {
        if length <= max {
            break;
        }
        let entry = managed[&id].clone();
        let version = entry.api_version.clone();
        let Some(first) = first_of_version.get(&version) else {
            first_of_version.insert(version, id);
            continue;
        };
        let bucket = ManagerId::new(ANCIENT_CHANGES, Operation::Update, &version, None);
        if !managed.contains_key(&bucket) {
            let moved = managed.remove(first).expect("first entry of its version");
            managed.insert(bucket.clone(), moved);
        }
        let into = managed.get_mut(&bucket).expect("bucket just made");
        into.set_fields(entry.set.union(&into.set));
        into.api_version = entry.api_version;
        into.set_time(entry.time);
        managed.remove(&id);
        length -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(manager: &str, op: &str, time: &str) -> Value {
        json!({"manager": manager, "operation": op, "apiVersion": "wardle.example.com/v1alpha1",
               "time": time, "fieldsType": "FieldsV1",
               "fieldsV1": {format!("f:{manager}"): {}}})
    }

    #[test]
    fn decodes_and_encodes_in_kube_order() {
        let list = json!([
            entry("b", "Update", "2024-01-01T00:00:02Z"),
            entry("a", "Update", "2024-01-01T00:00:02Z"),
            entry("z", "Apply", "2024-01-01T00:00:09Z"),
            {"manager": "s", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:status": {}}, "subresource": "status", "time": "2024-01-01T00:00:01Z"}
        ]);
        let managed = decode(Some(&list)).unwrap();
        let out = encode(managed.clone()).unwrap();
        let order: Vec<&str> = out
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(order, ["z", "s", "a", "b"]);
        assert_eq!(out[1]["subresource"], "status");
        assert_eq!(decode(Some(&out)).unwrap(), managed);
    }

    #[test]
    fn refuses_invalid_entries() {
        for bad in [
            json!([{"operation": "Patch", "apiVersion": "v1", "fieldsType": "FieldsV1"}]),
            json!([{"operation": "Update", "fieldsType": "FieldsV1"}]),
            json!([{"operation": "Update", "apiVersion": "v1"}]),
            json!([{"operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV2"}]),
            json!([{"operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"x": {}}}]),
        ] {
            assert!(decode(Some(&bad)).is_err(), "{bad}");
        }
        assert!(decode(None).unwrap().is_empty());
    }

    #[test]
    fn resets_are_an_empty_list_or_one_empty_entry() {
        assert!(is_reset(Some(&json!([]))));
        assert!(is_reset(Some(&json!([{}]))));
        assert!(!is_reset(None));
        assert!(!is_reset(Some(&json!([{}, {}]))));
        assert!(!is_reset(Some(&json!([entry("a", "Update", "t")]))));
    }

    #[test]
    fn identifier_is_kubes() {
        let id = ManagerId::new("kubectl", Operation::Update, "v1", Some("status"));
        assert_eq!(
            id.identifier(),
            r#"{"manager":"kubectl","operation":"Update","apiVersion":"v1","subresource":"status"}"#
        );
        let apply = ManagerId::new("kubectl", Operation::Apply, "v1", None);
        assert_eq!(
            apply.identifier(),
            r#"{"manager":"kubectl","operation":"Apply"}"#
        );
    }

    #[test]
    fn caps_update_managers_into_ancient_changes() {
        let list: Vec<Value> = (0..12)
            .map(|i| {
                entry(
                    &format!("m{i:02}"),
                    "Update",
                    &format!("2024-01-01T00:00:{i:02}Z"),
                )
            })
            .chain([entry("applier", "Apply", "2024-01-01T00:00:00Z")])
            .collect();
        let mut managed = decode(Some(&Value::Array(list))).unwrap();
        cap_update_managers(&mut managed, MAX_UPDATE_MANAGERS);
        let updates = managed
            .keys()
            .filter(|id| id.operation == Operation::Update)
            .count();
        assert_eq!(updates, MAX_UPDATE_MANAGERS);
        let bucket = ManagerId::new(
            ANCIENT_CHANGES,
            Operation::Update,
            "wardle.example.com/v1alpha1",
            None,
        );
        let merged = &managed[&bucket];
        assert_eq!(
            merged.set.to_fields_v1_string(),
            r#"{"f:m00":{},"f:m01":{},"f:m02":{}}"#
        );
        assert_eq!(merged.time.as_deref(), Some("2024-01-01T00:00:02Z"));
        assert!(managed.keys().any(|id| id.manager == "applier"));
    }
}
