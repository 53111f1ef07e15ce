//! Query parameters of resource requests, decoded into the options of `registry`.
//! As in kube-apiserver, a parameter nobody reads is ignored; a known one with a value that
//! does not decode is 400 `BadRequest`, and options that decode but break a rule (an
//! unsupported `dryRun`, `resourceVersionMatch` without `resourceVersion`, ...) are 422
//! `Invalid` naming the options kind (`ListOptions.meta.k8s.io "" is invalid: ...`).

use std::collections::HashMap;

use crate::endpoints::negotiation::Shape;
use crate::endpoints::request_info::{Verb, flag};
use crate::error::{Error, Result};
use crate::registry::options::{
    DeleteOptions, FieldValidation, GetOptions, ListOptions, ResourceVersionMatch, WriteOptions,
    dry_run,
};
use crate::registry::selector::{FieldSelector, LabelSelector};
use crate::runtime::FieldError;

/// The decoded query string of one request.
pub struct Query {
    values: HashMap<String, String>,
    verb: Verb,
}

impl Query {
    /// Decodes `query` (percent-encoded) of a request for `verb`. Of a repeated parameter the
    /// first value counts, as Go's `url.Values.Get`.
    pub fn parse(query: Option<&str>, verb: Verb) -> Result<Query> {
        let mut values = HashMap::new();
        for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            values
                .entry(k.into_owned())
                .or_insert_with(|| v.into_owned());
        }
        Ok(Query { values, verb })
    }

    /// The `meta.k8s.io` kind of this verb's options, named in its 422 answers.
    fn options_kind(&self) -> &'static str {
        match self.verb {
            Verb::Create => "CreateOptions",
            Verb::Update => "UpdateOptions",
            Verb::Patch => "PatchOptions",
            Verb::Delete | Verb::DeleteCollection => "DeleteOptions",
            Verb::Get => "GetOptions",
            _ => "ListOptions",
        }
    }

    fn invalid(&self, kind: &str, errors: Vec<FieldError>) -> Result<()> {
        if errors.is_empty() {
            return Ok(());
        }
        Err(Error::invalid_options(kind, &errors))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// A flag parameter (see [`flag`]); absent is false.
    fn bool(&self, name: &str) -> Result<bool> {
        Ok(self.get(name).is_some_and(flag))
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

    /// `includeObject` of a `Table` answer: `None`, `Metadata` (default) or `Object`. Only a
    /// `Table` reads it, so only a `Table` answer fails on a value it does not know.
    pub fn include_object(&self, shape: Shape) -> Result<IncludeObject> {
        match self.get("includeObject") {
            _ if shape != Shape::Table => Ok(IncludeObject::Metadata),
            None | Some("" | "Metadata") => Ok(IncludeObject::Metadata),
            Some("None") => Ok(IncludeObject::None),
            Some("Object") => Ok(IncludeObject::Object),
            Some(v) => Err(Error::bad_request(format!(
                "unrecognized includeObject value: {v:?}"
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
        let send_initial_events = match self.get("sendInitialEvents") {
            None => None,
            Some(_) => Some(self.bool("sendInitialEvents")?),
        };
        self.invalid("ListOptions", self.list_option_errors(send_initial_events)?)?;
        let resource_version_match = match self.get("resourceVersionMatch") {
            Some("NotOlderThan") => ResourceVersionMatch::NotOlderThan,
            Some("Exact") => ResourceVersionMatch::Exact,
            _ => ResourceVersionMatch::Unset,
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
            timeout_seconds: self.number::<i64>("timeoutSeconds")?,
            allow_watch_bookmarks: self.bool("allowWatchBookmarks")?,
            send_initial_events,
            field_view: None,
        })
    }

    /// kube-apiserver's `ValidateListOptions` (with the WatchList feature on).
    fn list_option_errors(&self, send_initial_events: Option<bool>) -> Result<Vec<FieldError>> {
        const FIELD: &str = "resourceVersionMatch";
        let matching = self.get(FIELD).unwrap_or_default();
        let resource_version = self.get("resourceVersion").unwrap_or_default();
        let continuing = !self.get("continue").unwrap_or_default().is_empty();
        let mut errors = Vec::new();
        if self.is_watch()? {
            if send_initial_events.is_some() && matching != "NotOlderThan" {
                errors.push(FieldError::forbidden(
                    FIELD,
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if !matching.is_empty() {
                if send_initial_events.is_none() {
                    errors.push(FieldError::forbidden(FIELD, "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"));
                }
                if matching != "NotOlderThan" {
                    errors.push(FieldError::not_supported(
                        FIELD,
                        matching,
                        &["NotOlderThan"],
                    ));
                }
                if continuing {
                    errors.push(FieldError::forbidden(
                        FIELD,
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
            return Ok(errors);
        }
        if !matching.is_empty() {
            if resource_version.is_empty() {
                errors.push(FieldError::forbidden(
                    FIELD,
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if continuing {
                errors.push(FieldError::forbidden(
                    FIELD,
                    "resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if matching != "Exact" && matching != "NotOlderThan" {
                errors.push(FieldError::not_supported(
                    FIELD,
                    matching,
                    &["Exact", "NotOlderThan", ""],
                ));
            }
            if matching == "Exact" && resource_version == "0" {
                errors.push(FieldError::forbidden(
                    FIELD,
                    "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        if send_initial_events.is_some() {
            errors.push(FieldError::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
        Ok(errors)
    }

    /// `dryRun`, checked as kube-apiserver's `ValidateDryRun`: only `All`.
    fn dry_run(&self, errors: &mut Vec<FieldError>) -> bool {
        let values: Vec<&str> = self.get("dryRun").into_iter().collect();
        dry_run(&values).unwrap_or_else(|e| {
            errors.push(e);
            false
        })
    }

    /// Options of create, update and patch (422 `Invalid` as `ValidateCreateOptions` & co.).
    pub fn write_options(&self) -> Result<WriteOptions> {
        self.write_options_of(false).map(|(options, _)| options)
    }

    /// The options of a server-side apply (a PATCH of `application/apply-patch+yaml`), and
    /// its `force`: as [`write_options`](Self::write_options), `fieldManager` required.
    pub fn apply_options(&self) -> Result<(WriteOptions, bool)> {
        self.write_options_of(true)
    }

    fn write_options_of(&self, apply: bool) -> Result<(WriteOptions, bool)> {
        let mut errors = Vec::new();
        let field_validation = match self.get("fieldValidation") {
            None | Some("") | Some("Warn") => FieldValidation::Warn,
            Some("Ignore") => FieldValidation::Ignore,
            Some("Strict") => FieldValidation::Strict,
            Some(v) => {
                errors.push(FieldError::not_supported(
                    "fieldValidation",
                    v,
                    &["", "Ignore", "Strict", "Warn"],
                ));
                FieldValidation::Warn
            }
        };
        let dry_run = self.dry_run(&mut errors);
        let field_manager = self.get("fieldManager").unwrap_or_default();
        errors.extend(field_manager_errors(field_manager));
        if apply && field_manager.is_empty() {
            errors.push(FieldError::required(
                "fieldManager",
                "is required for apply patch",
            ));
        }
        if !apply && self.verb == Verb::Patch && self.get("force").is_some() {
            // Only server-side apply takes `force`.
            errors.push(FieldError::forbidden(
                "force",
                "may not be specified for non-apply patch",
            ));
        }
        self.invalid(self.options_kind(), errors)?;
        let options = WriteOptions {
            dry_run,
            field_manager: self.get("fieldManager").map(str::to_string),
            field_validation,
            precondition_uid: None,
            force_allow_create: apply,
        };
        Ok((options, self.get("force").is_some_and(flag)))
    }

    /// `DeleteOptions` from the query; a body, when sent, is merged in by the handler.
    pub fn delete_options(&self) -> Result<DeleteOptions> {
        let mut errors = Vec::new();
        let dry_run = self.dry_run(&mut errors);
        self.invalid("DeleteOptions", errors)?;
        Ok(DeleteOptions {
            dry_run,
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

/// kube-apiserver's `ValidateFieldManager`: at most 128 bytes, every character printable.
fn field_manager_errors(manager: &str) -> Vec<FieldError> {
    const FIELD: &str = "fieldManager";
    let mut errors = Vec::new();
    if manager.len() > 128 {
        errors.push(FieldError::too_long(FIELD, 128));
    }
    for (i, c) in manager.char_indices() {
        if c.is_control() || (c.is_whitespace() && c != ' ') {
            let detail = format!("invalid character U+{:04X} (at position {i})", c as u32);
            errors.push(FieldError::invalid(FIELD, manager, &detail));
        }
    }
    errors
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
    fn unknown_parameters_are_ignored_and_bad_values_refused() {
        let q = Query::parse(Some("bogus=1&limit=abc"), Verb::Get)
            .ok()
            .unwrap();
        assert!(q.get_options().is_ok(), "limit is no parameter of get");
        let q = Query::parse(Some("limit=abc&bogus=1"), Verb::List)
            .ok()
            .unwrap();
        assert_eq!(q.list_options().unwrap_err().code(), 400);
        let q = Query::parse(Some("limit=2&limit=abc"), Verb::List)
            .ok()
            .unwrap();
        assert_eq!(q.list_options().unwrap().limit, 2, "the first value counts");
    }

    #[test]
    fn invalid_options_are_422_naming_their_kind() {
        let q = Query::parse(Some("dryRun=Some"), Verb::Create)
            .ok()
            .unwrap();
        let e = q.write_options().unwrap_err();
        assert_eq!((e.code(), e.reason()), (422, "Invalid"));
        assert_eq!(
            e.message(),
            r#"CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: []string{"Some"}: supported values: "All""#
        );
        let q = Query::parse(Some("fieldValidation=Loud"), Verb::Patch)
            .ok()
            .unwrap();
        let e = q.write_options().unwrap_err();
        assert!(e.message().starts_with("PatchOptions.meta.k8s.io"), "{e}");
        let q = Query::parse(Some("force=false"), Verb::Patch).ok().unwrap();
        assert_eq!(
            q.write_options().unwrap_err().message(),
            r#"PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch"#
        );
        let long = format!("fieldManager={}", "m".repeat(129));
        let q = Query::parse(Some(&long), Verb::Update).ok().unwrap();
        assert_eq!(
            q.write_options().unwrap_err().message(),
            r#"UpdateOptions.meta.k8s.io "" is invalid: fieldManager: Too long: may not be more than 128 bytes"#
        );
        let q = Query::parse(Some("fieldManager=a%07b"), Verb::Create)
            .ok()
            .unwrap();
        assert_eq!(
            q.write_options().unwrap_err().message(),
            r#"CreateOptions.meta.k8s.io "" is invalid: fieldManager: Invalid value: "a\u{7}b": invalid character U+0007 (at position 1)"#
        );
        let q = Query::parse(Some("fieldManager=kubectl-edit"), Verb::Create)
            .ok()
            .unwrap();
        assert!(q.write_options().is_ok());
        let q = Query::parse(Some("dryRun=x"), Verb::Delete).ok().unwrap();
        assert_eq!(q.delete_options().unwrap_err().code(), 422);
    }

    #[test]
    fn list_options_follow_validate_list_options() {
        let cases = [
            (
                "resourceVersionMatch=Exact",
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            ),
            (
                "resourceVersionMatch=Exact&resourceVersion=0",
                "resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ),
            (
                "resourceVersionMatch=Newest&resourceVersion=5",
                "resourceVersionMatch: Unsupported value: \"Newest\": supported values: \"Exact\", \"NotOlderThan\", \"\"",
            ),
            (
                "sendInitialEvents=true",
                "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
            ),
            (
                "watch=1&resourceVersionMatch=NotOlderThan",
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ),
            (
                "watch=1&sendInitialEvents=true",
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ),
        ];
        for (query, message) in cases {
            let q = Query::parse(Some(query), Verb::List).ok().unwrap();
            let e = q.list_options().unwrap_err();
            assert_eq!((e.code(), e.reason()), (422, "Invalid"), "{query}");
            assert_eq!(
                e.message(),
                format!("ListOptions.meta.k8s.io \"\" is invalid: {message}"),
                "{query}"
            );
            let details = e.status().details.as_ref().unwrap();
            assert_eq!(
                (details.group.as_str(), details.kind.as_str()),
                ("meta.k8s.io", "ListOptions")
            );
            assert_eq!(details.causes[0].field, message.split(':').next().unwrap());
        }
        let ok = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan";
        assert!(
            Query::parse(Some(ok), Verb::Watch)
                .ok()
                .unwrap()
                .list_options()
                .is_ok()
        );
        let ok = "resourceVersionMatch=NotOlderThan&resourceVersion=0";
        assert!(
            Query::parse(Some(ok), Verb::List)
                .ok()
                .unwrap()
                .list_options()
                .is_ok()
        );
    }

    #[test]
    fn list_options_decode() {
        let q = Query::parse(
            Some("limit=5&resourceVersion=0&allowWatchBookmarks=true&watch=1&timeoutSeconds=9"),
            Verb::Watch,
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

    /// Numbers as kube's int64 parameters: any int64 is taken (what it sizes is bounded
    /// where it is used), a negative limit is none, a negative timeout is kept.
    #[test]
    fn extreme_numbers_decode() {
        let options = |query: &str| {
            Query::parse(Some(query), Verb::Watch)
                .unwrap()
                .list_options()
                .unwrap()
        };
        let o = options("limit=9223372036854775807&timeoutSeconds=9223372036854775807");
        assert_eq!(o.limit, i64::MAX as usize);
        assert_eq!(o.timeout_seconds, Some(i64::MAX));
        let o = options("limit=-5&timeoutSeconds=-1");
        assert_eq!((o.limit, o.timeout_seconds), (0, Some(-1)));
        let past = Query::parse(Some("limit=9223372036854775808"), Verb::List).unwrap();
        assert_eq!(past.list_options().unwrap_err().code(), 400);
    }
}
