//! Authentication and authorization: the filters between request info and the router ask an
//! [`Authenticator`] who sent a request and an [`Authorizer`] whether that user may do it.
//! The verdicts mirror `k8s.io/apiserver`'s `authenticator.Request` and `authorizer.Authorizer`.

pub mod authorizer;
pub mod user;
pub mod x509;

use std::sync::Arc;

use async_trait::async_trait;

pub use authorizer::{AlwaysAllowAuthenticated, Attributes, Authorization, Authorizer, Decision};
pub use user::UserInfo;
pub use x509::X509Authenticator;

/// Why a request's credentials were rejected.
///
/// An error means "credentials were presented and are bad" (→ 401); finding no credentials of
/// its kind is `Ok(None)` instead, so the next authenticator gets a turn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// A client certificate did not verify against the client CA, or maps to no user.
    #[error("invalid client certificate: {0}")]
    InvalidCertificate(String),
    /// Credentials of another kind (token, proxy headers) were rejected.
    #[error("invalid credentials: {0}")]
    InvalidCredentials(String),
    /// The authenticator or authorizer could not decide (e.g. a review call failed).
    #[error("authentication unavailable: {0}")]
    Unavailable(String),
}

/// Finds the user behind a request.
///
/// Implementations look only at the request head: the extensions carry connection facts such
/// as [`crate::server::serve::PeerCertificates`], the headers carry tokens or proxy headers.
#[async_trait]
pub trait Authenticator: Send + Sync {
    /// `Ok(Some(user))` if this authenticator recognises the request, `Ok(None)` if it carries
    /// no credentials of this kind, `Err` if the credentials are present but invalid.
    async fn authenticate(
        &self,
        parts: &http::request::Parts,
    ) -> Result<Option<UserInfo>, AuthError>;
}

#[async_trait]
impl<A: Authenticator + ?Sized> Authenticator for Arc<A> {
    async fn authenticate(
        &self,
        parts: &http::request::Parts,
    ) -> Result<Option<UserInfo>, AuthError> {
        (**self).authenticate(parts).await
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
}
