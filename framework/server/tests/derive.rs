//! `#[derive(Resource)]`: the generated `extension_apiserver::Resource` and `kube_core::Resource` impls.

use std::borrow::Cow;

use extension_apiserver::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use extension_apiserver::k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use extension_apiserver::registry::context::RequestContext;
use extension_apiserver::registry::options::WriteOptions;
use extension_apiserver::{
    ColumnType, FieldError, GarbageCollectionPolicy, PrinterColumn, Resource, ResourceInfo, Scope,
    Strategy, StrategyContext,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A namespaced kind with every key given.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(group = "wardle.example.com", version = "v1alpha1", kind = "Flunder", namespaced,
           status = "FlunderStatus", shortnames = ["fl"], categories = ["all", "wardle"],
           printcolumn(name = "Reference", type = "string", json_path = ".spec.reference",
                       description = "The referenced object", priority = 0),
           printcolumn(name = "Count", type = "integer", format = "int32",
                       json_path = ".spec.count", priority = 1),
           selectable_field = ".spec.reference", selectable_field = ".status.phase",
           validate = validate_flunder, defaults = default_flunder,
           validate_update = validate_flunder_update)]
pub struct Flunder {
    pub metadata: ObjectMeta,
    pub spec: FlunderSpec,
    pub status: Option<FlunderStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FlunderSpec {
    pub reference: String,
    pub count: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FlunderStatus {
    pub phase: String,
}

fn validate_flunder(flunder: &Flunder) -> Vec<FieldError> {
    if flunder.spec.reference.is_empty() {
        vec![FieldError::required("spec.reference", "")]
    } else {
        Vec::new()
    }
}

fn validate_flunder_update(new: &Flunder, old: &Flunder) -> Vec<FieldError> {
    if new.spec.reference == old.spec.reference {
        Vec::new()
    } else {
        vec![FieldError::forbidden(
            "spec.reference",
            "field is immutable",
        )]
    }
}

fn default_flunder(flunder: &mut Flunder) {
    if flunder.spec.count == 0 {
        flunder.spec.count = 1;
    }
}

/// A cluster-scoped kind with only the required keys, a `status` field that is not a
/// subresource, and a kind ending in `y`.
#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(group = "wardle.example.com", version = "v1", kind = "Policy")]
pub struct Policy {
    pub metadata: ObjectMeta,
    pub status: Option<String>,
}

/// A kind ending in `s`, in the core group, with a non-`Option` status, overridden names and
/// the runtime named through another path.
#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(
    crate = "runtime",
    group = "",
    version = "v2beta3",
    kind = "Class",
    status = "ClassStatus",
    singular = "klass",
    plural = "klasses",
    allow_unconditional_update,
    allow_create_on_update,
    garbage_collection = "OrphanDependents"
)]
pub struct Class {
    pub metadata: ObjectMeta,
    pub status: ClassStatus,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct ClassStatus {}

/// Re-exported under another name: the derive must not need `::apiserver` when told so.
use extension_apiserver as runtime;

/// A kind ending in `s` with the default plural; a vowel before the final `y` keeps `-ys`.
#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(group = "g.example.com", version = "v1", kind = "Status")]
pub struct StatusKind {
    pub metadata: ObjectMeta,
}

#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(group = "g.example.com", version = "v1", kind = "Gateway")]
pub struct Gateway {
    pub metadata: ObjectMeta,
}

/// A kind that already reads as a plural keeps it, as kubebuilder names it.
#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(group = "g.example.com", version = "v1", kind = "BackupStats")]
pub struct BackupStats {
    pub metadata: ObjectMeta,
}

fn named(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        ..ObjectMeta::default()
    }
}

