//! `wardle.example.com/v1beta1`, as sample-apiserver's: a flunder names a flunder and a
//! fischer in fields of their own. It converts to and from the storage version (the hub),
//! `v1alpha1`, with sample-apiserver's rules, and validates as sample-apiserver does.

use extension_apiserver::prelude::*;
use extension_apiserver::runtime::convert::{ConversionError, Convertible, stash, unstash};

pub use crate::FlunderStatus;

/// A flunder: something that refers to another flunder or a fischer.
#[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[resource(
    group = "wardle.example.com",
    version = "v1beta1",
    kind = "Flunder",
    namespaced,
    status = "FlunderStatus",
    shortnames = ["fl"],
    categories = ["all", "wardle"],
    printcolumn(name = "Type", type = "string", json_path = ".spec.referenceType",
                description = "Flunder or Fischer"),
    printcolumn(name = "Flunder", type = "string", json_path = ".spec.flunderReference",
                description = "The name of the flunder this flunder refers to"),
    printcolumn(name = "Fischer", type = "string", json_path = ".spec.fischerReference",
                description = "The name of the fischer this flunder refers to"),
    selectable_field = ".spec.referenceType",
    selectable_field = ".spec.flunderReference",
    selectable_field = ".spec.fischerReference",
    validate = validate_flunder
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
    /// A name of another flunder, mutually exclusive to the fischer reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flunder_reference: Option<String>,
    /// A name of a fischer, mutually exclusive to the flunder reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fischer_reference: Option<String>,
    /// The reference type: `Flunder` or `Fischer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_type: Option<String>,
}

/// sample-apiserver's `ValidateFlunderSpec`.
fn validate_flunder(flunder: &Flunder) -> Vec<FieldError> {
    let spec = &flunder.spec;
    let flunder_ref = spec.flunder_reference.as_deref().unwrap_or_default();
    let fischer_ref = spec.fischer_reference.as_deref().unwrap_or_default();
    let kind = spec.reference_type.as_deref().unwrap_or_default();
    let invalid = |field: &str, value: &str, detail: &str| {
        FieldError::invalid(&format!("spec.{field}"), value, detail)
    };
    let mut errors = Vec::new();
    if !flunder_ref.is_empty() && !fischer_ref.is_empty() {
        errors.push(invalid(
            "fischerReference",
            fischer_ref,
            "cannot be set with flunderReference at the same time",
        ));
    } else if !flunder_ref.is_empty() && kind != "Flunder" {
        errors.push(invalid(
            "flunderReference",
            flunder_ref,
            "cannot be set if referenceType is not Flunder",
        ));
    } else if !fischer_ref.is_empty() && kind != "Fischer" {
        errors.push(invalid(
            "fischerReference",
            fischer_ref,
            "cannot be set if referenceType is not Fischer",
        ));
    } else if fischer_ref.is_empty() && kind == "Fischer" {
        errors.push(invalid(
            "fischerReference",
            fischer_ref,
            "cannot be empty if referenceType is Fischer",
        ));
    } else if flunder_ref.is_empty() && kind == "Flunder" {
        errors.push(invalid(
            "flunderReference",
            flunder_ref,
            "cannot be empty if referenceType is Flunder",
        ));
    }
    if !kind.is_empty() && !crate::REFERENCE_TYPES.contains(&kind) {
        errors.push(invalid("referenceType", kind, "must be Flunder or Fischer"));
    }
    errors
}

/// Where a v1beta1 flunder keeps the reference v1alpha1 has no field for (both references
/// set, or a reference its type does not select), so nothing is lost on the way through the
/// hub.
pub const UNMAPPED_REFERENCES: &str = "wardle.example.com/v1beta1-unmapped-references";

/// Where a v1beta1 flunder keeps a v1alpha1 reference whose type names no field of v1beta1
/// (no type, or one validation refuses).
pub const UNTYPED_REFERENCE: &str = "wardle.example.com/v1alpha1-untyped-reference";

/// What of a v1beta1 spec the v1alpha1 spec cannot say.
#[derive(Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Unmapped {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    flunder_reference: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fischer_reference: Option<String>,
}

/// sample-apiserver's conversions between v1beta1 (whose spec the internal version shares)
/// and v1alpha1: the reference goes to the field its type names, and back.
impl Convertible<crate::Flunder> for Flunder {
    fn into_hub(self) -> Result<crate::Flunder, ConversionError> {
        let Flunder {
            mut metadata,
            spec,
            status,
        } = self;
        let FlunderSpec {
            mut flunder_reference,
            mut fischer_reference,
            reference_type,
        } = spec;
        let reference = match reference_type.as_deref() {
            Some("Flunder") => flunder_reference.take(),
            Some("Fischer") => fischer_reference.take(),
            _ => unstash(&mut metadata, UNTYPED_REFERENCE)?,
        };
        let unmapped = Unmapped {
            flunder_reference,
            fischer_reference,
        };
        stash(&mut metadata, UNMAPPED_REFERENCES, &unmapped)?;
        Ok(crate::Flunder {
            metadata,
            spec: crate::FlunderSpec {
                reference,
                reference_type,
            },
            status,
        })
    }

