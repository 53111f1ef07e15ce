//! Calling a webhook: its URL (`clientConfig.url`, or `clientConfig.service` as
//! `https://{name}.{namespace}.svc:{port}{path}`), its `caBundle` as the only trust root (the
//! system's roots without one), `?timeout=` as kube's REST client adds it, and a deadline of
//! `timeoutSeconds`. Clients are kept per address and CA, so connections are reused.

use std::collections::HashMap;
use std::sync::Mutex;

use http::Uri;
use serde_json::Value;

use super::hook::Hook;

/// Where a webhook is: the base (`https://host:port`), the path and query to POST to, the
/// trust roots (DER), and the URL as kube's errors name it.
struct Target {
    base: Uri,
    path_and_query: String,
    roots: Option<Vec<Vec<u8>>>,
    url: String,
}

fn target(hook: &Hook) -> Result<Target, String> {
    let config = &hook.client_config;
    let url = match (&config.url, &config.service) {
        (Some(url), _) => url.clone(),
        (None, Some(service)) => format!(
            "https://{}.{}.svc:{}{}",
            service.name,
            service.namespace,
            service.port.unwrap_or(443),
            service.path.as_deref().unwrap_or("")
        ),
        (None, None) => return Err("webhook has no url or service in its clientConfig".into()),
    };
    let uri: Uri = url
        .parse()
        .map_err(|e| format!("invalid webhook URL {url:?}: {e}"))?;
    let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
        return Err(format!("invalid webhook URL {url:?}: not absolute"));
    };
    let base = Uri::builder()
        .scheme(scheme.clone())
        .authority(authority.clone())
        .path_and_query("/")
        .build()
        .map_err(|e| format!("invalid webhook URL {url:?}: {e}"))?;
    let separator = if uri.query().is_some() { '&' } else { '?' };
    let path = match uri.path_and_query() {
        Some(p) => p.as_str().to_string(),
        None => "/".into(),
    };
    let path_and_query = format!("{path}{separator}timeout={}s", hook.timeout.as_secs());
    let roots = match config.ca_bundle.as_ref().filter(|b| !b.0.is_empty()) {
        Some(pem) => Some(
            crate::tls::certs::parse_certs_pem(&pem.0)
                .map_err(|e| format!("invalid caBundle: {e}"))?
                .into_iter()
                .map(|c| c.to_vec())
                .collect(),
        ),
        None => None,
    };
    let url = format!("{scheme}://{authority}{path_and_query}");
    Ok(Target {
        base,
        path_and_query,
        roots,
        url,
    })
}

/// How many webhook clients are kept at most.
const MAX_CLIENTS: usize = 256;

/// A webhook's address and trust roots (DER).
type ClientKey = (String, Option<Vec<Vec<u8>>>);

/// Clients of the webhooks called so far, by address and trust roots.
#[derive(Default)]
pub(crate) struct Clients {
    cache: Mutex<HashMap<ClientKey, kube::Client>>,
}

impl Clients {
    fn client(&self, target: &Target) -> Result<kube::Client, String> {
        let key = (target.base.to_string(), target.roots.clone());
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = cache.get(&key) {
            return Ok(client.clone());
        }
        let mut config = kube::Config::new(target.base.clone());
        config.root_cert = target.roots.clone();
        let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
        // Rotated CAs and removed webhooks leave clients behind: start over past a bound
        // well above any real cluster's number of webhook endpoints.
        if cache.len() >= MAX_CLIENTS {
            cache.clear();
        }
        cache.insert(key, client.clone());
        Ok(client)
    }

    /// POSTs `review` to `hook` and returns its answer; `Err` is the reason of a failed
    /// call, as kube words it after `failed calling webhook "NAME": `.
    pub(crate) async fn call(&self, hook: &Hook, review: &Value) -> Result<Value, String> {
        let target = target(hook)?;
        let client = self.client(&target)?;
        let body = serde_json::to_vec(review).map_err(|e| e.to_string())?;
        let request = http::Request::post(target.path_and_query.as_str())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json")
            .body(body)
            .map_err(|e| e.to_string())?;
        let url = &target.url;
        match tokio::time::timeout(hook.timeout, client.request::<Value>(request)).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(format!("failed to call webhook: Post {url:?}: {e}")),
            Err(_) => Err(format!(
                "failed to call webhook: Post {url:?}: context deadline exceeded"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::admissionregistration::v1::{ServiceReference, WebhookClientConfig};

    use super::*;

    fn hook_with(config: WebhookClientConfig) -> Hook {
        let mut hook = crate::admission::webhook::hook::tests::hook("h");
        hook.client_config = config;
        hook
    }

    #[test]
    fn urls_and_services_as_kube_calls_them() {
        let url = hook_with(WebhookClientConfig {
            url: Some("https://hooks.example.com:8443/validate".into()),
            ..Default::default()
        });
        let by_url = target(&url).unwrap();
        assert_eq!(by_url.base.to_string(), "https://hooks.example.com:8443/");
        assert_eq!(by_url.path_and_query, "/validate?timeout=10s");
        assert!(by_url.roots.is_none(), "the system's roots");

        let service = hook_with(WebhookClientConfig {
            service: Some(ServiceReference {
                name: "policy".into(),
                namespace: "guard".into(),
                path: Some("/check".into()),
                port: None,
            }),
            ..Default::default()
        });
        let by_service = target(&service).unwrap();
        assert_eq!(
            by_service.url,
            "https://policy.guard.svc:443/check?timeout=10s"
        );

        let nothing = hook_with(WebhookClientConfig::default());
        assert!(target_error(&nothing).contains("no url or service"));
        let bad_ca = hook_with(WebhookClientConfig {
            url: Some("https://127.0.0.1/".into()),
            ca_bundle: Some(k8s_openapi::ByteString(b"not PEM".to_vec())),
            ..Default::default()
        });
        assert!(target_error(&bad_ca).contains("invalid caBundle"));
    }

    fn target_error(hook: &Hook) -> String {
        match target(hook) {
            Ok(_) => panic!("a target"),
            Err(e) => e,
        }
    }
}
