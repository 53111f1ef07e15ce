//! `--scale N`: a store of N Flunders, and what a server started on it costs. One Flunder is
//! created through the server (so it is stored exactly as the server writes it), then copied
//! N − 1 times straight into the backend's own format (SQLite and PostgreSQL rows, etcd keys),
//! each copy with its own name and uid; then the server is started again on that store, with
//! the watch cache and without it, and timed: until `/readyz` answers `ok`, until the watch
//! cache holds the store, and for the reads a client of a large collection makes.

use std::path::Path;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use http_body_util::BodyExt;

use crate::client::{self, Client, Error};
use crate::measure::settle_rss;
use crate::server::{Backend, Wardle};
use crate::workload;

/// The namespace of the objects.
const NS: &str = "bench";
/// The resource label of the watch cache's metrics.
const RESOURCE: &str = "flunders.wardle.example.com";
/// How long a start may take before the run fails.
const START_BOUND: Duration = Duration::from_secs(600);

/// One server started on the filled store.
pub struct Start {
    /// From spawning the process to `/readyz` answering `ok`.
    pub ready: Duration,
    /// From spawning to the watch cache holding the store (`None` with the cache off).
    pub filled: Option<Duration>,
    /// RSS once ready (and, with the cache, filled), and after the reads.
    pub rss: (u64, u64),
    /// The highest RSS from the start to the end of the reads (the load's and the reads').
    pub rss_peak: u64,
    /// A list of all, a walk by `limit=500`, a selector matching none (first page, whole):
    /// each its time, or why it failed (a storage deadline, for instance).
    pub reads: [Result<Duration, String>; 4],
    /// A watch from the list's `resourceVersion`: until its headers, and from a create to its
    /// `ADDED` event.
    pub watch: (Duration, Duration),
}

