//! The runs: one server per backend measured for every figure (and its ceilings beside it),
//! and a memory-only run (e.g. with the watch cache off).

use std::path::Path;
use std::time::Duration;

use crate::Settings;
use crate::ceiling::{self, BareServer, Canned};
use crate::client::{self, Client, Error, Sample};
use crate::server::{Backend, Wardle};
use crate::stages::Stages;
use crate::workload::{self, FanOut};

/// Namespaces: the bench objects, the fan-out's own, and one probe object.
const NS: &str = "bench";
const NS_FANOUT: &str = "bench-fanout";
/// The fan-out of watchers in v1beta1 (every event converted from the stored v1alpha1).
const NS_FANOUT_BETA: &str = "bench-fanout-beta";
const NS_PROBE: &str = "bench-probe";
/// Objects per page of the paginated list.
pub const LIMIT: usize = 500;

/// What the server did.
pub struct Ours {
    pub creates: Sample,
    pub gets: Sample,
    pub lists: Sample,
    pub walks: Sample,
    /// CPU time of the server's threads during the reads.
    pub cpu: ReadsCpu,
    pub pages: usize,
    pub fan_out: FanOut,
    pub conversion: Conversion,
    /// Merge patches, then server-side applies, of the same objects (managedFields kept by
    /// both).
    pub writes: (Sample, Sample),
    /// What each stage cost the creates, the merge patches and the applies.
    pub stages: WriteStages,
    pub memory: Memory,
}

/// The server's stage timings of each run of writes, and the CPU time its threads spent
/// on each (creates, patches, applies).
pub struct WriteStages {
    pub creates: Stages,
    pub patches: Stages,
    pub applies: Stages,
    pub cpu: [Duration; 3],
}

/// What serving a converted version costs: the same lists and walks in v1alpha1 (stored) and
/// v1beta1 (converted), and the fan-out with every watcher in v1beta1.
pub struct Conversion {
    pub lists: (Sample, Sample),
    pub walks: (Sample, Sample),
    pub fan_out: FanOut,
}

/// What the ceilings did with the same bytes.
pub struct Ceilings {
    pub writes: Sample,
    /// What the write ceiling is (raw etcd puts, …).
    pub writes_label: &'static str,
    /// On etcd3: raw create transactions (compare, put), as the backend sends them.
    pub create_txns: Option<Sample>,
    pub gets: Sample,
    pub lists: Sample,
    pub walks: Sample,
    /// CPU time of the bare server's threads during the reads.
    pub cpu: ReadsCpu,
}

/// Memory figures of one server: RSS idle, after each number of objects, and the mean JSON
/// size of one object.
pub struct Memory {
    pub idle: u64,
    pub at: Vec<(usize, u64)>,
    pub json_size: f64,
    /// Whole-collection reads at the largest number of objects.
    pub reads: Option<(usize, workload::ScaleReads)>,
}

/// Reads are measured in this many rounds, each running a share of ours and then the same
/// share on the bare server: on a shared virtual machine, whose speed drifts over seconds,
/// both sides of a ratio then meet the same conditions.
const ROUNDS: usize = 4;

/// Merge patches of every bench object, then server-side applies of them (each forced, by
/// one manager): what apply costs beside a plain update.
async fn writes(
    settings: &Settings,
    (client, wardle): (&Client, &Wardle),
) -> Result<((Sample, Sample), (Stages, Stages), [Duration; 2]), Error> {
    use workload::Write;
    let objects = 0..settings.objects;
    let concurrency = settings.concurrency;
    let patch = (Write::MergePatch, 1);
    let (before, cpu_before) = (Stages::scrape(client).await?, wardle.cpu()?);
    let patches = workload::updates(client, NS, objects.clone(), concurrency, patch).await?;
    let (after_patches, cpu_patches) = (Stages::scrape(client).await?, wardle.cpu()?);
    let apply = (Write::Apply, 2);
    let applies = workload::updates(client, NS, objects, concurrency, apply).await?;
    let (after_applies, cpu_applies) = (Stages::scrape(client).await?, wardle.cpu()?);
    Ok((
        (patches, applies),
        (
            after_patches.since(&before),
            after_applies.since(&after_patches),
        ),
        [
            cpu_patches.saturating_sub(cpu_before),
            cpu_applies.saturating_sub(cpu_patches),
        ],
    ))
}

