//! `validation(rule = "...", message = "...", message_expression = "...", reason = "...",
//! field_path = "...", optional_old_self)`: one `x-kubernetes-validations` rule on the type,
//! the fields of a CRD's `ValidationRule`.

use std::collections::HashSet;

use syn::{LitStr, Meta};

use crate::attrs::keys::Keys;
use crate::attrs::value;
use crate::ctxt::Ctxt;

const KEYS: &[&str] = &[
    "rule",
    "message",
    "message_expression",
    "reason",
    "field_path",
    "optional_old_self",
];

/// One `validation(...)` as written; `check.rs` parses its CEL.
pub struct Validation {
    /// The whole `validation(...)`, where errors about missing keys point.
    pub item: Meta,
    /// The CEL rule.
    pub rule: Option<LitStr>,
    /// The message when it fails.
    pub message: Option<LitStr>,
    /// A CEL expression for the message.
    pub message_expression: Option<LitStr>,
    /// `FieldValueInvalid`, `FieldValueForbidden`, `FieldValueRequired`, `FieldValueDuplicate`.
    pub reason: Option<LitStr>,
    /// Where the error points (`.spec.reference`).
    pub field_path: Option<LitStr>,
    /// `optional_old_self`.
    pub optional_old_self: bool,
    /// The keys that appeared, well-formed or not.
    pub given: HashSet<String>,
}

impl Validation {
    /// Reads one `validation(...)` item; `None` when it is not a list at all.
    pub fn from_meta(cx: &Ctxt, item: &Meta) -> Option<Self> {
        let example = r#"validation(rule = "self.spec.size <= 10", message = "too big")"#;
        let settings = value::nested_items(cx, item, example)?;
        let mut out = Self {
            item: item.clone(),
            rule: None,
            message: None,
            message_expression: None,
            reason: None,
            field_path: None,
            optional_old_self: false,
            given: HashSet::new(),
        };
        let mut keys = Keys::new("validation(...)", KEYS, &[]);
        for setting in settings {
            if let Some(key) = keys.accept(cx, &setting) {
                match key.as_str() {
                    "rule" => out.rule = value::string(cx, &setting),
                    "message" => out.message = value::string(cx, &setting),
                    "message_expression" => out.message_expression = value::string(cx, &setting),
                    "reason" => out.reason = value::string(cx, &setting),
                    "field_path" => out.field_path = value::string(cx, &setting),
                    "optional_old_self" => out.optional_old_self = value::flag(cx, &setting),
                    _ => unreachable!("`Keys` accepts only the keys in `KEYS`"),
                }
            }
        }
        out.given = keys.into_given();
        Some(out)
    }
}
