//! The API of Kubernetes' sample-apiserver (`wardle.example.com`), built with `apiserver`:
//! `Flunder` (namespaced, with status) in `v1alpha1` (stored) and `v1beta1` (converted, see
//! [`v1beta1`]), and `Fischer` (cluster-scoped) in `v1alpha1`.
//!
//! Creating a flunder whose name a fischer lists in `disallowedFlunders` is refused by the
//! [`BanFlunder`] admission plugin, as in sample-apiserver.
//!
//! Clients written for the Go sample-apiserver work with this server unchanged.

use extension_apiserver::prelude::*;

pub mod admission;
pub mod v1beta1;

pub use admission::BanFlunder;

#[cfg(feature = "mimalloc")]
mod allocator;

/// The API group.
pub const GROUP: &str = "wardle.example.com";

/// A flunder: something that refers to another flunder or a fischer.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "wardle.example.com",
    version = "v1alpha1",
    kind = "Flunder",
    namespaced,
    status = "FlunderStatus",
    shortnames = ["fl"],
    categories = ["all", "wardle"],
    printcolumn(name = "Reference", type = "string", json_path = ".spec.reference",
                description = "The name of the flunder or fischer this flunder refers to"),
    printcolumn(name = "Type", type = "string", json_path = ".spec.referenceType", priority = 1,
                description = "Flunder or Fischer"),
    selectable_field = ".spec.reference",
    selectable_field = ".spec.referenceType",
    defaults = default_flunder,
    // sample-apiserver's ValidateFlunderSpec, as a CRD of this shape states it: a reference
    // is required when a reference type is set, and the other way round (which defaulting
    // makes true whenever a reference is set).
    validation(
        rule = "!has(self.spec.referenceType) || (has(self.spec.reference) && self.spec.reference != '')",
        message = "must be set when referenceType is set",
        reason = "FieldValueRequired",
        field_path = ".spec.reference"
    ),
    validation(
        rule = "!has(self.spec.reference) || self.spec.reference == '' || has(self.spec.referenceType)",
        message = "must be set when reference is set",
        reason = "FieldValueRequired",
        field_path = ".spec.referenceType"
    )
)]
pub struct Flunder {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the flunder refers to.
    #[serde(default)]
    pub spec: FlunderSpec,
    /// What the server observed (nothing yet, as in sample-apiserver).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<FlunderStatus>,
}

/// The desired state of a flunder.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlunderSpec {
    /// A name of another flunder or fischer, depending on the reference type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The reference type: `Flunder` or `Fischer`; defaults to `Flunder` when a reference is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Flunder", "Fischer"]))]
    pub reference_type: Option<String>,
}

/// The observed state of a flunder.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FlunderStatus {}

/// The reference types a flunder may have.
pub const REFERENCE_TYPES: [&str; 2] = ["Flunder", "Fischer"];

fn default_flunder(flunder: &mut Flunder) {
    if flunder.spec.reference.is_some() && flunder.spec.reference_type.is_none() {
        flunder.spec.reference_type = Some("Flunder".into());
    }
}

/// A fischer: a cluster-wide list of flunders that are not allowed.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "wardle.example.com",
    version = "v1alpha1",
    kind = "Fischer",
    categories = ["wardle"],
    printcolumn(name = "Disallowed", type = "string", json_path = ".disallowedFlunders",
                description = "Names of flunders that may not be created")
)]
#[serde(rename_all = "camelCase")]
pub struct Fischer {
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Names of flunders that are not allowed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disallowed_flunders: Vec<String>,
}

/// The `wardle.example.com` group: `v1alpha1` (preferred, the storage version of both kinds)
/// and `v1beta1`, whose flunders are converted to and from v1alpha1's, as sample-apiserver
/// serves them.
pub fn api_group() -> APIGroup {
    APIGroup::new(GROUP)
        .version("v1alpha1", |v| {
            v.resource::<Flunder>().resource::<Fischer>()
        })
        .version("v1beta1", |v| v.converted::<v1beta1::Flunder, Flunder>())
}

/// What the wardle binary serves, added to `server`: the group and the `BanFlunder` admission
/// plugin.
pub fn configure(server: APIServer) -> APIServer {
    server.group(api_group()).admission_plugin(BanFlunder::make)
}
