//! Query parameters of resource requests, decoded into the options of `registry`.
//! A parameter no verb knows is refused with 400, and so is a known one with a bad value.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::registry::options::{
    DeleteOptions, FieldValidation, GetOptions, ListOptions, ResourceVersionMatch, WriteOptions,
};
use crate::registry::selector::{FieldSelector, LabelSelector};

/// The decoded query string, with the names each verb accepts.
pub struct Query {
    values: HashMap<String, String>,
}

/// Parameters every verb accepts.
const COMMON: &[&str] = &["pretty", "timeout"];
const GET: &[&str] = &["resourceVersion", "includeObject", "export", "exact"];
const LIST: &[&str] = &[
    "labelSelector",
    "fieldSelector",
    "limit",
    "continue",
    "resourceVersion",
    "resourceVersionMatch",
    "timeoutSeconds",
    "allowWatchBookmarks",
    "watch",
    "sendInitialEvents",
    "includeObject",
];
const WRITE: &[&str] = &["dryRun", "fieldManager", "fieldValidation"];
const PATCH: &[&str] = &["dryRun", "fieldManager", "fieldValidation", "force"];
const DELETE: &[&str] = &[
    "dryRun",
    "gracePeriodSeconds",
    "propagationPolicy",
    "orphanDependents",
    "ignoreStoreReadErrorWithClusterBreakingPotential",
];

impl Query {
    /// Decodes `query` (percent-encoded) for `verb`, refusing unknown parameters.
    pub fn parse(query: Option<&str>, verb: &str) -> Result<Query> {
        let allowed: Vec<&[&str]> = match verb {
            "get" => vec![GET],
            "list" | "watch" => vec![LIST],
            "create" | "update" => vec![WRITE],
            "patch" => vec![PATCH],
            "delete" => vec![DELETE],
            "deletecollection" => vec![DELETE, LIST],
            _ => vec![],
        };
        let mut values = HashMap::new();
        for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            let known =
                COMMON.contains(&k.as_ref()) || allowed.iter().any(|a| a.contains(&k.as_ref()));
            if !known {
                return Err(Error::bad_request(format!(
                    "unknown query parameter {k:?} for {verb}"
                )));
            }
            values.insert(k.into_owned(), v.into_owned());
        }
        Ok(Query { values })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    fn bool(&self, name: &str) -> Result<bool> {
        match self.get(name) {
            None | Some("" | "false" | "0") => Ok(false),
            Some("true" | "1") => Ok(true),
            Some(v) => Err(Error::bad_request(format!(
                "invalid value {v:?} for {name}: must be true or false"
            ))),
        }
    }

