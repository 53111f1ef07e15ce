//! Options of the REST verbs, decoded from query parameters and bodies by `endpoints` and
//! handed to storage. They mirror `meta.k8s.io/v1` `GetOptions`, `ListOptions`, ... .

use std::sync::Arc;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::registry::selector::{FieldSelector, LabelSelector};
use crate::runtime::FieldError;

/// How `resourceVersion` on a list is to be interpreted (`resourceVersionMatch`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResourceVersionMatch {
    /// Not given: `resourceVersion` unset means latest, `"0"` means any, `N` not older than N.
    #[default]
    Unset,
    /// `NotOlderThan`.
    NotOlderThan,
    /// `Exact`.
    Exact,
}

pub use crate::runtime::FieldValidation;

/// `GetOptions`.
#[derive(Clone, Debug, Default)]
pub struct GetOptions {
    /// `resourceVersion`: `"0"` means any version may be served (from cache).
    pub resource_version: Option<String>,
}

/// `ListOptions`, for list and watch.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// `labelSelector`.
    pub label_selector: Option<LabelSelector>,
    /// `fieldSelector`.
    pub field_selector: Option<FieldSelector>,
    /// `limit`; 0 means none.
    pub limit: usize,
    /// `continue`.
    pub continue_token: Option<String>,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: ResourceVersionMatch,
    /// `timeoutSeconds` (watch), as kube-apiserver reads it: absent or 0 is the server's own
    /// timeout and a negative one ends the watch at once; any larger one is a bound, never
    /// an overflow (a watch of `i64::MAX` seconds runs until the client or server ends it).
    pub timeout_seconds: Option<i64>,
    /// `allowWatchBookmarks`.
    pub allow_watch_bookmarks: bool,
    /// `sendInitialEvents` (watch).
    pub send_initial_events: Option<bool>,
    /// The version the field selector is written in, when it is not the stored one: a
    /// version served [converted](crate::registry::converted) sets it, so that the store
    /// evaluates `fieldSelector` on each object as that version shows it (its own field
    /// names, its own selectable fields), while labels, pages and revisions stay the store's.
    pub field_view: Option<FieldView>,
}

/// How a version served converted shows a stored object to field selectors: which fields of
/// it are selectable, and the conversion of a stored object (JSON of the storage version)
/// into it. Made by [`converted`](crate::registry::converted::converted).
#[derive(Clone)]
pub struct FieldView {
    pub(crate) selectable_fields: &'static [&'static str],
    pub(crate) show: ShowFn,
}

/// A stored object (JSON of the storage version) as a version shows it.
type ShowFn = Arc<dyn Fn(&Value) -> Result<Value> + Send + Sync>;

impl FieldView {
    /// A view with `selectable_fields` (besides `metadata.name` and `metadata.namespace`),
    /// objects shown through `show`.
    pub fn new(
        selectable_fields: &'static [&'static str],
        show: impl Fn(&Value) -> Result<Value> + Send + Sync + 'static,
    ) -> Self {
        Self {
            selectable_fields,
            show: Arc::new(show),
        }
    }
}

impl std::fmt::Debug for FieldView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FieldView")
            .field("selectable_fields", &self.selectable_fields)
            .finish_non_exhaustive()
    }
}

/// Options of create, update and patch.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
    /// `fieldManager`.
    pub field_manager: Option<String>,
    /// `fieldValidation`.
    pub field_validation: FieldValidation,
    /// The uid the object must have (kube's `UpdatedObjectInfo.Preconditions`): a PUT's
    /// `metadata.uid`, so that a replace aimed at an earlier incarnation of the name is a 409
    /// `Conflict`. Patches have none.
    pub precondition_uid: Option<String>,
    /// An update of a missing object creates it, whatever the type allows (kube's
    /// `forceAllowCreate`): server-side apply's. Only on the main resource.
    pub force_allow_create: bool,
}

/// `DeleteOptions`, from the body and the query.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `preconditions.uid`.
    pub precondition_uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub precondition_resource_version: Option<String>,
    /// `gracePeriodSeconds` (accepted; objects of this framework have no grace period).
    pub grace_period_seconds: Option<i64>,
    /// `propagationPolicy`: `Foreground`, `Background` or `Orphan`. The store sets the
    /// `foregroundDeletion` or `orphan` finalizer it asks for; the cluster's garbage collector
    /// does the rest.
    pub propagation_policy: Option<String>,
    /// `orphanDependents`, the deprecated form of `propagationPolicy`: `true` is `Orphan`,
    /// `false` is `Background` (and makes a delete that leaves the object in place answer
    /// 202 Accepted).
    pub orphan_dependents: Option<bool>,
}

/// The `dryRun` list of a `DeleteOptions` body: whether it asks for a dry run. Any value but
/// `All` is kube's `ValidateDryRun` 422 on `DeleteOptions.meta.k8s.io`, the list printed as
/// Go prints a `[]string`.
///
/// ```
/// use extension_apiserver::registry::options::delete_dry_run;
/// assert_eq!(delete_dry_run(&["All".into()]).unwrap(), true);
/// assert_eq!(delete_dry_run(&[]).unwrap(), false);
/// assert_eq!(delete_dry_run(&["Nope".into()]).unwrap_err().code(), 422);
/// ```
pub fn delete_dry_run(values: &[String]) -> Result<bool> {
    dry_run(values).map_err(|e| Error::invalid_options("DeleteOptions", &[e]))
}

/// kube's `ValidateDryRun`: every value must be `All`. Whether the request is a dry run, or
/// the field error, with the values as Go prints the `[]string` (`[]string{"x"}`).
pub fn dry_run<S: AsRef<str>>(values: &[S]) -> std::result::Result<bool, FieldError> {
    if values.iter().all(|v| v.as_ref() == "All") {
        return Ok(!values.is_empty());
    }
    let quoted: Vec<String> = values.iter().map(|v| format!("{:?}", v.as_ref())).collect();
    Err(FieldError::not_supported(
        "dryRun",
        GoStrings(&quoted.join(", ")),
        &["All"],
    ))
}

/// Quoted values printed as Go prints a `[]string`.
struct GoStrings<'a>(&'a str);

impl std::fmt::Debug for GoStrings<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[]string{{{}}}", self.0)
    }
}
