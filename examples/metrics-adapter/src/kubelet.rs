//! Resource usage from a kubelet's `/metrics/resource`, as metrics-server reads it
//! (`pkg/scraper/client/resource/decode.go`) and turns it into usage (`pkg/storage`): CPU as
//! the rate of the cumulative counter between the last two scrapes, memory as the last
//! working set.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::prometheus::Sample;

/// The kubelet's series metrics-server reads.
const NODE_CPU: &str = "node_cpu_usage_seconds_total";
const NODE_MEMORY: &str = "node_memory_working_set_bytes";
const CONTAINER_CPU: &str = "container_cpu_usage_seconds_total";
const CONTAINER_MEMORY: &str = "container_memory_working_set_bytes";

/// One measurement of a node or a container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Point {
    /// When it was measured (the samples' timestamp; the scrape's time without one).
    pub timestamp: Option<SystemTime>,
    /// CPU used since start, in nanocore-seconds.
    pub cumulative_cpu: u64,
    /// Working set, in bytes.
    pub memory: u64,
}

/// A pod, by namespace and name.
pub type PodKey = (String, String);

/// What one scrape of one kubelet gave.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    /// The node's own usage, when complete.
    pub node: Option<Point>,
    /// Each pod's containers.
    pub pods: BTreeMap<PodKey, BTreeMap<String, Point>>,
}

/// Reads a parsed page as metrics-server's `decodeBatch`: samples without a timestamp take
/// `scraped_at`; a node point without CPU or memory is dropped, and so is a pod any of whose
/// containers lacks either.
pub fn decode(samples: &[Sample], scraped_at: SystemTime) -> Batch {
    let mut node = Point::default();
    let mut pods: BTreeMap<PodKey, BTreeMap<String, Point>> = BTreeMap::new();
    for sample in samples {
        let timestamp = Some(
            sample
                .timestamp_ms
                .and_then(|ms| u64::try_from(ms).ok())
                .map_or(scraped_at, |ms| {
                    SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
                }),
        );
        // The kubelet writes seconds; metrics-server keeps whole nanoseconds.
        let (nanos, bytes) = (
            (sample.value * 1e9).max(0.0) as u64,
            sample.value.max(0.0) as u64,
        );
        let container = || {
            let label = |name: &str| sample.labels.get(name).cloned().unwrap_or_default();
            let pod = (label("namespace"), label("pod"));
            (pod, label("container"))
        };
        match sample.name.as_str() {
            NODE_CPU => {
                node.cumulative_cpu = nanos;
                node.timestamp = timestamp;
            }
            NODE_MEMORY => {
                node.memory = bytes;
                node.timestamp = timestamp;
            }
            CONTAINER_CPU | CONTAINER_MEMORY => {
                let (pod, name) = container();
                let point = pods.entry(pod).or_default().entry(name).or_default();
                if sample.name == CONTAINER_CPU {
                    point.cumulative_cpu = nanos;
                } else {
                    point.memory = bytes;
                }
                point.timestamp = timestamp;
            }
            _ => {}
        }
    }
    let complete = |p: &Point| p.timestamp.is_some() && p.cumulative_cpu != 0 && p.memory != 0;
    pods.retain(|_, containers| !containers.is_empty() && containers.values().all(complete));
    Batch {
        node: complete(&node).then_some(node),
        pods,
    }
}

/// A node's last two batches, from which usage is computed.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// The newest batch.
    pub last: Batch,
    /// For each point of `last`, the one before it, when older (metrics-server's `prev`).
    pub prev: Batch,
}

impl History {
    /// Takes a new batch, keeping for each point the previous one it is newer than (as
    /// metrics-server's `nodeStorage.Store`/`podStorage.Store`).
    pub fn store(&mut self, batch: Batch) {
        let node_prev = batch
            .node
            .and_then(|new| previous(self.last.node.as_ref(), self.prev.node.as_ref(), &new));
        let mut pods_prev: BTreeMap<PodKey, BTreeMap<String, Point>> = BTreeMap::new();
        for (pod, containers) in &batch.pods {
            for (name, new) in containers {
                let last = self.last.pods.get(pod).and_then(|c| c.get(name));
                let prev = self.prev.pods.get(pod).and_then(|c| c.get(name));
                if let Some(p) = previous(last, prev, new) {
                    pods_prev
                        .entry(pod.clone())
                        .or_default()
                        .insert(name.clone(), p);
                }
            }
        }
        self.prev = Batch {
            node: node_prev,
            pods: pods_prev,
        };
        self.last = batch;
    }

    /// The node's usage, once two points are known.
    pub fn node_usage(&self) -> Option<Usage> {
        usage(self.last.node.as_ref()?, self.prev.node.as_ref()?)
    }