/// Every figure of one backend with the watch cache at its default, with its ceilings.
pub async fn serving(settings: &Settings, backend: &Backend) -> Result<(Ours, Ceilings), Error> {
    let dir = tempfile::tempdir()?;
    let wardle = Wardle::start(dir.path(), backend, None)?;
    let tls = client::tls_config(&wardle.cert_dir)?;
    let client = Client::connect(wardle.port, tls.clone(), settings.connections).await?;
    let idle = settle_rss(&client, &wardle).await?;
    let (before, cpu_before) = (Stages::scrape(&client).await?, wardle.cpu()?);
    let creates = workload::create(&client, NS, 0..settings.objects, settings.concurrency).await?;
    let create_cpu = wardle.cpu()?.saturating_sub(cpu_before);
    let create_stages = Stages::scrape(&client).await?.since(&before);
    let rss_objects = settle_rss(&client, &wardle).await?;
    let (updates, (patch_stages, apply_stages), [patch_cpu, apply_cpu]) =
        writes(settings, (&client, &wardle)).await?;
    let canned = canned(&client).await?;
    let json_size = workload::mean_item_size(&canned.list)?;
    let pages = canned.pages.len();
    let object = canned.get.clone();
    let bare = BareServer::start(&wardle.cert_dir, canned)?;
    let bare_client = Client::connect(bare.port, tls.clone(), settings.connections).await?;
    let (reads, bare_reads) = reads(settings, (&client, &wardle), (&bare_client, &bare)).await?;
    let fan_client = Client::connect(wardle.port, tls.clone(), settings.watch_connections).await?;
    let fan_out = workload::fan_out(
        &fan_client,
        ("v1alpha1", NS_FANOUT),
        settings.watchers,
        settings.fan_out_writes,
    )
    .await?;
    let conversion = conversion(settings, &client, &fan_client).await?;
    drop(fan_client);
    let ceilings = write_ceilings(settings, backend, &bare_client, dir.path(), object).await?;
    let (writes, writes_label, create_txns) = ceilings;
    drop(bare_client);
    drop(bare);
    let mut at = vec![(settings.objects, rss_objects)];
    if settings.large > settings.objects {
        let more = settings.objects..settings.large;
        workload::create(&client, NS, more, settings.concurrency).await?;
        at.push((settings.large, settle_rss(&client, &wardle).await?));
    }
    let n = settings.large.max(settings.objects);
    let whole = Some((n, workload::scale_reads(&client, NS).await?));
    drop(client);
    cleanup(&wardle).await?;
    let memory = Memory {
        idle,
        at,
        json_size,
        reads: whole,
    };
    let ours = Ours {
        creates,
        writes: updates,
        stages: WriteStages {
            creates: create_stages,
            patches: patch_stages,
            applies: apply_stages,
            cpu: [create_cpu, patch_cpu, apply_cpu],
        },
        gets: reads.gets,
        lists: reads.lists,
        walks: reads.walks,
        cpu: reads.cpu,
        pages,
        fan_out,
        conversion,
        memory,
    };
    let ceilings = Ceilings {
        writes,
        writes_label,
        create_txns,
        gets: bare_reads.gets,
        lists: bare_reads.lists,
        walks: bare_reads.walks,
        cpu: bare_reads.cpu,
    };
    Ok((ours, ceilings))
}

/// Lists and walks of the bench objects in both versions, alternating in [`ROUNDS`] rounds,
/// and the fan-out again with the watchers in v1beta1.
async fn conversion(
    settings: &Settings,
    client: &Client,
    fan_client: &Client,
) -> Result<Conversion, Error> {
    let (lists, walks) = (
        settings.lists.div_ceil(ROUNDS),
        settings.walks.div_ceil(ROUNDS),
    );
    let mut samples: [Vec<Sample>; 4] = Default::default();
    for _ in 0..ROUNDS {
        for (i, version) in ["v1alpha1", "v1beta1"].into_iter().enumerate() {
            let path = workload::collection_in(version, NS);
            samples[i].push(workload::lists(client, &path, lists).await?);
            let next = |_: usize, token: &str| {
                let token = workload::query_escape(token);
                format!("{path}?limit={LIMIT}&continue={token}")
            };
            let walked = workload::walks(client, walks, &first_page(&path), next).await?;
            samples[2 + i].push(walked.0);
        }
    }
    let [alpha_lists, beta_lists, alpha_walks, beta_walks] = samples.map(Sample::merge);
    let fan_out = workload::fan_out(
        fan_client,
        ("v1beta1", NS_FANOUT_BETA),
        settings.watchers,
        settings.fan_out_writes,
    )
    .await?;
    Ok(Conversion {
        lists: (alpha_lists, beta_lists),
        walks: (alpha_walks, beta_walks),
        fan_out,
    })
}

