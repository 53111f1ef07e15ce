//! Serving benchmarks: the release `wardle` binary over real TLS on loopback, on each storage
//! backend, every figure printed beside its ceiling measured in the same run (a bare axum
//! server returning the same bytes over the same TLS; raw etcd puts and SQLite inserts of the
//! same object). Figures are printed, never asserted.
//!
//! ```text
//! cargo bench -p wardle --bench serving -- [--backend memory|sqlite|etcd3|postgres]... [--quick]
//!     [--etcd-servers URL] [--postgres-url URL] [--objects N] [--large N] [--concurrency N]
//! cargo bench -p wardle --features etcd --bench serving -- --backend etcd3   # etcd3 needs the feature
//! cargo bench -p wardle --features postgres --bench serving -- --backend postgres   # and postgres its own
//! cargo bench -p wardle --bench serving -- --rules    # only the schema rules' cost per write
//! cargo bench -p wardle --bench serving -- --watchers-scale [--backend B]... [--watchers N]
//!     [--watch-connections N] [--writes N] [--write-rate PER_SECOND]
//!     # only 10,000 idle watchers over 100 HTTP/2 connections, 30 writes at 1/s
//! cargo bench -p wardle --bench serving -- --compare FILE [--objects N] [--concurrency N] [--gets N]
//!     # only the same workload against servers already running (wardle, Go, a CRD), side by side
//! cargo bench -p wardle --features etcd,postgres --bench serving -- --scale N [--backend B]...
//!     # only a store of N Flunders (SQLite, etcd3, PostgreSQL): start-up, RSS, whole reads
//! ```
//!
//! `.ci/bench` runs every backend with a throw-away etcd and PostgreSQL. See `book/src/benchmarks.md`.
//! `WARDLE_BENCH_BINARY=path` measures that build of wardle instead of cargo's (an older one,
//! to compare in the same minutes); `WARDLE_BENCH_ARGS` adds flags to its command line.

mod ceiling;
mod client;
mod compare;
mod figures;
mod measure;
mod report;
mod rules;
mod scale;
mod server;
mod stages;
mod watchers;
mod workload;

use std::time::Instant;

use client::Error;
use report::Row;
use server::Backend;

/// What one run does; `--quick` makes everything smaller.
#[derive(Debug, Clone)]
pub struct Settings {
    pub backends: Vec<Backend>,
    /// Flunders created, then got and listed.
    pub objects: usize,
    /// Total Flunders for the last memory figure (0: skip).
    pub large: usize,
    /// Requests in flight for creates and gets (and raw etcd puts).
    pub concurrency: usize,
    /// HTTP/2 connections the requests are spread over.
    pub connections: usize,
    pub gets: usize,
    pub lists: usize,
    pub walks: usize,
    pub watchers: usize,
    /// Connections the watches are spread over (the server allows 1000 streams on one).
    pub watch_connections: usize,
    pub fan_out_writes: usize,
    /// Writes of the raw-store ceilings.
    pub raw_writes: usize,
    /// Whether to repeat the memory figures with `--watch-cache=false`.
    pub cache_off_run: bool,
    /// `--rules`: only the in-process figure of schema rules per write.
    pub rules_only: bool,
    /// `--watchers-scale`: only the many-watchers figures, with these sizes.
    pub watchers_scale: Option<watchers::Scale>,
    /// `--compare FILE`: only the side-by-side figures of the running servers FILE names.
    pub compare: Option<std::path::PathBuf>,
    /// `--scale N`: only a server started on a store of N objects.
    pub scale: Option<usize>,
}

