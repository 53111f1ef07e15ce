//! The per-request context handed to storage: who asked, the namespace of the URL, the
//! admission chain, and a sink for warnings (sent back as `Warning` headers, as
//! `k8s.io/apiserver/pkg/warning` does).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::oneshot;

use crate::admission::AdmissionContext;
use crate::admission::attributes::Requester;
use crate::metrics::{WriteStage, WriteVerb, write_stage};
use crate::registry::warning::WarningRecorder;
use crate::user::UserInfo;

/// What storage needs to know about the request besides its options.
#[derive(Clone, Debug, Default)]
pub struct RequestContext {
    /// The namespace from the URL; `None` for cluster-scoped requests and all-namespace lists.
    pub namespace: Option<String>,
    /// The user authentication found (kube's `request.UserFrom(ctx)`); `None` when the
    /// request did not go through authentication (storage called directly, in tests).
    pub user: Option<UserInfo>,
    /// The admission chain writes of this request go through, with what the endpoint knows
    /// of the request (filled by `endpoints/`); `None`: nothing to admit (storage called
    /// directly, in tests and by in-process readers).
    pub admission: Option<AdmissionContext>,
    warnings: Arc<WarningRecorder>,
    patch: Option<Arc<PatchDecoding>>,
    /// The write this request is, whose stages are timed (set by the write handlers).
    write: Option<WriteVerb>,
    /// Told when a watch's initial events are queued (set by the endpoint from what
    /// priority and fairness left in the request).
    watch_initialization: Option<WatchInitialization>,
}

/// Tells priority and fairness that a watch is initialized: its initial events are queued for
/// its client (kube's `WatchInitialized` and the filter's initialization signal). The watch's
/// seats are held until then, or until every handle is dropped without telling.
///
/// ```
/// use extension_apiserver::registry::context::WatchInitialization;
/// let (signal, mut initialized) = WatchInitialization::new();
/// assert!(initialized.try_recv().is_err());
/// signal.signal();
/// assert!(initialized.try_recv().is_ok());
/// ```
#[derive(Clone, Debug)]
pub struct WatchInitialization(Arc<Mutex<Option<oneshot::Sender<()>>>>);

impl WatchInitialization {
    /// A signal, and what it resolves once told (or once every handle is dropped).
    pub fn new() -> (Self, oneshot::Receiver<()>) {
        let (sender, receiver) = oneshot::channel();
        (Self(Arc::new(Mutex::new(Some(sender)))), receiver)
    }

    /// The watch is initialized; later calls do nothing.
    pub fn signal(&self) {
        if let Some(sender) = self.sender().take() {
            let _ = sender.send(());
        }
    }

    /// A handle of its own for whoever sends the initial events: this one, and every clone
    /// of it, no longer tells anything.
    pub fn hand_over(&self) -> Self {
        Self(Arc::new(Mutex::new(self.sender().take())))
    }

    fn sender(&self) -> std::sync::MutexGuard<'_, Option<oneshot::Sender<()>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What strict field validation needs to know of a PATCH (set by its handler): kube-apiserver
/// answers the strict decoding errors of a patched object as 422 `Invalid` at the field
/// `patch`, where a create or update body's are 400 `BadRequest`
/// (k8s.io/apiserver/pkg/endpoints/handlers/patch.go).
#[derive(Clone, Debug, Default)]
pub(crate) struct PatchDecoding {
    /// The strict errors of the patch body itself (its duplicate fields; a JSON patch's
    /// unknown operation fields), listed before the patched object's unknown fields.
    pub(crate) errors: Vec<String>,
    /// The invalid value the 422 shows: the patched object as JSON when `None`; a strategic
    /// merge patch shows the patch as Go prints a map.
    pub(crate) shown: Option<String>,
}

impl RequestContext {
    /// A context for `namespace`.
    pub fn namespaced(namespace: impl Into<String>) -> Self {
        Self {
            namespace: Some(namespace.into()),
            ..Self::default()
        }
    }

    /// A context for a cluster-scoped request or an all-namespaces list.
    pub fn cluster() -> Self {
        Self::default()
    }

