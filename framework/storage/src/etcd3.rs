//! A [`Backend`] on an etcd v3 cluster, through the `etcd-client` crate (feature `etcd`).
//!
//! etcd is the model of the backend trait, so most operations are one request: writes are
//! transactions that compare revisions, reads are ranges at a revision, watches are etcd
//! watches. What etcd reports differently from the trait (a watch canceled for compaction,
//! `OutOfRange` on reads) is translated here.

use std::collections::VecDeque;
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Compare, CompareOp, DeleteOptions, Error as EtcdError, GetOptions, GetResponse, PutOptions,
    Txn, TxnOp, TxnOpResponse, TxnResponse, WatchOptions, WatchRequestSender, WatchResponseStream,
};
use futures::stream;

use super::backend::{
    Backend, Event, EventType, KeyValue, ListRequest, ListResult, ProgressStream, Revision,
    StorageError, WatchItem,
};
use super::shared_read::SharedRounds;
use crate::tls::TlsError;
use crate::tls::certs::{CertKey, parse_certs_pem};
use channel::Dial;
use members::{Members, Probe, Retry};

mod channel;
mod members;

/// The request side of an open watch, through which progress is asked for.
type ProgressRequester = Arc<tokio::sync::Mutex<WatchRequestSender>>;

/// How to talk to etcd.
///
/// The deadlines make a dead or unreachable etcd an error within seconds instead of a request
/// that hangs: the client keeps reconnecting in the background, and the first request after
/// etcd is back succeeds.
#[derive(Clone, Debug)]
pub struct Etcd3Options {
    /// Prepended to every key in etcd and stripped from every key read back, so several
    /// users (tests, tenants) can share one cluster without seeing each other's keys.
    pub key_prefix: String,
    /// How long to wait for a TCP connection (and TLS handshake) to an endpoint.
    pub connect_timeout: Duration,
    /// How long one read or write (or the start of a watch) may take before it fails with
    /// [`StorageError::Unavailable`] (HTTP 503). An established watch is not bounded.
    pub request_timeout: Duration,
    /// How long the reads of one list may take, in place of `request_timeout`: a page of a
    /// large collection, or its count, may take longer than one key (kube-apiserver reads
    /// under the request's deadline, 60 s by default).
    pub list_timeout: Duration,
    /// How long the readiness check (`/readyz`) waits for etcd. Also how long a health probe
    /// of a member may take.
    pub ready_timeout: Duration,
    /// With several endpoints, how often each member is probed (a linearizable read within
    /// `ready_timeout`): one that fails is set aside, one that answers takes requests again.
    pub probe_interval: Duration,
    /// HTTP/2 keep-alive pings (interval, timeout): a connection whose pings go unanswered is
    /// dropped, so watches on a silently dead etcd end instead of waiting forever.
    pub keep_alive: Option<(Duration, Duration)>,
    /// TLS to etcd, for `https://` endpoints.
    pub tls: Option<Etcd3Tls>,
}

impl Default for Etcd3Options {
    fn default() -> Self {
        Self {
            key_prefix: String::new(),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            list_timeout: Duration::from_secs(60),
            ready_timeout: Duration::from_secs(2),
            probe_interval: Duration::from_secs(1),
            keep_alive: Some((Duration::from_secs(10), Duration::from_secs(5))),
            tls: None,
        }
    }
}

/// TLS to etcd, as kube-apiserver's `--etcd-cafile`, `--etcd-certfile` and `--etcd-keyfile`:
/// the CA bundle that etcd's serving certificate is verified against and, for an etcd started
/// with `--client-cert-auth`, the client certificate and key to present. All PEM.
#[derive(Clone, Default)]
pub struct Etcd3Tls {
    ca_pem: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Etcd3Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd3Tls")
            .field("ca", &self.ca_pem.is_some())
            .field("client_certificate", &self.identity.is_some())
            .finish()
    }
}