#[test]
fn namespaced_info_has_every_key() {
    let expected = ResourceInfo {
        group: "wardle.example.com",
        version: "v1alpha1",
        kind: "Flunder",
        plural: "flunders",
        singular: "flunder",
        scope: Scope::Namespaced,
        short_names: &["fl"],
        categories: &["all", "wardle"],
        status: true,
        scale: None,
        printer_columns: &[
            PrinterColumn {
                name: "Reference",
                type_: ColumnType::String,
                format: "",
                json_path: ".spec.reference",
                description: "The referenced object",
                priority: 0,
            },
            PrinterColumn {
                name: "Count",
                type_: ColumnType::Integer,
                format: "int32",
                json_path: ".spec.count",
                description: "",
                priority: 1,
            },
        ],
        selectable_fields: &["spec.reference", "status.phase"],
    };
    assert_eq!(Flunder::INFO, expected);
    assert_eq!(Flunder::INFO.api_version(), "wardle.example.com/v1alpha1");
}

#[test]
fn cluster_scoped_info_has_defaults() {
    let info = Policy::INFO;
    assert_eq!(info.scope, Scope::Cluster);
    assert_eq!((info.plural, info.singular), ("policies", "policy"));
    assert!(!info.status, "a `status` field alone is not a subresource");
    assert!(info.short_names.is_empty() && info.categories.is_empty());
    assert!(info.printer_columns.is_empty() && info.selectable_fields.is_empty());
}

fn unconditional<T: Strategy>() -> bool {
    T::allow_unconditional_update()
}

