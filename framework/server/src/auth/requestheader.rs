//! Request-header (front-proxy) authentication: the aggregator of kube-apiserver calls an
//! extension server with its front-proxy client certificate and names the user in headers
//! (`X-Remote-User`, `X-Remote-Group`, `X-Remote-Extra-{key}`, `X-Remote-Uid`). As
//! `k8s.io/apiserver`'s `headerrequest` behind an `x509.Verifier`, the headers are believed only
//! when the connection's client certificate chains to the request-header CA and its common
//! name is allowed; on any other connection they are ignored.

use async_trait::async_trait;
use http::{HeaderMap, HeaderName};

use super::{AuthError, Authenticator, CertificateError, X509Authenticator, user::UserInfo};
use crate::tls::PeerCertificates;
use crate::tls::TlsError;

/// What the request-header authenticator trusts and reads (`RequestHeaderConfig` of
/// `k8s.io/apiserver`), from flags or the `extension-apiserver-authentication` ConfigMap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestHeaderConfig {
    /// PEM bundle of the front-proxy CA(s).
    pub client_ca_pem: Vec<u8>,
    /// Common names allowed to assert users; empty: any certificate of the CA.
    pub allowed_names: Vec<String>,
    /// Headers holding the user name; the first non-empty one wins.
    pub username_headers: Vec<String>,
    /// Headers holding the user's UID; the first non-empty one wins.
    pub uid_headers: Vec<String>,
    /// Headers holding groups; every value of each counts.
    pub group_headers: Vec<String>,
    /// Prefixes of headers holding extras (`X-Remote-Extra-Scopes: a` → `scopes: [a]`).
    pub extra_headers_prefixes: Vec<String>,
}

/// Authenticates requests by front-proxy headers on a verified front-proxy connection.
pub struct RequestHeaderAuthenticator {
    verifier: X509Authenticator,
    allowed_names: Vec<String>,
    username_headers: Vec<HeaderName>,
    uid_headers: Vec<HeaderName>,
    group_headers: Vec<HeaderName>,
    extra_prefixes: Vec<String>,
}

impl std::fmt::Debug for RequestHeaderAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestHeaderAuthenticator")
            .field("allowed_names", &self.allowed_names)
            .field("username_headers", &self.username_headers)
            .finish_non_exhaustive()
    }
}

/// Header names are compared lower-cased (HTTP/2 sends them so, `http` stores them so).
fn lower(names: &[String]) -> Vec<String> {
    names
        .iter()
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty())
        .collect()
}

/// The header names, made once rather than parsed at each request; a name no header can
/// have is dropped (it never matched).
fn header_names(names: &[String]) -> Vec<HeaderName> {
    lower(names)
        .iter()
        .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
        .collect()
}

impl RequestHeaderAuthenticator {
    /// An authenticator for `config`; fails when the CA bundle holds no certificate.
    pub fn new(config: &RequestHeaderConfig) -> Result<Self, TlsError> {
        Ok(Self {
            verifier: X509Authenticator::from_pem(&config.client_ca_pem)?,
            allowed_names: config.allowed_names.clone(),
            username_headers: header_names(&config.username_headers),
            uid_headers: header_names(&config.uid_headers),
            group_headers: header_names(&config.group_headers),
            extra_prefixes: lower(&config.extra_headers_prefixes),
        })
    }

    /// `x509.Verifier`: the chain must verify against the request-header CA and the common
    /// name must be allowed.
    fn verify_proxy(&self, peer: &PeerCertificates) -> Result<(), AuthError> {
        let refused = self.verifier.read_peer(peer, |proxy| {
            let cn = proxy.map_or("", |u| u.name.as_str());
            let allowed =
                self.allowed_names.is_empty() || self.allowed_names.iter().any(|n| n == cn);
            (!allowed).then(|| cn.to_string())
        })?;
        match refused {
            None => Ok(()),
            Some(cn) => Err(AuthError::InvalidCertificate(
                CertificateError::NotAllowed { common_name: cn },
            )),
        }
    }

    /// The user the headers name, if any (after the proxy was verified).
    fn user_from_headers(&self, headers: &HeaderMap) -> Option<UserInfo> {
        let first = |names: &[HeaderName]| {
            names.iter().find_map(|name| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .filter(|v| !v.is_empty())
                    .map(str::to_string)
            })
        };
        let name = first(&self.username_headers)?;
        let mut user = UserInfo::new(name, []);
        user.uid = first(&self.uid_headers).unwrap_or_default();
        for header in &self.group_headers {
            for value in headers.get_all(header) {
                if let Some(v) = value.to_str().ok().filter(|v| !v.is_empty()) {
                    user.groups.push(v.to_string());
                }
            }
        }
        for (header, value) in headers {
            let Some(key) = self
                .extra_prefixes
                .iter()
                .find_map(|p| header.as_str().strip_prefix(p.as_str()))
            else {
                continue;
            };
            if let Some(v) = value.to_str().ok().filter(|v| !v.is_empty()) {
                user.extra
                    .entry(unescape_extra_key(key))
                    .or_default()
                    .push(v.to_string());
            }
        }
        Some(user.with_authenticated_group())
    }
}