/// A whole `--scale` run on one backend.
pub struct Scale {
    pub objects: usize,
    /// Copying the object into the store.
    pub seed: Duration,
    /// RSS of the server with one object.
    pub idle: u64,
    /// Mean JSON size of one object as a list serves it.
    pub json_size: f64,
    /// With the watch cache (the default), and with `--watch-cache=false`.
    pub starts: Vec<(&'static str, Start)>,
}

/// Fills `backend` with `objects` Flunders and measures the server started on them.
pub async fn run(backend: &Backend, objects: usize) -> Result<Scale, Error> {
    let dir = tempfile::tempdir()?;
    let first = Wardle::start(dir.path(), backend, None)?;
    let tls = client::tls_config(&first.cert_dir)?;
    let client = Client::connect(first.port, tls, 1).await?;
    let idle = settle_rss(&client, &first).await?;
    let template = workload::flunder(NS, &workload::name(0));
    client.create(&workload::collection(NS), template).await?;
    drop(client);
    let store = first.store().map(str::to_owned);
    drop(first);
    let started = Instant::now();
    let json_size = match backend {
        Backend::Memory => {
            return Err("--scale: the memory backend keeps nothing to restart on".into());
        }
        Backend::Sqlite => seed_sqlite(&dir.path().join("wardle.db"), objects)?,
        #[cfg(feature = "etcd")]
        Backend::Etcd3(servers) => seed_etcd(servers, store.as_deref(), objects).await?,
        #[cfg(feature = "postgres")]
        Backend::Postgres(url) => seed_postgres(url, store.as_deref(), objects).await?,
        #[allow(unreachable_patterns)]
        _ => return Err("this backend needs its feature (etcd, postgres)".into()),
    };
    let seed = started.elapsed();
    let mut starts = Vec::new();
    for (label, cache) in [
        ("watch cache on", None),
        ("--watch-cache=false", Some(false)),
    ] {
        let result = start(dir.path(), backend, cache, store.as_deref()).await;
        match result {
            Ok(measured) => starts.push((label, measured)),
            Err(e) => {
                cleanup(backend, store.as_deref()).await?;
                return Err(e);
            }
        }
    }
    cleanup(backend, store.as_deref()).await?;
    Ok(Scale {
        objects,
        seed,
        idle,
        json_size,
        starts,
    })
}

/// Starts a server on the filled store and times it.
async fn start(
    dir: &Path,
    backend: &Backend,
    watch_cache: Option<bool>,
    store: Option<&str>,
) -> Result<Start, Error> {
    let spawned = Instant::now();
    let wardle = Wardle::start_in(dir, backend, watch_cache, store)?;
    let tls = client::tls_config(&wardle.cert_dir)?;
    let client = Client::connect(wardle.port, tls, 1).await?;
    // Bounded: ten minutes of polls every 20 ms.
    let mut ready = None;
    let mut filled = None;
    let cached = watch_cache != Some(false);
    while spawned.elapsed() < START_BOUND {
        if ready.is_none() && client.send(Method::GET, "/readyz", None).await?.0 == StatusCode::OK {
            ready = Some(spawned.elapsed());
        }
        if cached && filled.is_none() && cache_revision(&client).await? > 0 {
            filled = Some(spawned.elapsed());
        }
        if ready.is_some() && (filled.is_some() || !cached) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ready = ready.ok_or("the server was not ready within ten minutes")?;
    if cached && filled.is_none() {
        return Err("the watch cache was not filled within ten minutes".into());
    }
    let rss_ready = settle_rss(&client, &wardle).await?;
    let reads = reads(&client).await;
    let watch = watch_latency(&client, if cached { "probe-on" } else { "probe-off" }).await?;
    let rss_after = wardle.rss()?;
    let rss_peak = wardle.rss_peak()?;
    Ok(Start {
        ready,
        filled,
        rss: (rss_ready, rss_after),
        rss_peak,
        reads,
        watch,
    })
}

/// The reads of [`Start::reads`], each timed once; one that fails does not stop the others.
async fn reads(client: &Client) -> [Result<Duration, String>; 4] {
    let path = workload::collection(NS);
    let timed = |path: String| async move {
        let started = Instant::now();
        client.get(&path).await.map_err(|e| short(&e))?;
        Ok(started.elapsed())
    };
    let full = timed(path.clone()).await;
    let first = format!("{path}?limit=500");
    let walk = workload::walks(client, 1, &first, |_, token| {
        format!(
            "{path}?limit=500&continue={}",
            workload::query_escape(token)
        )
    })
    .await
    .map(|(walk, _)| walk.quantile(0.5))
    .map_err(|e| short(&e));
    let nothing = "labelSelector=app%3Dnone";
    let selector_page = timed(format!("{path}?{nothing}&limit=500")).await;
    let selector_all = timed(format!("{path}?{nothing}")).await;
    [full, walk, selector_page, selector_all]
}

/// The status line of a failed request (`…: 504 Gateway Timeout (want 200 OK): …`).
fn short(error: &Error) -> String {
    let text = error.to_string();
    match text.split(": ").nth(1) {
        Some(status) => status.split(" (").next().unwrap_or(status).to_string(),
        None => text,
    }
}

/// `apiserver_watch_cache_resource_version` of the Flunders: 0 until the cache is filled.
async fn cache_revision(client: &Client) -> Result<i64, Error> {
    let metrics = client.get("/metrics").await?;
    let wanted = format!("apiserver_watch_cache_resource_version{{resource=\"{RESOURCE}\"}}");
    Ok(String::from_utf8_lossy(&metrics)
        .lines()
        .find_map(|line| line.strip_prefix(wanted.as_str()))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as i64)
}

/// Opens a watch from the collection's current `resourceVersion` (as a client does after its
/// list), then creates `name` and waits (at most 30 s) for its `ADDED` event; deletes it after.
async fn watch_latency(client: &Client, name: &str) -> Result<(Duration, Duration), Error> {
    let path = workload::collection(NS);
    let rv = workload::list_resource_version(&client.get(&format!("{path}?limit=1")).await?)?;
    let opened = Instant::now();
    let watch = format!("{path}?watch=1&resourceVersion={rv}&timeoutSeconds=60");
    let response = client.open(Method::GET, &watch, None).await?;
    let headers = opened.elapsed();
    if response.status() != StatusCode::OK {
        return Err(format!("watch answered {}", response.status()).into());
    }
    let mut body = response.into_body();
    let sent = Instant::now();
    client.create(&path, workload::flunder(NS, name)).await?;
    let event = tokio::time::timeout(Duration::from_secs(30), async {
        let mut seen = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                seen.extend_from_slice(&data);
                let text = String::from_utf8_lossy(&seen);
                if text.contains("\"ADDED\"") && text.contains(name) {
                    return Ok::<_, Error>(sent.elapsed());
                }
            }
        }
        Err("the watch ended before the ADDED event".into())
    })
    .await
    .map_err(|_| "no ADDED event within 30 s")??;
    drop(body);
    let item = format!("{path}/{name}");
    let (status, _) = client.send(Method::DELETE, &item, None).await?;
    if status != StatusCode::OK && status != StatusCode::ACCEPTED {
        return Err(format!("{item}: DELETE answered {status}").into());
    }
    Ok((headers, event))
}

