//! The results table: each figure beside its ceiling, the ratio, the target and whether it is
//! met, printed as Markdown so a run can be pasted into `book/src/benchmarks.md`.

use std::time::Duration;

/// One line of the table.
pub struct Row {
    figure: String,
    ours: String,
    ceiling: String,
    ratio: String,
    target: String,
    met: Option<bool>,
}

impl Row {
    /// A figure with no ceiling and no target.
    pub fn plain(figure: impl Into<String>, ours: impl Into<String>) -> Self {
        Self {
            figure: figure.into(),
            ours: ours.into(),
            ceiling: "—".into(),
            ratio: "—".into(),
            target: "—".into(),
            met: None,
        }
    }

    /// Sets the ceiling and the ratio (the share of the ceiling reached, 1.0 = at the ceiling).
    pub fn ceiling(mut self, ceiling: impl Into<String>, ratio: f64) -> Self {
        self.ceiling = ceiling.into();
        self.ratio = format!("{:.0}%", ratio * 100.0);
        self
    }

    /// Sets a ceiling that is a size to compare with, and `ours / ceiling` as a factor.
    pub fn compared_to(mut self, other: impl Into<String>, factor: f64) -> Self {
        self.ceiling = other.into();
        self.ratio = format!("{factor:.2}×");
        self
    }

    /// Sets the target and whether it is met.
    pub fn target(mut self, target: impl Into<String>, met: bool) -> Self {
        self.target = target.into();
        self.met = Some(met);
        self
    }
}

/// Prints a titled table.
pub fn print(title: &str, rows: &[Row]) {
    println!("\n### {title}\n");
    println!("| figure | ours | ceiling | ratio | target | met? |");
    println!("|---|---:|---:|---:|---|---|");
    for row in rows {
        let met = match row.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "—",
        };
        println!(
            "| {} | {} | {} | {} | {} | {met} |",
            row.figure, row.ours, row.ceiling, row.ratio, row.target
        );
    }
}

/// A duration in milliseconds.
pub fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

/// A rate per second.
pub fn per_second(rate: f64) -> String {
    format!("{rate:.0}/s")
}

/// A size in MiB.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// `b / a` for durations: how much of the ceiling's speed a latency reaches.
pub fn speed_share(ours: Duration, ceiling: Duration) -> f64 {
    ceiling.as_secs_f64() / ours.as_secs_f64().max(1e-9)
}
