//! Bearer tokens through `TokenReview` on the core kube-apiserver (`k8s.io/apiserver`'s
//! `bearertoken` + `webhook` token authenticator + token cache).
//!
//! - `Authorization: Bearer <token>` (scheme case-insensitive); no header or an empty token is
//!   "no credentials", a token the review does not accept is an error (→ 401).
//! - Answers are cached for `--authentication-token-webhook-cache-ttl` (10 s), accepted and
//!   rejected alike, under a SHA-256 digest of the token (and audiences), never the token.
//!   As in Go, errors are not cached: a failed call, or a review whose `status.error` is set.
//!   Concurrent requests with the same token share one review.
//! - Audiences: none are sent unless configured, as the delegating authenticator of
//!   `k8s.io/apiserver` (whose API audiences are empty).

use std::time::Duration;

use async_trait::async_trait;
use http::HeaderMap;
use serde_json::{Value, json};

use super::ttl_cache::{Flights, TtlCache};
use super::{AuthError, Authenticator, user::UserInfo};
use crate::core_api::CORE_API_TIMEOUT;

/// The path of `TokenReview` creation.
const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

/// Authenticates bearer tokens with `TokenReview`s.
pub struct TokenReviewAuthenticator {
    client: kube::Client,
    audiences: Vec<String>,
    ttl: Duration,
    cache: TtlCache<Option<UserInfo>>,
    flights: Flights<Result<Option<UserInfo>, AuthError>>,
}

impl std::fmt::Debug for TokenReviewAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenReviewAuthenticator")
            .field("ttl", &self.ttl)
            .field("audiences", &self.audiences)
            .finish_non_exhaustive()
    }
}

/// The token of an `Authorization: Bearer` header, if there is a non-empty one.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl TokenReviewAuthenticator {
    /// An authenticator asking the kube-apiserver behind `client`, caching answers for `ttl`.
    pub fn new(client: kube::Client, ttl: Duration) -> Self {
        Self {
            client,
            audiences: Vec::new(),
            ttl,
            cache: TtlCache::new(),
            flights: Flights::default(),
        }
    }

    /// Sends these audiences in every review (and caches per audience set); a token the
    /// review grants none of them is refused.
    pub fn with_audiences(mut self, audiences: Vec<String>) -> Self {
        self.audiences = audiences;
        self
    }

    /// Who `token` belongs to: `Ok(Some)` accepted, `Ok(None)` rejected, `Err` could not tell.
    /// Verdicts are cached for the TTL; errors never are.
    pub async fn review(&self, token: &str) -> Result<Option<UserInfo>, AuthError> {
        let key = TtlCache::<()>::key(
            std::iter::once(token.as_bytes()).chain(self.audiences.iter().map(|a| a.as_bytes())),
        );
        if let Some(hit) = self.cache.get(&key) {
            return Ok(hit);
        }
        let (client, token, audiences) = (
            self.client.clone(),
            token.to_string(),
            self.audiences.clone(),
        );
        let call = || async move {
            let answer = review_call(client, token, audiences.clone()).await?;
            verdict(&answer, &audiences)
        };
        let remember = |verdict: &Result<Option<UserInfo>, AuthError>| {
            if let Ok(user) = verdict {
                self.cache.insert(key, user.clone(), self.ttl);
            }
        };
        self.flights.run(key, call, remember).await
    }
}

