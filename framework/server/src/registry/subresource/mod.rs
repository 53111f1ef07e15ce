//! Subresources beyond `status` and `scale`: what kube-apiserver serves with `rest.Connecter`,
//! a `rest.Getter` of another kind on a subresource, or a `rest.Creater` answering another
//! kind (`pods/log`, `pods/exec`, `pods/attach`, `pods/eviction`, KubeVirt's `start`).
//!
//! A user attaches one to a resource `T` by name
//! ([`VersionBuilder::action`](crate::server::VersionBuilder::action) and its siblings) with
//! typed options decoded from the query as kube decodes `PodLogOptions`
//! ([`decode_options`]) and one of four handlers:
//!
//! - an [`Action`]: some of GET/POST/PUT/DELETE, an optional typed body, answering an object
//!   of any kind (the parent, another resource, a `Status`);
//! - a [`View`]: GET answering a computed object of another kind;
//! - a [`Streamer`]: GET answering a stream of bytes written to the client as they come
//!   (`pods/log?follow=true`);
//! - a [`Connecter`]: an upgraded session with channels ([`Session`]: stdin, stdout, stderr,
//!   resize) that ends with an [`ExitStatus`] (`pods/attach`, `pods/exec`).
//!
//! Handlers see names, options, the user and typed channels; the HTTP (routes, the query,
//! WebSocket frames and the channel.k8s.io subprotocols) is `endpoints/`'s.

mod erased;
mod options;
mod session;

use std::pin::Pin;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Result;
use crate::registry::context::RequestContext;
use crate::runtime::{ObjectKind, Resource};

pub(crate) use erased::{Erased, intern, options_kind as erased_options_kind};
pub use erased::{KindOf, Subresource, SubresourceKind};
pub use options::{NoOptions, decode_options};
pub use session::{Channels, ExitStatus, Output, ResizeEvents, Session, Stdin, TerminalSize};

/// What a subresource's handler is told of the request: the parent object's name and
/// namespace, the decoded options, and the request's context (its user, warnings).
#[derive(Clone, Debug)]
pub struct SubresourceRequest<O> {
    /// The parent object's name (`{plural}/{name}/{subresource}`).
    pub name: String,
    /// The parent's namespace; `None` for a cluster-scoped parent.
    pub namespace: Option<String>,
    /// The options decoded from the query.
    pub options: O,
    /// Who asked ([`RequestContext::user`]), and where warnings go.
    pub ctx: RequestContext,
}

/// The options of a subresource: decoded from the query string ([`decode_options`]); what a
/// parameter does not name keeps its [`Default`]. A struct of `bool`, integers, strings,
/// `Option`s of them and `Vec`s of them (repeated parameters), in camelCase as kube names
/// query parameters (`tailLines`, `sinceSeconds`).
pub trait SubresourceOptions:
    Serialize + DeserializeOwned + Default + JsonSchema + Clone + Send + Sync + 'static
{
}

impl<O> SubresourceOptions for O where
    O: Serialize + DeserializeOwned + Default + JsonSchema + Clone + Send + Sync + 'static
{
}

/// The HTTP methods an [`Action`] answers, as kube names their verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActionVerb {
    /// GET: verb `get`.
    Get,
    /// POST: verb `create`, admitted as `CREATE`.
    Create,
    /// PUT: verb `update`, admitted as `UPDATE`.
    Update,
    /// DELETE: verb `delete`, admitted as `DELETE`.
    Delete,
}

impl ActionVerb {
    /// The verb as authorization and discovery name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::Create => "create",
            Self::Update => "update",
            Self::Delete => "delete",
        }
    }
}

