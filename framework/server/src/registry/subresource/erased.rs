//! The four handler traits behind one type the installer keeps per path: options decoded
//! from query pairs, bodies and answers as JSON, so that `endpoints/` needs no type
//! parameter.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::{
    Action, ActionVerb, ByteStream, Channels, Connecter, ExitStatus, Session, Streamer,
    SubresourceOptions, SubresourceRequest, View, decode_options,
};
use crate::error::{Error, Result};
use crate::registry::schema::{SchemaFn, schema_of};
use crate::runtime::{ObjectKind, Resource, ResourceInfo};

/// Which of the four a subresource is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubresourceKind {
    /// An [`Action`].
    Action,
    /// A [`View`].
    View,
    /// A [`Streamer`].
    Stream,
    /// A [`Connecter`].
    Connect,
}

/// The kind of an answer or an options object, for discovery, OpenAPI and admission.
#[derive(Clone, Debug)]
pub struct KindOf {
    /// `apiVersion`.
    pub api_version: String,
    /// `group` (empty for the core group and `Status`).
    pub group: &'static str,
    /// `version`.
    pub version: &'static str,
    /// `kind`.
    pub kind: &'static str,
    /// Its schema.
    pub schema: SchemaFn,
}

impl KindOf {
    fn of<K: ObjectKind>() -> Self {
        Self {
            api_version: K::api_version(),
            group: K::group(),
            version: K::version(),
            kind: K::kind(),
            schema: schema_of::<K>,
        }
    }
}

/// One subresource of a resource, its handler behind a trait object.
#[derive(Clone)]
pub struct Subresource {
    kind: SubresourceKind,
    handler: Arc<dyn Erased>,
}

impl std::fmt::Debug for Subresource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subresource")
            .field("kind", &self.kind)
            .finish()
    }
}

/// What every handler offers once its types are erased.
#[async_trait]
pub(crate) trait Erased: Send + Sync {
    fn parent(&self) -> ResourceInfo;
    fn options_schema(&self) -> SchemaFn;
    fn decode(&self, pairs: &[(String, String)]) -> Result<Value>;
    fn answer(&self) -> Option<KindOf>;
    fn body(&self) -> Option<SchemaFn> {
        None
    }
    fn action_verbs(&self) -> &'static [ActionVerb] {
        &[ActionVerb::Get]
    }
    fn content_type(&self) -> &'static str {
        "application/json"
    }
    fn channels(&self, _options: &Value) -> Result<Channels> {
        Err(Error::internal("not a connection"))
    }
    async fn act(
        &self,
        _verb: ActionVerb,
        _request: Request,
        _body: Option<Value>,
    ) -> Result<Value> {
        Err(Error::internal("not an action"))
    }
    async fn get(&self, _request: Request) -> Result<Value> {
        Err(Error::internal("not a view"))
    }
    async fn stream(&self, _request: Request) -> Result<ByteStream> {
        Err(Error::internal("not a stream"))
    }
    async fn check(&self, _request: &Request) -> Result<()> {
        Ok(())
    }
    async fn connect(&self, _request: Request, _session: Session) -> Result<ExitStatus> {
        Err(Error::internal("not a connection"))
    }
}

/// A request with its options still JSON.
pub(crate) type Request = SubresourceRequest<Value>;

impl Subresource {
    /// An [`Action`].
    pub fn action<A: Action>(handler: A) -> Self {
        Self::new(SubresourceKind::Action, ActionOf(handler))
    }

    /// A [`View`].
    pub fn view<V: View>(handler: V) -> Self {
        Self::new(SubresourceKind::View, ViewOf(handler))
    }

    /// A [`Streamer`].
    pub fn stream<S: Streamer>(handler: S) -> Self {
        Self::new(SubresourceKind::Stream, StreamOf(handler))
    }

    /// A [`Connecter`].
    pub fn connect<C: Connecter>(handler: C) -> Self {
        Self::new(SubresourceKind::Connect, ConnectOf(handler))
    }

    fn new(kind: SubresourceKind, handler: impl Erased + 'static) -> Self {
        Self {
            kind,
            handler: Arc::new(handler),
        }
    }

    /// Which of the four it is.
    pub fn kind(&self) -> SubresourceKind {
        self.kind
    }

    /// The kind of its parent resource.
    pub fn parent(&self) -> ResourceInfo {
        self.handler.parent()
    }

    /// The verbs it supports, in discovery's order: an action's, `get` for a view and a
    /// stream, `create` and `get` for a connection (as `pods/attach`).
    pub fn verbs(&self) -> Vec<&'static str> {
        let mut verbs: Vec<&'static str> = match self.kind {
            SubresourceKind::Action => self
                .handler
                .action_verbs()
                .iter()
                .map(|v| v.as_str())
                .collect(),
            SubresourceKind::View | SubresourceKind::Stream => vec!["get"],
            SubresourceKind::Connect => vec!["create", "get"],
        };
        verbs.sort_unstable();
        verbs.dedup();
        verbs
    }

    /// What it answers (actions and views).
    pub fn answer(&self) -> Option<KindOf> {
        self.handler.answer()
    }

    /// The kind discovery lists for it as subresource `name`: an action's or a view's
    /// answer, a stream's parent (as `pods/log` lists `Pod`), a connection's options
    /// `{Kind}{Name}Options` in the parent's group version (as `pods/attach` lists
    /// `PodAttachOptions`).
    pub fn served_info(&self, name: &str) -> ResourceInfo {
        let parent = self.parent();
        match (self.kind, self.answer()) {
            (SubresourceKind::Action | SubresourceKind::View, Some(answer)) => ResourceInfo {
                group: answer.group,
                version: answer.version,
                kind: answer.kind,
                ..parent
            },
            (SubresourceKind::Connect, _) => ResourceInfo {
                kind: options_kind(parent.kind, name),
                ..parent
            },
            _ => parent,
        }
    }

    /// The schema of its options, for OpenAPI's query parameters.
    pub fn options_schema(&self) -> SchemaFn {
        self.handler.options_schema()
    }

    /// The schema of an action's body.
    pub fn body_schema(&self) -> Option<SchemaFn> {
        self.handler.body()
    }

    /// The `Content-Type` of a stream's body.
    pub fn content_type(&self) -> &'static str {
        self.handler.content_type()
    }

    pub(crate) fn handler(&self) -> &Arc<dyn Erased> {
        &self.handler
    }
}

