//! `printcolumn(name = "...", type = "...", json_path = "...", ...)`: one `kubectl get` column,
//! the fields of a CRD's `additionalPrinterColumns` entry.

use std::collections::HashSet;

use syn::{LitStr, Meta};

use crate::attrs::keys::Keys;
use crate::attrs::value;
use crate::ctxt::Ctxt;

const KEYS: &[&str] = &[
    "name",
    "type",
    "format",
    "json_path",
    "description",
    "priority",
];

/// One `printcolumn(...)` as written; `check.rs` decides whether it is complete and valid.
pub struct PrintColumn {
    /// The whole `printcolumn(...)`, where errors about missing keys point.
    pub item: Meta,
    /// Column header.
    pub name: Option<LitStr>,
    /// OpenAPI type; `string` when absent.
    pub type_: Option<LitStr>,
    /// OpenAPI format; none when absent.
    pub format: Option<LitStr>,
    /// JSONPath into the object, starting with `.`.
    pub json_path: Option<LitStr>,
    /// Column description; empty when absent.
    pub description: Option<LitStr>,
    /// 0 (always shown) when absent.
    pub priority: Option<i32>,
    /// The keys that appeared, well-formed or not.
    pub given: HashSet<String>,
}

impl PrintColumn {
    /// Reads one `printcolumn(...)` item, reporting malformed settings; `None` when it is not
    /// a list at all.
    pub fn from_meta(cx: &Ctxt, item: &Meta) -> Option<Self> {
        let example = r#"printcolumn(name = "Reference", json_path = ".spec.reference")"#;
        let settings = value::nested_items(cx, item, example)?;
        let mut column = Self::empty(item);
        let mut keys = Keys::new("printcolumn(...)", KEYS, &[]);
        for setting in settings {
            if let Some(key) = keys.accept(cx, &setting) {
                column.set(cx, &key, &setting);
            }
        }
        column.given = keys.into_given();
        Some(column)
    }

    fn empty(item: &Meta) -> Self {
        Self {
            item: item.clone(),
            name: None,
            type_: None,
            format: None,
            json_path: None,
            description: None,
            priority: None,
            given: HashSet::new(),
        }
    }

    fn set(&mut self, cx: &Ctxt, key: &str, setting: &Meta) {
        match key {
            "name" => self.name = value::string(cx, setting),
            "type" => self.type_ = value::string(cx, setting),
            "format" => self.format = value::string(cx, setting),
            "json_path" => self.json_path = value::string(cx, setting),
            "description" => self.description = value::string(cx, setting),
            "priority" => self.priority = value::int(cx, setting),
            _ => unreachable!("`Keys` accepts only the keys in `KEYS`"),
        }
    }
}
