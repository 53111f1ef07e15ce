//! `--compare FILE`: the same workload against API servers that are already running, side by
//! side in one run — wardle, the Go sample-apiserver and a CRD served by kube-apiserver, all on
//! one etcd (issue 29's check). FILE is JSON:
//!
//! ```json
//! {"targets": [{"name": "wardle", "address": "127.0.0.1:8444", "server_name": "localhost",
//!   "collection": "/apis/wardle.example.com/v1alpha1/namespaces/bench/flunders",
//!   "api_version": "wardle.example.com/v1alpha1", "kind": "Flunder",
//!   "ca": "ca.crt", "cert": "client.crt", "key": "client.key",
//!   "headers": {"X-Remote-User": "admin", "X-Remote-Group": "system:masters"}, "pid": 1234}],
//!  "watched": [{"name": "etcd", "pid": 987}]}
//! ```
//!
//! Each target gets `--objects` creates, then gets, first pages of `limit=500` and full lists,
//! in rounds that take turns between the targets (so that the machine's drift meets all of
//! them alike), and its resident memory (`pid`) before and after the objects. The first target
//! is the one the others are compared with. The collections must exist and be empty (a fresh
//! namespace each).
//!
//! Before each turn the bench waits (5 s at most) until the servers and the watched processes
//! are quiet, so that a turn does not pay for work the one before left running; the last row
//! says how long each target's turns waited, and in how many the wait gave up.
//!
//! The CPU time each create and get cost is printed too: the target's own (`pid`), the bench
//! client's, and that of each `watched` process (etcd, kube-apiserver) while the target's
//! creates or gets ran: on a small machine the servers share the cores with etcd, so a
//! create's speed depends on what etcd spends on it as much as on the server.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use serde::Deserialize;

use crate::Settings;
use crate::client::{Client, Error, Sample, drive, tls_config_from};
use crate::report::{mib, ms, per_second};
use crate::server::{cpu_of, rss_of};
use crate::workload::{gets, lists, name, spread};

#[derive(Deserialize)]
struct File {
    targets: Vec<Target>,
    /// Other processes whose CPU each target's requests cost as well.
    #[serde(default)]
    watched: Vec<Watched>,
}

/// A process that is not measured as a target, but whose CPU is (etcd, kube-apiserver).
#[derive(Deserialize)]
struct Watched {
    name: String,
    pid: u32,
}

/// One server to measure, as the file describes it.
#[derive(Deserialize)]
struct Target {
    name: String,
    address: SocketAddr,
    /// The name the server's certificate is checked for.
    server_name: String,
    /// The path of a namespaced collection: `/apis/GROUP/VERSION/namespaces/NS/RESOURCE`.
    collection: String,
    api_version: String,
    kind: String,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// The server's process, for its resident memory.
    pid: Option<u32>,
}

impl Target {
    fn namespace(&self) -> Result<&str, Error> {
        self.collection
            .split("/namespaces/")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .ok_or_else(|| format!("{}: the collection names no namespace", self.name).into())
    }

    /// The `i`th object, as [`crate::workload::flunder`] makes it, in this target's kind.
    fn object(&self, i: usize) -> Result<Bytes, Error> {
        let object = serde_json::json!({
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": {"name": name(i), "namespace": self.namespace()?, "labels": {"app": "bench"}},
            "spec": {"reference": "f-0000000"},
        });
        Ok(Bytes::from(object.to_string()))
    }

    async fn connect(&self, connections: usize) -> Result<Client, Error> {
        let tls = tls_config_from(&self.ca, &self.cert, &self.key)
            .map_err(|e| format!("{}: {e}", self.name))?;
        let headers = self
            .headers
            .iter()
            .map(|(k, v)| Ok((HeaderName::try_from(k)?, HeaderValue::try_from(v)?)))
            .collect::<Result<Vec<_>, Error>>()?;
        Client::connect_to(self.address, &self.server_name, tls, connections, headers).await
    }

    fn rss(&self) -> Result<Option<u64>, Error> {
        self.pid.map(rss_of).transpose()
    }
}

/// What one target did.
#[derive(Default)]
struct Figures {
    creates: Vec<Sample>,
    gets: Vec<Sample>,
    pages: Vec<Sample>,
    lists: Vec<Sample>,
    rss_before: Option<u64>,
    rss_after: Option<u64>,
    /// CPU of the [`Processes`] over the target's creates, and over its gets.
    create_cpu: Cpu,
    get_cpu: Cpu,
    /// The waits for quiet before the target's create and get turns.
    waits: Waits,
}

