//! Strategies: what create and update do to an object between the client's body and storage,
//! as `k8s.io/apiserver`'s `RESTCreateStrategy` and `RESTUpdateStrategy`.
//!
//! The generic part ([`generic`]) applies to every type alike (server-managed metadata,
//! status kept or dropped, generation); the per-type part is the [`Strategy`] trait, over the
//! typed object, with a [`StrategyContext`] saying who asked and how.

pub mod generic;

use crate::user::UserInfo;

use crate::registry::context::RequestContext;
use crate::registry::options::WriteOptions;
use crate::registry::stores::StoreSet;
use crate::runtime::{FieldError, Resource};

pub use generic::{
    UpdateTarget, clear_status_on_create, keep_what_target_may_not_change, next_generation,
    prepare_meta_for_create, prepare_meta_for_update, spec_changed,
};

/// The per-type rules of create and update: kube's `RESTCreateStrategy` and
/// `RESTUpdateStrategy` over the typed object. Every method has a default that does nothing
/// (or allows nothing), so a type overrides only what it needs.
///
/// `#[derive(Resource)]` implements it from `defaults = fn`, `validate = fn`,
/// `validate_update = fn`, `allow_create_on_update` and `allow_unconditional_update`; with
/// `#[resource(custom_strategy)]` it leaves it to you:
///
/// ```
/// use extension_apiserver::prelude::*;
///
/// #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// #[resource(group = "example.com", version = "v1", kind = "Note", namespaced, custom_strategy)]
/// pub struct Note {
///     #[serde(default)]
///     pub metadata: ObjectMeta,
///     #[serde(default)]
///     pub text: String,
/// }
///
/// impl Strategy for Note {
///     fn prepare_for_create(&mut self, ctx: &StrategyContext<'_>) {
///         // Who made it, kept in an annotation.
///         let user = ctx.user().map(|u| u.name.clone()).unwrap_or_default();
///         self.metadata.annotations.get_or_insert_with(Default::default)
///             .insert("example.com/created-by".into(), user);
///     }
///
///     fn validate(&self, _: &StrategyContext<'_>) -> Vec<FieldError> {
///         match self.text.len() {
///             0 => vec![FieldError::required("text", "")],
///             _ => vec![],
///         }
///     }
///
///     fn warnings_on_create(&self, _: &StrategyContext<'_>) -> Vec<String> {
///         match self.text.len() > 100 {
///             true => vec!["text is longer than 100 characters".into()],
///             false => vec![],
///         }
///     }
///
///     fn canonicalize(&mut self) {
///         self.text = self.text.trim().to_string();
///     }
/// }
/// ```
///
/// On create the store runs, in kube's order: decoding, [`default_fields`](Self::default_fields),
/// the generic preparation, [`prepare_for_create`](Self::prepare_for_create), the name from
/// `generateName`, metadata validation and [`validate`](Self::validate),
/// [`warnings_on_create`](Self::warnings_on_create), [`canonicalize`](Self::canonicalize).
/// On update: decoding, `default_fields`, the generic preparation,
/// [`prepare_for_update`](Self::prepare_for_update), validation with
/// [`validate_update`](Self::validate_update), [`warnings_on_update`](Self::warnings_on_update),
/// `canonicalize`, then the generation bump when anything but metadata and status changed.
pub trait Strategy: Resource {
    /// Fills defaults, on create and update, before anything else (kube decodes with
    /// defaulting before its strategy runs). It has no context: defaults depend on the object
    /// alone, as kube's `SetDefaults_*`.
    fn default_fields(&mut self) {}

    /// Changes a new object before it is validated (kube's `PrepareForCreate`). Status and
    /// server-managed metadata are already cleared.
    fn prepare_for_create(&mut self, ctx: &StrategyContext<'_>) {
        let _ = ctx;
    }

    /// Changes the new state of an object before it is validated (kube's
    /// `PrepareForUpdate`): what an update may not change is already put back from `old`.
    fn prepare_for_update(&mut self, old: &Self, ctx: &StrategyContext<'_>) {
        let _ = (old, ctx);
    }

    /// Validates a new object (kube's `Validate`). Each error becomes one
    /// `details.causes` entry of a 422 `Invalid`.
    fn validate(&self, ctx: &StrategyContext<'_>) -> Vec<FieldError> {
        let _ = ctx;
        Vec::new()
    }

    /// Validates an update of `old` to `self` (kube's `ValidateUpdate`). Defaults to
    /// [`validate`](Self::validate) of the new object.
    fn validate_update(&self, old: &Self, ctx: &StrategyContext<'_>) -> Vec<FieldError> {
        let _ = old;
        self.validate(ctx)
    }

    /// Warnings for the client about a valid new object (kube's `WarningsOnCreate`), sent as
    /// `Warning: 299 - "..."` headers.
    fn warnings_on_create(&self, ctx: &StrategyContext<'_>) -> Vec<String> {
        let _ = ctx;
        Vec::new()
    }

    /// Warnings for the client about a valid update (kube's `WarningsOnUpdate`).
    fn warnings_on_update(&self, old: &Self, ctx: &StrategyContext<'_>) -> Vec<String> {
        let _ = (old, ctx);
        Vec::new()
    }