fn settings() -> Result<Settings, Error> {
    let mut args = std::env::args().skip(1);
    let mut quick = false;
    let mut rules_only = false;
    let mut watchers_scale = false;
    let mut scale = watchers::Scale::default();
    let mut backends = Vec::new();
    let mut etcd = "http://127.0.0.1:23790".to_string();
    let mut postgres = "postgres://postgres@127.0.0.1:54320/apiserver".to_string();
    let (mut objects, mut large, mut concurrency, mut scale_objects) = (None, None, None, None);
    let mut compare = None;
    let mut gets = None;
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            // `cargo bench` passes --bench to every bench binary.
            "--bench" => {}
            "--quick" => quick = true,
            "--rules" => rules_only = true,
            "--watchers-scale" => watchers_scale = true,
            "--compare" => compare = Some(value("--compare")?.into()),
            "--watchers" => scale.watchers = value("--watchers")?.parse()?,
            "--watch-connections" => scale.connections = value("--watch-connections")?.parse()?,
            "--writes" => scale.writes = value("--writes")?.parse()?,
            "--write-rate" => scale.rate = value("--write-rate")?.parse()?,
            "--backend" => backends.extend(value("--backend")?.split(',').map(str::to_string)),
            "--etcd-servers" => etcd = value("--etcd-servers")?,
            "--postgres-url" => postgres = value("--postgres-url")?,
            "--objects" => objects = Some(value("--objects")?.parse()?),
            "--gets" => gets = Some(value("--gets")?.parse()?),
            "--large" => large = Some(value("--large")?.parse()?),
            "--scale" => scale_objects = Some(value("--scale")?.parse()?),
            "--concurrency" => concurrency = Some(value("--concurrency")?.parse()?),
            other => return Err(format!("unknown argument {other:?}; see the bench's doc").into()),
        }
    }
    if backends.is_empty() {
        // The memory backend keeps nothing a server could be started on again.
        backends = if scale_objects.is_some() {
            vec!["sqlite".into()]
        } else {
            vec!["memory".into(), "sqlite".into()]
        };
        if cfg!(feature = "etcd") {
            backends.push("etcd3".into());
        }
        if cfg!(feature = "postgres") {
            backends.push("postgres".into());
        }
    }
    let backends = backends
        .iter()
        .map(|name| match name.as_str() {
            "memory" => Ok(Backend::Memory),
            "sqlite" => Ok(Backend::Sqlite),
            "etcd3" if cfg!(feature = "etcd") => Ok(Backend::Etcd3(etcd.clone())),
            "etcd3" => {
                Err("etcd3 needs the etcd feature: cargo bench -p wardle --features etcd …".into())
            }
            "postgres" if cfg!(feature = "postgres") => Ok(Backend::Postgres(postgres.clone())),
            "postgres" => Err(
                "postgres needs the postgres feature: cargo bench -p wardle --features postgres …"
                    .into(),
            ),
            other => Err(format!(
                "unknown backend {other:?} (memory, sqlite, etcd3, postgres)"
            )),
        })
        .collect::<Result<_, String>>()?;
    let objects = objects.unwrap_or(10_000);
    Ok(Settings {
        backends,
        objects,
        large: large.unwrap_or(if quick { 0 } else { 100_000 }),
        concurrency: concurrency.unwrap_or(32),
        connections: 4,
        gets: gets.unwrap_or(if quick { 5_000 } else { 20_000 }),
        lists: if quick { 5 } else { 20 },
        walks: if quick { 3 } else { 10 },
        watchers: 1_000,
        watch_connections: 10,
        fan_out_writes: if quick { 3 } else { 10 },
        raw_writes: objects.min(if quick { 2_000 } else { 10_000 }),
        cache_off_run: !quick,
        rules_only,
        watchers_scale: watchers_scale.then_some(scale),
        compare,
        scale: scale_objects,
    })
}

fn main() {
    extension_apiserver::tls::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = runtime.block_on(run()) {
        eprintln!("bench failed: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), Error> {
    let settings = settings()?;
    if let Some(file) = &settings.compare {
        return compare::run(&settings, file).await;
    }
    if let Some(scale) = settings.watchers_scale {
        for backend in &settings.backends {
            let rows = watchers::run(backend, scale).await?;
            report::print(
                &format!("{} backend: watchers at scale", backend.name()),
                &rows,
            );
        }
        return Ok(());
    }
    if let Some(objects) = settings.scale {
        for backend in &settings.backends {
            let started = Instant::now();
            let run = scale::run(backend, objects).await?;
            scale::print(backend, &run);
            println!("\n({} s)", started.elapsed().as_secs());
        }
        return Ok(());
    }
    report::print("schema validation (in process)", &rules::rows());
    if settings.rules_only {
        return Ok(());
    }
    let cache_flag = server::has_watch_cache_flag()?;
    println!(
        "# wardle serving bench: {} objects, {} in flight over {} HTTP/2 connections, \
         {} watchers; memory up to {} objects; --watch-cache flag: {}",
        settings.objects,
        settings.concurrency,
        settings.connections,
        settings.watchers,
        settings.large.max(settings.objects),
        if cache_flag {
            "yes"
        } else {
            "absent (memory with the cache off not measured)"
        }
    );
    for backend in &settings.backends {
        let started = Instant::now();
        let (ours, ceilings) = measure::serving(&settings, backend).await?;
        let mut rows = figures::serving(&settings, backend, &ours, &ceilings);
        if cache_flag && settings.cache_off_run {
            let off = measure::memory(&settings, backend, Some(false)).await?;
            rows.extend(figures::memory_rows(&off, " (--watch-cache=false)"));
            rows.push(figures::cache_cost(&ours.memory, &off));
        } else {
            rows.push(Row::plain(
                "watch cache cost per object",
                "not measured (no --watch-cache flag, or --quick)",
            ));
        }
        let took = started.elapsed().as_secs();
        report::print(&format!("{} backend ({took} s)", backend.name()), &rows);
    }
    Ok(())
}