/// Runs `f` with the context of a plain write.
fn with_ctx<R>(f: impl FnOnce(&StrategyContext<'_>) -> R) -> R {
    let (request, options) = (RequestContext::default(), WriteOptions::default());
    f(&StrategyContext::new(&request, &options))
}

#[test]
fn strategy_choices_default_as_in_kube_and_can_be_set() {
    // Off by default, as custom resources and sample-apiserver have it.
    assert!(!unconditional::<Policy>());
    assert_eq!(
        Policy::GARBAGE_COLLECTION_POLICY,
        GarbageCollectionPolicy::DeleteDependents
    );
    assert!(unconditional::<Class>());
    assert!(!Policy::allow_create_on_update());
    assert!(Class::allow_create_on_update());
    assert_eq!(
        Class::GARBAGE_COLLECTION_POLICY,
        GarbageCollectionPolicy::OrphanDependents
    );
}

#[test]
fn plurals_follow_english_rules() {
    assert_eq!(StatusKind::INFO.plural, "statuses");
    assert_eq!(StatusKind::INFO.singular, "status");
    assert_eq!(Gateway::INFO.plural, "gateways");
    assert_eq!(BackupStats::INFO.plural, "backupstats");
    assert_eq!(BackupStats::INFO.singular, "backupstats");
}

#[test]
fn overrides_and_core_group() {
    let info = Class::INFO;
    assert_eq!((info.plural, info.singular), ("klasses", "klass"));
    assert_eq!(info.api_version(), "v2beta3");
    assert!(info.status);
}

#[test]
fn metadata_accessors_reach_the_field() {
    let mut flunder = Flunder {
        metadata: named("a"),
        ..Flunder::default()
    };
    assert_eq!(flunder.metadata().name.as_deref(), Some("a"));
    flunder.metadata_mut().namespace = Some("ns".to_string());
    assert_eq!(flunder.metadata.namespace.as_deref(), Some("ns"));
}

#[test]
fn hooks_delegate_to_the_given_functions() {
    let mut flunder = Flunder::default();
    assert_eq!(
        with_ctx(|ctx| flunder.validate(ctx)),
        vec![FieldError::required("spec.reference", "")]
    );
    flunder.default_fields();
    assert_eq!(flunder.spec.count, 1);

    let old = Flunder {
        spec: FlunderSpec {
            reference: "x".into(),
            count: 1,
        },
        ..Flunder::default()
    };
    let new = Flunder {
        spec: FlunderSpec {
            reference: "y".into(),
            count: 1,
        },
        ..Flunder::default()
    };
    assert_eq!(
        with_ctx(|ctx| new.validate_update(&old, ctx)),
        vec![FieldError::forbidden(
            "spec.reference",
            "field is immutable"
        )]
    );
    assert!(with_ctx(|ctx| old.validate_update(&old, ctx)).is_empty());
}

#[test]
fn hooks_default_to_nothing() {
    let mut policy = Policy::default();
    policy.default_fields();
    assert!(with_ctx(|ctx| policy.validate(ctx)).is_empty());
    assert!(with_ctx(|ctx| policy.validate_update(&Policy::default(), ctx)).is_empty());
    assert!(with_ctx(|ctx| policy.warnings_on_create(ctx)).is_empty());
}

/// A kind whose strategy is written by hand: the derive leaves `Strategy` to it (a second
/// impl would not compile).
#[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[resource(group = "example.com", version = "v1", kind = "Note", custom_strategy)]
pub struct Note {
    pub metadata: ObjectMeta,
    pub text: String,
}

impl Strategy for Note {
    fn validate(&self, ctx: &StrategyContext<'_>) -> Vec<FieldError> {
        match ctx.dry_run() {
            true => vec![FieldError::forbidden("text", "no dry runs")],
            false => Vec::new(),
        }
    }

    fn canonicalize(&mut self) {
        self.text = self.text.trim().to_string();
    }
}

#[test]
fn custom_strategy_is_the_users() {
    let request = RequestContext::default();
    let options = WriteOptions {
        dry_run: true,
        ..WriteOptions::default()
    };
    let mut note = Note {
        text: " a ".into(),
        ..Note::default()
    };
    assert_eq!(
        note.validate(&StrategyContext::new(&request, &options))
            .len(),
        1
    );
    note.canonicalize();
    assert_eq!(note.text, "a");
    // A hand-written strategy may canonicalize: its writes encode the object again after.
    const { assert!(Note::CANONICALIZES) };
}

/// The derive writes no `canonicalize`, and says so: a create stores the JSON its schema
/// checks read rather than encoding the object twice.
#[test]
fn derived_strategy_does_not_canonicalize() {
    const { assert!(!Flunder::CANONICALIZES) };
    const { assert!(!Policy::CANONICALIZES) };
}

#[test]
fn kube_core_resource_matches_info() {
    use extension_apiserver::kube_core::Resource as KubeResource;

    assert_eq!(Flunder::kind(&()), "Flunder");
    assert_eq!(Flunder::group(&()), "wardle.example.com");
    assert_eq!(Flunder::version(&()), "v1alpha1");
    assert_eq!(Flunder::plural(&()), "flunders");
    assert_eq!(Flunder::api_version(&()), "wardle.example.com/v1alpha1");
    assert!(
        matches!(Flunder::plural(&()), Cow::Borrowed(_)),
        "names are static strings"
    );
    assert_eq!(
        Flunder::url_path(&(), Some("ns")),
        "/apis/wardle.example.com/v1alpha1/namespaces/ns/flunders"
    );

    assert_eq!(Class::api_version(&()), "v2beta3");
    assert_eq!(Class::url_path(&(), None), "/api/v2beta3/klasses");
    assert_eq!(
        Policy::url_path(&(), None),
        "/apis/wardle.example.com/v1/policies"
    );
}

#[test]
fn kube_core_resource_scope_and_meta() {
    use extension_apiserver::kube_core::Resource as KubeResource;

    fn scope_of<K: KubeResource>() -> &'static str {
        std::any::type_name::<K::Scope>()
    }
    assert_eq!(
        scope_of::<Flunder>(),
        std::any::type_name::<NamespaceResourceScope>()
    );
    assert_eq!(
        scope_of::<Policy>(),
        std::any::type_name::<ClusterResourceScope>()
    );

    let mut flunder = Flunder {
        metadata: named("a"),
        ..Flunder::default()
    };
    flunder.meta_mut().uid = Some("u".to_string());
    assert_eq!(flunder.meta().uid.as_deref(), Some("u"));
    let reference = flunder.object_ref(&());
    assert_eq!(reference.kind.as_deref(), Some("Flunder"));
    assert_eq!(
        reference.api_version.as_deref(),
        Some("wardle.example.com/v1alpha1")
    );
}
