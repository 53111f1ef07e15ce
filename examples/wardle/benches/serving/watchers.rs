//! `--watchers-scale`: many idle watches on few HTTP/2 connections (10,000 over 100 by
//! default, kube-apiserver's and the aggregator's way of multiplexing), then writes at a fixed
//! rate (one a second by default: each is 10,000 events); for each write, the time until every watcher has its event, and what an idle watcher
//! costs the server in memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::client::{Client, Error, Sample, tls_config};
use crate::measure::settle_rss;
use crate::report::{Row, mib, ms};
use crate::server::{Backend, Wardle};
use crate::workload::{collection, flunder, list_resource_version};

/// What one run of the mode does.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    pub watchers: usize,
    pub connections: usize,
    /// Writes sent, one every `1 / rate` seconds whether or not the last has reached everyone.
    pub writes: usize,
    pub rate: f64,
}

impl Default for Scale {
    fn default() -> Self {
        Self {
            watchers: 10_000,
            connections: 100,
            writes: 30,
            rate: 1.0,
        }
    }
}

/// The untouched namespace the watches look at.
const NAMESPACE: &str = "bench-watchers";

/// How long a write's events may take before they count as missing.
const MISSING_AFTER: Duration = Duration::from_secs(30);

/// Arrivals of one write's event: how many watchers have it, and when the last did
/// (nanoseconds after the run's start).
#[derive(Default)]
struct Arrivals {
    seen: AtomicUsize,
    last: AtomicU64,
}

/// What the run measured.
struct Measured {
    rss_before: u64,
    rss_after: u64,
    /// Per write: from its send to its last watcher's event.
    all_watchers: Sample,
    /// Events that never arrived within [`MISSING_AFTER`].
    missing: usize,
    opened_in: Duration,
    /// CPU time of the server and of this bench (the watchers' client) from the first write
    /// until every event arrived.
    cpu: (Duration, Duration),
}

/// Runs the mode on `backend` and returns its table.
pub async fn run(backend: &Backend, scale: Scale) -> Result<Vec<Row>, Error> {
    let dir = tempfile::tempdir()?;
    let wardle = Wardle::start(dir.path(), backend, None)?;
    let tls = tls_config(&wardle.cert_dir)?;
    let writer = Client::connect(wardle.port, tls.clone(), 1).await?;
    let watchers = Client::connect(wardle.port, tls, scale.connections).await?;
    let measured = measure(&wardle, (&writer, &watchers), scale).await?;
    Ok(rows(scale, &measured))
}

async fn measure(
    wardle: &Wardle,
    (writer, watchers): (&Client, &Client),
    scale: Scale,
) -> Result<Measured, Error> {
    let path = collection(NAMESPACE);
    let rv = list_resource_version(&writer.get(&format!("{path}?limit=1")).await?)?;
    let rss_before = settle_rss(writer, wardle).await?;
    let start = Instant::now();
    let arrivals: Arc<Vec<Arrivals>> =
        Arc::new((0..scale.writes).map(|_| Arrivals::default()).collect());
    let watch = format!("{path}?watch=1&resourceVersion={rv}&timeoutSeconds=3600");
    let opening = Instant::now();
    // Opened a connection's worth at a time: all at once would queue 10,000 streams.
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..scale.watchers.div_ceil(scale.connections) {
        let batch = scale.connections.min(scale.watchers - readers.len());
        let opened = futures::future::try_join_all(
            (0..batch).map(|_| watchers.open(Method::GET, &watch, None)),
        )
        .await?;
        for response in opened {
            if response.status() != StatusCode::OK {
                return Err(format!("watch answered {}", response.status()).into());
            }
            readers.spawn(read_events(response.into_body(), arrivals.clone(), start));
        }
    }
    let opened_in = opening.elapsed();
    let rss_after = settle_rss(writer, wardle).await?;

    let cpu_before = (wardle.cpu()?, own_cpu()?);
    let mut sent = Vec::with_capacity(scale.writes);
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / scale.rate));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut writes = tokio::task::JoinSet::new();
    for write in 0..scale.writes {
        ticks.tick().await;
        sent.push(start.elapsed());
        let (writer, path) = (writer.clone(), path.clone());
        writes.spawn(async move {
            let name = format!("scale-{write}");
            writer.create(&path, flunder(NAMESPACE, &name)).await
        });
    }
    while let Some(done) = writes.join_next().await {
        done??;
    }
    let deadline = Instant::now() + MISSING_AFTER;
    while Instant::now() < deadline
        && arrivals
            .iter()
            .any(|a| a.seen.load(Ordering::Acquire) < scale.watchers)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cpu = (
        wardle.cpu()?.saturating_sub(cpu_before.0),
        own_cpu()?.saturating_sub(cpu_before.1),
    );
    readers.abort_all();
    let mut delays = Vec::new();
    let mut missing = 0;
    for (arrival, sent) in arrivals.iter().zip(&sent) {
        let seen = arrival.seen.load(Ordering::Acquire);
        missing += scale.watchers.saturating_sub(seen);
        if seen >= scale.watchers {
            let last = Duration::from_nanos(arrival.last.load(Ordering::Acquire));
            delays.push(last.saturating_sub(*sent));
        }
    }
    Ok(Measured {
        rss_before,
        rss_after,
        all_watchers: Sample::new(delays, Duration::ZERO),
        missing,
        opened_in,
        cpu,
    })
}

