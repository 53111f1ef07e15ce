//! Conversion between the versions of a resource: hub and spoke, as k8s.io/apiserver converts
//! every version through its internal one and controller-runtime through a `Hub`.
//!
//! One version of a resource is its storage version, the hub; every other served version (a
//! spoke) implements [`Convertible`] to and from it in plain Rust. Conversions must survive a
//! round trip: hub → spoke → hub gives the hub object back, so a field the spoke lacks travels
//! in an annotation of the spoke ([`stash`] / [`unstash`]), as Kubernetes keeps such fields.
//! Every type converts to itself, so the hub needs nothing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::runtime::Resource;

/// A version of a resource whose storage version is `Hub`.
///
/// ```
/// use extension_apiserver::prelude::*;
/// use extension_apiserver::runtime::convert::{Convertible, ConversionError};
///
/// #[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
/// #[resource(group = "example.com", version = "v2", kind = "Widget")]
/// pub struct WidgetV2 {
///     #[serde(default)]
///     pub metadata: ObjectMeta,
///     #[serde(default)]
///     pub size: i64,
/// }
///
/// #[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
/// #[resource(group = "example.com", version = "v1", kind = "Widget")]
/// pub struct WidgetV1 {
///     #[serde(default)]
///     pub metadata: ObjectMeta,
///     #[serde(default)]
///     pub width: i64,
/// }
///
/// impl Convertible<WidgetV2> for WidgetV1 {
///     fn into_hub(self) -> Result<WidgetV2, ConversionError> {
///         Ok(WidgetV2 { metadata: self.metadata, size: self.width })
///     }
///     fn from_hub(hub: WidgetV2) -> Result<Self, ConversionError> {
///         Ok(WidgetV1 { metadata: hub.metadata, width: hub.size })
///     }
/// }
/// let v1 = WidgetV1 { width: 3, ..Default::default() };
/// let hub: WidgetV2 = v1.clone().into_hub().unwrap();
/// assert_eq!(hub.size, 3);
/// // Every type is also its own hub, so name the hub when it is not clear from the context.
/// assert_eq!(<WidgetV1 as Convertible<WidgetV2>>::from_hub(hub).unwrap(), v1);
/// ```
///
/// To test that a conversion loses nothing, [`spoke_round_trip`] and [`hub_round_trip`] name
/// both versions, so the blanket `Convertible<T> for T` cannot be picked by mistake.
pub trait Convertible<Hub: Resource>: Resource {
    /// This version as the hub.
    fn into_hub(self) -> Result<Hub, ConversionError>;
    /// The hub as this version.
    fn from_hub(hub: Hub) -> Result<Self, ConversionError>;
}

/// Every version is its own hub: the storage version converts to itself.
impl<T: Resource> Convertible<T> for T {
    fn into_hub(self) -> Result<T, ConversionError> {
        Ok(self)
    }

    fn from_hub(hub: T) -> Result<Self, ConversionError> {
        Ok(hub)
    }
}

/// `spoke` → hub → spoke: equal to `spoke` when the conversion keeps everything. Both types
/// are named (`spoke_round_trip::<Spoke, Hub>`), where `spoke.into_hub()` alone could resolve
/// to the blanket `Convertible<Spoke> for Spoke` and prove nothing.
///
/// ```
/// # use extension_apiserver::prelude::*;
/// # use extension_apiserver::runtime::convert::{Convertible, ConversionError};
/// # #[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
/// # #[resource(group = "example.com", version = "v2", kind = "Widget")]
/// # pub struct WidgetV2 { #[serde(default)] pub metadata: ObjectMeta, #[serde(default)] pub size: i64 }
/// # #[derive(Resource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
/// # #[resource(group = "example.com", version = "v1", kind = "Widget")]
/// # pub struct WidgetV1 { #[serde(default)] pub metadata: ObjectMeta, #[serde(default)] pub width: i64 }
/// # impl Convertible<WidgetV2> for WidgetV1 {
/// #     fn into_hub(self) -> Result<WidgetV2, ConversionError> { Ok(WidgetV2 { metadata: self.metadata, size: self.width }) }
/// #     fn from_hub(hub: WidgetV2) -> Result<Self, ConversionError> { Ok(WidgetV1 { metadata: hub.metadata, width: hub.size }) }
/// # }
/// use extension_apiserver::runtime::convert::{hub_round_trip, spoke_round_trip};
///
/// let v1 = WidgetV1 { width: 3, ..Default::default() };
/// assert_eq!(spoke_round_trip::<WidgetV1, WidgetV2>(v1.clone()).unwrap(), v1);
/// let v2 = WidgetV2 { size: 5, ..Default::default() };
/// assert_eq!(hub_round_trip::<WidgetV1, WidgetV2>(v2.clone()).unwrap(), v2);
/// ```
pub fn spoke_round_trip<Spoke, Hub>(spoke: Spoke) -> Result<Spoke, ConversionError>
where
    Spoke: Convertible<Hub>,
    Hub: Resource,
{
    Spoke::from_hub(spoke.into_hub()?)
}