/// The template's copy `i`: its name and the last twelve hex digits of its uid replaced (the
/// same length, so every copy is as large as the template).
fn copy_of(template: &str, uid: &str, i: usize) -> String {
    let new_uid = format!("{}{i:012x}", &uid[..24]);
    template
        .replace(&workload::name(0), &workload::name(i))
        .replace(uid, &new_uid)
}

/// The uid in a stored object's JSON.
fn uid_of(value: &str) -> Result<String, Error> {
    let start = value
        .find("\"uid\":\"")
        .ok_or("no uid in the stored object")?
        + 7;
    let uid = value.get(start..start + 36).ok_or("a short uid")?;
    Ok(uid.to_string())
}

/// The stored object's mean JSON size is its length: a list serves it as stored (plus its
/// `resourceVersion`, a few bytes).
fn json_size(value: &str) -> f64 {
    value.len() as f64
}

/// Copies the template into the `log` and `current` tables in one transaction, at the next
/// revisions, as the server writes them.
fn seed_sqlite(path: &Path, objects: usize) -> Result<f64, Error> {
    let mut db = rusqlite::Connection::open(path)?;
    let (key, value): (Vec<u8>, Vec<u8>) = db.query_row(
        "SELECT c.key, l.value FROM current c JOIN log l ON l.revision = c.revision
         WHERE CAST(c.key AS TEXT) LIKE ?1",
        [format!("%/{NS}/{}", workload::name(0))],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )?;
    let top: i64 = db.query_row("SELECT MAX(revision) FROM log", [], |row| row.get(0))?;
    let (key, value) = (String::from_utf8(key)?, String::from_utf8(value)?);
    let uid = uid_of(&value)?;
    let tx = db.transaction()?;
    {
        let mut log = tx.prepare(
            "INSERT INTO log (revision, key, value, create_revision, prev_revision, deleted)
             VALUES (?1, ?2, ?3, ?1, NULL, 0)",
        )?;
        let mut current = tx.prepare("INSERT INTO current (key, revision) VALUES (?1, ?2)")?;
        for i in 1..objects {
            let revision = top + i as i64;
            let key = key.replace(&workload::name(0), &workload::name(i));
            let value = copy_of(&value, &uid, i);
            log.execute(rusqlite::params![
                revision,
                key.as_bytes(),
                value.as_bytes()
            ])?;
            current.execute(rusqlite::params![key.as_bytes(), revision])?;
        }
    }
    tx.commit()?;
    Ok(json_size(&value))
}

