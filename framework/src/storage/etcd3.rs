//! A [`Backend`] on an etcd v3 cluster, through the `etcd-client` crate (feature `etcd`).
//!
//! etcd is the model of the backend trait, so most operations are one request: writes are
//! transactions that compare revisions, reads are ranges at a revision, watches are etcd
//! watches. What etcd reports differently from the trait (a watch canceled for compaction,
//! `OutOfRange` on reads) is translated here.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, Error as EtcdError, GetOptions,
    PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse, WatchOptions, WatchRequestSender,
    WatchResponseStream,
};
use futures::stream;

use super::backend::{
    Backend, Event, EventType, KeyValue, ListRequest, ListResult, ProgressStream, Revision,
    StorageError, WatchItem,
};

/// The request side of an open watch, through which progress is asked for.
type ProgressRequester = Arc<tokio::sync::Mutex<WatchRequestSender>>;

/// How to talk to etcd.
#[derive(Clone, Debug)]
pub struct Etcd3Options {
    /// Prepended to every key in etcd and stripped from every key read back, so several
    /// users (tests, tenants) can share one cluster without seeing each other's keys.
    pub key_prefix: String,
    /// How long to wait for a TCP connection to an endpoint.
    pub connect_timeout: Duration,
}

impl Default for Etcd3Options {
    fn default() -> Self {
        Self {
            key_prefix: String::new(),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// A storage backend on etcd v3.
#[derive(Clone)]
pub struct Etcd3Backend {
    client: Client,
    prefix: String,
    /// Every open watch, for [`Backend::request_progress`]; a watch that ended leaves a dead
    /// pointer, swept on the next request.
    watches: Arc<Mutex<Vec<Weak<tokio::sync::Mutex<WatchRequestSender>>>>>,
}

impl std::fmt::Debug for Etcd3Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd3Backend")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Etcd3Backend {
    /// Creates a client for `endpoints` (`http://127.0.0.1:2379`, …).
    ///
    /// The connection is made lazily: this succeeds even when no endpoint answers. Call
    /// [`Backend::ready`] to check that one does.
    pub async fn connect(
        endpoints: &[String],
        options: Etcd3Options,
    ) -> Result<Self, StorageError> {
        // No request timeout: tonic would apply it to the long-lived watch streams too.
        let connect = ConnectOptions::new().with_connect_timeout(options.connect_timeout);
        let client = Client::connect(endpoints, Some(connect))
            .await
            .map_err(|e| StorageError::Unavailable(e.to_string()))?;
        Ok(Self {
            client,
            prefix: options.key_prefix,
            watches: Arc::default(),
        })
    }

    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn convert(&self, kv: &etcd_client::KeyValue) -> KeyValue {
        let key = String::from_utf8_lossy(kv.key());
        KeyValue {
            key: key.strip_prefix(&self.prefix).unwrap_or(&key).to_owned(),
            value: Bytes::copy_from_slice(kv.value()),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
        }
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, StorageError> {
        self.client.kv_client().txn(txn).await.map_err(map_error)
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
        let watch = self
            .client
            .watch_client()
            .watch(self.full("\0"), Some(options))
            .await;
        let mut stream = watch.map_err(map_error)?;
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
    match error {
        EtcdError::GRpcStatus(status) => {
            let code = status.code() as i32;
            if [CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE].contains(&code) {
                StorageError::Unavailable(status.message().to_owned())
            } else {
                StorageError::Internal(status.message().to_owned())
            }
        }
        EtcdError::TransportError(_) | EtcdError::IoError(_) => {
            StorageError::Unavailable(error.to_string())
        }
        other => StorageError::Internal(other.to_string()),
    }
}

// gRPC status codes, by number: etcd-client does not re-export tonic's `Code`, and a direct
// tonic dependency would have to track etcd-client's version.
const CANCELLED: i32 = 1;
const DEADLINE_EXCEEDED: i32 = 4;
const OUT_OF_RANGE: i32 = 11;
const UNAVAILABLE: i32 = 14;

fn out_of_range_message(error: &EtcdError) -> Option<String> {
    match error {
        EtcdError::GRpcStatus(status) if status.code() as i32 == OUT_OF_RANGE => {
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
        let response = self.client.kv_client().get(self.full(key), None).await;
        let response = response.map_err(map_error)?;
        Ok(response.kvs().first().map(|kv| self.convert(kv)))
    }

    async fn list(&self, request: &ListRequest) -> Result<ListResult, StorageError> {
        let options = self.list_options(request);
        let start = self.list_start(request);
        let response = match self.client.kv_client().get(start, Some(options)).await {
            Ok(response) => response,
            Err(error) => match out_of_range_message(&error) {
                Some(message) => return Err(self.out_of_range(request.revision, &message).await),
                None => return Err(map_error(error)),
            },
        };
        let items: Vec<KeyValue> = response.kvs().iter().map(|kv| self.convert(kv)).collect();
        let remaining = (response.count() - items.len() as i64).max(0);
        let revision = match request.revision {
            0 => header_revision(response.header()),
            revision => revision,
        };
        Ok(ListResult {
            items,
            revision,
            more: response.more(),
            remaining: Some(remaining),
        })
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StorageError> {
        let full = self.full(key);
        let txn = Txn::new()
            .when([Compare::create_revision(full.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(full, value.to_vec(), None)]);
        let response = self.txn(txn).await?;
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
        let txn = Txn::new()
            .when([
                Compare::create_revision(full.clone(), CompareOp::Greater, 0),
                Compare::mod_revision(full.clone(), CompareOp::Equal, expected),
            ])
            .and_then([TxnOp::put(
                full.clone(),
                value.to_vec(),
                Some(PutOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(full, None)]);
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
        let txn = Txn::new()
            .when(compares)
            .and_then([TxnOp::delete(
                full.clone(),
                Some(DeleteOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(full, None)]);
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
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(after + 1)
            .with_prev_key();
        let watch = self
            .client
            .watch_client()
            .watch(self.full(prefix), Some(options))
            .await;
        let (requests, responses) = watch.map_err(map_error)?.split();
        let requests = Arc::new(tokio::sync::Mutex::new(requests));
        if let Ok(mut watches) = self.watches.lock() {
            watches.retain(|w| w.strong_count() > 0);
            watches.push(Arc::downgrade(&requests));
        }
        Ok(event_stream(self.clone(), requests, responses, after))
    }

    async fn request_progress(&self) {
        let open: Vec<ProgressRequester> = match self.watches.lock() {
            Ok(mut watches) => {
                watches.retain(|w| w.strong_count() > 0);
                watches.iter().filter_map(Weak::upgrade).collect()
            }
            Err(_) => return,
        };
        for requests in open {
            // A watch whose stream broke reports that on its own stream.
            let _ = requests.lock().await.request_progress().await;
        }
    }

    async fn current_revision(&self) -> Result<Revision, StorageError> {
        // Any range answers with the store's revision in its header; count_only keeps it small.
        let options = GetOptions::new().with_count_only();
        let response = self
            .client
            .kv_client()
            .get(self.full("\0"), Some(options))
            .await;
        Ok(header_revision(response.map_err(map_error)?.header()))
    }

    async fn compact(&self, revision: Revision) -> Result<(), StorageError> {
        let current = self.current_revision().await?;
        if revision > current {
            return Err(StorageError::FutureRevision {
                requested: revision,
                current,
            });
        }
        match self.client.kv_client().compact(revision, None).await {
            Ok(_) => Ok(()),
            // Compacting at or below the compacted revision is a no-op for the trait.
            Err(error) if out_of_range_message(&error).is_some() => Ok(()),
            Err(error) => Err(map_error(error)),
        }
    }
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
    /// Held so that the watch stays open and can be asked for progress.
    _requests: ProgressRequester,
    responses: WatchResponseStream,
    pending: VecDeque<Result<WatchItem, StorageError>>,
    after: Revision,
    done: bool,
}

fn event_stream(
    backend: Etcd3Backend,
    requests: ProgressRequester,
    responses: WatchResponseStream,
    after: Revision,
) -> ProgressStream {
    let state = WatchState {
        backend,
        _requests: requests,
        responses,
        pending: VecDeque::new(),
        after,
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
            Ok(None) => return self.fail(StorageError::Unavailable("watch closed".into())),
            Err(error) => return self.fail(map_error(error)),
        };
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
                self.pending.push_back(Ok(WatchItem::Progress(revision)));
            }
            return;
        }
        for event in response.events() {
            self.pending
                .push_back(Ok(WatchItem::Event(self.convert(event))));
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
    use super::prefix_end;

    #[test]
    fn prefix_end_increments_the_last_byte() {
        assert_eq!(prefix_end("/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end(""), vec![0]);
    }
}
