//! `scale(spec_replicas_path = "...", status_replicas_path = "...", label_selector_path = "...")`:
//! the scale subresource, the fields of a CRD's `subresources.scale`.

use std::collections::HashSet;

use syn::{LitStr, Meta};

use crate::attrs::keys::Keys;
use crate::attrs::value;
use crate::ctxt::Ctxt;

const KEYS: &[&str] = &[
    "spec_replicas_path",
    "status_replicas_path",
    "label_selector_path",
];

/// `scale(...)` as written; `check.rs` decides whether it is complete and valid.
pub struct Scale {
    /// The whole `scale(...)`, where errors about missing keys point.
    pub item: Meta,
    /// `.spec.replicas`: where the desired replicas are.
    pub spec_replicas_path: Option<LitStr>,
    /// `.status.replicas`: where the observed replicas are.
    pub status_replicas_path: Option<LitStr>,
    /// `.status.selector`: where the label selector (as a string) is; optional.
    pub label_selector_path: Option<LitStr>,
    /// The keys that appeared, well-formed or not.
    pub given: HashSet<String>,
}

impl Scale {
    /// Reads one `scale(...)` item; `None` when it is not a list at all.
    pub fn from_meta(cx: &Ctxt, item: &Meta) -> Option<Self> {
        let example = r#"scale(spec_replicas_path = ".spec.replicas", status_replicas_path = ".status.replicas")"#;
        let settings = value::nested_items(cx, item, example)?;
        let mut scale = Self {
            item: item.clone(),
            spec_replicas_path: None,
            status_replicas_path: None,
            label_selector_path: None,
            given: HashSet::new(),
        };
        let mut keys = Keys::new("scale(...)", KEYS, &[]);
        for setting in settings {
            if let Some(key) = keys.accept(cx, &setting) {
                let value = value::string(cx, &setting);
                match key.as_str() {
                    "spec_replicas_path" => scale.spec_replicas_path = value,
                    "status_replicas_path" => scale.status_replicas_path = value,
                    "label_selector_path" => scale.label_selector_path = value,
                    _ => unreachable!("`Keys` accepts only the keys in `KEYS`"),
                }
            }
        }
        scale.given = keys.into_given();
        Some(scale)
    }
}