impl Etcd3Tls {
    /// From PEM data: an optional CA bundle, and an optional client certificate chain with its
    /// private key. Malformed PEM is an error here rather than a failed handshake later.
    pub fn from_pem(
        ca_pem: Option<Vec<u8>>,
        identity: Option<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Self, TlsError> {
        if let Some(ca) = &ca_pem {
            parse_certs_pem(ca)?;
        }
        if let Some((cert, key)) = &identity {
            CertKey::from_pem(cert, key)?;
        }
        Ok(Self { ca_pem, identity })
    }

    /// Reads `--etcd-cafile`, `--etcd-certfile` and `--etcd-keyfile`. A certificate needs its
    /// key and the other way round; a file that cannot be read or parsed is an error naming it.
    pub fn from_files(
        ca_file: Option<&Path>,
        cert_file: Option<&Path>,
        key_file: Option<&Path>,
    ) -> Result<Self, TlsError> {
        let read = |path: &Path| std::fs::read(path).map_err(|e| TlsError::io(path, e));
        let ca_pem = match ca_file {
            Some(path) => {
                let pem = read(path)?;
                parse_certs_pem(&pem)
                    .map_err(|e| TlsError::Invalid(format!("{}: {e}", path.display())))?;
                Some(pem)
            }
            None => None,
        };
        let identity = match (cert_file, key_file) {
            (Some(cert), Some(key)) => {
                let (cert_pem, key_pem) = (read(cert)?, read(key)?);
                CertKey::from_pem(&cert_pem, &key_pem).map_err(|e| {
                    TlsError::Invalid(format!("{} / {}: {e}", cert.display(), key.display()))
                })?;
                Some((cert_pem, key_pem))
            }
            (None, None) => None,
            _ => {
                return Err(TlsError::Invalid(
                    "a client certificate for etcd needs both a certificate and a key file".into(),
                ));
            }
        };
        Ok(Self { ca_pem, identity })
    }

    /// The TLS client configuration of a connection to etcd: the CA's roots, the client
    /// certificate if any, and HTTP/2 by ALPN (as gRPC wants it).
    fn client_config(&self) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        let ca = self.ca_pem.as_deref().unwrap_or_default();
        let roots = crate::tls::root_store(&parse_certs_pem(ca)?)?;
        let builder = rustls::ClientConfig::builder_with_provider(crate::tls::crypto_provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Invalid(e.to_string()))?
            .with_root_certificates(roots);
        let mut config = match &self.identity {
            Some((cert, key)) => {
                let identity = CertKey::from_pem(cert, key)?;
                builder
                    .with_client_auth_cert(identity.cert_chain, identity.key)
                    .map_err(|e| TlsError::Invalid(e.to_string()))?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
}

/// How many reads of etcd's revision may be on their way at once. With one, a get that
/// arrives while a read is on its way waits for it and then for a whole new one; with two it
/// begins one at once, at the price of more reads (0.12–0.15 a get instead of 0.07–0.08):
/// where the cores are busy, as on the machine the book's "consistent gets on etcd3" were
/// measured on, two were no faster at p50 and cost etcd more, and three were slower still;
/// in the lab beside the Go sample-apiserver (the book's side by side, a seventh time) two
/// were slower too.
const READ_OVERLAP: usize = 1;

/// A storage backend on etcd v3.
///
/// With several endpoints (the members of one cluster), each call goes to a member that
/// serves: see [`Etcd3Backend::connect`].
#[derive(Clone)]
pub struct Etcd3Backend {
    members: Arc<Members>,
    prefix: String,
    request_timeout: Duration,
    list_timeout: Duration,
    ready_timeout: Duration,
    /// Every open watch, for [`Backend::request_progress`]; a watch that ended leaves a dead
    /// pointer, swept on the next request.
    watches: Arc<Mutex<Vec<Weak<tokio::sync::Mutex<WatchRequestSender>>>>>,
    /// Reads of the current revision, shared by concurrent callers.
    reads: Arc<SharedRounds<Revision>>,
    /// Progress requests to every open watch, shared by concurrent callers, one round at a
    /// time: a caller then waits for etcd's notification on the watch, not for the sends,
    /// and overlapping rounds would only send each watch more requests.
    progress: Arc<SharedRounds<()>>,
}

impl std::fmt::Debug for Etcd3Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd3Backend")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Etcd3Backend {
    /// Creates a client for `endpoints` (`http://127.0.0.1:2379`, `https://…`, …).
    ///
    /// The connection is made lazily: this succeeds even when no endpoint answers, and the
    /// client keeps trying. Call [`Backend::ready`] to check that one does.
    ///
    /// Several endpoints are the members of one cluster, as kube-apiserver's
    /// `--etcd-servers`: a call goes to the members in turn, skipping one that failed a call
    /// or a health probe until a probe finds it serving again; a read (or the start of a watch) that fails for want of
    /// etcd is tried on the next member, and so is a write that provably never left (no
    /// connection could be made). A write whose answer was lost is not sent again: it fails
    /// with [`StorageError::Unavailable`], since etcd may have applied it. `https://`
    /// endpoints need [`Etcd3Options::tls`] with a CA; mixing `http://` and `https://` is an
    /// error; TLS options with only `http://` endpoints are ignored with a warning, as
    /// kube-apiserver does.
    pub async fn connect(
        endpoints: &[String],
        options: Etcd3Options,
    ) -> Result<Self, StorageError> {
        let https = endpoints
            .iter()
            .filter(|e| e.starts_with("https://"))
            .count();
        if https > 0 && https < endpoints.len() {
            return Err(StorageError::Internal(format!(
                "etcd endpoints {}: all https:// or none",
                endpoints.join(",")
            )));
        }
        // No request timeout here: it would apply to the long-lived watch streams too;
        // `within` bounds every other call instead.
        let mut dial = Dial {
            connect_timeout: options.connect_timeout,
            keep_alive: options.keep_alive,
            tls: None,
        };
        match (&options.tls, https > 0) {
            (Some(tls), true) if tls.ca_pem.is_some() => {
                let config = tls
                    .client_config()
                    .map_err(|e| StorageError::Internal(format!("etcd TLS: {e}")))?;
                dial.tls = Some(config);
            }
            (_, true) => {
                return Err(StorageError::Internal(format!(
                    "etcd endpoints {}: https:// needs the CA that signed etcd's certificate \
                     (--etcd-cafile)",
                    endpoints.join(",")
                )));
            }
            (Some(_), false) => tracing::warn!(
                endpoints = %endpoints.join(","),
                "etcd TLS options are ignored: no endpoint is https://"
            ),
            (None, false) => {}
        }
        let probe = Probe {
            interval: options.probe_interval,
            timeout: options.ready_timeout,
        };
        let members = Members::connect(endpoints, dial, probe)
            .await
            .map_err(|e| StorageError::Unavailable(e.to_string()))?;
        Ok(Self {
            members,
            prefix: options.key_prefix,
            request_timeout: options.request_timeout,
            list_timeout: options.list_timeout.max(options.request_timeout),
            ready_timeout: options.ready_timeout,
            watches: Arc::default(),
            reads: Arc::new(SharedRounds::new(READ_OVERLAP)),
            progress: Arc::new(SharedRounds::new(1)),
        })
    }

    /// Runs one call to etcd with the request deadline. While no endpoint is connected the
    /// client's balancer waits for one instead of failing, so without a deadline a request to
    /// a dead etcd would hang.
    async fn within<T>(&self, call: impl Future<Output = T>) -> Result<T, StorageError> {
        deadline(self.request_timeout, call).await
    }

    /// A range read on a member that serves, within `limit`.
    async fn range(
        &self,
        limit: Duration,
        key: Vec<u8>,
        options: Option<GetOptions>,
    ) -> Result<Result<GetResponse, EtcdError>, StorageError> {
        let read = self.members.call(Retry::Idempotent, |client| {
            let (key, options) = (key.clone(), options.clone());
            let mut kv = client
                .kv_client()
                .max_decoding_message_size(MAX_RESPONSE_BYTES);
            async move { kv.get(key, options).await }
        });
        deadline(limit, read).await
    }

    /// Opens a watch on a member that serves, within the request deadline.
    async fn open_watch(
        &self,
        key: Vec<u8>,
        options: WatchOptions,
    ) -> Result<etcd_client::WatchStream, StorageError> {
        let watch = self.members.call(Retry::Idempotent, |client| {
            let (key, options) = (key.clone(), options.clone());
            let mut watch = client
                .watch_client()
                .max_decoding_message_size(MAX_RESPONSE_BYTES);
            async move { watch.watch(key, Some(options)).await }
        });
        self.within(watch).await?.map_err(map_error)
    }

    /// etcd's current revision: any range answers with it in its header; count_only keeps
    /// the answer small.
    async fn read_revision(&self) -> Result<Revision, StorageError> {
        let options = GetOptions::new().with_count_only();
        let key = self.full("\0").into_bytes();
        let response = self.range(self.request_timeout, key, Some(options)).await?;
        Ok(header_revision(response.map_err(map_error)?.header()))
    }

    /// Asks every open watch for a progress report (see [`Backend::request_progress`]).
    async fn send_progress_requests(&self) {
        let open: Vec<ProgressRequester> = match self.watches.lock() {
            Ok(mut watches) => {
                watches.retain(|w| w.strong_count() > 0);
                watches.iter().filter_map(Weak::upgrade).collect()
            }
            Err(_) => return,
        };
        for requests in open {
            // A watch whose stream broke reports that on its own stream.
            let mut requests = requests.lock().await;
            let _ = self.within(requests.request_progress()).await;
        }
    }

    /// Opens an etcd watch of the keys under `prefix` after revision `after`, registered for
    /// [`Backend::request_progress`].
    async fn watch_prefix(
        &self,
        prefix: &str,
        after: Revision,
    ) -> Result<(ProgressRequester, WatchResponseStream), StorageError> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(after + 1)
            .with_prev_key();
        let watch = self.open_watch(self.full(prefix).into_bytes(), options);
        let (requests, responses) = watch.await?.split();
        let requests = Arc::new(tokio::sync::Mutex::new(requests));
        if let Ok(mut watches) = self.watches.lock() {
            watches.retain(|w| w.strong_count() > 0);
            watches.push(Arc::downgrade(&requests));
        }
        Ok((requests, responses))
    }

    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn convert(&self, kv: &etcd_client::KeyValue) -> KeyValue {
        KeyValue {
            key: self.strip(kv.key()),
            value: Bytes::copy_from_slice(kv.value()),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
        }
    }

    /// As [`Self::convert`], taking the value read instead of copying it: the reads (a get, a
    /// page of a list) own their answer, whose values become the items' bytes as they are.
    fn convert_owned(&self, kv: etcd_client::KeyValue) -> KeyValue {
        let (create_revision, mod_revision) = (kv.create_revision(), kv.mod_revision());
        let (key, value) = kv.into_key_value();
        KeyValue {
            key: self.strip(&key),
            value: Bytes::from(value),
            create_revision,
            mod_revision,
        }
    }

    /// A key read from etcd without this backend's prefix.
    fn strip(&self, key: &[u8]) -> String {
        let key = String::from_utf8_lossy(key);
        key.strip_prefix(&self.prefix).unwrap_or(&key).to_owned()
    }

    /// Sends the transaction `make` builds; built again for another member only if a
    /// first one provably never left, so a write's value is not copied for nothing.
    async fn txn(&self, make: impl Fn() -> Txn) -> Result<TxnResponse, StorageError> {
        let write = self.members.call(Retry::IfNotSent, |client| {
            let (mut kv, txn) = (client.kv_client(), make());
            async move { kv.txn(txn).await }
        });
        self.within(write).await?.map_err(map_error)
    }

    /// The key-value a failed transaction read in its `else` branch, if the key exists.
    fn else_kv(&self, response: &TxnResponse) -> Option<KeyValue> {
        response.op_responses().iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| self.convert(kv)),
            _ => None,
        })
    }

    /// The oldest revision etcd still has. etcd's errors do not say it, but a watch from
    /// revision 1 is canceled with it.
    async fn compacted_revision(&self) -> Result<Revision, StorageError> {
        let options = WatchOptions::new().with_start_revision(1);
        let mut stream = self
            .open_watch(self.full("\0").into_bytes(), options)
            .await?;
        let probe = async {
            while let Some(response) = stream.message().await.map_err(map_error)? {
                if response.compact_revision() > 0 {
                    return Ok(response.compact_revision());
                }
            }
            Ok(0)
        };
        tokio::time::timeout(Duration::from_secs(5), probe)
            .await
            .unwrap_or(Ok(0))
    }

    /// Turns an `OutOfRange` of a read at `requested` into the trait's error.
    async fn out_of_range(&self, requested: Revision, message: &str) -> StorageError {
        if message.contains("future") {
            match self.current_revision().await {
                Ok(current) => StorageError::FutureRevision { requested, current },
                Err(error) => error,
            }
        } else {
            match self.compacted_revision().await {
                Ok(compacted) => StorageError::Compacted {
                    requested,
                    compacted,
                },
                Err(error) => error,
            }
        }
    }

    fn list_options(&self, request: &ListRequest) -> GetOptions {
        let mut options = GetOptions::new()
            .with_range(prefix_end(&self.full(&request.prefix)))
            .with_revision(request.revision);
        if request.limit > 0 {
            options = options.with_limit(request.limit as i64);
        }
        options
    }

    fn list_start(&self, request: &ListRequest) -> String {
        match &request.start_after {
            // The smallest key greater than `start_after`.
            Some(after) => format!("{}\0", self.full(after)),
            // etcd rejects an empty key; "\0" is the smallest one it takes.
            None if self.full(&request.prefix).is_empty() => "\0".to_owned(),
            None => self.full(&request.prefix),
        }
    }
}