/// What the server answered, for the bare server to answer again: one object, the full list,
/// the pages of one walk, and a created object.
async fn canned(client: &Client) -> Result<Canned, Error> {
    let list_path = workload::collection(NS);
    let (_, pages) = workload::walks(client, 1, &first_page(&list_path), next_page).await?;
    let probe = workload::flunder(NS_PROBE, "probe");
    Ok(Canned {
        get: client.get(&item(0)).await?,
        list: client.get(&list_path).await?,
        pages,
        created: client
            .create(&workload::collection(NS_PROBE), probe)
            .await?,
    })
}

/// The path of bench object `i`.
fn item(i: usize) -> String {
    format!("{}/{}", workload::collection(NS), workload::name(i))
}

fn first_page(list_path: &str) -> String {
    format!("{list_path}?limit={LIMIT}")
}

fn next_page(_: usize, token: &str) -> String {
    let token = workload::query_escape(token);
    format!(
        "{}?limit={LIMIT}&continue={token}",
        workload::collection(NS)
    )
}

/// Gets, full lists and paginated walks.
pub struct Reads {
    pub gets: Sample,
    pub lists: Sample,
    pub walks: Sample,
    pub cpu: ReadsCpu,
}

/// The server's CPU time (all its threads) while it answered the gets, the full lists and the
/// walks.
#[derive(Clone, Copy, Default)]
pub struct ReadsCpu {
    pub gets: Duration,
    pub lists: Duration,
    pub walks: Duration,
}

/// Gets of random objects, full lists and paginated walks on the server, and the same on the
/// bare server (which answers the canned bytes), in [`ROUNDS`] alternating rounds; with the CPU
/// time each server spent on each kind.
async fn reads(
    settings: &Settings,
    (ours, wardle): (&Client, &Wardle),
    (bare, bare_server): (&Client, &BareServer),
) -> Result<(Reads, Reads), Error> {
    let n = settings.objects;
    let (gets, lists, walks) = (
        settings.gets.div_ceil(ROUNDS),
        settings.lists.div_ceil(ROUNDS),
        settings.walks.div_ceil(ROUNDS),
    );
    let list_path = workload::collection(NS);
    let mut samples: [Vec<Sample>; 6] = Default::default();
    let (mut cpu, mut bare_cpu) = (ReadsCpu::default(), ReadsCpu::default());
    let ours_cpu = || wardle.cpu();
    let theirs_cpu = || bare_server.cpu();
    for _ in 0..ROUNDS {
        let random_item = move |i| item(workload::spread(i, n));
        let c = settings.concurrency;
        let work = workload::gets(ours, gets, c, random_item);
        samples[0].push(on_cpu(ours_cpu, &mut cpu.gets, work).await?);
        let work = workload::gets(bare, gets, c, |_| "/get".into());
        samples[1].push(on_cpu(theirs_cpu, &mut bare_cpu.gets, work).await?);
        let work = workload::lists(ours, &list_path, lists);
        samples[2].push(on_cpu(ours_cpu, &mut cpu.lists, work).await?);
        let work = workload::lists(bare, "/list", lists);
        samples[3].push(on_cpu(theirs_cpu, &mut bare_cpu.lists, work).await?);
        let first = first_page(&list_path);
        let work = workload::walks(ours, walks, &first, next_page);
        samples[4].push(on_cpu(ours_cpu, &mut cpu.walks, work).await?.0);
        let bare_next = |i: usize, _: &str| format!("/page?i={i}");
        let work = workload::walks(bare, walks, "/page?i=0", bare_next);
        samples[5].push(on_cpu(theirs_cpu, &mut bare_cpu.walks, work).await?.0);
    }
    let [g, bg, l, bl, w, bw] = samples.map(Sample::merge);
    Ok((
        Reads {
            gets: g,
            lists: l,
            walks: w,
            cpu,
        },
        Reads {
            gets: bg,
            lists: bl,
            walks: bw,
            cpu: bare_cpu,
        },
    ))
}

/// Runs `work`, adding the CPU time `cpu` reports over it to `total`.
async fn on_cpu<T>(
    cpu: impl Fn() -> Result<Duration, Error>,
    total: &mut Duration,
    work: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let before = cpu()?;
    let out = work.await?;
    *total += cpu()? - before;
    Ok(out)
}

/// The write ceilings of `backend`: raw writes (and on etcd3, raw create transactions).
async fn write_ceilings(
    settings: &Settings,
    backend: &Backend,
    bare: &Client,
    dir: &Path,
    object: bytes::Bytes,
) -> Result<(Sample, &'static str, Option<Sample>), Error> {
    let (writes, writes_label) = raw_writes(settings, backend, bare, dir, object.clone()).await?;
    let create_txns = match backend {
        #[cfg(feature = "etcd")]
        Backend::Etcd3(servers) => {
            let txn = ceiling::EtcdWrite::CreateTxn;
            let (count, concurrency) = (settings.raw_writes, settings.concurrency);
            let sample = ceiling::etcd_writes(servers, txn, object, count, concurrency).await?;
            // The puts' keys too, now that both ceilings are measured.
            ceiling::delete_etcd_writes(servers).await?;
            Some(sample)
        }
        _ => None,
    };
    Ok((writes, writes_label, create_txns))
}

