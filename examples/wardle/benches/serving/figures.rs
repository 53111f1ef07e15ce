//! The measurements turned into table rows: each figure beside its ceiling, with the issue's
//! targets.

use std::time::Duration;

use crate::Settings;
use crate::client::Sample;
use crate::measure::{Ceilings, LIMIT, Memory, Ours};
use crate::report::{Row, mib, ms, per_second, speed_share};
use crate::server::Backend;

const MIB: u64 = 1024 * 1024;

/// The rows of a serving run.
pub fn serving(settings: &Settings, backend: &Backend, ours: &Ours, ceil: &Ceilings) -> Vec<Row> {
    let mut rows = vec![create_row(settings, backend, ours, ceil)];
    if let Some(txns) = &ceil.create_txns {
        let share = ours.creates.per_second() / txns.per_second();
        let label = format!(
            "create/s ({} in flight) vs raw etcd-client create txns",
            settings.concurrency
        );
        rows.push(
            Row::plain(label, per_second(ours.creates.per_second()))
                .ceiling(per_second(txns.per_second()), share),
        );
    }
    rows.extend(latency_rows("get", &ours.gets, &ceil.gets));
    let in_flight = settings.concurrency;
    rows.push(share_row(
        &format!("get/s ({in_flight} in flight)"),
        &ours.gets,
        &ceil.gets,
    ));
    let n = settings.objects;
    let (full, bare_full) = (ours.lists.quantile(0.5), ceil.lists.quantile(0.5));
    let share = speed_share(full, bare_full);
    let fast = full < Duration::from_millis(50);
    rows.push(
        Row::plain(format!("list {n} full, p50"), ms(full))
            .ceiling(ms(bare_full), share)
            .target("≥ 60%, < 50 ms", share >= 0.6 && fast),
    );
    let (walk, bare_walk) = (ours.walks.quantile(0.5), ceil.walks.quantile(0.5));
    let share = speed_share(walk, bare_walk);
    let pages = ours.pages;
    rows.push(
        Row::plain(
            format!("list {n} by limit={LIMIT} ({pages} pages), p50 per walk"),
            ms(walk),
        )
        .ceiling(ms(bare_walk), share)
        .target("≥ 60%", share >= 0.6),
    );
    rows.extend(cpu_rows(ours, ceil));
    rows.extend(fan_out_rows(settings, &ours.fan_out, ""));
    rows.extend(write_rows(settings, ours));
    rows.extend(conversion_rows(settings, ours));
    rows.extend(memory_rows(&ours.memory, ""));
    rows
}

/// Merge patches and server-side applies of the same objects, as writes per second, the
/// apply's as a factor of the patch's.
fn write_rows(settings: &Settings, ours: &Ours) -> Vec<Row> {
    let (patches, applies) = &ours.writes;
    let in_flight = settings.concurrency;
    let factor = patches.per_second() / applies.per_second();
    vec![
        Row::plain(
            format!("merge patch/s ({in_flight} in flight)"),
            per_second(patches.per_second()),
        ),
        Row::plain(
            format!("server-side apply/s ({in_flight} in flight)"),
            per_second(applies.per_second()),
        )
        .compared_to(
            format!("merge patch: {}", per_second(patches.per_second())),
            factor,
        ),
        cpu_per_write("create", ours.stages.cpu[0], ours.creates.len()),
        cpu_per_write("merge patch", ours.stages.cpu[1], patches.len()),
        cpu_per_write("server-side apply", ours.stages.cpu[2], applies.len()),
        ours.stages.creates.row(
            "create: server µs per write by stage",
            ("create", "create"),
            ours.creates.len(),
        ),
        ours.stages.patches.row(
            "merge patch: server µs per write by stage",
            ("patch", "update"),
            patches.len(),
        ),
        ours.stages.applies.row(
            "server-side apply: server µs per write by stage",
            ("apply", "update"),
            applies.len(),
        ),
    ]
}

