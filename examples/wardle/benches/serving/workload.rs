//! What the bench does to a server: create Flunders, get them, list them (whole and in pages),
//! and time one write's way to many watchers. The read workloads take paths, so the same code
//! drives wardle and the bare ceiling server.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::Deserialize;
use tokio::sync::mpsc;

use crate::client::{Client, Error, Sample, drive};

/// The Flunders of `namespace`.
pub fn collection(namespace: &str) -> String {
    collection_in("v1alpha1", namespace)
}

/// The Flunders of `namespace` in `version` (`v1beta1` is converted from the stored v1alpha1).
pub fn collection_in(version: &str, namespace: &str) -> String {
    format!("/apis/wardle.example.com/{version}/namespaces/{namespace}/flunders")
}

/// The name of the `i`th bench Flunder.
pub fn name(i: usize) -> String {
    format!("f-{i:07}")
}

/// A Flunder as a client sends it: a label and a reference, like a small real object.
pub fn flunder(namespace: &str, name: &str) -> Bytes {
    let object = serde_json::json!({
        "apiVersion": "wardle.example.com/v1alpha1",
        "kind": "Flunder",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "bench"}},
        "spec": {"reference": "f-0000000"},
    });
    Bytes::from(object.to_string())
}

/// How [`updates`] writes.
#[derive(Clone, Copy, Debug)]
pub enum Write {
    /// A JSON merge patch of `spec.reference`.
    MergePatch,
    /// A server-side apply of the whole Flunder by one field manager.
    Apply,
}

/// Changes `spec.reference` of Flunders `range` of `namespace` (one write each) with
/// `concurrency` in flight, as `how` says; `round` makes each run's value new.
pub async fn updates(
    client: &Client,
    namespace: &str,
    range: Range<usize>,
    concurrency: usize,
    (how, round): (Write, usize),
) -> Result<Sample, Error> {
    let (client, namespace) = (client.clone(), Arc::<str>::from(namespace));
    let first = range.start;
    drive(range.len(), concurrency, move |i| {
        let (client, namespace) = (client.clone(), namespace.clone());
        async move {
            let name = name(first + i);
            let reference = format!("r-{round}-{i}");
            let (query, content_type, body) = match how {
                Write::MergePatch => {
                    let patch = serde_json::json!({"spec": {"reference": reference}});
                    ("", "application/merge-patch+json", patch)
                }
                Write::Apply => {
                    let mut object: serde_json::Value =
                        serde_json::from_slice(&flunder(&namespace, &name))?;
                    object["spec"]["reference"] = reference.into();
                    (
                        "?fieldManager=bench&force=true",
                        "application/apply-patch+yaml",
                        object,
                    )
                }
            };
            let path = format!("{}/{name}{query}", collection(&namespace));
            let body = Bytes::from(body.to_string());
            client.patch(&path, content_type, body).await.map(drop)
        }
    })
    .await
}

/// Creates Flunders `range` in `namespace` with `concurrency` in flight.
pub async fn create(
    client: &Client,
    namespace: &str,
    range: Range<usize>,
    concurrency: usize,
) -> Result<Sample, Error> {
    let (client, namespace) = (client.clone(), Arc::<str>::from(namespace));
    let path: Arc<str> = collection(&namespace).into();
    let first = range.start;
    drive(range.len(), concurrency, move |i| {
        let (client, path) = (client.clone(), path.clone());
        let body = flunder(&namespace, &name(first + i));
        async move { client.create(&path, body).await.map(drop) }
    })
    .await
}

/// `count` GETs with `concurrency` in flight; the `i`th goes to `path(i)`.
pub async fn gets(
    client: &Client,
    count: usize,
    concurrency: usize,
    path: impl Fn(usize) -> String + Send + Sync + 'static,
) -> Result<Sample, Error> {
    let client = client.clone();
    drive(count, concurrency, move |i| {
        let (client, path) = (client.clone(), path(i));
        async move { client.get(&path).await.map(drop) }
    })
    .await
}

/// A well-spread index in `0..n` for the `i`th request (splitmix64), the same every run.
pub fn spread(i: usize, n: usize) -> usize {
    let mut z = (i as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) % n.max(1) as u64) as usize
}

/// `times` GETs of `path`, one at a time (a list is timed alone, not against others).
pub async fn lists(client: &Client, path: &str, times: usize) -> Result<Sample, Error> {
    let path = path.to_string();
    gets(client, times, 1, move |_| path.clone()).await
}

#[derive(Deserialize)]
struct ListHead {
    metadata: ListMeta,
}

#[derive(Deserialize)]
struct ListMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: String,
    #[serde(rename = "continue", default)]
    continue_token: Option<String>,
}

/// `times` walks through a paginated list, one page at a time: `first` is the first page's
/// path, `next(i, token)` the path of page `i` given the previous page's `continue` token.
/// Returns the time per walk and the pages of the first walk.
pub async fn walks(
    client: &Client,
    times: usize,
    first: &str,
    next: impl Fn(usize, &str) -> String,
) -> Result<(Sample, Vec<Bytes>), Error> {
    let mut latencies = Vec::with_capacity(times);
    let mut pages = Vec::new();
    let start = Instant::now();
    for walk in 0..times {
        let started = Instant::now();
        let mut path = first.to_string();
        // Bounded: a list of 100,000 objects in pages of 500 has 200.
        for i in 1..=100_000 {
            let page = client.get(&path).await?;
            let head: ListHead = serde_json::from_slice(&page)?;
            if walk == 0 {
                pages.push(page);
            }
            match head.metadata.continue_token.filter(|t| !t.is_empty()) {
                Some(token) => path = next(i, &token),
                None => break,
            }
        }
        latencies.push(started.elapsed());
    }
    Ok((Sample::new(latencies, start.elapsed()), pages))
}