/// Rounds the work is split into, each target taking its turn in every round.
const ROUNDS: usize = 4;

/// How often, and for how long at most, [`settle`] looks for the machine to be quiet.
const SETTLE_STEP: Duration = Duration::from_millis(100);
const SETTLE_LIMIT: Duration = Duration::from_secs(5);

/// Waits, for [`SETTLE_LIMIT`] at most, until the processes `pids` name use less than a tenth
/// of a core between them: a turn does not pay for what the turn before left running
/// (kube-apiserver went on at a full core for up to two seconds after a CRD's creates, into
/// the next target's turn). Adds how long it waited, and whether it gave up, to `waits`.
async fn settle(pids: &[u32], waits: &mut Waits) {
    let read = || -> Duration { pids.iter().filter_map(|&pid| cpu_of(pid).ok()).sum() };
    let start = std::time::Instant::now();
    let mut before = read();
    let quiet = loop {
        if start.elapsed() >= SETTLE_LIMIT {
            break false;
        }
        tokio::time::sleep(SETTLE_STEP).await;
        let now = read();
        if now.saturating_sub(before) < SETTLE_STEP / 10 {
            break true;
        }
        before = now;
    };
    waits.turns += 1;
    waits.waited += start.elapsed();
    waits.loud += usize::from(!quiet);
}

/// The waits for quiet before one target's turns.
#[derive(Default)]
struct Waits {
    turns: usize,
    waited: Duration,
    /// Turns that began without the machine quiet: [`settle`] gave up.
    loud: usize,
}

/// The processes whose CPU is counted during a target's requests: the target's server, the
/// bench client (this process), then every watched process, in the file's order.
struct Processes(Vec<Option<u32>>);

impl Processes {
    fn of(target: &Target, watched: &[Watched]) -> Self {
        let client = Some(std::process::id());
        let others = watched.iter().map(|w| Some(w.pid));
        Self([target.pid, client].into_iter().chain(others).collect())
    }

    /// Each process's CPU time so far; `None` where there is no process or it cannot be read.
    fn now(&self) -> Vec<Option<Duration>> {
        let read = |pid: u32| cpu_of(pid).ok();
        self.0.iter().map(|pid| pid.and_then(read)).collect()
    }

    /// Runs `work`, adding what each process spent over it to `total`.
    async fn measure<T>(
        &self,
        total: &mut Cpu,
        work: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let before = self.now();
        let out = work.await?;
        total.add(before, self.now());
        Ok(out)
    }
}

/// CPU time per process of [`Processes`], summed over a target's turns; `None` once a reading
/// failed.
#[derive(Default)]
struct Cpu(Vec<Option<Duration>>);

impl Cpu {
    fn add(&mut self, before: Vec<Option<Duration>>, after: Vec<Option<Duration>>) {
        if self.0.is_empty() {
            self.0 = vec![Some(Duration::ZERO); before.len()];
        }
        for ((total, before), after) in self.0.iter_mut().zip(before).zip(after) {
            *total = match (*total, before, after) {
                (Some(total), Some(before), Some(after)) => {
                    Some(total + after.saturating_sub(before))
                }
                _ => None,
            };
        }
    }

    /// What process `i` spent per request, of `requests`.
    fn per(&self, i: usize, requests: usize) -> Option<Duration> {
        let total = self.0.get(i).copied().flatten()?;
        Some(total / u32::try_from(requests.max(1)).unwrap_or(u32::MAX))
    }
}