    /// A pod's usage per container, once two points of every container are known; its time
    /// is the earliest of the containers' (as metrics-server's `podStorage.GetMetrics`).
    pub fn pod_usage(&self, pod: &PodKey) -> Option<(Vec<(String, Usage)>, Usage)> {
        let last = self.last.pods.get(pod)?;
        let prev = self.prev.pods.get(pod)?;
        let mut containers = Vec::new();
        let mut earliest: Option<Usage> = None;
        for (name, point) in last {
            let usage = usage(point, prev.get(name)?)?;
            if earliest.is_none_or(|e| usage.timestamp < e.timestamp) {
                earliest = Some(usage);
            }
            containers.push((name.clone(), usage));
        }
        Some((containers, earliest?))
    }
}

/// The point to keep before `new`: the last one when `new` is newer, else the kept previous
/// one when still older than `new`.
fn previous(last: Option<&Point>, prev: Option<&Point>, new: &Point) -> Option<Point> {
    match (last, prev) {
        (Some(last), _) if new.timestamp > last.timestamp => Some(*last),
        (_, Some(prev)) if prev.timestamp < new.timestamp => Some(*prev),
        _ => None,
    }
}

/// Usage over a window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Usage {
    /// CPU in nanocores: the counter's rate over the window.
    pub nanocores: u64,
    /// Working set in bytes at the end of the window.
    pub memory: u64,
    /// The end of the window.
    pub timestamp: SystemTime,
    /// The time between the two points.
    pub window: Duration,
}

/// metrics-server's `resourceUsage`: the CPU counter's rate between `prev` and `last`, and
/// `last`'s memory; none when the counter went back (a restart) or no time passed.
pub fn usage(last: &Point, prev: &Point) -> Option<Usage> {
    let (end, start) = (last.timestamp?, prev.timestamp?);
    let window = end.duration_since(start).ok().filter(|w| !w.is_zero())?;
    let used = last.cumulative_cpu.checked_sub(prev.cumulative_cpu)?;
    let nanocores = (used as f64 / window.as_secs_f64()) as u64;
    Some(Usage {
        nanocores,
        memory: last.memory,
        timestamp: end,
        window,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prometheus::parse;

    fn at(ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn page(node_cpu: f64, app_cpu: f64, ts: u64) -> Vec<Sample> {
        parse(&format!(
            "node_cpu_usage_seconds_total {node_cpu} {ts}\n\
             node_memory_working_set_bytes 1048576 {ts}\n\
             container_cpu_usage_seconds_total{{container=\"app\",namespace=\"default\",pod=\"web\"}} {app_cpu} {ts}\n\
             container_memory_working_set_bytes{{container=\"app\",namespace=\"default\",pod=\"web\"}} 2048 {ts}\n\
             container_cpu_usage_seconds_total{{container=\"side\",namespace=\"default\",pod=\"half\"}} 1 {ts}\n"
        ))
        .unwrap()
    }

    #[test]
    fn decodes_as_metrics_server_and_drops_incomplete_pods() {
        let batch = decode(&page(10.0, 2.0, 1_000), at(5));
        let node = batch.node.unwrap();
        assert_eq!(node.cumulative_cpu, 10_000_000_000);
        assert_eq!(node.memory, 1_048_576);
        assert_eq!(node.timestamp, Some(at(1_000)));
        let key = ("default".to_string(), "web".to_string());
        assert_eq!(batch.pods[&key]["app"].memory, 2048);
        // `half` has CPU but no memory: dropped as metrics-server drops it.
        assert_eq!(batch.pods.len(), 1);
        // Without timestamps the scrape's time stands.
        let untimed = parse("node_cpu_usage_seconds_total 1\nnode_memory_working_set_bytes 1\n");
        assert_eq!(
            decode(&untimed.unwrap(), at(7)).node.unwrap().timestamp,
            Some(at(7))
        );
    }

    #[test]
    fn cpu_is_the_rate_between_the_last_two_points() {
        let mut history = History::default();
        history.store(decode(&page(10.0, 2.0, 10_000), at(0)));
        assert_eq!(history.node_usage(), None, "one point is no rate");
        // 1.5 core-seconds in 3 s on the node, 0.75 in 3 s in the container.
        history.store(decode(&page(11.5, 2.75, 13_000), at(0)));
        let node = history.node_usage().unwrap();
        assert_eq!(node.nanocores, 500_000_000);
        assert_eq!(node.window, Duration::from_secs(3));
        assert_eq!(node.timestamp, at(13_000));
        assert_eq!(node.memory, 1_048_576);
        let key = ("default".to_string(), "web".to_string());
        let (containers, pod) = history.pod_usage(&key).unwrap();
        assert_eq!(containers[0].0, "app");
        assert_eq!(containers[0].1.nanocores, 250_000_000);
        assert_eq!(pod.window, Duration::from_secs(3));
        // The same page again (nothing newer): the previous point is kept.
        history.store(decode(&page(11.5, 2.75, 13_000), at(0)));
        assert_eq!(history.node_usage().unwrap().nanocores, 500_000_000);
        // A restart (counter back to less): no usage until two new points.
        history.store(decode(&page(1.0, 0.5, 16_000), at(0)));
        assert_eq!(history.node_usage(), None);
        history.store(decode(&page(2.0, 0.5, 18_000), at(0)));
        assert_eq!(history.node_usage().unwrap().nanocores, 500_000_000);
    }
}