/// Reads of a whole large collection, each timed once: what a million objects cost a client.
pub struct ScaleReads {
    /// One list of every object.
    pub full: Duration,
    /// A walk through every object in pages of 500.
    pub walk: Duration,
    /// A first page (limit 500) with a label selector that matches nothing: the server reads
    /// every object to find out.
    pub selector_page: Duration,
    /// The same selector without a limit.
    pub selector_all: Duration,
}

/// Times [`ScaleReads`] on the Flunders of `namespace`.
pub async fn scale_reads(client: &Client, namespace: &str) -> Result<ScaleReads, Error> {
    let path = collection(namespace);
    let timed = |path: String| async move {
        let started = Instant::now();
        client.get(&path).await?;
        Ok::<_, Error>(started.elapsed())
    };
    let full = timed(path.clone()).await?;
    let first = format!("{path}?limit=500");
    let (walk, _) = walks(client, 1, &first, |_, token| {
        format!("{path}?limit=500&continue={}", query_escape(token))
    })
    .await?;
    let nothing = "labelSelector=app%3Dnone";
    let selector_page = timed(format!("{path}?{nothing}&limit=500")).await?;
    let selector_all = timed(format!("{path}?{nothing}")).await?;
    Ok(ScaleReads {
        full,
        walk: walk.quantile(0.5),
        selector_page,
        selector_all,
    })
}

/// The `resourceVersion` of a list response.
pub fn list_resource_version(list: &[u8]) -> Result<String, Error> {
    Ok(serde_json::from_slice::<ListHead>(list)?
        .metadata
        .resource_version)
}

/// The mean size in bytes of one item of a list, serialized compactly as JSON.
pub fn mean_item_size(list: &[u8]) -> Result<f64, Error> {
    #[derive(Deserialize)]
    struct Items {
        items: Vec<serde_json::Value>,
    }
    let items = serde_json::from_slice::<Items>(list)?.items;
    let total: usize = items
        .iter()
        .map(|item| serde_json::to_vec(item).map(|v| v.len()))
        .sum::<Result<_, _>>()?;
    Ok(total as f64 / items.len().max(1) as f64)
}

/// Percent-encodes a query value (continue tokens are base64, with `+`, `/` and `=`).
pub fn query_escape(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// How a write reached many watchers.
pub struct FanOut {
    /// For every watcher and write: the time from sending the write to the watcher's event.
    pub delays: Sample,
    /// The slowest write's time until its last watcher had it.
    pub worst_write: Duration,
    /// Watcher events that did not arrive within 30 s of their write.
    pub missed: usize,
}

/// Opens `watchers` watches in `version` on the Flunders of an otherwise untouched `namespace`
/// (spread over the client's connections), then `writes` times creates a Flunder there (in
/// v1alpha1) and waits (at most 30 s) until every watcher has seen its ADDED event.
pub async fn fan_out(
    client: &Client,
    (version, namespace): (&str, &str),
    watchers: usize,
    writes: usize,
) -> Result<FanOut, Error> {
    let path = collection(namespace);
    let rv = list_resource_version(&client.get(&format!("{path}?limit=1")).await?)?;
    let watched = collection_in(version, namespace);
    let watch = format!("{watched}?watch=1&resourceVersion={rv}&timeoutSeconds=600");
    let opened = futures::future::try_join_all(
        (0..watchers).map(|_| client.open(Method::GET, &watch, None)),
    )
    .await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut readers = tokio::task::JoinSet::new();
    for response in opened {
        if response.status() != StatusCode::OK {
            return Err(format!("watch answered {}", response.status()).into());
        }
        readers.spawn(read_events(response.into_body(), tx.clone()));
    }
    drop(tx);
    // Headers are back for every watch; give the server a moment to finish registering them.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (mut delays, mut worst_write, mut missed) = (Vec::new(), Duration::ZERO, 0);
    for write in 0..writes {
        let sent = Instant::now();
        let name = format!("fanout-{write}");
        client.create(&path, flunder(namespace, &name)).await?;
        let deadline = tokio::time::Instant::from_std(sent + Duration::from_secs(30));
        let mut seen = 0;
        while seen < watchers {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some((w, at))) if w == write => {
                    delays.push(at - sent);
                    worst_write = worst_write.max(at - sent);
                    seen += 1;
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        missed += watchers - seen;
    }
    readers.abort_all();
    Ok(FanOut {
        delays: Sample::new(delays, Duration::ZERO),
        worst_write,
        missed,
    })
}

#[derive(Deserialize)]
struct WatchLine {
    #[serde(rename = "type")]
    event_type: String,
    object: WatchObject,
}

#[derive(Deserialize)]
struct WatchObject {
    metadata: ObjectName,
}

#[derive(Deserialize)]
struct ObjectName {
    #[serde(default)]
    name: String,
}

/// Reads watch events, sending (write number, arrival) for each ADDED `fanout-N`.
async fn read_events(mut body: Incoming, tx: mpsc::UnboundedSender<(usize, Instant)>) {
    let mut buffer = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        let at = Instant::now();
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buffer.extend_from_slice(&data);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            let Ok(event) = serde_json::from_slice::<WatchLine>(&line) else {
                continue;
            };
            let write = event.object.metadata.name.strip_prefix("fanout-");
            if let (true, Some(Ok(write))) = (event.event_type == "ADDED", write.map(str::parse))
                && tx.send((write, at)).is_err()
            {
                return;
            }
        }
    }
}