/// Copies the template into the `log` and `live` tables with one statement each (as the
/// book's first million was made), then analyzes them as autovacuum would.
#[cfg(feature = "postgres")]
async fn seed_postgres(url: &str, schema: Option<&str>, objects: usize) -> Result<f64, Error> {
    let schema = schema.ok_or("no schema")?;
    let (db, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let row = db
        .query_one(
            &format!(
                "SELECT l.value, (SELECT MAX(revision) FROM {schema}.log)
                 FROM {schema}.live c JOIN {schema}.log l ON l.revision = c.revision
                 WHERE convert_from(c.key, 'UTF8') LIKE $1"
            ),
            &[&format!("%/{NS}/{}", workload::name(0))],
        )
        .await?;
    let (value, top): (Vec<u8>, i64) = (row.get(0), row.get(1));
    let value = String::from_utf8(value)?;
    let uid = uid_of(&value)?;
    let template = workload::name(0);
    // The name and uid are plain ASCII (letters, digits, dashes), safe inside the literals.
    let name = "'f-' || lpad(i::text, 7, '0')";
    let new_uid = format!("'{}' || lpad(to_hex(i), 12, '0')", &uid[..24]);
    db.batch_execute(&format!(
        "INSERT INTO {schema}.log (revision, key, value, create_revision, prev_revision, deleted)
         SELECT {top} + i,
            convert_to(replace(convert_from(t.key, 'UTF8'), '{template}', {name}), 'UTF8'),
            convert_to(replace(replace(convert_from(t.value, 'UTF8'), '{template}', {name}),
                '{uid}', {new_uid}), 'UTF8'),
            {top} + i, NULL, false
         FROM generate_series(1, {last}) i,
            (SELECT l.key, l.value FROM {schema}.live c JOIN {schema}.log l
             ON l.revision = c.revision WHERE convert_from(c.key, 'UTF8') LIKE '%/{NS}/{template}') t;
         INSERT INTO {schema}.live (key, revision)
            SELECT key, revision FROM {schema}.log WHERE revision > {top};
         ANALYZE {schema}.log; ANALYZE {schema}.live;",
        last = objects as i64 - 1,
    ))
    .await?;
    Ok(json_size(&value))
}

/// Puts the copies under the server's prefix in transactions of 128 puts (etcd's default
/// `--max-txn-ops`), 8 in flight.
#[cfg(feature = "etcd")]
async fn seed_etcd(servers: &str, prefix: Option<&str>, objects: usize) -> Result<f64, Error> {
    use etcd_client::{GetOptions, Txn, TxnOp};
    use std::sync::Arc;
    let prefix = prefix.ok_or("no prefix")?;
    let mut etcd = etcd_client::Client::connect([servers], None).await?;
    let all = etcd
        .get(format!("{prefix}/"), Some(GetOptions::new().with_prefix()))
        .await?;
    let suffix = format!("/{NS}/{}", workload::name(0));
    let kv = all
        .kvs()
        .iter()
        .find(|kv| kv.key().ends_with(suffix.as_bytes()))
        .ok_or("the template is not in etcd")?;
    let key = Arc::<str>::from(String::from_utf8(kv.key().to_vec())?);
    let value = Arc::<str>::from(String::from_utf8(kv.value().to_vec())?);
    let uid = Arc::<str>::from(uid_of(&value)?);
    const BATCH: usize = 128;
    let batches = (objects - 1).div_ceil(BATCH);
    let kv_client = etcd.kv_client();
    let (k, v) = (key.clone(), value.clone());
    client::drive(batches, 8, move |b| {
        let (mut kv_client, key, value, uid) =
            (kv_client.clone(), k.clone(), v.clone(), uid.clone());
        async move {
            let first = 1 + b * BATCH;
            let puts = (first..(first + BATCH).min(objects)).map(|i| {
                let key = key.replace(&workload::name(0), &workload::name(i));
                TxnOp::put(key, copy_of(&value, &uid, i), None)
            });
            kv_client
                .txn(Txn::new().and_then(puts.collect::<Vec<_>>()))
                .await?;
            Ok(())
        }
    })
    .await?;
    Ok(json_size(&value))
}

/// Removes the etcd keys or the PostgreSQL schema (SQLite's file goes with the directory).
async fn cleanup(backend: &Backend, store: Option<&str>) -> Result<(), Error> {
    match (backend, store) {
        #[cfg(feature = "etcd")]
        (Backend::Etcd3(servers), Some(prefix)) => {
            let mut client = etcd_client::Client::connect([servers], None).await?;
            crate::ceiling::delete_prefix(client.clone(), &format!("{prefix}/")).await?;
            // Give the space back: compact to now and defragment.
            let revision = client
                .get("/", None)
                .await?
                .header()
                .map_or(0, |h| h.revision());
            client.compact(revision, None).await?;
            client.defragment().await?;
        }
        #[cfg(feature = "postgres")]
        (Backend::Postgres(url), Some(schema)) => crate::ceiling::drop_schema(url, schema).await?,
        _ => {}
    }
    Ok(())
}

/// The table of one backend's run.
pub fn print(backend: &Backend, scale: &Scale) {
    let n = scale.objects;
    let json = scale.json_size * n as f64;
    println!(
        "\n### {} backend: {} Flunders started on (`--scale {n}`)\n",
        backend.name(),
        thousands(n)
    );
    println!(
        "Filled in {:.1} s ({:.1} µs/object) by copying one object as the server stored it; \
         {:.0} bytes of JSON each, {} in all; RSS of the server with one object {}.\n",
        scale.seed.as_secs_f64(),
        per_object(scale.seed, n),
        scale.json_size,
        crate::report::mib(json as u64),
        crate::report::mib(scale.idle),
    );
    let labels: Vec<&str> = scale.starts.iter().map(|(label, _)| *label).collect();
    println!("| figure | {} | target |", labels.join(" | "));
    println!("|---|{}---|", "---:|".repeat(labels.len()));
    let row = |figure: &str, cell: &dyn Fn(&Start) -> String, target: &str| {
        let cells: Vec<String> = scale.starts.iter().map(|(_, s)| cell(s)).collect();
        println!("| {figure} | {} | {target} |", cells.join(" | "));
    };
    let timed = |read: &Result<Duration, String>| match read {
        Ok(d) => format!(
            "{} ({:.2} µs/object)",
            crate::report::ms(*d),
            per_object(*d, n)
        ),
        Err(status) => format!("failed: {status}"),
    };
    row(
        "start until `/readyz` is `ok`",
        &|s| crate::report::ms(s.ready),
        "—",
    );
    row(
        "start until the watch cache holds every object",
        &|s| s.filled.map_or("—".into(), crate::report::ms),
        if n >= 1_000_000 { "< 30 s" } else { "—" },
    );
    let ratio = |rss: u64| (rss.saturating_sub(scale.idle)) as f64 / json;
    row(
        "RSS when ready (× the objects' JSON, over the idle RSS)",
        &|s| format!("{} ({:.2}×)", crate::report::mib(s.rss.0), ratio(s.rss.0)),
        "≤ 1.5× with the cache",
    );
    row(
        "RSS after the reads below",
        &|s| format!("{} ({:.2}×)", crate::report::mib(s.rss.1), ratio(s.rss.1)),
        "—",
    );
    row(
        "highest RSS until the end of the reads (`VmHWM`)",
        &|s| {
            format!(
                "{} ({:.2}×)",
                crate::report::mib(s.rss_peak),
                ratio(s.rss_peak)
            )
        },
        "—",
    );
    row("list of all, one request", &|s| timed(&s.reads[0]), "—");
    row("walk of all by `limit=500`", &|s| timed(&s.reads[1]), "—");
    row(
        "`labelSelector` matching none, first page of `limit=500`",
        &|s| timed(&s.reads[2]),
        "< 2 s",
    );
    row(
        "`labelSelector` matching none, whole list",
        &|s| timed(&s.reads[3]),
        "< 2 s",
    );
    row(
        "watch from the list's `resourceVersion`: headers / create → `ADDED`",
        &|s| {
            format!(
                "{} / {}",
                crate::report::ms(s.watch.0),
                crate::report::ms(s.watch.1)
            )
        },
        "—",
    );
}

fn per_object(d: Duration, n: usize) -> f64 {
    d.as_secs_f64() * 1e6 / n.max(1) as f64
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