/// The first key after every key that starts with `prefix`, as etcd's `WithPrefix`.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff (or the prefix is empty): "\0" means "to the end" to etcd.
    vec![0]
}

fn map_error(error: EtcdError) -> StorageError {
    match &error {
        EtcdError::GRpcStatus(status) if is_too_large(status) => StorageError::TooLarge {
            key: String::new(),
            size: 0,
            limit: 0,
        },
        EtcdError::GRpcStatus(status) if is_unavailable(&error) => {
            let source = std::error::Error::source(status);
            StorageError::Unavailable(describe(status.message(), source))
        }
        EtcdError::GRpcStatus(status) => {
            StorageError::Internal(format!("etcd: {}", status.message()))
        }
        EtcdError::TransportError(_) | EtcdError::IoError(_) => {
            let source = std::error::Error::source(&error);
            StorageError::Unavailable(describe(&error.to_string(), source))
        }
        other => StorageError::Internal(format!("etcd: {other}")),
    }
}

/// Whether etcd refused a request over its `--max-request-bytes`, or the client one over
/// gRPC's message size: kube-apiserver's `isTooLargeError`.
fn is_too_large(status: &tonic::Status) -> bool {
    match status.code() {
        tonic::Code::InvalidArgument => status.message() == "etcdserver: request is too large",
        tonic::Code::ResourceExhausted => status.message().contains("message larger than max"),
        _ => false,
    }
}