/// The server's CPU time (all its threads) per write of a run: what a write costs, whatever
/// else the machine runs.
fn cpu_per_write(what: &str, cpu: Duration, writes: usize) -> Row {
    let micros = cpu.as_secs_f64() * 1e6 / writes.max(1) as f64;
    Row::plain(format!("server CPU per {what}"), format!("{micros:.0} µs"))
}

/// Lists and walks in v1beta1 beside the same in v1alpha1 (the stored version), as a factor
/// of its time, and the fan-out to watchers of v1beta1.
fn conversion_rows(settings: &Settings, ours: &Ours) -> Vec<Row> {
    let n = settings.objects;
    let conv = &ours.conversion;
    let compare = |what: String, (alpha, beta): &(Sample, Sample)| {
        let (alpha, beta) = (alpha.quantile(0.5), beta.quantile(0.5));
        let factor = beta.as_secs_f64() / alpha.as_secs_f64();
        Row::plain(what, ms(beta)).compared_to(format!("v1alpha1: {}", ms(alpha)), factor)
    };
    let mut rows = vec![
        compare(
            format!("list {n} full in v1beta1 (converted), p50"),
            &conv.lists,
        ),
        compare(
            format!("list {n} by limit={LIMIT} in v1beta1 (converted), p50 per walk"),
            &conv.walks,
        ),
    ];
    rows.extend(fan_out_rows(
        settings,
        &conv.fan_out,
        " in v1beta1 (converted)",
    ));
    rows
}

/// The servers' own CPU time per get, per full list and per walk (all their threads, from
/// `/proc/<pid>/task/*/schedstat`): what the framework costs, without the client's share.
fn cpu_rows(ours: &Ours, ceil: &Ceilings) -> Vec<Row> {
    let per = |total: Duration, count: usize| total / count.max(1) as u32;
    let kinds = [
        ("get", ours.cpu.gets, ceil.cpu.gets, ours.gets.len()),
        (
            "full list",
            ours.cpu.lists,
            ceil.cpu.lists,
            ours.lists.len(),
        ),
        ("walk", ours.cpu.walks, ceil.cpu.walks, ours.walks.len()),
    ];
    kinds
        .into_iter()
        .map(|(kind, ours_cpu, bare_cpu, count)| {
            let (ours, bare) = (per(ours_cpu, count), per(bare_cpu, count));
            Row::plain(format!("server CPU per {kind}"), micros(ours))
                .ceiling(micros(bare), speed_share(ours, bare))
        })
        .collect()
}

fn micros(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{} µs", d.as_micros())
    } else {
        ms(d)
    }
}

fn create_row(settings: &Settings, backend: &Backend, ours: &Ours, ceil: &Ceilings) -> Row {
    let share = ours.creates.per_second() / ceil.writes.per_second();
    let label = format!(
        "create/s ({} in flight) vs {}",
        settings.concurrency, ceil.writes_label
    );
    let row = Row::plain(label, per_second(ours.creates.per_second()))
        .ceiling(per_second(ceil.writes.per_second()), share);
    match backend {
        Backend::Etcd3(_) => row.target("≥ 70%", share >= 0.7),
        _ => row,
    }
}

impl Memory {
    /// (RSS_N − RSS_idle) / N for the largest N.
    pub fn per_object(&self) -> f64 {
        let (n, rss) = self.at.last().copied().unwrap_or((1, self.idle));
        rss.saturating_sub(self.idle) as f64 / n.max(1) as f64
    }
}

