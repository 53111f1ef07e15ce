//! What each stage of a write cost the server, from its `/metrics`
//! (`apiserver_write_stage_duration_seconds`, by verb and stage): scraped before and after
//! a run of writes, the difference of each series' sum over its count is the stage's time
//! per write.

use std::collections::BTreeMap;

use crate::client::{Client, Error};
use crate::report::Row;

const METRIC: &str = "apiserver_write_stage_duration_seconds";

/// The stages in the order a write passes them, as the server names them.
const STAGES: [&str; 8] = [
    "decode",
    "patch",
    "field_manager",
    "admission",
    "strategy",
    "encode",
    "store",
    "watch_cache",
];

/// Sum (seconds) and count of each (verb, stage) series.
#[derive(Clone, Debug, Default)]
pub struct Stages(BTreeMap<(String, String), (f64, f64)>);

impl Stages {
    /// The server's stage series now; empty when it has none (an older server).
    pub async fn scrape(client: &Client) -> Result<Self, Error> {
        let text = client.get("/metrics").await?;
        Ok(Self::parse(&String::from_utf8_lossy(&text)))
    }

    fn parse(text: &str) -> Self {
        let mut series = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(METRIC) else {
                continue;
            };
            let (field, rest) = match rest {
                r if r.starts_with("_sum{") => (0, &r[4..]),
                r if r.starts_with("_count{") => (1, &r[6..]),
                _ => continue,
            };
            let Some((labels, value)) = rest.rsplit_once(' ') else {
                continue;
            };
            let label = |name: &str| {
                let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
                let len = labels[start..].find('"')?;
                Some(labels[start..start + len].to_string())
            };
            let (Some(verb), Some(stage), Ok(value)) =
                (label("verb"), label("stage"), value.parse::<f64>())
            else {
                continue;
            };
            let entry: &mut (f64, f64) = series.entry((verb, stage)).or_default();
            if field == 0 {
                entry.0 = value;
            } else {
                entry.1 = value;
            }
        }
        Self(series)
    }

    /// What was recorded between `before` and `self`.
    pub fn since(&self, before: &Stages) -> Stages {
        let delta = self.0.iter().map(|(key, (sum, count))| {
            let (sum0, count0) = before.0.get(key).copied().unwrap_or_default();
            (key.clone(), (sum - sum0, count - count0))
        });
        Stages(delta.collect())
    }

    /// Microseconds per write of `stage` of `verb`, over `writes` writes; `None` when the
    /// stage was not recorded.
    fn micros(&self, verb: &str, stage: &str, writes: usize) -> Option<f64> {
        let (sum, count) = self.0.get(&(verb.to_string(), stage.to_string()))?;
        (*count > 0.0).then(|| sum * 1e6 / writes.max(1) as f64)
    }

    /// One row: each stage's µs per write of `verb` over `writes` writes (a stage run twice
    /// in a write, e.g. a decode of the body and of the stored object, counts both), the
    /// watch cache's as `cache_verb` (it knows creates from updates only).
    pub fn row(&self, label: &str, (verb, cache_verb): (&str, &str), writes: usize) -> Row {
        let mut total = 0.0;
        let parts: Vec<String> = STAGES
            .iter()
            .filter_map(|stage| {
                let verb = if *stage == "watch_cache" {
                    cache_verb
                } else {
                    verb
                };
                let micros = self.micros(verb, stage, writes)?;
                total += micros;
                Some(format!("{} {micros:.1}", stage.replace('_', " ")))
            })
            .collect();
        if parts.is_empty() {
            return Row::plain(label, "not recorded (a server without the stage metric)");
        }
        Row::plain(label, format!("{total:.1} µs: {}", parts.join(" · ")))
    }
}
