//! The groups a server serves ([`APIGroup`]), each a set of versions ([`VersionBuilder`]),
//! each a set of resources.

use std::sync::Arc;

use super::error::ServerError;
use super::storage_config::{Declaration, MakeComputed, StorageConfig, StorageFactory};
use crate::aggregator::APIServiceVersion;
use crate::registry::computed::{ComputedOptions, ComputedStorage, Provider};
use crate::registry::converted::converted;
use crate::registry::group::APIGroupInfo;
use crate::registry::rest::RestStorage;
use crate::registry::strategy::Strategy;
use crate::registry::subresource::{Action, Connecter, Streamer, Subresource, View};
use crate::runtime::{Convertible, Resource};

/// The resources of one version of a group.
#[derive(Default)]
pub struct VersionBuilder {
    version: String,
    factories: Vec<StorageFactory>,
    declarations: Vec<Declaration>,
}

impl VersionBuilder {
    /// Serves `T` with the generic [`Store`](crate::registry::store::Store): `{plural}` and, when `T` has a status,
    /// `{plural}/status`.
    pub fn resource<T: Strategy>(mut self) -> Self {
        self.declarations
            .push(Box::new(|config| config.serves_kind::<T>()));
        let factory: StorageFactory = Box::new(|config| {
            let store = config.store::<T>();
            let plural = T::INFO.plural;
            let mut paths = vec![(plural.to_string(), store.rest_storage())];
            if T::INFO.status {
                paths.push((format!("{plural}/status"), store.status_rest_storage()));
            }
            if let Some(scale) = store.scale_rest_storage() {
                paths.push((format!("{plural}/scale"), scale));
            }
            paths
        });
        self.factories.push(factory);
        self
    }

    /// Serves `S` in this version, stored as `H`, its storage version (the hub), converting
    /// each object on the way in and out ([`Convertible`]): `{plural}`, `{plural}/status` and
    /// `{plural}/scale` as `H` has them, over the one store of `H` (its keys, revisions and
    /// watch cache), so every version sees the same objects at the same revisions. `H` is
    /// served with [`resource`](Self::resource) in its own version (or nowhere, when its
    /// version is only stored); a resource with two storage versions is refused at start.
    /// When `H` is served with [`computed`](Self::computed), `S` is its provider's objects
    /// converted (`get`, `list`, `watch`, from the one mirror of `H`).
    ///
    /// ```no_run
    /// # use extension_apiserver::prelude::*;
    /// # use extension_apiserver::runtime::convert::{Convertible, ConversionError};
    /// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// # #[resource(group = "example.com", version = "v2", kind = "Widget")]
    /// # pub struct WidgetV2 { #[serde(default)] pub metadata: ObjectMeta }
    /// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// # #[resource(group = "example.com", version = "v1", kind = "Widget")]
    /// # pub struct WidgetV1 { #[serde(default)] pub metadata: ObjectMeta }
    /// # impl Convertible<WidgetV2> for WidgetV1 {
    /// #     fn into_hub(self) -> Result<WidgetV2, ConversionError> { Ok(WidgetV2 { metadata: self.metadata }) }
    /// #     fn from_hub(hub: WidgetV2) -> Result<Self, ConversionError> { Ok(WidgetV1 { metadata: hub.metadata }) }
    /// # }
    /// let group = APIGroup::new("example.com")
    ///     .version("v2", |v| v.resource::<WidgetV2>())
    ///     .version("v1", |v| v.converted::<WidgetV1, WidgetV2>());
    /// ```
    ///
    /// Objects stored as `S` (while `S` was the storage version) are read converted to `H`
    /// ([`StorageConfig::decodes`]); `migrate-storage` rewrites them as `H`.
    pub fn converted<S, H>(mut self) -> Self
    where
        S: Convertible<H> + Strategy,
        H: Strategy,
    {
        self.declarations.push(Box::new(|config| {
            config.decodes::<S, H>();
            config.serves_converted::<S, H>();
        }));
        let factory: StorageFactory = Box::new(|config| {
            let plural = S::INFO.plural;
            // A computed hub: its mirror's `get`, `list` and `watch`, converted.
            if let Some((_, hub)) = config.computed::<H>() {
                return vec![(plural.to_string(), converted::<S, H>(hub))];
            }
            let store = config.store::<H>();
            let mut paths = vec![(plural.to_string(), converted::<S, H>(store.rest_storage()))];
            if S::INFO.status && H::INFO.status {
                let status = converted::<S, H>(store.status_rest_storage());
                paths.push((format!("{plural}/status"), status));
            }
            if let Some(scale) = store
                .scale_rest_storage()
                .filter(|_| S::INFO.scale.is_some())
            {
                paths.push((format!("{plural}/scale"), scale));
            }
            paths
        });
        self.factories.push(factory);
        self
    }

