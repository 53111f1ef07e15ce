//! Name and object-metadata validation with kube-apiserver's exact messages.
//! The string checks return kube's detail strings; the metadata checks work on the
//! `metadata` of a JSON object and return [`FieldError`]s under `metadata.*`.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::{Map, Value};

use crate::FieldError;

/// Longest DNS-1123 label (RFC 1123), e.g. a namespace name.
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// Longest DNS-1123 subdomain, e.g. most object names.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Longest label value, and longest name part of a qualified name.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
/// Sum of all annotation keys and values, in bytes.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;
/// Detail of an update that changes an immutable field.
pub const FIELD_IMMUTABLE_ERROR_MSG: &str = "field is immutable";

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case \
     alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
     alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str = "must consist of alphanumeric characters, '-', '_' or '.', \
     and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric \
     characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `must be no more than N characters` (kube counts bytes but says characters).
pub fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// kube's explanation of a failed pattern, with examples:
/// `msg (e.g. 'a',  or 'b', regex used for validation is 'fmt')`.
pub fn regex_error(msg: &str, pattern: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{pattern}')");
    }
    // kube joins "'a', " and " or 'b', ", hence the double space; clients grep for it.
    let shown: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{msg} (e.g. {}regex used for validation is '{pattern}')",
        shown.join(" or ")
    )
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, without the length limit.
fn matches_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&first), Some(&last)) => {
            is_lower_alnum(first)
                && is_lower_alnum(last)
                && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns1123_label)
}

