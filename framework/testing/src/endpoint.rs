//! [`TlsEndpoint`]: a router of a test's own served over TLS on a loopback port, for the
//! fakes around a server (the core kube-apiserver, a kubelet, a webhook).

use std::net::SocketAddr;
use std::time::Duration;

use extension_apiserver::lifecycle::ShutdownSignal;
use extension_apiserver::server::serve::{ServeOptions, serve_tls_with};
use extension_apiserver::tls::certs::CertKey;

/// `router` served over TLS on 127.0.0.1 and an ephemeral port with the serving certificate
/// `serving`; stopped when dropped (in-flight requests get 100 ms).
///
/// ```no_run
/// # async fn t() {
/// use extension_apiserver::axum::{Router, routing::get};
/// use extension_apiserver::tls::certs::CertKey;
/// use extension_apiserver_testing::{TlsEndpoint, pki::TestCa};
///
/// let cert = TestCa::new("fake").serving(&["127.0.0.1"]);
/// let serving = CertKey::from_pem(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes()).unwrap();
/// let endpoint = TlsEndpoint::start(Router::new().route("/", get(|| async { "hi" })), &serving).await;
/// println!("https://{}/", endpoint.addr);
/// # }
/// ```
pub struct TlsEndpoint {
    /// Where it listens.
    pub addr: SocketAddr,
    signal: ShutdownSignal,
}

impl TlsEndpoint {
    /// Starts serving; panics when it cannot (a test has nothing better to do).
    pub async fn start(router: axum::Router, serving: &CertKey) -> Self {
        extension_apiserver::tls::install_crypto_provider();
        let tls = extension_apiserver::server::tls::server_config(serving, None)
            .expect("a TLS configuration of the serving certificate");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("the bound address");
        let signal = ShutdownSignal::new();
        let options = ServeOptions {
            grace_period: Duration::from_millis(100),
            signal: signal.clone(),
            ..ServeOptions::default()
        };
        tokio::spawn(async move {
            let _ = serve_tls_with(listener, tls, router, std::future::pending(), options).await;
        });
        Self { addr, signal }
    }
}

impl Drop for TlsEndpoint {
    fn drop(&mut self) {
        self.signal.trigger();
    }
}