    /// Puts a valid object in its canonical form before it is stored (kube's
    /// `Canonicalize`): sorting a list whose order does not matter, say.
    fn canonicalize(&mut self) {}

    /// Whether [`canonicalize`](Self::canonicalize) may change the object. `true` unless
    /// said otherwise; `#[derive(Resource)]`, which never writes `canonicalize`, says
    /// `false`. When `false`, a create stores the JSON its schema checks read instead of
    /// encoding the object a second time (one JSON tree per create fewer). Leave
    /// it `true` in any impl that writes `canonicalize`: a `false` there creates the object
    /// as it was before `canonicalize`.
    const CANONICALIZES: bool = true;

    /// Whether a PUT to a name that does not exist creates the object (kube's
    /// `AllowCreateOnUpdate`), answering 201. The body must then carry no `resourceVersion`
    /// (404 otherwise, as kube answers). `false`, as for custom resources.
    fn allow_create_on_update() -> bool {
        false
    }

    /// Whether an update without `metadata.resourceVersion` applies to whatever is stored
    /// (kube's `AllowUnconditionalUpdate`). `false`, as for custom resources and
    /// sample-apiserver: such an update is refused with 422 (`metadata.resourceVersion:
    /// Invalid value: 0x0: must be specified for an update`). Patches never need one.
    fn allow_unconditional_update() -> bool {
        false
    }
}

/// What a [`Strategy`] knows about the request: who made it, in which namespace, through which
/// subresource, as a dry run or not, with which options. Warnings go through the strategy's
/// `warnings_on_*` methods, or [`warn`](Self::warn) from anywhere.
#[derive(Clone, Copy, Debug)]
pub struct StrategyContext<'a> {
    request: &'a RequestContext,
    options: &'a WriteOptions,
    subresource: Option<&'static str>,
    /// The server's stores, which `with_stores` and `reader` (in the store module, which
    /// makes readers) set and read.
    pub(crate) stores: Option<&'a StoreSet>,
}

impl<'a> StrategyContext<'a> {
    /// The context of a write of the main resource: for unit tests of a strategy, and for
    /// storage of your own that runs one.
    ///
    /// ```
    /// use extension_apiserver::registry::context::RequestContext;
    /// use extension_apiserver::registry::options::WriteOptions;
    /// use extension_apiserver::registry::strategy::StrategyContext;
    /// let request = RequestContext::namespaced("ns");
    /// let options = WriteOptions { dry_run: true, ..WriteOptions::default() };
    /// let ctx = StrategyContext::new(&request, &options);
    /// assert!(ctx.dry_run());
    /// assert_eq!(ctx.namespace(), Some("ns"));
    /// ```
    pub fn new(request: &'a RequestContext, options: &'a WriteOptions) -> Self {
        Self {
            request,
            options,
            subresource: None,
            stores: None,
        }
    }

    /// The same context for a write through `subresource` (`status`, `scale`).
    pub fn for_subresource(mut self, subresource: Option<&'static str>) -> Self {
        self.subresource = subresource;
        self
    }

    /// The user who made the request, when it went through authentication.
    pub fn user(&self) -> Option<&'a UserInfo> {
        self.request.user.as_ref()
    }

    /// Whether the user belongs to `group`.
    pub fn user_in_group(&self, group: &str) -> bool {
        self.user().is_some_and(|u| u.in_group(group))
    }

    /// The namespace of the request's URL; `None` for cluster-scoped kinds.
    pub fn namespace(&self) -> Option<&'a str> {
        self.request.namespace.as_deref()
    }

    /// The subresource written through: `None` for the object itself, `Some("status")`,
    /// `Some("scale")`.
    pub fn subresource(&self) -> Option<&'static str> {
        self.subresource
    }

    /// `dryRun=All`: the object is checked and answered, not stored. A strategy must not act
    /// on the world outside the object when it is set.
    pub fn dry_run(&self) -> bool {
        self.options.dry_run
    }

    /// The write's options (`fieldManager`, `fieldValidation`, …).
    pub fn options(&self) -> &'a WriteOptions {
        self.options
    }

    /// The whole request context.
    pub fn request(&self) -> &'a RequestContext {
        self.request
    }

    /// Adds a `Warning` header to the answer.
    pub fn warn(&self, message: impl Into<String>) {
        self.request.warn(message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_reads_user_namespace_and_options() {
        let user = UserInfo::new("alice", ["editors".to_string()]);
        let request = RequestContext::namespaced("ns").with_user(user);
        let options = WriteOptions {
            dry_run: true,
            field_manager: Some("kubectl".into()),
            ..WriteOptions::default()
        };
        let ctx = StrategyContext::new(&request, &options).for_subresource(Some("status"));
        assert_eq!(ctx.user().unwrap().name, "alice");
        assert!(ctx.user_in_group("editors") && !ctx.user_in_group("admins"));
        assert_eq!(ctx.namespace(), Some("ns"));
        assert_eq!(ctx.subresource(), Some("status"));
        assert!(ctx.dry_run());
        assert_eq!(ctx.options().field_manager.as_deref(), Some("kubectl"));
        ctx.warn("w");
        assert_eq!(request.warnings(), ["w"]);
    }
}