    /// Serves a computed or external resource: `provider` says what the objects are, the
    /// framework serves them read-only (`get`, `list`, `watch`) with selectors, pages, tables,
    /// resourceVersions and watch events (see [`registry::computed`](crate::registry::computed)).
    /// Other versions of it are served with [`converted`](Self::converted), and
    /// [`StorageConfig::reader`] reads its objects in process.
    pub fn computed<P: Provider>(self, provider: P) -> Self {
        let provider = Arc::new(provider);
        self.computed_shared(ComputedOptions::default(), move |_| provider.clone())
    }

    /// [`computed`](Self::computed) with options, the provider made from the server's
    /// [`StorageConfig`] (e.g. with a [`reader`](StorageConfig::reader) of a stored resource).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use extension_apiserver::prelude::*;
    /// # use extension_apiserver::registry::store::Reader;
    /// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// # #[resource(group = "example.com", version = "v1", kind = "Book", namespaced)]
    /// # struct Book { #[serde(default)] metadata: ObjectMeta }
    /// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// # #[resource(group = "example.com", version = "v1", kind = "Shelf", namespaced)]
    /// # struct Shelf { #[serde(default)] metadata: ObjectMeta }
    /// struct Shelves { books: Reader<Book> }
    /// # #[extension_apiserver::async_trait]
    /// # impl Provider for Shelves {
    /// #     type Object = Shelf;
    /// #     async fn list(&self, _: Option<&str>) -> extension_apiserver::Result<Vec<Shelf>> { Ok(vec![]) }
    /// # }
    /// let group = APIGroup::new("example.com").version("v1", |v| {
    ///     v.resource::<Book>().computed_with(
    ///         ComputedOptions::default().relist_interval(Duration::from_secs(2)),
    ///         |storage| Shelves { books: storage.reader::<Book>() },
    ///     )
    /// });
    /// ```
    pub fn computed_with<P: Provider>(
        self,
        options: ComputedOptions,
        make: impl Fn(&StorageConfig) -> P + Send + Sync + 'static,
    ) -> Self {
        self.computed_shared(options, move |config| Arc::new(make(config)))
    }

    fn computed_shared<P: Provider>(
        mut self,
        options: ComputedOptions,
        make: impl Fn(&StorageConfig) -> Arc<P> + Send + Sync + 'static,
    ) -> Self {
        let make: MakeComputed<P::Object> = Arc::new(move |config| {
            let cached = options.has_watch_cache() && config.watch_cache;
            let options = options.clone().watch_cache(cached);
            let storage = ComputedStorage::shared(make(config), options);
            storage.stop_on(config.shutdown.clone());
            (storage.reader(), storage.rest_storage())
        });
        let declared = make.clone();
        self.declarations.push(Box::new(move |config| {
            config.declare_computed(&declared);
            config.serves_kind::<P::Object>();
        }));
        let factory: StorageFactory = Box::new(|config| {
            let (_, storage) = config
                .computed::<P::Object>()
                .expect("a group declares its computed kinds before making its storage");
            let plural = <P::Object as Resource>::INFO.plural;
            vec![(plural.to_string(), storage)]
        });
        self.factories.push(factory);
        self
    }