/// RSS idle and with objects, and the cost per object beside one object's JSON size.
pub fn memory_rows(memory: &Memory, label: &str) -> Vec<Row> {
    let idle = memory.idle;
    let mut rows =
        vec![Row::plain(format!("RSS idle{label}"), mib(idle)).target("< 20 MiB", idle < 20 * MIB)];
    for &(n, rss) in &memory.at {
        let row = Row::plain(format!("RSS with {n} Flunders{label}"), mib(rss));
        rows.push(match n {
            10_000 => row.target("< 60 MiB", rss < 60 * MIB),
            _ => row,
        });
    }
    let per = memory.per_object();
    let n = memory.at.last().map_or(0, |a| a.0);
    let json = format!("JSON {:.0} B", memory.json_size);
    rows.push(
        Row::plain(
            format!("RSS per object (N={n}){label}"),
            format!("{per:.0} B"),
        )
        .compared_to(json, per / memory.json_size),
    );
    if let Some((n, reads)) = &memory.reads {
        let per_object = |d: Duration| {
            format!(
                "{} ({:.2} µs/object)",
                ms(d),
                d.as_secs_f64() * 1e6 / *n as f64
            )
        };
        rows.push(Row::plain(
            format!("list of all {n}{label}"),
            per_object(reads.full),
        ));
        rows.push(Row::plain(
            format!("walk of {n} in pages of 500{label}"),
            per_object(reads.walk),
        ));
        let two_seconds = Duration::from_secs(2);
        for (what, took) in [
            ("first page (limit 500)", reads.selector_page),
            ("list", reads.selector_all),
        ] {
            rows.push(
                Row::plain(
                    format!("selector matching none of {n}, {what}{label}"),
                    per_object(took),
                )
                .target("< 2 s", took < two_seconds),
            );
        }
    }
    rows
}

/// What the watch cache costs per object: the per-object RSS with it on minus with it off.
pub fn cache_cost(on: &Memory, off: &Memory) -> Row {
    let cost = on.per_object() - off.per_object();
    let share = cost / on.json_size;
    Row::plain(
        "watch cache cost per object (on − off)",
        format!("{cost:.0} B"),
    )
    .compared_to(format!("JSON {:.0} B", on.json_size), share)
    .target("≤ 1.5× JSON", share <= 1.5)
}

/// p50 and p99 of ours beside the ceiling's; the target is 60% of the ceiling's speed.
fn latency_rows(what: &str, ours: &Sample, ceiling: &Sample) -> Vec<Row> {
    [("p50", 0.5), ("p99", 0.99)]
        .into_iter()
        .map(|(name, q)| {
            let share = speed_share(ours.quantile(q), ceiling.quantile(q));
            Row::plain(format!("{what} {name}"), ms(ours.quantile(q)))
                .ceiling(ms(ceiling.quantile(q)), share)
                .target("≥ 60%", share >= 0.6)
        })
        .collect()
}

/// Throughput of ours beside the ceiling's; the target is 60%.
fn share_row(what: &str, ours: &Sample, ceiling: &Sample) -> Row {
    let share = ours.per_second() / ceiling.per_second();
    Row::plain(what, per_second(ours.per_second()))
        .ceiling(per_second(ceiling.per_second()), share)
        .target("≥ 60%", share >= 0.6)
}

/// The fan-out figures: every watcher's delay (p50, p99) and the slowest write's last one.
fn fan_out_rows(settings: &Settings, fan: &crate::workload::FanOut, label: &str) -> Vec<Row> {
    let what = format!(
        "watch fan-out: {} watchers{label}, write → event",
        settings.watchers
    );
    let worst = if fan.missed > 0 {
        let missed = format!("{} events missing after 30 s", fan.missed);
        Row::plain(format!("{what}, max"), missed).target("< 100 ms", false)
    } else {
        let writes = settings.fan_out_writes;
        Row::plain(
            format!("{what}, max over {writes} writes"),
            ms(fan.worst_write),
        )
        .target("< 100 ms", fan.worst_write < Duration::from_millis(100))
    };
    vec![
        Row::plain(format!("{what}, p50"), ms(fan.delays.quantile(0.5))),
        Row::plain(format!("{what}, p99"), ms(fan.delays.quantile(0.99))),
        worst,
    ]
}