/// `hub` → spoke → hub: equal to `hub` when the spoke keeps (or [`stash`]es) every field
/// the hub has. Both types are named, as in [`spoke_round_trip`].
pub fn hub_round_trip<Spoke, Hub>(hub: Hub) -> Result<Hub, ConversionError>
where
    Spoke: Convertible<Hub>,
    Hub: Resource,
{
    Spoke::from_hub(hub)?.into_hub()
}

/// Why an object could not be converted between versions (answered as a 500, as
/// kube-apiserver answers a failed conversion).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConversionError {
    message: String,
}

impl ConversionError {
    /// A conversion error saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// Keeps `value` (fields a spoke lacks) in the annotation `key` of `meta` as JSON; a value
/// that serializes to `null`, `{}` or `[]` leaves no annotation, so objects that have nothing
/// to keep stay as they were.
pub fn stash<V: Serialize>(
    meta: &mut ObjectMeta,
    key: &str,
    value: &V,
) -> Result<(), ConversionError> {
    let json = serde_json::to_value(value).map_err(|e| ConversionError::new(e.to_string()))?;
    let empty = match &json {
        serde_json::Value::Null => true,
        serde_json::Value::Object(map) => map.is_empty(),
        serde_json::Value::Array(items) => items.is_empty(),
        _ => false,
    };
    if empty {
        return Ok(());
    }
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(key.to_string(), json.to_string());
    Ok(())
}

/// Takes back what [`stash`] kept under `key`, removing the annotation (and the annotations
/// map when it is left empty); `None` when there is none.
pub fn unstash<V: DeserializeOwned>(
    meta: &mut ObjectMeta,
    key: &str,
) -> Result<Option<V>, ConversionError> {
    let Some(annotations) = meta.annotations.as_mut() else {
        return Ok(None);
    };
    let Some(text) = annotations.remove(key) else {
        return Ok(None);
    };
    if annotations.is_empty() {
        meta.annotations = None;
    }
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| ConversionError::new(format!("annotation {key}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, serde::Deserialize, Default, PartialEq, Debug)]
    struct Lacking {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        other: Option<String>,
    }

    #[test]
    fn stashed_fields_come_back_and_leave_no_trace() {
        let mut meta = ObjectMeta::default();
        stash(&mut meta, "example.com/kept", &Lacking::default()).unwrap();
        assert_eq!(meta.annotations, None, "nothing to keep, no annotation");
        let kept = Lacking {
            other: Some("x".into()),
        };
        stash(&mut meta, "example.com/kept", &kept).unwrap();
        assert_eq!(
            meta.annotations.as_ref().unwrap()["example.com/kept"],
            r#"{"other":"x"}"#
        );
        let back: Option<Lacking> = unstash(&mut meta, "example.com/kept").unwrap();
        assert_eq!(back, Some(kept));
        assert_eq!(meta, ObjectMeta::default());
        let none: Option<Lacking> = unstash(&mut meta, "example.com/kept").unwrap();
        assert_eq!(none, None);
    }

    #[test]
    fn a_broken_annotation_is_an_error() {
        let mut meta = ObjectMeta {
            annotations: Some([("k".to_string(), "{".to_string())].into()),
            ..ObjectMeta::default()
        };
        assert!(unstash::<Lacking>(&mut meta, "k").is_err());
    }
}