/// Whether `error` says etcd could not be reached or did not answer (rather than that it
/// refused the call): HTTP 503, and a reason to try another member.
fn is_unavailable(error: &EtcdError) -> bool {
    match error {
        EtcdError::GRpcStatus(status) => {
            let code = status.code() as i32;
            // A status with a source was made by the client from a failed connection (etcd
            // went away mid-stream: "h2 protocol error", code Unknown or Internal); one that
            // etcd sent has none.
            let lost_connection =
                std::error::Error::source(status).is_some() && [UNKNOWN, INTERNAL].contains(&code);
            lost_connection || [CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE].contains(&code)
        }
        EtcdError::TransportError(_) | EtcdError::IoError(_) => true,
        _ => false,
    }
}

/// `etcd: `, `message` and its causes, each once ("etcd: tcp connect error: Connection refused").
fn describe(message: &str, mut source: Option<&(dyn std::error::Error + 'static)>) -> String {
    let mut text = format!("etcd: {message}");
    // Bounded: error chains are short, and a cycle must not loop forever.
    for _ in 0..8 {
        let Some(cause) = source else { break };
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

// gRPC status codes, by number: etcd-client does not re-export tonic's `Code`, and a direct
// tonic dependency would have to track etcd-client's version.
const CANCELLED: i32 = 1;
const UNKNOWN: i32 = 2;
const DEADLINE_EXCEEDED: i32 = 4;
const OUT_OF_RANGE: i32 = 11;
const INTERNAL: i32 = 13;
const UNAVAILABLE: i32 = 14;

/// The largest etcd response read: a page of a list (the watch cache loads 10,000 objects a
/// page) or a batch of watch events easily passes tonic's default of 4 MiB, which fails the
/// read. etcd's Go client, as kube-apiserver uses it, takes up to `math.MaxInt32` bytes
/// (`defaultMaxCallRecvMsgSize`, client/v3/options.go); so does this backend.
const MAX_RESPONSE_BYTES: usize = i32::MAX as usize;

/// The message of etcd's `OutOfRange` answer (a compacted or future revision). gRPC uses the
/// same code for a response over the size limit, which is not one.
fn out_of_range_message(error: &EtcdError) -> Option<String> {
    match error {
        EtcdError::GRpcStatus(status)
            if status.code() as i32 == OUT_OF_RANGE && status.message().contains("revision") =>
        {
            Some(status.message().to_owned())
        }
        _ => None,
    }
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Revision {
    header.map(|h| h.revision()).unwrap_or_default()
}

#[async_trait]
impl Backend for Etcd3Backend {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StorageError> {
        let key = self.full(key).into_bytes();
        let response = self.range(self.request_timeout, key, None).await?;
        let mut response = response.map_err(map_error)?;
        let kv = response.take_kvs().into_iter().next();
        Ok(kv.map(|kv| self.convert_owned(kv)))
    }

    async fn list(&self, request: &ListRequest) -> Result<ListResult, StorageError> {
        let options = self.list_options(request);
        let start = self.list_start(request).into_bytes();
        let mut response = match self.range(self.list_timeout, start, Some(options)).await? {
            Ok(response) => response,
            Err(error) => match out_of_range_message(&error) {
                Some(message) => return Err(self.out_of_range(request.revision, &message).await),
                None => return Err(map_error(error)),
            },
        };
        let revision = match request.revision {
            0 => header_revision(response.header()),
            revision => revision,
        };
        let (count, more) = (response.count(), response.more());
        let items: Vec<KeyValue> = response
            .take_kvs()
            .into_iter()
            .map(|kv| self.convert_owned(kv))
            .collect();
        let remaining = (count - items.len() as i64).max(0);
        Ok(ListResult {
            items,
            revision,
            more,
            remaining: Some(remaining),
        })
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StorageError> {
        let full = self.full(key);
        let response = self
            .txn(|| {
                Txn::new()
                    .when([Compare::create_revision(&*full, CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(&*full, value.to_vec(), None)])
            })
            .await?;
        if !response.succeeded() {
            return Err(StorageError::KeyExists(key.to_owned()));
        }
        let revision = header_revision(response.header());
        Ok(KeyValue {
            key: key.to_owned(),
            value,
            create_revision: revision,
            mod_revision: revision,
        })
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Revision,
    ) -> Result<KeyValue, StorageError> {
        let full = self.full(key);
        // The create_revision compare keeps `expected = 0` from creating a missing key.
        let txn = || {
            Txn::new()
                .when([
                    Compare::create_revision(&*full, CompareOp::Greater, 0),
                    Compare::mod_revision(&*full, CompareOp::Equal, expected),
                ])
                .and_then([TxnOp::put(
                    &*full,
                    value.to_vec(),
                    Some(PutOptions::new().with_prev_key()),
                )])
                .or_else([TxnOp::get(&*full, None)])
        };
        let response = self.txn(txn).await?;
        if !response.succeeded() {
            return Err(write_failure(key, expected, self.else_kv(&response)));
        }
        let create_revision = response.op_responses().iter().find_map(|op| match op {
            TxnOpResponse::Put(put) => put.prev_key().map(|kv| kv.create_revision()),
            _ => None,
        });
        let revision = header_revision(response.header());
        Ok(KeyValue {
            key: key.to_owned(),
            value,
            create_revision: create_revision.unwrap_or(revision),
            mod_revision: revision,
        })
    }

    async fn delete(
        &self,
        key: &str,
        expected: Option<Revision>,
    ) -> Result<KeyValue, StorageError> {
        let full = self.full(key);
        let mut compares = vec![Compare::create_revision(
            full.clone(),
            CompareOp::Greater,
            0,
        )];
        if let Some(expected) = expected {
            compares.push(Compare::mod_revision(
                full.clone(),
                CompareOp::Equal,
                expected,
            ));
        }
        let txn = || {
            Txn::new()
                .when(compares.clone())
                .and_then([TxnOp::delete(
                    &*full,
                    Some(DeleteOptions::new().with_prev_key()),
                )])
                .or_else([TxnOp::get(&*full, None)])
        };
        let response = self.txn(txn).await?;
        if !response.succeeded() {
            let current = self.else_kv(&response);
            return Err(write_failure(key, expected.unwrap_or(0), current));
        }
        let previous = response.op_responses().iter().find_map(|op| match op {
            TxnOpResponse::Delete(delete) => delete.prev_kvs().first().map(|kv| self.convert(kv)),
            _ => None,
        });
        let mut kv = previous.ok_or_else(|| StorageError::NotFound(key.to_owned()))?;
        kv.mod_revision = header_revision(response.header());
        Ok(kv)
    }

    async fn watch_with_progress(
        &self,
        prefix: &str,
        after: Revision,
    ) -> Result<ProgressStream, StorageError> {
        let (requests, responses) = self.watch_prefix(prefix, after).await?;
        Ok(event_stream(
            self.clone(),
            prefix,
            requests,
            responses,
            after,
        ))
    }

    /// One round of progress requests serves every caller that asked before it began: a
    /// consistent get that finds the watch cache behind etcd's revision (writes under other
    /// prefixes move it) asks for progress, and under load the gets of one revision read all
    /// ask at once; one request per watch answers them all, as etcd reports a revision at
    /// least as new as any it had when the request arrived.
    async fn request_progress(&self) {
        let send = |me: Self| async move {
            me.send_progress_requests().await;
            Ok(())
        };
        // The sends report no error: a watch whose stream broke says so on its own stream.
        let _ = self.progress.read_from(self, send).await;
    }

    /// One read of etcd's revision serves every caller that asked before it began (up to
    /// `READ_OVERLAP` on their way at once).
    async fn current_revision(&self) -> Result<Revision, StorageError> {
        let fetch = |me: Self| async move { me.read_revision().await };
        self.reads.read_from(self, fetch).await
    }

    async fn compact(&self, revision: Revision) -> Result<(), StorageError> {
        let current = self.current_revision().await?;
        if revision > current {
            return Err(StorageError::FutureRevision {
                requested: revision,
                current,
            });
        }
        // Compacting twice is harmless: the second is an `OutOfRange` no-op.
        let compact = self.members.call(Retry::Idempotent, |client| {
            let mut kv = client.kv_client();
            async move { kv.compact(revision, None).await }
        });
        match self.within(compact).await? {
            Ok(_) => Ok(()),
            // Compacting at or below the compacted revision is a no-op for the trait.
            Err(error) if out_of_range_message(&error).is_some() => Ok(()),
            Err(error) => Err(map_error(error)),
        }
    }

    /// A count-only read with the (shorter) readiness deadline.
    async fn ready(&self) -> Result<(), StorageError> {
        let options = GetOptions::new().with_count_only();
        let key = self.full("\0").into_bytes();
        self.range(self.ready_timeout, key, Some(options))
            .await?
            .map_err(map_error)?;
        Ok(())
    }
}

/// `call`, or [`StorageError::Unavailable`] when it takes longer than `limit`.
async fn deadline<T>(limit: Duration, call: impl Future<Output = T>) -> Result<T, StorageError> {
    tokio::time::timeout(limit, call)
        .await
        .map_err(|_| StorageError::Unavailable(format!("etcd did not answer within {limit:?}")))
}

/// The error of a failed compare-and-swap, from the key as it is now.
fn write_failure(key: &str, expected: Revision, current: Option<KeyValue>) -> StorageError {
    match current {
        None => StorageError::NotFound(key.to_owned()),
        Some(kv) => StorageError::Conflict {
            key: key.to_owned(),
            expected,
            actual: kv.mod_revision,
        },
    }
}

/// What an etcd watch becomes: the watch, items not yet handed out, and whether it ended.
struct WatchState {
    backend: Etcd3Backend,
    prefix: String,
    /// Held so that the watch stays open and can be asked for progress.
    _requests: ProgressRequester,
    responses: WatchResponseStream,
    pending: VecDeque<Result<WatchItem, StorageError>>,
    /// Every change up to this revision has been handed out: where a resumed watch starts.
    after: Revision,
    /// Watches reopened since the last answer from etcd.
    resumes: usize,
    done: bool,
}

/// How many times in a row a broken watch is reopened on another member before its error
/// is handed out (the caller then starts over, as the watch cache does with a reload).
const MAX_RESUMES: usize = 3;

fn event_stream(
    backend: Etcd3Backend,
    prefix: &str,
    requests: ProgressRequester,
    responses: WatchResponseStream,
    after: Revision,
) -> ProgressStream {
    let state = WatchState {
        backend,
        prefix: prefix.to_owned(),
        _requests: requests,
        responses,
        pending: VecDeque::new(),
        after,
        resumes: 0,
        done: false,
    };
    Box::pin(stream::unfold(state, |mut state| async move {
        loop {
            if let Some(item) = state.pending.pop_front() {
                return Some((item, state));
            }
            if state.done {
                return None;
            }
            state.receive().await;
        }
    }))
}

impl WatchState {
    /// Reads one response from etcd into `pending`, or marks the stream done.
    async fn receive(&mut self) {
        let response = match self.responses.message().await {
            Ok(Some(response)) => response,
            Ok(None) => {
                return self
                    .resume(StorageError::Unavailable("watch closed".into()))
                    .await;
            }
            Err(error) => return self.resume(map_error(error)).await,
        };
        self.resumes = 0;
        if response.compact_revision() > 0 {
            // etcd 3.4 cancels a watch from a compacted revision with no error, only this.
            return self.fail(StorageError::Compacted {
                requested: self.after + 1,
                compacted: response.compact_revision(),
            });
        }
        if response.canceled() {
            let reason = format!("watch canceled: {}", response.cancel_reason());
            return self.fail(StorageError::Unavailable(reason));
        }
        if response.events().is_empty() && !response.created() {
            // A progress notification: nothing more under the prefix up to this revision.
            let revision = header_revision(response.header());
            if revision > 0 {
                self.after = self.after.max(revision);
                self.pending.push_back(Ok(WatchItem::Progress(revision)));
            }
            return;
        }
        for event in response.events() {
            let event = self.convert(event);
            self.after = self.after.max(event.kv.mod_revision);
            self.pending.push_back(Ok(WatchItem::Event(event)));
        }
    }

    /// After the watch broke for want of etcd (its member died), reopens it on a member that
    /// serves from the revision it had reached, as clientv3's watcher does: the watcher sees
    /// no gap and need not list again. Other errors, and repeated failures, end the stream.
    async fn resume(&mut self, error: StorageError) {
        if !matches!(error, StorageError::Unavailable(_)) || self.resumes >= MAX_RESUMES {
            return self.fail(error);
        }
        self.resumes += 1;
        match self.backend.watch_prefix(&self.prefix, self.after).await {
            Ok((requests, responses)) => {
                tracing::info!(prefix = %self.prefix, after = self.after, %error, "etcd watch resumed");
                self._requests = requests;
                self.responses = responses;
            }
            Err(_) => self.fail(error),
        }
    }

    fn fail(&mut self, error: StorageError) {
        self.pending.push_back(Err(error));
        self.done = true;
    }

    fn convert(&self, event: &etcd_client::Event) -> Event {
        let prev_kv = event.prev_kv().map(|kv| self.backend.convert(kv));
        let kv = event.kv().map(|kv| self.backend.convert(kv));
        let mut kv = kv.unwrap_or_else(|| KeyValue {
            key: String::new(),
            value: Bytes::new(),
            create_revision: 0,
            mod_revision: 0,
        });
        let event_type = match event.event_type() {
            etcd_client::EventType::Put => EventType::Put,
            etcd_client::EventType::Delete => EventType::Delete,
        };
        if event_type == EventType::Delete {
            // etcd's delete event has an empty value; the trait wants the last one.
            if let Some(prev) = &prev_kv {
                kv.value = prev.value.clone();
                kv.create_revision = prev.create_revision;
            }
        }
        Event {
            event_type,
            kv,
            prev_kv,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Etcd3Backend, Etcd3Options, Etcd3Tls, prefix_end};
    use crate::StorageError;

    async fn connect_error(endpoints: &[&str], options: Etcd3Options) -> String {
        let endpoints: Vec<String> = endpoints.iter().map(|e| e.to_string()).collect();
        match Etcd3Backend::connect(&endpoints, options).await {
            Err(StorageError::Internal(message)) => message,
            other => panic!("expected a configuration error, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn https_needs_a_ca_and_schemes_do_not_mix() {
        let https = ["https://127.0.0.1:2379"];
        let message = connect_error(&https, Etcd3Options::default()).await;
        assert!(message.contains("--etcd-cafile"), "{message}");
        let mixed = ["https://127.0.0.1:2379", "http://127.0.0.1:2380"];
        let message = connect_error(&mixed, Etcd3Options::default()).await;
        assert!(message.contains("all https:// or none"), "{message}");
    }

    #[test]
    fn tls_files_are_checked_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.crt");
        let error = Etcd3Tls::from_files(Some(&missing), None, None).unwrap_err();
        assert!(error.to_string().contains("missing.crt"), "{error}");
        let garbage = dir.path().join("garbage.crt");
        std::fs::write(&garbage, "not PEM").unwrap();
        let error = Etcd3Tls::from_files(Some(&garbage), None, None).unwrap_err();
        assert!(error.to_string().contains("garbage.crt"), "{error}");
        let error = Etcd3Tls::from_files(None, Some(&garbage), None).unwrap_err();
        assert!(error.to_string().contains("both"), "{error}");
    }

    #[test]
    fn prefix_end_increments_the_last_byte() {
        assert_eq!(prefix_end("/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end(""), vec![0]);
    }
}