    fn from_hub(hub: crate::Flunder) -> Result<Self, ConversionError> {
        let crate::Flunder {
            mut metadata,
            spec,
            status,
        } = hub;
        let unmapped: Unmapped = unstash(&mut metadata, UNMAPPED_REFERENCES)?.unwrap_or_default();
        let mut flunder_reference = unmapped.flunder_reference;
        let mut fischer_reference = unmapped.fischer_reference;
        match spec.reference_type.as_deref() {
            Some("Flunder") => flunder_reference = spec.reference,
            Some("Fischer") => fischer_reference = spec.reference,
            // No type to say where it goes: v1beta1 has no field for it.
            _ => stash(&mut metadata, UNTYPED_REFERENCE, &spec.reference)?,
        }
        Ok(Flunder {
            metadata,
            spec: FlunderSpec {
                flunder_reference,
                fischer_reference,
                reference_type: spec.reference_type,
            },
            status,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use extension_apiserver::runtime::convert::{hub_round_trip, spoke_round_trip};

    fn values() -> [Option<String>; 3] {
        [None, Some("a".into()), Some(String::new())]
    }

    fn types() -> [Option<String>; 4] {
        [
            None,
            Some("Flunder".into()),
            Some("Fischer".into()),
            Some("Other".into()),
        ]
    }

    fn named(spec: FlunderSpec) -> Flunder {
        Flunder {
            metadata: ObjectMeta {
                name: Some("f".into()),
                annotations: Some([("kept".to_string(), "yes".to_string())].into()),
                ..ObjectMeta::default()
            },
            spec,
            status: Some(FlunderStatus {}),
        }
    }

    /// Every v1beta1 spec over a small domain goes to the hub and back unchanged.
    #[test]
    fn every_v1beta1_flunder_survives_the_hub() {
        for flunder_reference in values() {
            for fischer_reference in values() {
                for reference_type in types() {
                    let spoke = named(FlunderSpec {
                        flunder_reference: flunder_reference.clone(),
                        fischer_reference: fischer_reference.clone(),
                        reference_type,
                    });
                    let back = spoke_round_trip::<Flunder, crate::Flunder>(spoke.clone());
                    assert_eq!(back.unwrap(), spoke);
                }
            }
        }
    }

    /// Every v1alpha1 spec goes to v1beta1 and back unchanged.
    #[test]
    fn every_v1alpha1_flunder_survives_v1beta1() {
        for reference in values() {
            for reference_type in types() {
                let hub = crate::Flunder {
                    metadata: named(FlunderSpec::default()).metadata,
                    spec: crate::FlunderSpec {
                        reference: reference.clone(),
                        reference_type: reference_type.clone(),
                    },
                    status: None,
                };
                let back = hub_round_trip::<Flunder, crate::Flunder>(hub.clone());
                assert_eq!(back.unwrap(), hub);
            }
        }
    }

    #[test]
    fn sample_apiserver_rules() {
        let hub: crate::Flunder = named(FlunderSpec {
            fischer_reference: Some("fish".into()),
            reference_type: Some("Fischer".into()),
            ..FlunderSpec::default()
        })
        .into_hub()
        .unwrap();
        assert_eq!(hub.spec.reference.as_deref(), Some("fish"));
        assert_eq!(hub.spec.reference_type.as_deref(), Some("Fischer"));
        assert!(
            !hub.metadata
                .annotations
                .unwrap()
                .contains_key(UNMAPPED_REFERENCES)
        );
    }

    #[test]
    fn validation_is_sample_apiservers() {
        let errors = |spec| {
            validate_flunder(&named(spec))
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        assert!(errors(FlunderSpec::default()).is_empty());
        assert_eq!(
            errors(FlunderSpec {
                flunder_reference: Some("a".into()),
                fischer_reference: Some("b".into()),
                reference_type: Some("Flunder".into()),
            }),
            [
                r#"spec.fischerReference: Invalid value: "b": cannot be set with flunderReference at the same time"#
            ]
        );
        assert_eq!(
            errors(FlunderSpec {
                reference_type: Some("Fischer".into()),
                ..FlunderSpec::default()
            }),
            [
                r#"spec.fischerReference: Invalid value: "": cannot be empty if referenceType is Fischer"#
            ]
        );
        assert_eq!(
            errors(FlunderSpec {
                reference_type: Some("Other".into()),
                ..FlunderSpec::default()
            }),
            [r#"spec.referenceType: Invalid value: "Other": must be Flunder or Fischer"#]
        );
    }
}