/// CPU time of this process's threads.
fn own_cpu() -> Result<Duration, Error> {
    crate::server::threads_cpu("/proc/self/task", None)
}

/// Reads one watch, counting each ADDED `scale-N` it brings. Looks for the name in the line
/// rather than decoding it, and reads the lines where they lie in the frame, copying only a
/// line split across frames: 10,000 watchers' JSON would otherwise cost the bench's own CPU,
/// on the same machine, more than the server's.
async fn read_events(mut body: Incoming, arrivals: Arc<Vec<Arrivals>>, start: Instant) {
    let mut split_line = Vec::new();
    while let Some(Ok(frame)) = body.frame().await {
        let at = start.elapsed().as_nanos() as u64;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let mut rest: &[u8] = &data;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let (line, after) = rest.split_at(end + 1);
            rest = after;
            let write = if split_line.is_empty() {
                added_write(line)
            } else {
                split_line.extend_from_slice(line);
                let write = added_write(&split_line);
                split_line.clear();
                write
            };
            if let Some(arrival) = write.and_then(|write| arrivals.get(write)) {
                arrival.last.fetch_max(at, Ordering::AcqRel);
                arrival.seen.fetch_add(1, Ordering::AcqRel);
            }
        }
        split_line.extend_from_slice(rest);
    }
}

/// The N of an ADDED event of Flunder `scale-N`.
fn added_write(line: &[u8]) -> Option<usize> {
    const ADDED: &[u8] = br#"{"type":"ADDED""#;
    const NAME: &[u8] = br#""name":"scale-"#;
    if !line.starts_with(ADDED) {
        return None;
    }
    let at = line.windows(NAME.len()).position(|w| w == NAME)? + NAME.len();
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&line[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

fn rows(scale: Scale, m: &Measured) -> Vec<Row> {
    let what = format!(
        "{} watchers over {} HTTP/2 connections, {} writes at {}/s: write → every watcher has it",
        scale.watchers, scale.connections, scale.writes, scale.rate
    );
    let (p99, max) = (m.all_watchers.quantile(0.99), m.all_watchers.quantile(1.0));
    let complete = m.missing == 0;
    let per_watcher = m.rss_after.saturating_sub(m.rss_before) / scale.watchers.max(1) as u64;
    vec![
        Row::plain(format!("{what}, p50"), ms(m.all_watchers.quantile(0.5))),
        Row::plain(format!("{what}, p99"), ms(p99))
            .target("< 100 ms", complete && p99 < Duration::from_millis(100)),
        Row::plain(format!("{what}, max"), ms(max))
            .target("< 250 ms", complete && max < Duration::from_millis(250)),
        Row::plain(
            "events missing 30 s after their write",
            m.missing.to_string(),
        )
        .target("0", complete),
        Row::plain("time to open the watches", ms(m.opened_in)),
        Row::plain(
            "CPU per event delivered: server / client (bench)",
            format!(
                "{:.2} µs / {:.2} µs",
                per_event(m.cpu.0, scale),
                per_event(m.cpu.1, scale)
            ),
        ),
        Row::plain(
            "server RSS before / after opening the watches",
            format!("{} / {}", mib(m.rss_before), mib(m.rss_after)),
        ),
        Row::plain(
            "server memory per idle watcher",
            format!("{:.1} KiB", per_watcher as f64 / 1024.0),
        ),
    ]
}

/// CPU time per watcher event of the run, in microseconds.
fn per_event(cpu: Duration, scale: Scale) -> f64 {
    cpu.as_secs_f64() * 1e6 / (scale.writes * scale.watchers).max(1) as f64
}
