//! Checks of the model against the rules kube-apiserver enforces on names and on CRDs'
//! printer columns, so a mistake is a compile error with a span instead of a server that
//! fails at start or serves a broken discovery document.

use syn::LitStr;

use crate::ast::Container;
use crate::attrs::{PrintColumn, ResourceAttrs, Scale, Validation};
use crate::ctxt::Ctxt;
use crate::names;

/// The values of a printer column's `type`, as in `additionalPrinterColumns`.
pub const COLUMN_TYPES: &[&str] = &["string", "integer", "number", "boolean", "date"];

/// The values of `garbage_collection`, as kube's `rest.GarbageCollectionPolicy`.
pub const GC_POLICIES: &[&str] = &["DeleteDependents", "OrphanDependents", "Unsupported"];

/// The values of a printer column's `format`, as in `additionalPrinterColumns`.
pub const COLUMN_FORMATS: &[&str] = &[
    "int32",
    "int64",
    "float",
    "double",
    "byte",
    "date",
    "date-time",
    "password",
];

const LABEL_RULE: &str =
    "must be a lower-case DNS-1123 label (a-z, 0-9 and `-`, at most 63 characters)";

/// Reports every problem of `cont` into `cx`.
pub fn check(cx: &Ctxt, cont: &Container) {
    check_required(cx, cont);
    check_names(cx, &cont.attrs);
    check_fields(cx, cont);
    for column in &cont.attrs.printcolumns {
        check_printcolumn(cx, column);
    }
    if let Some(scale) = &cont.attrs.scale {
        check_scale(cx, scale);
    }
    for field in &cont.attrs.selectable_fields {
        check_selectable_field(cx, field);
    }
    for validation in &cont.attrs.validations {
        check_validation(cx, validation);
    }
    if let Some(policy) = &cont.attrs.garbage_collection {
        one_of(cx, policy, "garbage_collection", GC_POLICIES);
    }
    check_custom_strategy(cx, &cont.attrs);
}

/// With `custom_strategy` the derive implements no `Strategy`: the hooks it would have filled
/// in would be silently ignored.
fn check_custom_strategy(cx: &Ctxt, attrs: &ResourceAttrs) {
    let Some(custom) = &attrs.custom_strategy else {
        return;
    };
    const HOOKS: [&str; 5] = [
        "defaults",
        "validate",
        "validate_update",
        "allow_unconditional_update",
        "allow_create_on_update",
    ];
    for key in HOOKS.iter().filter(|k| attrs.given.contains(**k)) {
        cx.error_spanned_by(
            custom,
            format!(
                "`custom_strategy` and `{key}` do not go together: with `custom_strategy` you \
                 implement `Strategy` yourself, so put `{key}` in that impl"
            ),
        );
    }
}