    /// Attaches the action `name` to `A::Parent` (`{plural}/{name}`), its handler made from
    /// the server's [`StorageConfig`] (e.g. with a [`reader`](StorageConfig::reader) of the
    /// parent). See [`Action`].
    ///
    /// ```no_run
    /// # use extension_apiserver::prelude::*;
    /// # use extension_apiserver::registry::subresource::*;
    /// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// # #[resource(group = "example.com", version = "v1", kind = "Run", namespaced)]
    /// # pub struct Run { #[serde(default)] pub metadata: ObjectMeta }
    /// # struct Cancel; struct Log;
    /// # #[extension_apiserver::async_trait]
    /// # impl Action for Cancel {
    /// #     type Parent = Run; type Options = NoOptions; type Body = serde_json::Value; type Output = Run;
    /// #     async fn act(&self, _: ActionVerb, r: SubresourceRequest<NoOptions>, _: Option<serde_json::Value>)
    /// #         -> extension_apiserver::Result<Run> { Ok(Run::default()) }
    /// # }
    /// # #[extension_apiserver::async_trait]
    /// # impl Streamer for Log {
    /// #     type Parent = Run; type Options = NoOptions;
    /// #     async fn stream(&self, _: SubresourceRequest<NoOptions>) -> extension_apiserver::Result<ByteStream> {
    /// #         Ok(Box::pin(futures::stream::empty()))
    /// #     }
    /// # }
    /// let group = APIGroup::new("example.com").version("v1", |v| {
    ///     v.resource::<Run>()
    ///         .action("cancel", |_| Cancel)
    ///         .stream("log", |_| Log)
    /// });
    /// ```
    pub fn action<A: Action>(
        self,
        name: &str,
        make: impl Fn(&StorageConfig) -> A + Send + Sync + 'static,
    ) -> Self {
        self.subresource::<A::Parent>(name, move |config| Subresource::action(make(config)))
    }

    /// Attaches the computed view `name` to `V::Parent`. See [`View`] and
    /// [`action`](Self::action).
    pub fn view<V: View>(
        self,
        name: &str,
        make: impl Fn(&StorageConfig) -> V + Send + Sync + 'static,
    ) -> Self {
        self.subresource::<V::Parent>(name, move |config| Subresource::view(make(config)))
    }

    /// Attaches the stream `name` to `S::Parent`. See [`Streamer`] and
    /// [`action`](Self::action).
    pub fn stream<S: Streamer>(
        self,
        name: &str,
        make: impl Fn(&StorageConfig) -> S + Send + Sync + 'static,
    ) -> Self {
        self.subresource::<S::Parent>(name, move |config| Subresource::stream(make(config)))
    }

    /// Attaches the upgraded connection `name` to `C::Parent` (WebSocket, channel.k8s.io v5
    /// and v4). See [`Connecter`] and [`action`](Self::action).
    pub fn connect<C: Connecter>(
        self,
        name: &str,
        make: impl Fn(&StorageConfig) -> C + Send + Sync + 'static,
    ) -> Self {
        self.subresource::<C::Parent>(name, move |config| Subresource::connect(make(config)))
    }

    fn subresource<T: Resource>(
        self,
        name: &str,
        make: impl Fn(&StorageConfig) -> Subresource + Send + Sync + 'static,
    ) -> Self {
        let path = format!("{}/{name}", T::INFO.plural);
        self.storage_with(&path, move |config| {
            RestStorage::for_subresource::<T>(make(config))
        })
    }

    /// Serves a storage of your own at `path` (`things` or `things/subresource`), for
    /// computed or external resources that a [`Provider`] does not fit.
    pub fn storage(self, path: &str, storage: RestStorage) -> Self {
        self.storage_with(path, move |_| storage.clone())
    }

    /// [`storage`](Self::storage), made from the server's [`StorageConfig`]: to reach the
    /// configured backend or read stored resources ([`StorageConfig::reader`]).
    pub fn storage_with(
        mut self,
        path: &str,
        make: impl Fn(&StorageConfig) -> RestStorage + Send + Sync + 'static,
    ) -> Self {
        let path = path.to_string();
        self.factories
            .push(Box::new(move |config| vec![(path.clone(), make(config))]));
        self
    }
}

/// One API group: its versions, the preferred first.
pub struct APIGroup {
    name: String,
    versions: Vec<VersionBuilder>,
    /// Versions no longer served whose objects may still be stored.
    formerly_stored: Vec<Declaration>,
    group_priority_minimum: i32,
    version_priority: i32,
}