/// Whether `s` is a DNS-1123 label; the failures as kube words them.
pub fn is_dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1123_label(s) {
        if matches_dns1123_subdomain(s) {
            // A valid subdomain that is not a label can only have failed on its dots.
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// Whether `s` is a DNS-1123 subdomain; the failures as kube words them.
pub fn is_dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns1123_subdomain(s) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`: the name part of a label key.
fn matches_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// Whether `s` is a qualified name (a label or annotation key, a finalizer):
/// `[prefix/]name` with a DNS subdomain prefix.
pub fn is_qualified_name(s: &str) -> Vec<String> {
    let examples = ["MyName", "my.name", "123-abc"];
    let parts: Vec<&str> = s.split('/').collect();
    let mut errs = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                let prefixed = is_dns1123_subdomain(prefix).into_iter();
                errs.extend(prefixed.map(|m| format!("prefix part {m}")));
            }
            *name
        }
        _ => {
            let rule = regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &examples);
            return vec![format!(
                "a qualified name {rule} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(LABEL_VALUE_MAX_LENGTH)
        ));
    }
    if !matches_qualified_name_part(name) {
        let rule = regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &examples);
        errs.push(format!("name part {rule}"));
    }
    errs
}

/// Whether `s` is a valid label value (empty is valid).
pub fn is_valid_label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !s.is_empty() && !matches_qualified_name_part(s) {
        let examples = ["MyValue", "my_value", "12345"];
        errs.push(regex_error(LABEL_VALUE_ERR, LABEL_VALUE_FMT, &examples));
    }
    errs
}

/// A name rule: `(name, prefix)` → failures. `prefix` is true for a `generateName`,
/// which gets random characters appended and so may end in `-`.
pub type ValidateNameFn = fn(&str, bool) -> Vec<String>;

/// kube lets a generateName end in `-` by checking it with its tail masked. It drops two
/// characters for one `a` (kube's quirk, kept so length limits agree); a lone `-` is left
/// as is (kube would panic on it) and so fails the check.
fn mask_trailing_dash(name: &str) -> String {
    match name.strip_suffix('-') {
        Some(_) if name.len() >= 2 => format!("{}a", &name[..name.len() - 2]),
        _ => name.to_string(),
    }
}

/// The DNS-subdomain name rule: what CRDs and most built-in types require.
pub fn name_is_dns_subdomain(name: &str, prefix: bool) -> Vec<String> {
    if prefix {
        return is_dns1123_subdomain(&mask_trailing_dash(name));
    }
    is_dns1123_subdomain(name)
}

/// The DNS-label name rule (namespaces, services).
pub fn name_is_dns_label(name: &str, prefix: bool) -> Vec<String> {
    if prefix {
        return is_dns1123_label(&mask_trailing_dash(name));
    }
    is_dns1123_label(name)
}

/// Whether `s` is a DNS-1035 label (`[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 characters);
/// the failures as kube words them (`IsDNS1035Label`).
pub fn is_dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !(matches_dns1123_label(s) && s.as_bytes()[0].is_ascii_lowercase()) {
        errs.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', \
             start with an alphabetic character, and end with an alphanumeric character",
            "[a-z]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// The DNS-1035 name rule (`NameIsDNS1035Label`).
pub fn name_is_dns1035_label(name: &str, prefix: bool) -> Vec<String> {
    if prefix {
        return is_dns1035_label(&mask_trailing_dash(name));
    }
    is_dns1035_label(name)
}

/// The default object-name rule for our resources: a DNS subdomain, as for CRDs.
pub fn validate_object_name(name: &str, prefix: bool) -> Vec<String> {
    name_is_dns_subdomain(name, prefix)
}

/// The namespace-name rule: a DNS label.
pub fn validate_namespace_name(name: &str, prefix: bool) -> Vec<String> {
    name_is_dns_label(name, prefix)
}

/// The weakest rule, the one every name must pass because it becomes a URL path segment:
/// not `.` or `..`, no `/` or `%`. Go servers whose types skip name validation (the
/// sample-apiserver) enforce only this.
pub fn validate_path_segment_name(name: &str, prefix: bool) -> Vec<String> {
    if !prefix {
        if let Some(bad) = [".", ".."].into_iter().find(|bad| name == *bad) {
            return vec![format!("may not be '{bad}'")];
        }
    }
    ["/", "%"]
        .into_iter()
        .filter(|bad| name.contains(bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

/// Prints a pre-rendered value as is in a [`FieldError`] (for kube's unquoted renderings).
struct Raw(String);

impl fmt::Debug for Raw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Go's `%#v` of a `[]string`, which kube puts in some messages.
fn go_string_slice<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let quoted: Vec<String> = items.into_iter().map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

fn str_field<'a>(meta: &'a Value, key: &str) -> &'a str {
    meta.get(key).and_then(Value::as_str).unwrap_or("")
}

fn int_field(meta: &Value, key: &str) -> i64 {
    meta.get(key).and_then(Value::as_i64).unwrap_or(0)
}

fn is_set(meta: &Value, key: &str) -> bool {
    !matches!(meta.get(key), None | Some(Value::Null))
}

/// Validates `metadata` on create, as kube's `ValidateObjectMetaAccessor`.
///
/// `meta` is the object's `metadata` value; `namespaced` says whether the resource lives in
/// namespaces; `name_fn` is the name rule (e.g. [`validate_object_name`]). Unlike kube, an
/// empty name is accepted when `generateName` is set, so this may run before the name is
/// generated. Checked: name / generateName, namespace presence and form, generation,
/// labels, annotations (keys and total size), owner references and finalizers.
pub fn validate_object_meta(
    meta: &Value,
    namespaced: bool,
    name_fn: ValidateNameFn,
) -> Vec<FieldError> {
    let mut errs = validate_names(meta, name_fn);
    errs.extend(validate_namespace(str_field(meta, "namespace"), namespaced));
    let generation = int_field(meta, "generation");
    if generation < 0 {
        errs.push(FieldError::invalid(
            "metadata.generation",
            generation,
            "must be greater than or equal to 0",
        ));
    }
    errs.extend(validate_labels(meta.get("labels"), "metadata.labels"));
    errs.extend(validate_annotations(
        meta.get("annotations"),
        "metadata.annotations",
    ));
    errs.extend(validate_owner_references(meta.get("ownerReferences")));
    errs.extend(validate_finalizers(meta.get("finalizers")));
    errs
}

fn validate_names(meta: &Value, name_fn: ValidateNameFn) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let generate_name = str_field(meta, "generateName");
    if !generate_name.is_empty() {
        for msg in name_fn(generate_name, true) {
            errs.push(FieldError::invalid(
                "metadata.generateName",
                generate_name,
                &msg,
            ));
        }
    }
    let name = str_field(meta, "name");
    if name.is_empty() {
        if generate_name.is_empty() {
            errs.push(FieldError::required(
                "metadata.name",
                "name or generateName is required",
            ));
        }
    } else {
        for msg in name_fn(name, false) {
            errs.push(FieldError::invalid("metadata.name", name, &msg));
        }
    }
    errs
}

fn validate_namespace(namespace: &str, namespaced: bool) -> Vec<FieldError> {
    let field = "metadata.namespace";
    match (namespaced, namespace.is_empty()) {
        (true, true) => vec![FieldError::required(field, "")],
        (true, false) => validate_namespace_name(namespace, false)
            .iter()
            .map(|msg| FieldError::invalid(field, namespace, msg))
            .collect(),
        (false, false) => vec![FieldError::forbidden(field, "not allowed on this type")],
        (false, true) => Vec::new(),
    }
}

/// The string entries of a JSON map; other values get an error of their own, since a
/// typed Go server would have refused them while decoding.
fn string_map<'a>(
    value: Option<&'a Value>,
    field: &str,
    errs: &mut Vec<FieldError>,
) -> Vec<(&'a str, &'a str)> {
    let Some(map) = value.and_then(Value::as_object) else {
        if value.is_some_and(|v| !v.is_null()) {
            errs.push(FieldError::invalid(
                field,
                Raw(json_text(value)),
                "must be a map of strings",
            ));
        }
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in map {
        match v.as_str() {
            Some(s) => out.push((k.as_str(), s)),
            None => errs.push(FieldError::invalid(
                &format!("{field}[{k}]"),
                Raw(v.to_string()),
                "must be a string",
            )),
        }
    }
    out
}

fn json_text(value: Option<&Value>) -> String {
    value.map(Value::to_string).unwrap_or_default()
}

/// Label keys and values, as kube's `ValidateLabels` (errors at `field`, not per key).
pub fn validate_labels(labels: Option<&Value>, field: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (k, v) in string_map(labels, field, &mut errs) {
        errs.extend(
            is_qualified_name(k)
                .iter()
                .map(|m| FieldError::invalid(field, k, m)),
        );
        errs.extend(
            is_valid_label_value(v)
                .iter()
                .map(|m| FieldError::invalid(field, v, m)),
        );
    }
    errs
}

/// Annotation keys (qualified names, any case) and their total size.
pub fn validate_annotations(annotations: Option<&Value>, field: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let entries = string_map(annotations, field, &mut errs);
    for (k, _) in &entries {
        // kube ignores case in annotation keys but reports the key as written.
        let msgs = is_qualified_name(&k.to_lowercase());
        errs.extend(msgs.iter().map(|m| FieldError::invalid(field, *k, m)));
    }
    let total: usize = entries.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::too_long(field, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
    errs
}

fn string_list(value: Option<&Value>) -> Vec<&str> {
    let items = value
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    items.iter().filter_map(Value::as_str).collect()
}

/// Finalizer names (qualified names) and the orphan / foreground conflict.
fn validate_finalizers(finalizers: Option<&Value>) -> Vec<FieldError> {
    let field = "metadata.finalizers";
    let names = string_list(finalizers);
    let mut errs = Vec::new();
    for name in &names {
        errs.extend(
            is_qualified_name(name)
                .iter()
                .map(|m| FieldError::invalid(field, *name, m)),
        );
    }
    if names.contains(&"orphan") && names.contains(&"foregroundDeletion") {
        let value = Raw(go_string_slice(names.iter().copied()));
        errs.push(FieldError::invalid(
            field,
            value,
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    errs
}

/// The version of an `apiVersion`, empty when it does not parse (as kube's
/// `schema.FromAPIVersionAndKind`).
fn api_version_version(api_version: &str) -> &str {
    match api_version.split('/').collect::<Vec<_>>().as_slice() {
        [version] => version,
        [_, version] => version,
        _ => "",
    }
}

/// gogo-protobuf's `String()` of an OwnerReference, which kube prints for a banned owner.
fn owner_reference_text(r: &Map<String, Value>) -> String {
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let b = |k: &str| match r.get(k).and_then(Value::as_bool) {
        Some(v) => format!("*{v}"),
        None => "nil".to_string(),
    };
    format!(
        "&OwnerReference{{APIVersion:{},Kind:{},Name:{},UID:{},Controller:{},BlockOwnerDeletion:{},}}",
        s("apiVersion"),
        s("kind"),
        s("name"),
        s("uid"),
        b("controller"),
        b("blockOwnerDeletion")
    )
}

fn validate_owner_reference(r: &Map<String, Value>) -> Vec<FieldError> {
    let field = "metadata.ownerReferences";
    let get = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
    let mut errs = Vec::new();
    let version = api_version_version(get("apiVersion"));
    if version.is_empty() {
        errs.push(FieldError::invalid(
            &format!("{field}.apiVersion"),
            get("apiVersion"),
            "version must not be empty",
        ));
    }
    for key in ["kind", "name", "uid"] {
        if get(key).is_empty() {
            errs.push(FieldError::invalid(
                &format!("{field}.{key}"),
                "",
                "must not be empty",
            ));
        }
    }
    // kube refuses core/v1 Events as owners: they are garbage-collected on their own.
    if get("apiVersion") == "v1" && get("kind") == "Event" {
        let detail = "/v1, Kind=Event is disallowed from being an owner";
        errs.push(FieldError::invalid(
            field,
            Raw(owner_reference_text(r)),
            detail,
        ));
    }
    errs
}

/// Owner references: required parts, banned owners, at most one controller.
fn validate_owner_references(refs: Option<&Value>) -> Vec<FieldError> {
    let items = refs
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut errs = Vec::new();
    let mut first_controller: Option<String> = None;
    for r in items.iter().filter_map(Value::as_object) {
        errs.extend(validate_owner_reference(r));
        if r.get("controller").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let get = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("");
        let current = format!("{}/{}", get("kind"), get("name"));
        match &first_controller {
            None => first_controller = Some(current),
            Some(first) => {
                let detail = format!(
                    "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                );
                // kube prints the Go struct dump here; the JSON text carries the same facts.
                let value = Raw(json_text(refs));
                errs.push(FieldError::invalid(
                    "metadata.ownerReferences",
                    value,
                    &detail,
                ));
            }
        }
    }
    errs
}

/// Validates `metadata` on update, as kube's `ValidateObjectMetaAccessorUpdate`.
///
/// Immutable: name, namespace, uid, creationTimestamp, deletionTimestamp,
/// deletionGracePeriodSeconds. Also: resourceVersion must be set (the store fills it in
/// first for an unconditional update), generation may not go down, no finalizer may be
/// added once deletion started, and labels, annotations and owner references must be valid.
/// `generateName` may change freely: kube ignores it after create.
pub fn validate_object_meta_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if is_set(old, "deletionTimestamp") {
        errs.extend(validate_no_new_finalizers(
            new.get("finalizers"),
            old.get("finalizers"),
        ));
    }
    if str_field(new, "resourceVersion").is_empty() {
        errs.push(FieldError::invalid(
            "metadata.resourceVersion",
            "",
            "must be specified for an update",
        ));
    }
    let (new_gen, old_gen) = (int_field(new, "generation"), int_field(old, "generation"));
    if new_gen < old_gen {
        errs.push(FieldError::invalid(
            "metadata.generation",
            new_gen,
            "must not be decremented",
        ));
    }
    errs.extend(validate_immutable_fields(new, old));
    errs.extend(validate_labels(new.get("labels"), "metadata.labels"));
    errs.extend(validate_annotations(
        new.get("annotations"),
        "metadata.annotations",
    ));
    errs.extend(validate_owner_references(new.get("ownerReferences")));
    errs
}

fn validate_no_new_finalizers(new: Option<&Value>, old: Option<&Value>) -> Vec<FieldError> {
    let old: BTreeSet<&str> = string_list(old).into_iter().collect();
    let added: BTreeSet<&str> = string_list(new)
        .into_iter()
        .filter(|f| !old.contains(f))
        .collect();
    if added.is_empty() {
        return Vec::new();
    }
    let detail = format!(
        "no new finalizers can be added if the object is being deleted, found new finalizers {}",
        go_string_slice(added)
    );
    vec![FieldError::forbidden("metadata.finalizers", &detail)]
}

fn validate_immutable_fields(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for key in ["name", "namespace", "uid"] {
        let (n, o) = (str_field(new, key), str_field(old, key));
        if n != o {
            errs.push(FieldError::invalid(
                &format!("metadata.{key}"),
                n,
                FIELD_IMMUTABLE_ERROR_MSG,
            ));
        }
    }
    for key in ["creationTimestamp", "deletionTimestamp"] {
        let (n, o) = (new.get(key), old.get(key));
        if !same_time(n, o) {
            let shown = Raw(go_time_text(n, key == "creationTimestamp"));
            errs.push(FieldError::invalid(
                &format!("metadata.{key}"),
                shown,
                FIELD_IMMUTABLE_ERROR_MSG,
            ));
        }
    }
    let key = "deletionGracePeriodSeconds";
    let (n, o) = (
        new.get(key).filter(|v| !v.is_null()),
        old.get(key).filter(|v| !v.is_null()),
    );
    if n != o {
        let shown = Raw(n.map_or_else(|| "null".to_string(), Value::to_string));
        errs.push(FieldError::invalid(
            &format!("metadata.{key}"),
            shown,
            FIELD_IMMUTABLE_ERROR_MSG,
        ));
    }
    errs
}

fn timestamp(value: Option<&Value>) -> Option<jiff::Timestamp> {
    value.and_then(Value::as_str).and_then(|s| s.parse().ok())
}

/// Timestamps compare as instants (kube's semantic equality), missing equals null.
fn same_time(a: Option<&Value>, b: Option<&Value>) -> bool {
    let (a, b) = (a.filter(|v| !v.is_null()), b.filter(|v| !v.is_null()));
    match (timestamp(a), timestamp(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// How kube prints a `metav1.Time` in a message: Go's `time.Time.String()` in UTC. A
/// missing creationTimestamp is Go's zero time; a missing deletionTimestamp is `null`.
fn go_time_text(value: Option<&Value>, zero_when_missing: bool) -> String {
    match (timestamp(value), value.filter(|v| !v.is_null())) {
        (Some(ts), _) => ts.strftime("%Y-%m-%d %H:%M:%S%.f +0000 UTC").to_string(),
        (None, Some(other)) => other.to_string(),
        (None, None) if zero_when_missing => "0001-01-01 00:00:00 +0000 UTC".to_string(),
        (None, None) => "null".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    const NAME_PART_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

    fn texts(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn dns1123_labels() {
        let long = "a".repeat(63);
        for ok in [
            "a",
            "ab",
            "abc",
            "a1",
            "a-1",
            "a--1--2--b",
            "0",
            "01",
            "0-1",
            &long,
        ] {
            assert!(is_dns1123_label(ok).is_empty(), "{ok}");
        }
        for bad in [
            "", "A", "ABC", "aBc", "A1", "A-1", "1-A", "-", "a-", "-a", "1-", "_", "a_", "_a",
            "a_b", "1_", "_1", "1_2", ".", "a.", ".a", "1.", ".1", "!", "a!", "!a", "a!b", "1!",
            "!1", "1!2", "~", "a~", "~a", "a~b", "1~", "~1", "1~2",
        ] {
            assert!(!is_dns1123_label(bad).is_empty(), "{bad:?}");
        }
        assert_eq!(is_dns1123_label("a.b"), vec!["must not contain dots"]);
        assert_eq!(is_dns1123_label("-a"), vec![LABEL_MSG]);
        assert_eq!(
            is_dns1123_label(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
    }

    #[test]
    fn dns1123_subdomains() {
        let long = "a".repeat(253);
        for ok in ["a", "a.b.c", "1.2.3", "a-1.b-2", "0.a", &long] {
            assert!(is_dns1123_subdomain(ok).is_empty(), "{ok}");
        }
        for bad in ["", "A", "a.", ".a", "a..b", "a_b", "a.-b", "a-.b"] {
            assert_eq!(is_dns1123_subdomain(bad), vec![SUBDOMAIN_MSG], "{bad:?}");
        }
        let too_long = "a".repeat(254);
        assert_eq!(
            is_dns1123_subdomain(&too_long),
            vec!["must be no more than 253 characters"]
        );
    }

    #[test]
    fn qualified_names() {
        let max = format!("{}/{}", "a".repeat(253), "b".repeat(63));
        for ok in [
            "simple",
            "now-with-dashes",
            "1-starts-with-num",
            "1234",
            "simple/simple",
            "now-with-dashes/simple",
            "now-with-dashes/now-with-dashes",
            "now.with.dots/simple",
            "now-with.dashes-and.dots/simple",
            "1-num.2-num/3-num",
            "1234/5678",
            "1.2.3.4/5678",
            "Uppercase_Is_OK_123",
            "example.com/Uppercase_Is_OK_123",
            "requests.storage-foo",
            &max,
        ] {
            assert!(is_qualified_name(ok).is_empty(), "{ok}");
        }
        for bad in [
            "nospecialchars%^=@",
            "cantendwithadash-",
            "-cantstartwithadash-",
            "only/one/slash",
            "Example.com/abc",
            "example_com/abc",
            "example.com/",
            "/simple",
            "a/b/c",
        ] {
            assert!(!is_qualified_name(bad).is_empty(), "{bad}");
        }
        assert_eq!(is_qualified_name("-a"), vec![NAME_PART_MSG]);
        assert_eq!(
            is_qualified_name(""),
            vec![
                "name part must be non-empty".to_string(),
                NAME_PART_MSG.to_string()
            ]
        );
        assert_eq!(is_qualified_name("/a")[0], "prefix part must be non-empty");
        assert_eq!(
            is_qualified_name("A.com/a")[0],
            format!("prefix part {SUBDOMAIN_MSG}")
        );
        assert_eq!(
            is_qualified_name(&"a".repeat(64))[0],
            "name part must be no more than 63 characters"
        );
        assert!(is_qualified_name("a/b/c")[0].starts_with("a qualified name must consist of"));
        assert!(is_qualified_name("a/b/c")[0].ends_with(
            " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ));
    }

    #[test]
    fn label_values() {
        for ok in [
            "simple",
            "now-with-dashes",
            "1-starts-with-num",
            "end-with-num-1",
            "1234",
            "",
            "A.B-c_d",
            &"a".repeat(63),
        ] {
            assert!(is_valid_label_value(ok).is_empty(), "{ok}");
        }
        for bad in [
            "nospecialchars%^=@",
            "Tama-nui-te-rā.is.Māori.sun",
            "\\backslashes\\are\\bad",
            "-starts-with-dash",
            "ends-with-dash-",
            ".starts.with.dot",
            "ends.with.dot.",
        ] {
            assert_eq!(is_valid_label_value(bad), vec![LABEL_VALUE_MSG], "{bad}");
        }
        assert_eq!(
            is_valid_label_value(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
    }

    #[test]
    fn name_rules_and_prefixes() {
        assert!(name_is_dns_subdomain("foo-", true).is_empty());
        assert!(!name_is_dns_subdomain("foo-", false).is_empty());
        assert!(name_is_dns_label("a-", true).is_empty());
        assert!(!name_is_dns_label("-", true).is_empty());
        assert!(validate_namespace_name("kube-system", false).is_empty());
        assert_eq!(
            validate_namespace_name("a.b", false),
            vec!["must not contain dots"]
        );
        assert!(validate_object_name("a.b", false).is_empty());
        assert_eq!(
            validate_path_segment_name("..", false),
            vec!["may not be '..'"]
        );
        assert_eq!(
            validate_path_segment_name(".", false),
            vec!["may not be '.'"]
        );
        assert!(validate_path_segment_name(".", true).is_empty());
        assert_eq!(
            validate_path_segment_name("a/b%", false),
            vec!["may not contain '/'", "may not contain '%'"]
        );
        assert!(validate_path_segment_name("Foo_Bar", false).is_empty());
    }

    #[test]
    fn object_meta_name_rules() {
        let errs = validate_object_meta(&json!({"namespace": "ns"}), true, validate_object_name);
        assert_eq!(
            texts(&errs),
            vec!["metadata.name: Required value: name or generateName is required"]
        );
        let errs = validate_object_meta(
            &json!({"generateName": "foo-", "namespace": "ns"}),
            true,
            validate_object_name,
        );
        assert!(errs.is_empty(), "{errs:?}");
        let errs = validate_object_meta(
            &json!({"generateName": "Foo-", "namespace": "ns"}),
            true,
            validate_object_name,
        );
        assert_eq!(
            texts(&errs),
            vec![format!(
                "metadata.generateName: Invalid value: \"Foo-\": {SUBDOMAIN_MSG}"
            )]
        );
        let errs = validate_object_meta(
            &json!({"name": "Bad_Name", "namespace": "ns"}),
            true,
            validate_object_name,
        );
        assert_eq!(
            texts(&errs),
            vec![format!(
                "metadata.name: Invalid value: \"Bad_Name\": {SUBDOMAIN_MSG}"
            )]
        );
        let errs = validate_object_meta(
            &json!({"name": "Bad_Name"}),
            false,
            validate_path_segment_name,
        );
        assert!(errs.is_empty());
    }

    #[test]
    fn object_meta_namespace_rules() {
        let errs = validate_object_meta(&json!({"name": "a"}), true, validate_object_name);
        assert_eq!(texts(&errs), vec!["metadata.namespace: Required value"]);
        let errs = validate_object_meta(
            &json!({"name": "a", "namespace": "ns"}),
            false,
            validate_object_name,
        );
        assert_eq!(
            texts(&errs),
            vec!["metadata.namespace: Forbidden: not allowed on this type"]
        );
        let errs = validate_object_meta(
            &json!({"name": "a", "namespace": "a.b"}),
            true,
            validate_object_name,
        );
        assert_eq!(
            texts(&errs),
            vec!["metadata.namespace: Invalid value: \"a.b\": must not contain dots"]
        );
    }

    #[test]
    fn object_meta_labels_annotations_generation() {
        let meta = json!({"name": "a", "generation": -1,
            "labels": {"-bad": "ok", "good": "-bad"}, "annotations": {"Upper.Case/OK": "x", "a/b/c": "y"}});
        let errs = texts(&validate_object_meta(&meta, false, validate_object_name));
        assert_eq!(
            errs[0],
            "metadata.generation: Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(
            errs[1],
            format!("metadata.labels: Invalid value: \"-bad\": {NAME_PART_MSG}")
        );
        assert_eq!(
            errs[2],
            format!("metadata.labels: Invalid value: \"-bad\": {LABEL_VALUE_MSG}")
        );
        assert!(
            errs[3].starts_with("metadata.annotations: Invalid value: \"a/b/c\": a qualified name")
        );
        assert_eq!(errs.len(), 4);
    }

    #[test]
    fn annotation_size_limit() {
        let big = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT - 1);
        let meta = json!({"name": "a", "annotations": {"k": big}});
        assert!(validate_object_meta(&meta, false, validate_object_name).is_empty());
        let meta = json!({"name": "a", "annotations": {"k": big, "l": ""}});
        let errs = validate_object_meta(&meta, false, validate_object_name);
        assert_eq!(
            errs,
            vec![FieldError::too_long("metadata.annotations", 262144)]
        );
    }

    #[test]
    fn non_string_labels_are_rejected() {
        let meta = json!({"name": "a", "labels": {"x": 1}});
        let errs = texts(&validate_object_meta(&meta, false, validate_object_name));
        assert_eq!(
            errs,
            vec!["metadata.labels[x]: Invalid value: 1: must be a string"]
        );
    }

    #[test]
    fn finalizers_and_owner_references() {
        let meta = json!({"name": "a", "finalizers": ["orphan", "foregroundDeletion", "bad/x/y"],
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "1", "controller": true},
                {"apiVersion": "", "kind": "", "name": "", "uid": "", "controller": true}]});
        let errs = texts(&validate_object_meta(&meta, false, validate_object_name));
        assert_eq!(
            errs[0],
            "metadata.ownerReferences: Invalid value: &OwnerReference{APIVersion:v1,Kind:Event,Name:e,UID:1,Controller:*true,BlockOwnerDeletion:nil,}: /v1, Kind=Event is disallowed from being an owner"
        );
        assert_eq!(
            errs[1],
            "metadata.ownerReferences.apiVersion: Invalid value: \"\": version must not be empty"
        );
        assert_eq!(
            errs[2],
            "metadata.ownerReferences.kind: Invalid value: \"\": must not be empty"
        );
        assert!(errs[5].contains("Only one reference can have Controller set to true. Found \"true\" in references for Event/e and /"));
        assert!(
            errs[6]
                .starts_with("metadata.finalizers: Invalid value: \"bad/x/y\": a qualified name")
        );
        assert_eq!(
            errs[7],
            "metadata.finalizers: Invalid value: []string{\"orphan\", \"foregroundDeletion\", \"bad/x/y\"}: finalizer orphan and foregroundDeletion cannot be both set"
        );
        assert_eq!(errs.len(), 8);
    }

    fn old_meta() -> Value {
        json!({"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "5", "generation": 2,
               "creationTimestamp": "2024-01-02T03:04:05Z", "generateName": "a-"})
    }

    #[test]
    fn update_accepts_unchanged_and_generate_name_changes() {
        let mut new = old_meta();
        new["generateName"] = json!("other-");
        new["labels"] = json!({"x": "y"});
        new["creationTimestamp"] = json!("2024-01-02T04:04:05+01:00");
        assert!(validate_object_meta_update(&new, &old_meta()).is_empty());
    }

    #[test]
    fn update_rejects_immutable_changes() {
        let new = json!({"name": "b", "namespace": "other", "uid": "u2", "resourceVersion": "5", "generation": 1,
                         "creationTimestamp": "2025-01-02T03:04:05.25Z", "deletionTimestamp": "2025-01-02T03:04:05Z",
                         "deletionGracePeriodSeconds": 30});
        let errs = texts(&validate_object_meta_update(&new, &old_meta()));
        assert_eq!(
            errs,
            vec![
                "metadata.generation: Invalid value: 1: must not be decremented",
                "metadata.name: Invalid value: \"b\": field is immutable",
                "metadata.namespace: Invalid value: \"other\": field is immutable",
                "metadata.uid: Invalid value: \"u2\": field is immutable",
                "metadata.creationTimestamp: Invalid value: 2025-01-02 03:04:05.25 +0000 UTC: field is immutable",
                "metadata.deletionTimestamp: Invalid value: 2025-01-02 03:04:05 +0000 UTC: field is immutable",
                "metadata.deletionGracePeriodSeconds: Invalid value: 30: field is immutable",
            ]
        );
    }

    #[test]
    fn update_requires_resource_version_and_blocks_new_finalizers() {
        let mut old = old_meta();
        old["deletionTimestamp"] = json!("2024-02-01T00:00:00Z");
        old["finalizers"] = json!(["a.io/x"]);
        let mut new = old.clone();
        new["resourceVersion"] = json!("");
        new["finalizers"] = json!(["a.io/x", "b.io/y", "a.io/z"]);
        let errs = texts(&validate_object_meta_update(&new, &old));
        assert_eq!(
            errs,
            vec![
                "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"a.io/z\", \"b.io/y\"}",
                "metadata.resourceVersion: Invalid value: \"\": must be specified for an update",
            ]
        );
    }

    #[test]
    fn update_shows_removed_creation_timestamp_as_zero_time() {
        let mut new = old_meta();
        new.as_object_mut().unwrap().remove("creationTimestamp");
        let errs = texts(&validate_object_meta_update(&new, &old_meta()));
        assert_eq!(
            errs,
            vec![
                "metadata.creationTimestamp: Invalid value: 0001-01-01 00:00:00 +0000 UTC: field is immutable"
            ]
        );
    }
}
