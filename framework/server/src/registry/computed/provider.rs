//! The one trait a computed or external resource implements: the objects as they are now.

use std::pin::Pin;

use async_trait::async_trait;
use futures::Stream;

use crate::error::Result;
use crate::runtime::Resource;

/// The source of a computed or external resource: what its objects are right now.
///
/// The framework mirrors what the provider answers and serves it with the semantics of a
/// stored resource (`apiVersion`/`kind`, selectors, `limit`/`continue`, tables,
/// resourceVersion, watch); see [`ComputedStorage`](super::ComputedStorage). Objects are the
/// typed `Self::Object`: no `apiVersion`, `kind` or `resourceVersion` to set.
///
/// ```
/// use extension_apiserver::prelude::*;
/// use extension_apiserver::registry::computed::Provider;
///
/// #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// #[resource(group = "example.com", version = "v1", kind = "Clock")]
/// struct Clock {
///     #[serde(default)]
///     metadata: ObjectMeta,
///     zone: String,
/// }
///
/// struct Clocks;
///
/// #[extension_apiserver::async_trait]
/// impl Provider for Clocks {
///     type Object = Clock;
///
///     async fn list(&self, _namespace: Option<&str>) -> extension_apiserver::Result<Vec<Clock>> {
///         let clock = |zone: &str| Clock {
///             metadata: ObjectMeta { name: Some(zone.to_lowercase()), ..Default::default() },
///             zone: zone.into(),
///         };
///         Ok(vec![clock("UTC"), clock("CET")])
///     }
/// }
/// ```
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// The kind served.
    type Object: Resource;

    /// The current objects of `namespace`, or of every namespace when `None` (always `None`
    /// for a cluster-scoped kind). An object without `metadata.namespace` in the answer for
    /// a namespace is in that namespace. An error is the answer of the request that asked
    /// (a `503` from [`Error::service_unavailable`](crate::Error::service_unavailable) when
    /// the external system is down, say).
    async fn list(&self, namespace: Option<&str>) -> Result<Vec<Self::Object>>;

    /// The object `name` of `namespace` (`None` for a cluster-scoped kind), or `None` when
    /// there is none. The default lists the namespace and picks the object; override it when
    /// one object is cheaper to compute than all of them.
    async fn get(&self, namespace: Option<&str>, name: &str) -> Result<Option<Self::Object>> {
        let objects = self.list(namespace).await?;
        Ok(objects
            .into_iter()
            .find(|o| o.metadata().name.as_deref() == Some(name)))
    }

    /// A stream of changes as they happen, when the source can push them: watches then see
    /// a change at once instead of at the next re-list. Called once, when the server starts;
    /// the default has none.
    fn changes(&self) -> Option<ChangeStream<Self::Object>> {
        None
    }
}

/// One change a [`Provider`] pushes.
#[derive(Clone, Debug, PartialEq)]
pub enum Change<T> {
    /// The object was created or changed: this is its state now.
    Applied(T),
    /// The object is gone.
    Deleted {
        /// Its namespace (`None` for a cluster-scoped kind).
        namespace: Option<String>,
        /// Its name.
        name: String,
    },
    /// Many things changed, or the source lost track: list everything again.
    Relist,
}

/// The stream [`Provider::changes`] returns; it may end (re-lists and reads still go on).
pub type ChangeStream<T> = Pin<Box<dyn Stream<Item = Change<T>> + Send>>;