/// `group`, `version` and `kind` have no sensible default.
fn check_required(cx: &Ctxt, cont: &Container) {
    let Some(attr) = &cont.attrs.attr else {
        let msg = r#"missing #[resource(group = "...", version = "...", kind = "...")]"#;
        return cx.error_spanned_by(cont.ident, msg);
    };
    let required = [
        (
            "group",
            r#"e.g. `group = "wardle.example.com"`, or `group = ""` for the core group"#,
        ),
        ("version", r#"e.g. `version = "v1alpha1"`"#),
        ("kind", r#"e.g. `kind = "Flunder"`"#),
    ];
    for (key, hint) in required {
        if !cont.attrs.given.contains(key) {
            cx.error_spanned_by(attr, format!("missing `{key}` in #[resource(...)], {hint}"));
        }
    }
}

fn check_names(cx: &Ctxt, attrs: &ResourceAttrs) {
    if let Some(group) = attrs.group.as_ref().filter(|g| !g.value().is_empty()) {
        let rule = concat!(
            r#"must be a lower-case DNS-1123 subdomain such as "wardle.example.com", "#,
            r#"or "" for the core group"#
        );
        require(cx, group, names::is_dns1123_subdomain, "group", rule);
    }
    if let Some(version) = &attrs.version {
        let rule = r#"must look like "v1", "v1alpha1" or "v2beta3""#;
        require(cx, version, names::is_version, "version", rule);
    }
    if let Some(kind) = &attrs.kind {
        let rule = r#"must be UpperCamelCase ASCII letters and digits, such as "Flunder""#;
        require(cx, kind, names::is_kind, "kind", rule);
    }
    let labels = [
        ("plural", attrs.plural.iter()),
        ("singular", attrs.singular.iter()),
    ];
    for (what, lits) in labels {
        lits.for_each(|lit| require(cx, lit, names::is_dns1123_label, what, LABEL_RULE));
    }
    let lists = [
        ("short name", &attrs.shortnames),
        ("category", &attrs.categories),
    ];
    for (what, lits) in lists {
        lits.iter()
            .for_each(|lit| require(cx, lit, names::is_dns1123_label, what, LABEL_RULE));
    }
}

/// Reports `lit` unless `valid` accepts its value.
fn require(cx: &Ctxt, lit: &LitStr, valid: fn(&str) -> bool, what: &str, rule: &str) {
    let value = lit.value();
    if !valid(&value) {
        cx.error_spanned_by(lit, format!("invalid {what} {value:?}: {rule}"));
    }
}

/// The generated code reads `self.metadata`, and `self.status` when `status` is given.
fn check_fields(cx: &Ctxt, cont: &Container) {
    if cont.fields.is_none() {
        return; // not a struct with named fields: already reported
    }
    let ident = cont.ident;
    if cont.field("metadata").is_none() {
        let msg = format!("`{ident}` needs a `metadata` field, e.g. `pub metadata: ObjectMeta`");
        cx.error_spanned_by(ident, msg);
    }
    if let Some(status) = &cont.attrs.status {
        if cont.field("status").is_none() {
            let ty = status.lit.value();
            let msg = format!(
                "`status` declares a status subresource, so `{ident}` needs a `status` field, \
                 e.g. `pub status: Option<{ty}>`"
            );
            cx.error_spanned_by(&status.item, msg);
        }
    }
}

/// The values of a rule's `reason`, as apiextensions' `FieldValueErrorReason`.
pub const RULE_REASONS: &[&str] = &[
    "FieldValueInvalid",
    "FieldValueForbidden",
    "FieldValueRequired",
    "FieldValueDuplicate",
];

/// A `validation(...)` rule as a CRD's is checked when it is created: a rule is required,
/// and it and its `message_expression` must parse as CEL (here with the `cel` crate the
/// server compiles them with); `reason` is one of kube's; `field_path` a JSON path.
fn check_validation(cx: &Ctxt, validation: &Validation) {
    match &validation.rule {
        None => cx.error_spanned_by(
            &validation.item,
            r#"validation(...) needs a `rule`, e.g. `rule = "self.spec.size <= 10"`"#,
        ),
        Some(rule) => check_cel(cx, rule, "rule"),
    }
    if let Some(expression) = &validation.message_expression {
        check_cel(cx, expression, "message_expression");
    }
    if let Some(reason) = &validation.reason {
        one_of(cx, reason, "reason", RULE_REASONS);
    }
    if let Some(path) = validation
        .field_path
        .as_ref()
        .filter(|p| !p.value().is_empty() && !p.value().starts_with(['.', '[']))
    {
        let msg = format!(
            r#"invalid field_path {:?}: a JSON path starting with `.`, e.g. ".spec.reference""#,
            path.value()
        );
        cx.error_spanned_by(path, msg);
    }
    let uses_old_self = validation
        .rule
        .as_ref()
        .and_then(|r| cel::Program::compile(&r.value()).ok())
        .is_some_and(|p| p.references().has_variable("oldSelf"));
    if validation.optional_old_self && validation.rule.is_some() && !uses_old_self {
        cx.error_spanned_by(
            &validation.item,
            "optional_old_self may not be set if oldSelf is not used in the rule",
        );
    }
}

/// Reports `lit` when it does not parse as CEL, with the parser's message.
fn check_cel(cx: &Ctxt, lit: &LitStr, what: &str) {
    let source = lit.value();
    if source.trim().is_empty() {
        cx.error_spanned_by(lit, format!("the {what} must not be empty"));
        return;
    }
    if let Err(e) = cel::Program::compile(&source) {
        let e = e.to_string();
        cx.error_spanned_by(
            lit,
            format!("the {what} is not valid CEL: {}", e.trim_end()),
        );
    }
}

fn check_printcolumn(cx: &Ctxt, column: &PrintColumn) {
    let required = [
        ("name", r#"name = "Reference""#),
        ("json_path", r#"json_path = ".spec.reference""#),
    ];
    for (key, example) in required {
        if !column.given.contains(key) {
            cx.error_spanned_by(
                &column.item,
                format!("printcolumn(...) needs a `{key}`, e.g. `{example}`"),
            );
        }
    }
    if let Some(name) = column.name.as_ref().filter(|n| n.value().is_empty()) {
        cx.error_spanned_by(name, "the column name must not be empty");
    }
    if let Some(path) = column
        .json_path
        .as_ref()
        .filter(|p| !p.value().starts_with('.'))
    {
        let msg = format!(
            r#"invalid json_path {:?}: must start with `.`, e.g. ".spec.reference""#,
            path.value()
        );
        cx.error_spanned_by(path, msg);
    }
    if let Some(type_) = &column.type_ {
        one_of(cx, type_, "column type", COLUMN_TYPES);
    }
    if let Some(format) = column.format.as_ref().filter(|f| !f.value().is_empty()) {
        one_of(cx, format, "column format", COLUMN_FORMATS);
    }
}

/// The rules apiextensions-apiserver applies to a CRD's `subresources.scale`: both replicas
/// paths given, the desired under `.spec`, the observed under `.status`, the selector under
/// either; each a plain dotted path.
fn check_scale(cx: &Ctxt, scale: &Scale) {
    let required = [
        (
            "spec_replicas_path",
            r#"spec_replicas_path = ".spec.replicas""#,
        ),
        (
            "status_replicas_path",
            r#"status_replicas_path = ".status.replicas""#,
        ),
    ];
    for (key, example) in required {
        if !scale.given.contains(key) {
            cx.error_spanned_by(
                &scale.item,
                format!("scale(...) needs a `{key}`, e.g. `{example}`"),
            );
        }
    }
    let paths = [
        (&scale.spec_replicas_path, &[".spec."][..]),
        (&scale.status_replicas_path, &[".status."][..]),
        (&scale.label_selector_path, &[".spec.", ".status."][..]),
    ];
    for (lit, roots) in paths {
        let Some(lit) = lit else { continue };
        let value = lit.value();
        let valid = roots.iter().any(|root| {
            value.strip_prefix(root).is_some_and(|rest| {
                rest.split('.')
                    .all(|s| !s.is_empty() && !s.contains(['[', ']', '*']))
            })
        });
        if !valid {
            let under = roots
                .iter()
                .map(|r| format!("`{}`", r.trim_end_matches('.')));
            let under: Vec<String> = under.collect();
            let msg = format!(
                "invalid scale path {value:?}: must be a dotted JSONPath under {}",
                under.join(" or ")
            );
            cx.error_spanned_by(lit, msg);
        }
    }
}

/// Reports `lit` unless its value is one of `allowed`.
fn one_of(cx: &Ctxt, lit: &LitStr, what: &str, allowed: &[&str]) {
    let value = lit.value();
    if !allowed.contains(&value.as_str()) {
        let list: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
        cx.error_spanned_by(
            lit,
            format!(
                "unsupported {what} {value:?}: expected one of {}",
                list.join(", ")
            ),
        );
    }
}

/// A field selector path is written as a JSONPath (`.spec.reference`), as in CRDs'
/// `selectableFields`.
fn check_selectable_field(cx: &Ctxt, lit: &LitStr) {
    let value = lit.value();
    let valid = value
        .strip_prefix('.')
        .is_some_and(|p| p.split('.').all(|s| !s.is_empty()));
    if !valid {
        let rule = r#"must be a JSONPath to a field such as ".spec.reference""#;
        let msg = format!("invalid selectable_field {value:?}: {rule}");
        cx.error_spanned_by(lit, msg);
    }
}