/// What a `TokenReview` answer says of its token, as k8s.io/apiserver's webhook
/// authenticator reads it: a rejection that explains itself in `status.error` is an error (not
/// cached); a token granted none of `audiences` (when there are some) is not ours.
fn verdict(answer: &Value, audiences: &[String]) -> Result<Option<UserInfo>, AuthError> {
    let status = &answer["status"];
    if status["authenticated"].as_bool() != Some(true) {
        if let Some(error) = status["error"].as_str().filter(|e| !e.is_empty()) {
            return Err(AuthError::InvalidCredentials(error.to_string()));
        }
        return Ok(None);
    }
    if !audiences.is_empty() {
        // Go's webhook authenticator: the audiences the review grants (ours, when it names
        // none) must include one of ours, else the token is not for this server.
        let granted: Vec<&str> = status["audiences"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let ours = |g: &&str| audiences.iter().any(|a| a == g);
        if !granted.is_empty() && !granted.iter().any(ours) {
            return Ok(None);
        }
    }
    let user: UserInfo = serde_json::from_value(status["user"].clone())
        .map_err(|e| AuthError::Unavailable(format!("decoding TokenReview status.user: {e}")))?;
    Ok(Some(user.with_authenticated_group()))
}

/// One `TokenReview` (owned arguments: the call may outlive the request that started it).
async fn review_call(
    client: kube::Client,
    token: String,
    audiences: Vec<String>,
) -> Result<Value, AuthError> {
    let mut spec = json!({ "token": token });
    if !audiences.is_empty() {
        spec["audiences"] = json!(audiences);
    }
    let review = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": spec,
    });
    create(&client, TOKEN_REVIEWS, &review)
        .await
        .map_err(|e| AuthError::Unavailable(format!("TokenReview: {e}")))
}

/// Why a review call to the core kube-apiserver failed (after its retries).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReviewCallError {
    /// The review did not encode.
    #[error("encoding the review: {0}")]
    Encode(#[from] serde_json::Error),
    /// The request could not be built.
    #[error("building the request: {0}")]
    Request(#[from] http::Error),
    /// kube-apiserver answered with an error `Status`.
    #[error("{} ({})", .0.message, .0.code)]
    Refused(Box<kube::core::Status>),
    /// The call did not reach kube-apiserver, or its answer did not decode.
    #[error(transparent)]
    Transport(kube::Error),
    /// No answer came in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// POSTs `body` to `path` of the core kube-apiserver and returns the decoded answer, retrying
/// as `k8s.io/apiserver`'s webhooks do (`DefaultAuthWebhookRetryBackoff`: up to 5 tries,
/// 500 ms × 1.5ⁿ) on transport errors, 429 and 5xx; each call bounded by
/// [`CORE_API_TIMEOUT`].
pub(crate) async fn create(
    client: &kube::Client,
    path: &str,
    body: &Value,
) -> Result<Value, ReviewCallError> {
    let bytes = serde_json::to_vec(body)?;
    let mut delay = Duration::from_millis(500);
    let mut last_error = ReviewCallError::Timeout(CORE_API_TIMEOUT);
    for attempt in 0..5 {
        if attempt > 0 {
            tokio::time::sleep(delay).await;
            delay = delay.mul_f64(1.5);
        }
        let request = http::Request::post(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json")
            .body(bytes.clone())?;
        let result = tokio::time::timeout(CORE_API_TIMEOUT, client.request::<Value>(request)).await;
        last_error = match result {
            Ok(Ok(answer)) => return Ok(answer),
            Ok(Err(kube::Error::Api(status))) => {
                let retry = status.code == 429 || status.code >= 500;
                let refused = ReviewCallError::Refused(status);
                if !retry {
                    return Err(refused);
                }
                refused
            }
            Ok(Err(e)) => ReviewCallError::Transport(e),
            Err(_) => ReviewCallError::Timeout(CORE_API_TIMEOUT),
        };
    }
    Err(last_error)
}

#[async_trait]
impl Authenticator for TokenReviewAuthenticator {
    async fn authenticate(
        &self,
        parts: &http::request::Parts,
    ) -> Result<Option<UserInfo>, AuthError> {
        let Some(token) = bearer_token(&parts.headers) else {
            return Ok(None);
        };
        match self.review(token).await? {
            Some(user) => Ok(Some(user)),
            None => Err(AuthError::InvalidCredentials("invalid bearer token".into())),
        }
    }

    /// Drops a bearer `Authorization` header, so no handler is tempted to reuse the token.
    fn clear_credentials(&self, headers: &mut HeaderMap) {
        if bearer_token(headers).is_some() {
            headers.remove(http::header::AUTHORIZATION);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_as_go_reads_them() {
        let headers = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(http::header::AUTHORIZATION, v.parse().unwrap());
            h
        };
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("  Bearer abc extra")), Some("abc"));
        assert_eq!(bearer_token(&headers("Bearer ")), None);
        assert_eq!(bearer_token(&headers("Bearer  abc")), None);
        assert_eq!(bearer_token(&headers("Basic abc")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }
}