pub async fn run(settings: &Settings, file: &Path) -> Result<(), Error> {
    let file: File = serde_json::from_slice(&std::fs::read(file)?)?;
    if file.targets.is_empty() {
        return Err("--compare: the file names no targets".into());
    }
    let mut clients = Vec::new();
    for target in &file.targets {
        clients.push(target.connect(settings.connections).await?);
    }
    let mut figures: Vec<Figures> = file.targets.iter().map(|_| Figures::default()).collect();
    for (target, figures) in file.targets.iter().zip(&mut figures) {
        figures.rss_before = target.rss()?;
    }
    let processes: Vec<Processes> = file
        .targets
        .iter()
        .map(|t| Processes::of(t, &file.watched))
        .collect();
    // Every server and watched process, for `settle`.
    let busy: Vec<u32> = file
        .targets
        .iter()
        .filter_map(|t| t.pid)
        .chain(file.watched.iter().map(|w| w.pid))
        .collect();
    let n = settings.objects;
    let per_round = n.div_ceil(ROUNDS);
    for round in 0..ROUNDS {
        let range = (round * per_round).min(n)..((round + 1) * per_round).min(n);
        let turns = file.targets.iter().zip(&clients).zip(&processes);
        for (((target, client), processes), figures) in turns.zip(&mut figures) {
            let objects = range
                .clone()
                .map(|i| target.object(i))
                .collect::<Result<Vec<_>, Error>>()?;
            let (client, path) = (client.clone(), Arc::<str>::from(target.collection.as_str()));
            let objects = Arc::new(objects);
            settle(&busy, &mut figures.waits).await;
            let creates = drive(objects.len(), settings.concurrency, move |i| {
                let (client, path, objects) = (client.clone(), path.clone(), objects.clone());
                async move { client.create(&path, objects[i].clone()).await.map(drop) }
            });
            let sample = processes.measure(&mut figures.create_cpu, creates).await?;
            figures.creates.push(sample);
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (target, figures) in file.targets.iter().zip(&mut figures) {
        figures.rss_after = target.rss()?;
    }
    let page = |target: &Target| format!("{}?limit=500", target.collection);
    for _ in 0..ROUNDS {
        let turns = file.targets.iter().zip(&clients).zip(&processes);
        for (((target, client), processes), figures) in turns.zip(&mut figures) {
            let collection = target.collection.clone();
            let get = move |i: usize| format!("{collection}/{}", name(spread(i, n)));
            let count = settings.gets / ROUNDS;
            settle(&busy, &mut figures.waits).await;
            let these = gets(client, count, settings.concurrency, get);
            let sample = processes.measure(&mut figures.get_cpu, these).await?;
            figures.gets.push(sample);
            let times = (settings.lists / ROUNDS).max(1);
            figures
                .pages
                .push(lists(client, &page(target), times * 5).await?);
            figures
                .lists
                .push(lists(client, &target.collection, times).await?);
        }
    }
    let (creates, gets): (Vec<Cpu>, Vec<Cpu>) = figures
        .iter_mut()
        .map(|f| {
            (
                std::mem::take(&mut f.create_cpu),
                std::mem::take(&mut f.get_cpu),
            )
        })
        .unzip();
    let waits: Vec<Waits> = figures
        .iter_mut()
        .map(|f| std::mem::take(&mut f.waits))
        .collect();
    print(settings, &file.targets, figures);
    print_cpu(settings, &file, [&creates, &gets]);
    print_waits(&waits);
    Ok(())
}

/// How long the bench waited for quiet before each target's turns, and in how many turns it
/// gave up: a turn that began on a busy machine shared the cores with whatever kept it busy.
fn print_waits(waits: &[Waits]) {
    let mut line = String::from("| waited for quiet before the turns |");
    for w in waits {
        line.push_str(&format!(
            " {:.1} s; {} of {} turns not quiet |",
            w.waited.as_secs_f64(),
            w.loud,
            w.turns
        ));
    }
    line.push_str(&" — |".repeat(waits.len().saturating_sub(1)));
    println!("{line}");
}

/// The CPU time per create and per get of each process, during each target's turns (`cpu`:
/// each target's over its creates, and over its gets).
fn print_cpu(settings: &Settings, file: &File, cpu: [&[Cpu]; 2]) {
    let names = ["server".to_string(), "bench client".to_string()]
        .into_iter()
        .chain(file.watched.iter().map(|w| w.name.clone()));
    let show = |d: Option<Duration>| match d {
        Some(d) => format!(" {:.0} µs |", d.as_secs_f64() * 1e6),
        None => " — |".to_string(),
    };
    let [creates, gets] = cpu;
    let phases = [
        ("create", settings.objects, creates),
        ("get", (settings.gets / ROUNDS) * ROUNDS, gets),
    ];
    // Rows of the same table.
    for (i, process) in names.enumerate() {
        for (verb, requests, targets) in phases {
            let per: Vec<Option<Duration>> = targets.iter().map(|c| c.per(i, requests)).collect();
            let mut line = format!("| {process} CPU per {verb} |");
            per.iter().for_each(|d| line.push_str(&show(*d)));
            let costs: Vec<Option<f64>> = per.iter().map(|d| d.map(|d| d.as_secs_f64())).collect();
            line.push_str(&versus_first(&costs, |factor| format!("{factor:.1}×")));
            println!("{line}");
        }
    }
}

/// A target's creates, gets, first pages and full lists, and its memory before, after and per object.
type Merged = (
    Sample,
    Sample,
    Sample,
    Sample,
    (Option<u64>, Option<u64>, Option<f64>),
);

fn print(settings: &Settings, targets: &[Target], figures: Vec<Figures>) {
    let merged: Vec<Merged> = figures
        .into_iter()
        .map(|f| {
            let per_object = match (f.rss_before, f.rss_after) {
                (Some(before), Some(after)) => {
                    Some(after.saturating_sub(before) as f64 / settings.objects as f64)
                }
                _ => None,
            };
            (
                Sample::merge(f.creates),
                Sample::merge(f.gets),
                Sample::merge(f.pages),
                Sample::merge(f.lists),
                (f.rss_before, f.rss_after, per_object),
            )
        })
        .collect();
    let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    println!(
        "\n### side by side: {} objects, {} in flight over {} HTTP/2 connections\n",
        settings.objects, settings.concurrency, settings.connections
    );
    let mut header = String::from("| figure |");
    let mut rule = String::from("|---|");
    for name in &names {
        header.push_str(&format!(" {name} |"));
        rule.push_str("---:|");
    }
    for name in names.iter().skip(1) {
        header.push_str(&format!(" {} vs {name} |", names[0]));
        rule.push_str("---:|");
    }
    println!("{header}\n{rule}");
    // Each row: every target's figure, shown, and as a cost (lower is better: the seconds
    // a request takes, or one over a rate), which `versus_first` compares.
    let rate = |f: &dyn Fn(&Merged) -> f64| -> Vec<(String, f64)> {
        merged
            .iter()
            .map(|m| (per_second(f(m)), 1.0 / f(m).max(1e-12)))
            .collect()
    };
    let time = |f: &dyn Fn(&Merged) -> Duration| -> Vec<(String, f64)> {
        merged
            .iter()
            .map(|m| (ms(f(m)), f(m).as_secs_f64()))
            .collect()
    };
    let rows = [
        ("create/s", rate(&|m| m.0.per_second())),
        ("create p50", time(&|m| m.0.quantile(0.5))),
        ("get/s", rate(&|m| m.1.per_second())),
        ("get p50", time(&|m| m.1.quantile(0.5))),
        ("get p99", time(&|m| m.1.quantile(0.99))),
        (
            "list first page of limit=500, p50",
            time(&|m| m.2.quantile(0.5)),
        ),
        ("list of all objects, p50", time(&|m| m.3.quantile(0.5))),
    ];
    for (figure, values) in rows {
        let mut line = format!("| {figure} |");
        for (text, _) in &values {
            line.push_str(&format!(" {text} |"));
        }
        let costs: Vec<Option<f64>> = values.iter().map(|(_, cost)| Some(*cost)).collect();
        line.push_str(&versus_first(&costs, |factor| format!("{factor:.1}×")));
        println!("{line}");
    }
    let memory: Vec<_> = merged.iter().map(|m| m.4).collect();
    let show = |bytes: Option<u64>| bytes.map(mib).unwrap_or_else(|| "—".into());
    let mut before = String::from("| RSS before the objects |");
    let mut after = String::from("| RSS after the objects |");
    let mut per = String::from("| RSS per stored object |");
    for (b, a, p) in &memory {
        before.push_str(&format!(" {} |", show(*b)));
        after.push_str(&format!(" {} |", show(*a)));
        per.push_str(&match p {
            Some(p) => format!(" {p:.0} B |"),
            None => " — |".into(),
        });
    }
    let dashes = " — |".repeat(targets.len() - 1);
    before.push_str(&dashes);
    after.push_str(&dashes);
    // Less than a byte an object is taken for one (no growth at all would be no figure).
    let costs: Vec<Option<f64>> = memory
        .iter()
        .map(|(_, _, p)| p.map(|p| p.max(1.0)))
        .collect();
    per.push_str(&versus_first(&costs, |factor| format!("1/{factor:.1}")));
    println!("{before}\n{after}\n{per}");
}

/// The cells comparing the first target with each other: how many times the first's cost
/// (`costs`: a time, CPU, bytes; lower is better) the other's is, written by `show`; `—`
/// where either is unknown. Every figure of the table compares this one way.
fn versus_first(costs: &[Option<f64>], show: impl Fn(f64) -> String) -> String {
    let Some(first) = costs.first() else {
        return String::new();
    };
    costs
        .iter()
        .skip(1)
        .map(|other| match (first, other) {
            (Some(first), Some(other)) => format!(" {} |", show(other / first.max(1e-12))),
            _ => " — |".to_string(),
        })
        .collect()
}
