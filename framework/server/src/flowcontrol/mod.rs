//! API Priority and Fairness, as `k8s.io/apiserver`'s `util/flowcontrol` runs it for extension
//! servers: the cluster's FlowSchemas and PriorityLevelConfigurations
//! (`flowcontrol.apiserver.k8s.io/v1`) are followed from the core kube-apiserver; each request
//! is classified by the first FlowSchema (by `matchingPrecedence`, then name) whose rules
//! match it into a priority level and a flow (the schema and the user or namespace its
//! distinguisher names); a Limited level's seats are dispatched fairly across its queues by
//! virtual time in seat-seconds, measured from how long requests really run, a flow's requests
//! shuffle-sharded to a hand of them; an Exempt level's requests are never queued nor limited.
//! Each level's nominal seats (the server's concurrency limit, split by
//! `nominalConcurrencyShares`) are lent and borrowed between levels by their seat demand every
//! [`BORROWING_ADJUSTMENT_PERIOD`], within `lendablePercent` and `borrowingLimitPercent`.
//! Until the configuration is first synced, the mandatory objects (`exempt`,
//! `catch-all`) are the configuration, as in kube-apiserver.
//!
//! What is simpler than kube: mutating requests take one seat (kube adds seats for the
//! watchers an event reaches); see the book's chapter *Priority and fairness*.
//!
//! The HTTP filter that runs it is `filters::priority_and_fairness`; this module knows nothing
//! of HTTP.

mod allocation;
pub mod bootstrap;
mod borrowing;
mod demand;
mod queueset;
mod retry_after;
mod rules;
mod seat_seconds;
pub mod width;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::flowcontrol::v1 as fc;
use kube::runtime::watcher;
use sha2::{Digest as _, Sha256};

use crate::auth::user::UserInfo;
use crate::core_api;
use crate::lifecycle::ShutdownSignal;
pub use borrowing::{BORROWING_ADJUSTMENT_PERIOD, SeatLimits};
use queueset::{Kind, Labels, Level};
pub use queueset::{Rejection, Seat};

/// What classification reads of a request.
#[derive(Debug, Clone, Copy)]
pub struct RequestDigest<'a> {
    /// Who asks.
    pub user: &'a UserInfo,
    /// kube's verb (`get`, `list`, `watch`, `create`, …; for a non-resource request the
    /// lower-case HTTP method).
    pub verb: &'a str,
    /// The URL path.
    pub path: &'a str,
    /// What a resource request names; `None` for a non-resource request.
    pub resource: Option<ResourceTarget<'a>>,
}

/// The resource a request names.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResourceTarget<'a> {
    /// The API group (`""` for the core group).
    pub api_group: &'a str,
    /// The resource's plural.
    pub resource: &'a str,
    /// The subresource, or `""`.
    pub subresource: &'a str,
    /// The namespace, or `""` for a cluster-scoped request.
    pub namespace: &'a str,
}

/// Where a request was classified.
#[derive(Debug, Clone)]
pub struct Classification {
    schema: Arc<Schema>,
    flow: u64,
}

impl Classification {
    /// The matching FlowSchema's name.
    pub fn flow_schema(&self) -> &str {
        &self.schema.name
    }

    /// Its UID (`X-Kubernetes-PF-FlowSchema-UID`).
    pub fn flow_schema_uid(&self) -> &str {
        &self.schema.uid
    }

    /// The priority level's name.
    pub fn priority_level(&self) -> &str {
        &self.schema.level.name
    }

    /// Its UID (`X-Kubernetes-PF-PriorityLevel-UID`).
    pub fn priority_level_uid(&self) -> &str {
        &self.schema.level.uid
    }

    /// The schema's and the level's UIDs, shared: what each response's
    /// `X-Kubernetes-PF-*` headers are made of without a copy.
    pub(crate) fn shared_uids(&self) -> &[bytes::Bytes; 2] {
        &self.schema.shared_uids
    }

    /// The seconds a client refused at this level should wait before it tries again (kube's
    /// dropped-requests tracker: 1, growing to at most 32 while the level keeps refusing).
    pub fn retry_after(&self) -> u32 {
        u32::try_from(self.schema.level.retry_after()).unwrap_or(1)
    }

    /// Whether the level is Exempt: requests are neither queued nor limited.
    pub fn exempt(&self) -> bool {
        self.schema.level.kind == Kind::Exempt
    }

    /// The most seats one request of the level may take (kube's per-level `MaxSeats`).
    pub fn max_seats(&self) -> u32 {
        let hand = match self.schema.level.kind {
            Kind::Queue { hand_size, .. } => Some(hand_size),
            _ => None,
        };
        width::max_seats(self.schema.level.limits().nominal, hand)
    }
}