#[async_trait]
impl Authenticator for RequestHeaderAuthenticator {
    async fn authenticate(
        &self,
        parts: &http::request::Parts,
    ) -> Result<Option<UserInfo>, AuthError> {
        let Some(peer) = parts.extensions.get::<PeerCertificates>() else {
            return Ok(None);
        };
        self.verify_proxy(peer)?;
        Ok(self.user_from_headers(&parts.headers))
    }

    /// Removes every header this authenticator reads, so handlers (and anything they proxy
    /// to) never see identity headers, whoever sent them.
    fn clear_credentials(&self, headers: &mut HeaderMap) {
        for name in self
            .username_headers
            .iter()
            .chain(&self.uid_headers)
            .chain(&self.group_headers)
        {
            headers.remove(name);
        }
        if !self.extra_prefixes.is_empty() {
            let extra: Vec<http::HeaderName> = headers
                .keys()
                .filter(|h| {
                    self.extra_prefixes
                        .iter()
                        .any(|p| h.as_str().starts_with(p))
                })
                .cloned()
                .collect();
            for name in extra {
                headers.remove(name);
            }
        }
    }
}

/// Go's `unescapeExtraKey`: the key after the prefix is lower-cased (header names are) and
/// percent-unescaped as `url.PathUnescape` does; a malformed escape leaves the key as sent.
pub fn unescape_extra_key(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(b) => {
                    out.push(b);
                    i += 3;
                    continue;
                }
                None => return key.to_string(),
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| key.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_keys_are_unescaped_like_go() {
        assert_eq!(unescape_extra_key("scopes"), "scopes");
        assert_eq!(
            unescape_extra_key("example.com%2fscopes"),
            "example.com/scopes"
        );
        assert_eq!(unescape_extra_key("a%zz"), "a%zz");
        assert_eq!(unescape_extra_key("a%2"), "a%2");
        assert_eq!(unescape_extra_key("a+b"), "a+b");
    }

    fn authenticator(names: &[&str]) -> RequestHeaderAuthenticator {
        let ca = crate::tls::pki::TestCa::new("front-proxy");
        RequestHeaderAuthenticator::new(&RequestHeaderConfig {
            client_ca_pem: ca.cert_pem.into_bytes(),
            allowed_names: names.iter().map(|s| s.to_string()).collect(),
            username_headers: vec!["X-Remote-User".into()],
            uid_headers: vec!["X-Remote-Uid".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_headers_prefixes: vec!["X-Remote-Extra-".into()],
        })
        .unwrap()
    }

    #[test]
    fn headers_map_to_a_user() {
        let auth = authenticator(&[]);
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-user", "jane".parse().unwrap());
        headers.insert("x-remote-uid", "u-1".parse().unwrap());
        headers.append("x-remote-group", "devs".parse().unwrap());
        headers.append("x-remote-group", "ops".parse().unwrap());
        headers.append("x-remote-extra-scopes", "a".parse().unwrap());
        headers.append("x-remote-extra-scopes", "b".parse().unwrap());
        headers.append("x-remote-extra-example.com%2fkey", "v".parse().unwrap());
        let user = auth.user_from_headers(&headers).unwrap();
        assert_eq!(user.name, "jane");
        assert_eq!(user.uid, "u-1");
        assert_eq!(user.groups, ["devs", "ops", "system:authenticated"]);
        assert_eq!(user.extra["scopes"], ["a", "b"]);
        assert_eq!(user.extra["example.com/key"], ["v"]);
        auth.clear_credentials(&mut headers);
        assert!(headers.is_empty());
        assert!(auth.user_from_headers(&HeaderMap::new()).is_none());
    }

    #[test]
    fn forwarded_anonymous_stays_unauthenticated() {
        let auth = authenticator(&[]);
        let mut headers = HeaderMap::new();
        headers.insert("x-remote-user", "system:anonymous".parse().unwrap());
        headers.insert("x-remote-group", "system:unauthenticated".parse().unwrap());
        let user = auth.user_from_headers(&headers).unwrap();
        assert_eq!(user.groups, ["system:unauthenticated"]);
    }
}