    /// The same context, made by `user`.
    ///
    /// ```
    /// use extension_apiserver::user::UserInfo;
    /// use extension_apiserver::registry::context::RequestContext;
    /// let user = UserInfo::new("alice", []);
    /// let ctx = RequestContext::namespaced("ns").with_user(user);
    /// assert_eq!(ctx.user.unwrap().name, "alice");
    /// ```
    pub fn with_user(mut self, user: UserInfo) -> Self {
        self.user = Some(user);
        self
    }

    /// Adds a warning for the client. As kube-apiserver's recorder, a repeated text is
    /// dropped, and the warnings of one request stay within about 4 KiB of text: past it,
    /// each is cut to 256 characters, and then the rest are dropped
    /// ([`warning`](crate::registry::warning)).
    ///
    /// ```
    /// use extension_apiserver::registry::context::RequestContext;
    /// let ctx = RequestContext::cluster();
    /// ctx.warn("deprecated field");
    /// ctx.warn("deprecated field");
    /// assert_eq!(ctx.warnings(), ["deprecated field"]);
    /// ```
    pub fn warn(&self, message: impl Into<String>) {
        self.warnings.add(message.into());
    }

    /// The warnings added so far (cut as [`warn`](Self::warn) says).
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.warnings()
    }

    /// The same context, for a watch whose initialization `signal` tells.
    pub fn with_watch_initialization(mut self, signal: WatchInitialization) -> Self {
        self.watch_initialization = Some(signal);
        self
    }

    /// The watch initialization signal, for the storage that sends the initial events (it
    /// signals once they are queued; kube's cacher does so); `None` when nothing waits for
    /// it. The context's own handle no longer tells.
    pub fn take_watch_initialization(&self) -> Option<WatchInitialization> {
        self.watch_initialization
            .as_ref()
            .map(WatchInitialization::hand_over)
    }

    /// Tells that the watch is initialized, unless its storage took the signal: what the
    /// endpoint does once the handler answered.
    pub fn watch_initialized(&self) {
        if let Some(signal) = &self.watch_initialization {
            signal.signal();
        }
    }

    /// What the endpoint reads of the context once the handler has answered: the warnings
    /// and the watch's initialization, without a copy of the rest (the user, the namespace).
    pub(crate) fn answered(&self) -> Answered {
        Answered {
            warnings: self.warnings.clone(),
            watch_initialization: self.watch_initialization.clone(),
        }
    }

    /// The same context, for a PATCH whose strict decoding errors are `patch`'s.
    pub(crate) fn for_patch(mut self, patch: PatchDecoding) -> Self {
        self.patch = Some(Arc::new(patch));
        self
    }

    /// The same context, for a write whose stages are timed as `verb`'s
    /// (`apiserver_write_stage_duration_seconds`).
    pub(crate) fn for_write(mut self, verb: WriteVerb) -> Self {
        self.write = Some(verb);
        self
    }

    /// Records that `stage` of this request's write took the time since `started` (nothing
    /// when the request is no timed write); now, when the next stage starts.
    pub(crate) fn stage(&self, stage: WriteStage, started: Instant) -> Instant {
        match self.write {
            Some(verb) => write_stage(verb, stage, started),
            None => Instant::now(),
        }
    }

    /// The request's admission, and who asked and where, for the chain.
    pub(crate) fn admission_request(&self) -> (Option<&AdmissionContext>, Requester<'_>) {
        let requester = Requester {
            namespace: self.namespace.as_deref(),
            user: self.user.as_ref(),
            warnings: &self.warnings,
        };
        (self.admission.as_ref(), requester)
    }

    /// What a PATCH's handler said of its body; `None` for other requests.
    pub(crate) fn patch(&self) -> Option<&PatchDecoding> {
        self.patch.as_deref()
    }
}

/// The part of a [`RequestContext`] the endpoint reads after the handler
/// ([`RequestContext::answered`]).
pub(crate) struct Answered {
    warnings: Arc<WarningRecorder>,
    watch_initialization: Option<WatchInitialization>,
}

impl Answered {
    /// As [`RequestContext::watch_initialized`].
    pub(crate) fn watch_initialized(&self) {
        if let Some(signal) = &self.watch_initialization {
            signal.signal();
        }
    }

    /// As [`RequestContext::warnings`].
    pub(crate) fn warnings(&self) -> Vec<String> {
        self.warnings.warnings()
    }
}