    fn number<N: std::str::FromStr>(&self, name: &str) -> Result<Option<N>> {
        match self.get(name) {
            None | Some("") => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                Error::bad_request(format!(
                    "invalid value {v:?} for {name}: must be an integer"
                ))
            }),
        }
    }

    /// Whether `watch` is set.
    pub fn is_watch(&self) -> Result<bool> {
        self.bool("watch")
    }

    /// `includeObject` of a Table request: `None`, `Metadata` (default) or `Object`.
    pub fn include_object(&self) -> Result<IncludeObject> {
        match self.get("includeObject") {
            None | Some("" | "Metadata") => Ok(IncludeObject::Metadata),
            Some("None") => Ok(IncludeObject::None),
            Some("Object") => Ok(IncludeObject::Object),
            Some(v) => Err(Error::bad_request(format!(
                "includeObject: Unsupported value: {v:?}: supported values: \"Metadata\", \"None\", \"Object\""
            ))),
        }
    }

    /// `GetOptions`.
    pub fn get_options(&self) -> Result<GetOptions> {
        Ok(GetOptions {
            resource_version: self.get("resourceVersion").map(str::to_string),
        })
    }

    /// `ListOptions`.
    pub fn list_options(&self) -> Result<ListOptions> {
        let label_selector = match self.get("labelSelector") {
            Some(s) => {
                Some(LabelSelector::parse(s).map_err(|e| Error::bad_request(e.to_string()))?)
            }
            None => None,
        };
        let field_selector = match self.get("fieldSelector") {
            Some(s) => {
                Some(FieldSelector::parse(s).map_err(|e| Error::bad_request(e.to_string()))?)
            }
            None => None,
        };
        let limit: i64 = self.number("limit")?.unwrap_or(0);
        let resource_version_match = match self.get("resourceVersionMatch") {
            None | Some("") => ResourceVersionMatch::Unset,
            Some("NotOlderThan") => ResourceVersionMatch::NotOlderThan,
            Some("Exact") => ResourceVersionMatch::Exact,
            Some(v) => {
                return Err(Error::bad_request(format!(
                    "resourceVersionMatch: Unsupported value: {v:?}: supported values: \"Exact\", \"NotOlderThan\""
                )))
            }
        };
        let send_initial_events = match self.get("sendInitialEvents") {
            None => None,
            Some(_) => Some(self.bool("sendInitialEvents")?),
        };
        Ok(ListOptions {
            label_selector,
            field_selector,
            limit: usize::try_from(limit.max(0)).unwrap_or(0),
            continue_token: self
                .get("continue")
                .filter(|c| !c.is_empty())
                .map(str::to_string),
            resource_version: self.get("resourceVersion").map(str::to_string),
            resource_version_match,
            timeout_seconds: self.number("timeoutSeconds")?,
            allow_watch_bookmarks: self.bool("allowWatchBookmarks")?,
            send_initial_events,
        })
    }

    fn dry_run(&self) -> Result<bool> {
        match self.get("dryRun") {
            None | Some("") => Ok(false),
            Some("All") => Ok(true),
            Some(v) => Err(Error::bad_request(format!(
                "dryRun: Unsupported value: {v:?}: supported values: \"All\""
            ))),
        }
    }

    /// Options of create, update and patch.
    pub fn write_options(&self) -> Result<WriteOptions> {
        let field_validation = match self.get("fieldValidation") {
            None | Some("") | Some("Warn") => FieldValidation::Warn,
            Some("Ignore") => FieldValidation::Ignore,
            Some("Strict") => FieldValidation::Strict,
            Some(v) => {
                return Err(Error::bad_request(format!(
                    "fieldValidation: Unsupported value: {v:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
                )))
            }
        };
        Ok(WriteOptions {
            dry_run: self.dry_run()?,
            field_manager: self.get("fieldManager").map(str::to_string),
            field_validation,
            precondition_uid: None,
        })
    }

    /// `DeleteOptions` from the query; a body, when sent, is merged in by the handler.
    pub fn delete_options(&self) -> Result<DeleteOptions> {
        Ok(DeleteOptions {
            dry_run: self.dry_run()?,
            grace_period_seconds: self.number("gracePeriodSeconds")?,
            propagation_policy: self.get("propagationPolicy").map(str::to_string),
            orphan_dependents: match self.get("orphanDependents") {
                None | Some("") => None,
                Some(_) => Some(self.bool("orphanDependents")?),
            },
            ..DeleteOptions::default()
        })
    }
}

/// What a `Table` row carries besides its cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    /// Nothing.
    None,
    /// `PartialObjectMetadata` (the default).
    Metadata,
    /// The whole object.
    Object,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_bad_parameters_are_refused() {
        assert_eq!(
            Query::parse(Some("bogus=1"), "get").err().unwrap().code(),
            400
        );
        assert_eq!(
            Query::parse(Some("limit=1"), "get").err().unwrap().code(),
            400
        );
        let q = Query::parse(Some("limit=abc"), "list").ok().unwrap();
        assert_eq!(q.list_options().unwrap_err().code(), 400);
        let q = Query::parse(Some("dryRun=Some"), "create").ok().unwrap();
        assert_eq!(q.write_options().unwrap_err().code(), 400);
    }

    #[test]
    fn list_options_decode() {
        let q = Query::parse(
            Some("limit=5&resourceVersion=0&allowWatchBookmarks=true&watch=1&timeoutSeconds=9"),
            "watch",
        )
        .ok()
        .unwrap();
        let o = q.list_options().unwrap();
        assert_eq!(o.limit, 5);
        assert_eq!(o.resource_version.as_deref(), Some("0"));
        assert!(o.allow_watch_bookmarks);
        assert_eq!(o.timeout_seconds, Some(9));
        assert!(q.is_watch().unwrap());
    }
}
