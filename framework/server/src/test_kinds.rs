//! Kinds for unit tests across the crate: a `Flunder` of [`TEST_INFO`], and one resource in
//! two versions, `Old` (v1alpha1, `width`) converting to and from `New` (v1beta1, `size`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

use crate::runtime::{ConversionError, Convertible, Resource, ResourceInfo};

/// A namespaced `Flunder` with a status, for unit tests across the crate.
pub(crate) const TEST_INFO: ResourceInfo = ResourceInfo {
    group: "wardle.example.com",
    version: "v1alpha1",
    kind: "Flunder",
    plural: "flunders",
    singular: "flunder",
    scope: crate::runtime::Scope::Namespaced,
    short_names: &[],
    categories: &[],
    status: true,
    scale: None,
    printer_columns: &[],
    selectable_fields: &[],
};

/// A flunder of [`TEST_INFO`] with any `spec`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Flunder {
    #[serde(default)]
    pub(crate) metadata: ObjectMeta,
    #[serde(default)]
    pub(crate) spec: serde_json::Value,
}

/// A flunder of v1alpha1, whose number is its `width`; no other field.
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Old {
    #[serde(default)]
    pub(crate) metadata: ObjectMeta,
    #[serde(default)]
    pub(crate) width: i64,
}

/// The same flunder in v1beta1, whose number is its `size`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct New {
    #[serde(default)]
    pub(crate) metadata: ObjectMeta,
    #[serde(default)]
    pub(crate) size: i64,
}

macro_rules! resource {
    ($kind:ty, $info:expr) => {
        impl Resource for $kind {
            const INFO: ResourceInfo = $info;
            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

resource!(Flunder, TEST_INFO);
resource!(Old, TEST_INFO);
resource!(
    New,
    ResourceInfo {
        version: "v1beta1",
        ..TEST_INFO
    }
);

impl Convertible<New> for Old {
    fn into_hub(self) -> Result<New, ConversionError> {
        Ok(New {
            metadata: self.metadata,
            size: self.width,
        })
    }

    fn from_hub(hub: New) -> Result<Self, ConversionError> {
        Ok(Old {
            metadata: hub.metadata,
            width: hub.size,
        })
    }
}