impl APIGroup {
    /// A group named `name`, e.g. `wardle.example.com`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            versions: Vec::new(),
            formerly_stored: Vec::new(),
            group_priority_minimum: crate::aggregator::DEFAULT_GROUP_PRIORITY_MINIMUM,
            version_priority: crate::aggregator::DEFAULT_VERSION_PRIORITY,
        }
    }

    /// The APIService priorities: `groupPriorityMinimum` of the group, and the
    /// `versionPriority` of its preferred (first) version; each later version gets one less
    /// (at least 1). Defaults: 1000 and 15, as sample-apiserver.
    pub fn priority(mut self, group_priority_minimum: i32, version_priority: i32) -> Self {
        self.group_priority_minimum = group_priority_minimum;
        self.version_priority = version_priority;
        self
    }

    /// The group's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Serves `T` in its own version (`T::INFO.version`), after the versions the group has:
    /// for [`APIServer::resource`](crate::server::APIServer::resource), which puts `T` in its
    /// own group, so that the group and version come from the type.
    pub(super) fn serve<T: Strategy>(&mut self) {
        let version = T::INFO.version;
        let i = match self.versions.iter().position(|v| v.version == version) {
            Some(i) => i,
            None => {
                self.versions.push(VersionBuilder {
                    version: version.to_string(),
                    ..VersionBuilder::default()
                });
                self.versions.len() - 1
            }
        };
        let builder = std::mem::take(&mut self.versions[i]);
        self.versions[i] = builder.resource::<T>();
    }

    /// One APIService entry per version, in order of preference.
    pub fn apiservice_versions(&self) -> Vec<APIServiceVersion> {
        self.versions
            .iter()
            .enumerate()
            .map(|(i, v)| APIServiceVersion {
                group: self.name.clone(),
                version: v.version.clone(),
                group_priority_minimum: self.group_priority_minimum,
                version_priority: (self.version_priority - i as i32).max(1),
            })
            .collect()
    }

    /// Adds a version and its resources.
    pub fn version(
        mut self,
        version: &str,
        build: impl FnOnce(VersionBuilder) -> VersionBuilder,
    ) -> Self {
        let builder = build(VersionBuilder {
            version: version.to_string(),
            ..VersionBuilder::default()
        });
        self.versions.push(builder);
        self
    }

    /// Objects stored as `Old` are read converted to `H`, the storage version, though `Old`
    /// is served no more: for a version that was the storage version once (so objects
    /// written then may still be stored in it, as a CustomResourceDefinition's
    /// `status.storedVersions` lists) until `migrate-storage` has rewritten them. A version
    /// still served with [`converted`](VersionBuilder::converted) needs no declaration.
    ///
    /// ```no_run
    /// # use extension_apiserver::prelude::*;
    /// # use extension_apiserver::runtime::convert::{Convertible, ConversionError};
    /// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// # #[resource(group = "example.com", version = "v2", kind = "Widget")]
    /// # pub struct WidgetV2 { #[serde(default)] pub metadata: ObjectMeta }
    /// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
    /// # #[resource(group = "example.com", version = "v1", kind = "Widget")]
    /// # pub struct WidgetV1 { #[serde(default)] pub metadata: ObjectMeta }
    /// # impl Convertible<WidgetV2> for WidgetV1 {
    /// #     fn into_hub(self) -> Result<WidgetV2, ConversionError> { Ok(WidgetV2 { metadata: self.metadata }) }
    /// #     fn from_hub(hub: WidgetV2) -> Result<Self, ConversionError> { Ok(WidgetV1 { metadata: hub.metadata }) }
    /// # }
    /// // v1 was the storage version and is served no more.
    /// let group = APIGroup::new("example.com")
    ///     .version("v2", |v| v.resource::<WidgetV2>())
    ///     .formerly_stored::<WidgetV1, WidgetV2>();
    /// ```
    pub fn formerly_stored<Old, H>(mut self) -> Self
    where
        Old: Convertible<H>,
        H: Resource,
    {
        self.formerly_stored
            .push(Box::new(|config| config.decodes::<Old, H>()));
        self
    }

    /// Tells `config` every version the group's stores may find in their keys.
    pub(super) fn declare(&self, config: &StorageConfig) {
        let versions = self.versions.iter().flat_map(|v| &v.declarations);
        for declaration in self.formerly_stored.iter().chain(versions) {
            declaration(config);
        }
    }

    pub(super) fn build(&self, config: &StorageConfig) -> Result<APIGroupInfo, ServerError> {
        self.declare(config);
        let mut info = APIGroupInfo::new(&self.name);
        for version in &self.versions {
            let expected = format!("{}/{}", self.name, version.version);
            for factory in &version.factories {
                for (path, storage) in factory(config) {
                    let gv = format!("{}/{}", storage.info.group, storage.info.version);
                    // A subresource may serve another kind (`scale`: autoscaling/v1 Scale).
                    let subresource = path.contains('/');
                    if gv != expected && !subresource {
                        return Err(ServerError::Config(format!(
                            "a resource of {gv} was registered under {expected}"
                        )));
                    }
                    info.add(&version.version, &path, storage);
                }
            }
        }
        if let Some(conflict) = config.conflict() {
            return Err(ServerError::Config(conflict));
        }
        Ok(info)
    }
}