/// One FlowSchema, resolved against the levels.
#[derive(Debug)]
struct Schema {
    name: String,
    uid: String,
    precedence: i32,
    distinguisher: Distinguisher,
    rules: Vec<fc::PolicyRulesWithSubjects>,
    level: Arc<Level>,
    labels: Labels,
    /// `uid` and the level's, made once a configuration rather than once a request.
    shared_uids: [bytes::Bytes; 2],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Distinguisher {
    None,
    ByUser,
    ByNamespace,
}

/// The configuration in force: schemas in matching order, and the levels by name.
#[derive(Debug)]
struct Config {
    schemas: Vec<Arc<Schema>>,
    levels: BTreeMap<String, Arc<Level>>,
}

/// The engine: the configuration and every level's seats and queues.
///
/// ```
/// # async fn run() {
/// use std::time::{Duration, Instant};
/// use extension_apiserver::auth::user::UserInfo;
/// use extension_apiserver::flowcontrol::{FlowControl, RequestDigest, ResourceTarget};
///
/// // Not following a cluster: the mandatory configuration, every seat catch-all's.
/// let engine = FlowControl::new(600);
/// let alice = UserInfo::new("alice", []).with_authenticated_group();
/// let digest = RequestDigest {
///     user: &alice,
///     verb: "list",
///     path: "/apis/example.com/v1/widgets",
///     resource: Some(ResourceTarget {
///         api_group: "example.com",
///         resource: "widgets",
///         ..ResourceTarget::default()
///     }),
/// };
/// let classification = engine.classify(&digest);
/// assert_eq!(classification.priority_level(), "catch-all");
/// let seat = engine.admit(&classification, 1, Duration::from_secs(15)).await.unwrap();
/// // The request runs while `seat` is held.
/// drop(seat);
/// # }
/// ```
#[derive(Debug)]
pub struct FlowControl {
    server_concurrency: u32,
    config: RwLock<Arc<Config>>,
    /// The cluster's objects as last seen; `None` until each first list.
    seen: Mutex<Seen>,
    /// Held while the levels' limits are recomputed (a new configuration, or borrowing).
    adjusting: Mutex<()>,
}

#[derive(Debug, Default)]
struct Seen {
    schemas: Option<Vec<fc::FlowSchema>>,
    levels: Option<Vec<fc::PriorityLevelConfiguration>>,
}

impl FlowControl {
    /// An engine with `server_concurrency` seats in all (kube's extension servers: the sum of
    /// `--max-requests-inflight` and `--max-mutating-requests-inflight`) and the mandatory
    /// configuration.
    pub fn new(server_concurrency: u32) -> Arc<Self> {
        let config = build(server_concurrency, Vec::new(), Vec::new(), &BTreeMap::new());
        borrowing::adjust(&config.levels, Instant::now());
        Arc::new(Self {
            server_concurrency,
            config: RwLock::new(Arc::new(config)),
            seen: Mutex::default(),
            adjusting: Mutex::default(),
        })
    }

    /// An engine following the FlowSchemas and PriorityLevelConfigurations behind `client`
    /// until `shutdown`.
    pub fn follow(
        client: kube::Client,
        server_concurrency: u32,
        shutdown: ShutdownSignal,
    ) -> Arc<Self> {
        let engine = Self::new(server_concurrency);
        let weak = Arc::downgrade(&engine);
        core_api::follow(
            kube::Api::<fc::FlowSchema>::all(client.clone()),
            watcher::Config::default(),
            "flowschemas".into(),
            shutdown.clone(),
            move |store| {
                if let Some(engine) = weak.upgrade() {
                    let seen = store.state().iter().map(|s| (**s).clone()).collect();
                    engine.seen().schemas = Some(seen);
                    engine.reconfigure();
                }
            },
        );
        let weak = Arc::downgrade(&engine);
        core_api::follow(
            kube::Api::<fc::PriorityLevelConfiguration>::all(client),
            watcher::Config::default(),
            "prioritylevelconfigurations".into(),
            shutdown.clone(),
            move |store| {
                if let Some(engine) = weak.upgrade() {
                    let seen = store.state().iter().map(|l| (**l).clone()).collect();
                    engine.seen().levels = Some(seen);
                    engine.reconfigure();
                }
            },
        );
        engine.adjust_borrowing_every(BORROWING_ADJUSTMENT_PERIOD, shutdown);
        engine
    }

