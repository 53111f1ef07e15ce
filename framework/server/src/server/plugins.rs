//! Admission plugins of the server's own, made once its storage and core API are known
//! ([`APIServer::admission_plugin`](super::APIServer::admission_plugin)).

use crate::admission::Plugin;
use crate::lifecycle::ShutdownSignal;
use crate::server::StorageConfig;

/// Makes an admission plugin at start (see
/// [`APIServer::admission_plugin`](super::APIServer::admission_plugin)).
pub type AdmissionPluginFactory = Box<dyn Fn(&PluginContext<'_>) -> Plugin + Send + Sync>;

/// What an admission plugin is made with: how it reads the server's own resources (kube
/// gives plugins informers through initializers), the core API, the shutdown signal.
#[non_exhaustive]
pub struct PluginContext<'a> {
    /// The server's storage: [`reader`](StorageConfig::reader) reads any resource the server
    /// stores or computes, typed and in process, from the resource's watch cache when it has
    /// one.
    pub storage: &'a StorageConfig,
    /// The core kube-apiserver, when the server has one (`--kubeconfig`, or in a cluster).
    pub core: Option<&'a kube::Client>,
    /// Fires when the server shuts down: background work of a plugin stops on it.
    pub shutdown: &'a ShutdownSignal,
}