/// An action on an object: KubeVirt's `virtualmachines/{name}/start` (PUT),
/// `pods/{name}/eviction` (POST, answering `Status`), a `cancel` answering the parent.
///
/// ```
/// use extension_apiserver::prelude::*;
/// use extension_apiserver::registry::subresource::{Action, ActionVerb, NoOptions, SubresourceRequest};
/// # #[derive(Resource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
/// # #[resource(group = "example.com", version = "v1", kind = "Run", namespaced)]
/// # pub struct Run { #[serde(default)] pub metadata: ObjectMeta }
/// struct Cancel;
///
/// #[extension_apiserver::async_trait]
/// impl Action for Cancel {
///     type Parent = Run;
///     type Options = NoOptions;
///     type Body = serde_json::Value;
///     type Output = Run;
///     const VERBS: &'static [ActionVerb] = &[ActionVerb::Create];
///     async fn act(
///         &self,
///         _verb: ActionVerb,
///         request: SubresourceRequest<NoOptions>,
///         _body: Option<serde_json::Value>,
///     ) -> extension_apiserver::Result<Run> {
///         let mut run = Run::default();
///         run.metadata.name = Some(request.name);
///         Ok(run)
///     }
/// }
/// ```
#[async_trait]
pub trait Action: Send + Sync + 'static {
    /// The resource the action is a subresource of.
    type Parent: Resource;
    /// Its query options.
    type Options: SubresourceOptions;
    /// Its request body, decoded (JSON or YAML) when the request has one.
    type Body: DeserializeOwned + JsonSchema + Send + 'static;
    /// What it answers.
    type Output: ObjectKind;
    /// The methods it answers (default: POST, `create`).
    const VERBS: &'static [ActionVerb] = &[ActionVerb::Create];

    /// Does the action. Errors are the framework's [`Error`](crate::Error)s
    /// (404 when the parent does not exist, 409, 422 …).
    async fn act(
        &self,
        verb: ActionVerb,
        request: SubresourceRequest<Self::Options>,
        body: Option<Self::Body>,
    ) -> Result<Self::Output>;
}

/// A computed view of an object as another kind, read with GET (Kueue's
/// `clusterqueues/{name}/pendingworkloads`).
#[async_trait]
pub trait View: Send + Sync + 'static {
    /// The resource the view is a subresource of.
    type Parent: Resource;
    /// Its query options.
    type Options: SubresourceOptions;
    /// What it answers: one object, list-shaped or not.
    type Output: ObjectKind;

    /// Computes the view.
    async fn get(&self, request: SubresourceRequest<Self::Options>) -> Result<Self::Output>;
}

/// The bytes a [`Streamer`] writes to the client, chunk by chunk. An error ends the body (the
/// client sees a cut response, as with kube's log streams).
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes>> + Send>>;

/// A stream read with GET (`pods/log`): each chunk is written to the client as it comes.
/// The framework polls the stream only as fast as the client reads (nothing is buffered
/// beyond a chunk), drops it as soon as the client goes away or the server shuts down, and
/// counts the request as long-running (no request timeout).
#[async_trait]
pub trait Streamer: Send + Sync + 'static {
    /// The resource the stream is a subresource of.
    type Parent: Resource;
    /// Its query options (`follow`, `tailLines` …).
    type Options: SubresourceOptions;
    /// The `Content-Type` of the body (kube's log: `text/plain`).
    const CONTENT_TYPE: &'static str = "text/plain";

    /// Opens the stream. Errors returned here (404, a 400 for options the handler refuses)
    /// are answered as `Status`; the stream's own errors end the body.
    async fn stream(&self, request: SubresourceRequest<Self::Options>) -> Result<ByteStream>;
}

/// An upgraded connection with channels (`pods/attach`, `pods/exec`): over WebSocket with the
/// `v5.channel.k8s.io` or `v4.channel.k8s.io` subprotocol. The handler gets a [`Session`]
/// and returns how it ended; the framework reports that on the error channel as the kubelet
/// does, and drops the handler as soon as the client goes away or the server shuts down.
#[async_trait]
pub trait Connecter: Send + Sync + 'static {
    /// The resource the connection is a subresource of.
    type Parent: Resource;
    /// Its query options (`stdin`, `stdout`, `stderr`, `tty`, `container` …).
    type Options: SubresourceOptions;

    /// The channels the client asked for, read from its options (kube's `stdin`, `stdout`,
    /// `stderr` and `tty` parameters). The default: stdout and stderr. A request asking for
    /// none of stdin, stdout and stderr is kube's 400.
    fn channels(&self, options: &Self::Options) -> Channels {
        let _ = options;
        Channels::default()
    }

    /// Checks the parent and options before the upgrade (404 when the object does not
    /// exist, 400 for a refused option): an error here is answered as a `Status` instead of
    /// the upgrade. The framework does not read the parent itself. The default accepts.
    async fn check(&self, request: &SubresourceRequest<Self::Options>) -> Result<()> {
        let _ = request;
        Ok(())
    }

    /// Serves the session until it ends.
    async fn connect(
        &self,
        request: SubresourceRequest<Self::Options>,
        session: Session,
    ) -> Result<ExitStatus>;
}