/// `{Kind}{Name}Options` (a `ResourceInfo` holds static names).
pub(crate) fn options_kind(kind: &str, name: &str) -> &'static str {
    let mut chars = name.chars();
    let title: String = chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default();
    intern(&format!("{kind}{title}Options"))
}

/// `name`, made static once for the life of the process: the names of options kinds and
/// parameters, which the static descriptions of discovery and OpenAPI hold.
pub(crate) fn intern(name: &str) -> &'static str {
    static MADE: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = made.iter().find(|k| **k == name) {
        return found;
    }
    let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
    made.push(leaked);
    leaked
}

fn typed<O: SubresourceOptions>(request: Request) -> Result<SubresourceRequest<O>> {
    let options = serde_json::from_value(request.options)
        .map_err(|e| Error::bad_request(format!("options: {e}")))?;
    Ok(SubresourceRequest {
        name: request.name,
        namespace: request.namespace,
        options,
        ctx: request.ctx,
    })
}

fn to_json<K: ObjectKind>(answer: &K) -> Result<Value> {
    let mut value = serde_json::to_value(answer).map_err(Error::internal)?;
    if let Value::Object(map) = &mut value {
        map.insert("apiVersion".into(), Value::String(K::api_version()));
        map.insert("kind".into(), Value::String(K::kind().into()));
    }
    Ok(value)
}

/// The methods every handler has from its `Parent` and `Options` types.
macro_rules! typed_handler {
    ($handler:ident) => {
        fn parent(&self) -> ResourceInfo {
            <$handler::Parent as Resource>::INFO
        }
        fn options_schema(&self) -> SchemaFn {
            schema_of::<$handler::Options>
        }
        fn decode(&self, pairs: &[(String, String)]) -> Result<Value> {
            encode(decode_options::<$handler::Options>(pairs)?)
        }
    };
}

struct ActionOf<A>(A);
struct ViewOf<V>(V);
struct StreamOf<S>(S);
struct ConnectOf<C>(C);

#[async_trait]
impl<A: Action> Erased for ActionOf<A> {
    typed_handler!(A);
    fn answer(&self) -> Option<KindOf> {
        Some(KindOf::of::<A::Output>())
    }
    fn body(&self) -> Option<SchemaFn> {
        Some(schema_of::<A::Body>)
    }
    fn action_verbs(&self) -> &'static [ActionVerb] {
        A::VERBS
    }
    async fn act(&self, verb: ActionVerb, request: Request, body: Option<Value>) -> Result<Value> {
        let body = match body {
            Some(body) => Some(
                serde_json::from_value::<A::Body>(body)
                    .map_err(|e| Error::bad_request(format!("the request body: {e}")))?,
            ),
            None => None,
        };
        let answer = self.0.act(verb, typed(request)?, body).await?;
        to_json(&answer)
    }
}

#[async_trait]
impl<V: View> Erased for ViewOf<V> {
    typed_handler!(V);
    fn answer(&self) -> Option<KindOf> {
        Some(KindOf::of::<V::Output>())
    }
    async fn get(&self, request: Request) -> Result<Value> {
        let answer = self.0.get(typed(request)?).await?;
        to_json(&answer)
    }
}

#[async_trait]
impl<S: Streamer> Erased for StreamOf<S> {
    typed_handler!(S);
    fn answer(&self) -> Option<KindOf> {
        None
    }
    fn content_type(&self) -> &'static str {
        S::CONTENT_TYPE
    }
    async fn stream(&self, request: Request) -> Result<ByteStream> {
        self.0.stream(typed(request)?).await
    }
}

#[async_trait]
impl<C: Connecter> Erased for ConnectOf<C> {
    typed_handler!(C);
    fn answer(&self) -> Option<KindOf> {
        None
    }
    fn channels(&self, options: &Value) -> Result<Channels> {
        let options: C::Options = serde_json::from_value(options.clone())
            .map_err(|e| Error::bad_request(format!("options: {e}")))?;
        Ok(self.0.channels(&options))
    }
    async fn check(&self, request: &Request) -> Result<()> {
        self.0.check(&typed(request.clone())?).await
    }
    async fn connect(&self, request: Request, session: Session) -> Result<ExitStatus> {
        self.0.connect(typed(request)?, session).await
    }
}

fn encode<O: SubresourceOptions>(options: O) -> Result<Value> {
    serde_json::to_value(options).map_err(Error::internal)
}