/// The memory figures alone (idle, `objects`, `large`), e.g. with the watch cache off.
pub async fn memory(
    settings: &Settings,
    backend: &Backend,
    watch_cache: Option<bool>,
) -> Result<Memory, Error> {
    let dir = tempfile::tempdir()?;
    let wardle = Wardle::start(dir.path(), backend, watch_cache)?;
    let tls = client::tls_config(&wardle.cert_dir)?;
    let client = Client::connect(wardle.port, tls, settings.connections).await?;
    let idle = settle_rss(&client, &wardle).await?;
    let mut at = Vec::new();
    let mut made = 0;
    for n in [settings.objects, settings.large] {
        if n > made {
            workload::create(&client, NS, made..n, settings.concurrency).await?;
            at.push((n, settle_rss(&client, &wardle).await?));
            made = n;
        }
    }
    let list = client
        .get(&format!("{}?limit=100", workload::collection(NS)))
        .await?;
    let json_size = workload::mean_item_size(&list)?;
    let reads = Some((made, workload::scale_reads(&client, NS).await?));
    drop(client);
    cleanup(&wardle).await?;
    Ok(Memory {
        idle,
        at,
        json_size,
        reads,
    })
}

/// The server's RSS once it has been quiet for a second (after a request, so the
/// connection and its TLS state count as idle cost).
pub async fn settle_rss(client: &Client, wardle: &Wardle) -> Result<u64, Error> {
    client.get("/apis/wardle.example.com/v1alpha1").await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    wardle.rss()
}

/// The write ceiling of `backend`: raw etcd puts, raw SQLite inserts, or (memory, which has
/// no store of its own to compare with) the bare server's POST.
async fn raw_writes(
    settings: &Settings,
    backend: &Backend,
    bare: &Client,
    dir: &Path,
    object: bytes::Bytes,
) -> Result<(Sample, &'static str), Error> {
    let count = settings.raw_writes;
    match backend {
        Backend::Memory => {
            let body = workload::flunder(NS, "f");
            let bare = bare.clone();
            let sample = client::drive(count, settings.concurrency, move |_| {
                let (bare, body) = (bare.clone(), body.clone());
                async move { bare.create("/create", body).await.map(drop) }
            })
            .await?;
            Ok((sample, "bare axum POST"))
        }
        Backend::Sqlite => {
            let path = dir.join("raw.db");
            let sample =
                ceiling::sqlite_inserts(&path, object, count, settings.concurrency).await?;
            Ok((sample, "raw SQLite inserts (1 writer)"))
        }
        #[cfg(feature = "etcd")]
        Backend::Etcd3(servers) => {
            let put = ceiling::EtcdWrite::Put;
            let sample =
                ceiling::etcd_writes(servers, put, object, count, settings.concurrency).await?;
            Ok((sample, "raw etcd-client puts"))
        }
        #[cfg(not(feature = "etcd"))]
        Backend::Etcd3(_) => Err("etcd3 needs the etcd feature".into()),
        #[cfg(feature = "postgres")]
        Backend::Postgres(url) => {
            let sample =
                ceiling::postgres_inserts(url, object, count, settings.concurrency).await?;
            Ok((sample, "raw PostgreSQL inserts (16 connections)"))
        }
        #[cfg(not(feature = "postgres"))]
        Backend::Postgres(_) => Err("postgres needs the postgres feature".into()),
    }
}

/// Removes the run's keys from etcd and its schema from PostgreSQL (other backends keep their
/// data in the run's directory).
async fn cleanup(wardle: &Wardle) -> Result<(), Error> {
    #[cfg(feature = "etcd")]
    if let (Some(prefix), Some(servers)) = (&wardle.etcd_prefix, &wardle.etcd_servers) {
        let client = etcd_client::Client::connect([servers], None).await?;
        ceiling::delete_prefix(client, &format!("{prefix}/")).await?;
    }
    #[cfg(not(feature = "etcd"))]
    let _ = (&wardle.etcd_prefix, &wardle.etcd_servers);
    #[cfg(feature = "postgres")]
    if let Some((url, schema)) = &wardle.postgres_schema {
        ceiling::drop_schema(url, schema).await?;
    }
    #[cfg(not(feature = "postgres"))]
    let _ = &wardle.postgres_schema;
    Ok(())
}
