//! Label and field selectors applied to objects of one kind.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::codec::decode_cached;
use crate::error::{Error, Result};
use crate::registry::options::{FieldView, ListOptions};
use crate::registry::selector::{FieldSelector, LabelSelector, field_value};
use crate::runtime::ResourceInfo;
use crate::runtime::object;
use crate::storage::cacher::CachedObject;

/// The selectors of a list or watch.
#[derive(Clone, Debug, Default)]
pub(crate) struct Filter {
    labels: Option<LabelSelector>,
    fields: Option<FieldSelector>,
    /// The version the field selector speaks of, when not the stored one.
    view: Option<FieldView>,
}

impl Filter {
    /// Takes the selectors of `options`, refusing fields `info` (or the version of
    /// `options.field_view`) does not declare selectable.
    pub(crate) fn new(info: &ResourceInfo, options: &ListOptions) -> Result<Self> {
        let labels = options
            .label_selector
            .clone()
            .filter(|s| !s.is_everything());
        let fields = options
            .field_selector
            .clone()
            .filter(|s| !s.is_everything());
        if let Some(fields) = &fields {
            let mut allowed = vec!["metadata.name"];
            if info.namespaced() {
                allowed.push("metadata.namespace");
            }
            allowed.extend_from_slice(match &options.field_view {
                Some(view) => view.selectable_fields,
                None => info.selectable_fields,
            });
            fields
                .validate_fields(&allowed)
                .map_err(|e| Error::bad_request(e.message().to_string()))?;
        }
        let view = options.field_view.clone().filter(|_| fields.is_some());
        Ok(Self {
            labels,
            fields,
            view,
        })
    }

    /// Whether every object matches.
    pub(crate) fn is_everything(&self) -> bool {
        self.labels.is_none() && self.fields.is_none()
    }

    /// Whether a watch-cache object is selected, decoding it only when a selector needs to
    /// (see [`selects_json`](Self::selects_json)).
    pub(crate) fn selects(&self, object: &CachedObject) -> Result<bool> {
        if self.is_everything() {
            return Ok(true);
        }
        let selected = object.with_json(|json| {
            self.selects_json(json, || format!("cached object {}", object.key_suffix()))
        });
        match selected {
            Some(selected) => selected,
            None => Ok(self.matches(&decode_cached(object)?)),
        }
    }

    /// Whether the object whose JSON is `json` is selected, when the selectors read no more
    /// than its labels, name and namespace: those are read without building the object (a
    /// sixth of a full decode), which is what a list with selectors over many objects spends
    /// its time on. `None` when they read other fields: decode the object and ask
    /// [`matches`](Self::matches). `what` names the object in an error.
    pub(crate) fn selects_json(
        &self,
        json: &[u8],
        what: impl FnOnce() -> String,
    ) -> Option<Result<bool>> {
        // With a version's view, an object the view cannot show is not selected: decode it.
        let head_only = match &self.fields {
            None => true,
            Some(fields) => {
                self.view.is_none() && fields.requirements().iter().all(|r| Head::reads(&r.field))
            }
        };
        if !head_only {
            return None;
        }
        Some(match serde_json::from_slice::<Head<'_>>(json) {
            Ok(head) => Ok(self.matches_head(&head.metadata.unwrap_or_default())),
            Err(e) => Err(Error::internal(format!("{}: {e}", what()))),
        })
    }

    fn matches_head(&self, head: &HeadMetadata<'_>) -> bool {
        if let Some(labels) = &self.labels {
            let lookup = |key: &str| head.labels.as_ref()?.get(key).map(|v| v.as_ref());
            if !labels.matches_with(lookup) {
                return false;
            }
        }
        self.fields.as_ref().is_none_or(|fields| {
            fields.matches_with(|field| {
                match field {
                    "metadata.name" => head.name.as_deref(),
                    _ => head.namespace.as_deref(),
                }
                .map(str::to_string)
            })
        })
    }

    /// Whether `object` is selected.
    pub(crate) fn matches(&self, object: &Value) -> bool {
        if let Some(labels) = &self.labels {
            if !labels.matches(&object::labels(object)) {
                return false;
            }
        }
        let Some(fields) = &self.fields else {
            return true;
        };
        match &self.view {
            // An object the version cannot show is not selected (it fails to convert on its
            // way out too, with the error).
            Some(view) => match (view.show)(object) {
                Ok(shown) => fields.matches_with(|field| field_value(&shown, field)),
                Err(_) => false,
            },
            None => fields.matches_with(|field| field_value(object, field)),
        }
    }
}

/// What selectors without fields beyond name and namespace read of a stored object: its JSON
/// is walked (and checked) whole, but only these are kept, borrowed where unescaped.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    metadata: Option<HeadMetadata<'a>>,
}

#[derive(Default, Deserialize)]
struct HeadMetadata<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    labels: Option<BTreeMap<Cow<'a, str>, Cow<'a, str>>>,
}

impl Head<'_> {
    /// Whether a field selector on `field` can be answered from the head: name and namespace
    /// read the same in every version, so the version's view of the object does not matter.
    fn reads(field: &str) -> bool {
        matches!(field, "metadata.name" | "metadata.namespace")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Reading only the head selects exactly what decoding the whole object selects.
    #[test]
    fn the_head_selects_as_the_whole_object_does() {
        let objects = [
            json!({"metadata": {"name": "a", "namespace": "one", "labels": {"app": "web", "tier": "x"}}}),
            json!({"metadata": {"name": "b\u{e9}\"q", "namespace": "two", "labels": {"app": "db"}}}),
            json!({"metadata": {"name": "c", "namespace": "one", "labels": null}}),
            json!({"metadata": {"name": "d", "namespace": "two"}}),
            json!({"kind": "NoMetadata"}),
            json!({"metadata": null}),
        ];
        let labels = [
            None,
            Some("app=web"),
            Some("app!=web"),
            Some("app"),
            Some("!app"),
            Some("app in (web, db)"),
            Some("tier notin (x)"),
        ];
        let fields = [
            None,
            Some("metadata.name=a"),
            Some("metadata.namespace!=one"),
            Some("metadata.name=b\u{e9}\"q,metadata.namespace=two"),
        ];
        for object in &objects {
            let bytes = serde_json::to_vec(object).unwrap();
            let head: Head<'_> = serde_json::from_slice(&bytes).unwrap();
            let head = head.metadata.unwrap_or_default();
            for label in labels {
                for field in fields {
                    let filter = Filter {
                        labels: label.map(|s| LabelSelector::parse(s).unwrap()),
                        fields: field.map(|s| FieldSelector::parse(s).unwrap()),
                        view: None,
                    };
                    assert_eq!(
                        filter.matches_head(&head),
                        filter.matches(object),
                        "{object} with labels {label:?} and fields {field:?}"
                    );
                }
            }
        }
    }
}