    /// Adjusts the levels' seats by their demand every `period` until `shutdown` (kube's
    /// `updateBorrowing` every 10 s: [`BORROWING_ADJUSTMENT_PERIOD`]), while the engine lives.
    pub fn adjust_borrowing_every(self: &Arc<Self>, period: Duration, shutdown: ShutdownSignal) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                tokio::select! {
                    _ = ticks.tick() => {}
                    _ = shutdown.cancelled() => return,
                }
                let Some(engine) = weak.upgrade() else {
                    return;
                };
                engine.adjust_borrowing();
            }
        });
    }

    /// Recomputes every level's current seats from the seat demand it had since the last
    /// adjustment (kube's `updateBorrowing`): levels lend what they did not need, within
    /// their `lendablePercent`, to levels that needed more, within their
    /// `borrowingLimitPercent`; waiting requests that now fit are dispatched.
    pub fn adjust_borrowing(&self) {
        let _adjusting = self
            .adjusting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        borrowing::adjust(&self.current().levels, Instant::now());
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the cluster's configuration is in force (both first lists arrived).
    pub fn synced(&self) -> bool {
        let seen = self.seen();
        seen.schemas.is_some() && seen.levels.is_some()
    }

    /// Builds the configuration from what was seen, keeping the levels whose kind is
    /// unchanged (their executing and waiting requests with them).
    fn reconfigure(&self) {
        let (schemas, levels) = {
            let seen = self.seen();
            match (&seen.schemas, &seen.levels) {
                (Some(s), Some(l)) => (s.clone(), l.clone()),
                _ => return,
            }
        };
        let _adjusting = self
            .adjusting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let fresh = {
            let mut config = self.config.write().unwrap_or_else(PoisonError::into_inner);
            let fresh = Arc::new(build(
                self.server_concurrency,
                schemas,
                levels,
                &config.levels,
            ));
            *config = fresh.clone();
            fresh
        };
        // kube recomputes the current limits with every new configuration too.
        borrowing::adjust(&fresh.levels, Instant::now());
    }

    fn current(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The first schema matching `digest`; `catch-all` when none does.
    pub fn classify(&self, digest: &RequestDigest<'_>) -> Classification {
        let config = self.current();
        let schema = config
            .schemas
            .iter()
            .find(|s| rules::matches(&s.rules, digest))
            .or_else(|| config.schemas.iter().find(|s| s.name == "catch-all"))
            .or_else(|| config.schemas.last())
            .expect("the mandatory schemas are always configured")
            .clone();
        let distinguisher = match (schema.distinguisher, &digest.resource) {
            (Distinguisher::ByUser, _) => digest.user.name.as_str(),
            (Distinguisher::ByNamespace, Some(target)) => target.namespace,
            _ => "",
        };
        let flow = hash_flow(&schema.name, distinguisher);
        Classification { schema, flow }
    }

    /// Seats for a classified request of `width` seats, after waiting in its queue at most
    /// `wait`; or why not.
    pub async fn admit(
        &self,
        classification: &Classification,
        width: u32,
        wait: Duration,
    ) -> Result<Seat, Rejection> {
        let schema = &classification.schema;
        schema
            .level
            .admit(classification.flow, width, wait, schema.labels.clone())
            .await
    }

    /// The seats of each priority level, by name.
    pub fn limits(&self) -> BTreeMap<String, SeatLimits> {
        let config = self.current();
        let levels = config.levels.iter();
        levels.map(|(name, l)| (name.clone(), l.limits())).collect()
    }
}

/// kube's `hashFlowID`: the first 8 bytes (little-endian) of the SHA-256 of the schema's name,
/// a zero byte and the distinguisher.
fn hash_flow(schema: &str, distinguisher: &str) -> u64 {
    let mut hash = Sha256::new();
    hash.update(schema.as_bytes());
    hash.update([0]);
    hash.update(distinguisher.as_bytes());
    let sum = hash.finalize();
    let mut first = [0; 8];
    first.copy_from_slice(&sum[..8]);
    u64::from_le_bytes(first)
}

/// `nominalConcurrencyShares` (kube's defaults: 30 for Limited, 0 for Exempt).
fn shares(spec: &fc::PriorityLevelConfigurationSpec) -> u64 {
    let shares = match spec.type_.as_str() {
        "Exempt" => spec
            .exempt
            .as_ref()
            .and_then(|e| e.nominal_concurrency_shares),
        _ => Some(
            spec.limited
                .as_ref()
                .and_then(|l| l.nominal_concurrency_shares)
                .unwrap_or(30),
        ),
    };
    u64::try_from(shares.unwrap_or(0)).unwrap_or(0)
}

/// `lendablePercent` and `borrowingLimitPercent` (an Exempt level has no borrowing limit), as
/// kube's `plSpecCommons`.
fn lending(spec: &fc::PriorityLevelConfigurationSpec) -> (Option<i32>, Option<i32>) {
    match (&spec.limited, &spec.exempt) {
        (Some(limited), _) => (limited.lendable_percent, limited.borrowing_limit_percent),
        (None, Some(exempt)) => (exempt.lendable_percent, None),
        (None, None) => (None, None),
    }
}

/// How a level limits; kube's defaults for queuing: 64 queues, hands of 8, 50 a queue.
fn kind(spec: &fc::PriorityLevelConfigurationSpec) -> Kind {
    if spec.type_ == "Exempt" {
        return Kind::Exempt;
    }
    let response = spec
        .limited
        .as_ref()
        .and_then(|l| l.limit_response.as_ref());
    match response {
        Some(r) if r.type_ == "Reject" => Kind::Reject,
        _ => {
            let queuing = response.and_then(|r| r.queuing.as_ref());
            let get = |f: fn(&fc::QueuingConfiguration) -> Option<i32>, default: i32| {
                let value = queuing.and_then(f).unwrap_or(default);
                usize::try_from(value).unwrap_or(0).max(1)
            };
            let queues = get(|q| q.queues, 64);
            Kind::Queue {
                queues,
                hand_size: get(|q| q.hand_size, 8).min(queues),
                queue_length_limit: get(|q| q.queue_length_limit, 50),
            }
        }
    }
}

/// The configuration of `schemas` and `levels` (each completed with the mandatory objects
/// it lacks, as kube's controller does), reusing `previous` levels of the same name, UID and
/// kind.
fn build(
    server_concurrency: u32,
    mut schemas: Vec<fc::FlowSchema>,
    mut levels: Vec<fc::PriorityLevelConfiguration>,
    previous: &BTreeMap<String, Arc<Level>>,
) -> Config {
    for mandatory in bootstrap::mandatory_priority_levels() {
        if !levels
            .iter()
            .any(|l| l.metadata.name == mandatory.metadata.name)
        {
            levels.push(mandatory);
        }
    }
    for mandatory in bootstrap::mandatory_flow_schemas() {
        if !schemas
            .iter()
            .any(|s| s.metadata.name == mandatory.metadata.name)
        {
            schemas.push(mandatory);
        }
    }
    let specs: Vec<(String, String, fc::PriorityLevelConfigurationSpec)> = levels
        .into_iter()
        .filter_map(|l| {
            let name = l.metadata.name?;
            Some((name, l.metadata.uid.unwrap_or_default(), l.spec?))
        })
        .collect();
    let share_sum: u64 = specs.iter().map(|(_, _, spec)| shares(spec)).sum();
    let mut built = BTreeMap::new();
    for (name, uid, spec) in specs {
        let kind = kind(&spec);
        // kube's nominal concurrency limit: ceil(server limit × shares / sum of shares).
        let nominal = (u64::from(server_concurrency) * shares(&spec)).div_ceil(share_sum.max(1));
        let nominal = u32::try_from(nominal).unwrap_or(u32::MAX);
        let (lendable, borrowing) = lending(&spec);
        let limits = SeatLimits::new(nominal, lendable, borrowing, server_concurrency);
        let level = match previous.get(&name) {
            Some(known) if known.uid == uid && known.kind == kind => {
                known.configure(limits);
                known.clone()
            }
            _ => Level::new(&name, &uid, kind, limits),
        };
        borrowing::note_configuration(&name, &limits);
        built.insert(name, level);
    }
    let mut resolved: Vec<Arc<Schema>> = schemas
        .into_iter()
        .filter_map(|s| {
            let spec = s.spec?;
            // A schema naming no known level is dangling and ignored, as in kube.
            let level = built.get(&spec.priority_level_configuration.name)?.clone();
            let name = s.metadata.name?;
            let distinguisher = match spec.distinguisher_method.map(|d| d.type_).as_deref() {
                Some("ByUser") => Distinguisher::ByUser,
                Some("ByNamespace") => Distinguisher::ByNamespace,
                _ => Distinguisher::None,
            };
            let uid = s.metadata.uid.unwrap_or_default();
            Some(Arc::new(Schema {
                labels: Labels::new(&name, &level.name),
                shared_uids: [
                    bytes::Bytes::from(uid.clone()),
                    bytes::Bytes::from(level.uid.clone()),
                ],
                uid,
                precedence: spec.matching_precedence.unwrap_or(1000),
                distinguisher,
                rules: spec.rules.unwrap_or_default(),
                level,
                name,
            }))
        })
        .collect();
    resolved.sort_by(|a, b| (a.precedence, &a.name).cmp(&(b.precedence, &b.name)));
    Config {
        schemas: resolved,
        levels: built,
    }
}

#[cfg(test)]
mod tests;
