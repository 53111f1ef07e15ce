//! Label and field selectors applied to objects of one kind.

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

    /// Whether a watch-cache object is selected, decoding it only when a selector needs to.
    pub(crate) fn selects(&self, object: &CachedObject) -> Result<bool> {
        if self.is_everything() {
            return Ok(true);
        }
        Ok(self.matches(&decode_cached(object)?))
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
