//! Authentication and authorization: the filters between request info and the router ask an
//! [`Authenticator`] who sent a request and an [`Authorizer`] whether that user may do it.
//! The verdicts mirror `k8s.io/apiserver`'s `authenticator.Request` and `authorizer.Authorizer`.

pub(crate) mod authorizer;
pub mod delegating;
pub(crate) mod options;
pub(crate) mod requestheader;
pub(crate) mod sar;
pub(crate) mod token_webhook;
pub(crate) mod ttl_cache;
// Each part's public items, under this module's name (the parts themselves are private).
pub use authorizer::*;
pub use extension_apiserver_machinery::user;
pub use options::*;
pub use requestheader::*;
mod chain;
pub(crate) mod x509;
mod x509_v1;

use std::sync::{Arc, RwLock};

use async_trait::async_trait;

pub use authorizer::{
    AlwaysAllowAuthenticated, AlwaysAllowPaths, Attributes, Authorization, Authorizer, Decision,
    PrivilegedGroups, UnionAuthorizer,
};
pub use chain::ChainError;
pub use options::DelegatingOptions;
pub use requestheader::{RequestHeaderAuthenticator, RequestHeaderConfig};
pub use sar::SubjectAccessReviewAuthorizer;
pub use token_webhook::TokenReviewAuthenticator;
pub use user::UserInfo;
pub use x509::{CertificateError, X509Authenticator};

/// Why a request's credentials were rejected.
///
/// An error means "credentials were presented and are bad" (→ 401); finding no credentials of
/// its kind is `Ok(None)` instead, so the next authenticator gets a turn.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// A client certificate did not verify against the client CA, or maps to no user.
    #[error("invalid client certificate: {0}")]
    InvalidCertificate(#[source] CertificateError),
    /// Credentials of another kind (token, proxy headers) were rejected.
    #[error("invalid credentials: {0}")]
    InvalidCredentials(String),
    /// The authenticator or authorizer could not decide (e.g. a review call failed); the
    /// message names the review.
    #[error("{0}")]
    Unavailable(String),
}

/// Finds the user behind a request.
///
/// Implementations look only at the request head: the extensions carry connection facts such
/// as [`crate::tls::PeerCertificates`], the headers carry tokens or proxy headers.
#[async_trait]
pub trait Authenticator: Send + Sync {
    /// `Ok(Some(user))` if this authenticator recognises the request, `Ok(None)` if it carries
    /// no credentials of this kind, `Err` if the credentials are present but invalid.
    async fn authenticate(
        &self,
        parts: &http::request::Parts,
    ) -> Result<Option<UserInfo>, AuthError>;

    /// Removes the credentials this authenticator reads from a request that was
    /// authenticated, before handlers see it (front-proxy headers, a bearer token), as
    /// `k8s.io/apiserver` does. Nothing by default.
    fn clear_credentials(&self, _headers: &mut http::HeaderMap) {}
}

#[async_trait]
impl<A: Authenticator + ?Sized> Authenticator for Arc<A> {
    async fn authenticate(
        &self,
        parts: &http::request::Parts,
    ) -> Result<Option<UserInfo>, AuthError> {
        (**self).authenticate(parts).await
    }

    fn clear_credentials(&self, headers: &mut http::HeaderMap) {
        (**self).clear_credentials(headers)
    }
}

/// An authenticator that can be replaced while the server runs (a CA rotated through the
/// `extension-apiserver-authentication` ConfigMap); empty, it recognises nobody.
pub struct Dynamic<A: ?Sized> {
    current: RwLock<Option<Arc<A>>>,
}

impl<A: ?Sized> Default for Dynamic<A> {
    fn default() -> Self {
        Self {
            current: RwLock::new(None),
        }
    }
}

impl<A: ?Sized> std::fmt::Debug for Dynamic<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dynamic")
            .field("set", &self.get().is_some())
            .finish()
    }
}

impl<A: ?Sized> Dynamic<A> {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the authenticator (`None`: recognise nobody).
    pub fn set(&self, authenticator: Option<Arc<A>>) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = authenticator;
    }

    /// The current authenticator.
    pub fn get(&self) -> Option<Arc<A>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[async_trait]
impl<A: Authenticator + ?Sized> Authenticator for Dynamic<A> {
    async fn authenticate(
        &self,
        parts: &http::request::Parts,
    ) -> Result<Option<UserInfo>, AuthError> {
        match self.get() {
            Some(current) => current.authenticate(parts).await,
            None => Ok(None),
        }
    }

    fn clear_credentials(&self, headers: &mut http::HeaderMap) {
        if let Some(current) = self.get() {
            current.clear_credentials(headers);
        }
    }
}

/// Tries authenticators in order; the first that recognises the request wins.
///
/// Like `k8s.io/apiserver`'s union authenticator, an error from one does not stop the others
/// (a bad token must not hide a good client certificate); errors are reported only when no
/// authenticator succeeds.
#[derive(Default, Clone)]
pub struct UnionAuthenticator {
    authenticators: Vec<Arc<dyn Authenticator>>,
}

impl UnionAuthenticator {
    /// An empty union, which authenticates nobody.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an authenticator, tried after the ones already added.
    pub fn with(mut self, authenticator: impl Authenticator + 'static) -> Self {
        self.authenticators.push(Arc::new(authenticator));
        self
    }
}

#[async_trait]
impl Authenticator for UnionAuthenticator {
    async fn authenticate(
        &self,
        parts: &http::request::Parts,
    ) -> Result<Option<UserInfo>, AuthError> {
        let mut first_error = None;
        for authenticator in &self.authenticators {
            match authenticator.authenticate(parts).await {
                Ok(Some(user)) => return Ok(Some(user)),
                Ok(None) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(None), Err)
    }

    fn clear_credentials(&self, headers: &mut http::HeaderMap) {
        for authenticator in &self.authenticators {
            authenticator.clear_credentials(headers);
        }
    }
}
