//! What each stage of a write costs: `apiserver_write_stage_duration_seconds` by verb and
//! stage. kube-apiserver times these steps with trace spans (`utiltrace` in its create,
//! update and patch handlers); here they are a histogram too, so that the cost of a stage per
//! write is `_sum / _count` of its series (the serving bench prints it so).
//!
//! The handles are made once: recording a stage costs a clock read and an atomic add or
//! two, not a label lookup.

use std::sync::OnceLock;
use std::time::Instant;

use prometheus::Histogram;

/// The write a stage belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteVerb {
    /// A POST of a new object.
    Create,
    /// A PUT.
    Update,
    /// A JSON, merge or strategic merge patch.
    Patch,
    /// A server-side apply.
    Apply,
}

impl WriteVerb {
    const ALL: [WriteVerb; 4] = [Self::Create, Self::Update, Self::Patch, Self::Apply];

    /// The `verb` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Apply => "apply",
        }
    }
}

/// A stage of a write, in the order a create passes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteStage {
    /// The body read into JSON, and JSON into the type.
    Decode,
    /// A patch applied to the stored object (patch), the configuration merged (apply).
    Patch,
    /// `managedFields` computed.
    FieldManager,
    /// The mutating and validating admission plugins.
    Admission,
    /// Defaults, the type's strategy, metadata and schema validation.
    Strategy,
    /// The object encoded for storage and for the response.
    Encode,
    /// The storage backend's write.
    Store,
    /// The written object put in the watch cache and sent to its watchers.
    WatchCache,
}

impl WriteStage {
    const ALL: [WriteStage; 8] = [
        Self::Decode,
        Self::Patch,
        Self::FieldManager,
        Self::Admission,
        Self::Strategy,
        Self::Encode,
        Self::Store,
        Self::WatchCache,
    ];

    /// The `stage` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Decode => "decode",
            Self::Patch => "patch",
            Self::FieldManager => "field_manager",
            Self::Admission => "admission",
            Self::Strategy => "strategy",
            Self::Encode => "encode",
            Self::Store => "store",
            Self::WatchCache => "watch_cache",
        }
    }
}

/// The metric's name.
pub const NAME: &str = "apiserver_write_stage_duration_seconds";

/// The metric's help.
pub(super) const HELP: &str = "Time spent in each stage of a create, update, patch or apply \
    (decode, patch, field_manager, admission, strategy, encode, store, watch_cache), in seconds.";

/// Its buckets: 1 µs to about a quarter of a second.
pub(super) fn buckets() -> Result<Vec<f64>, prometheus::Error> {
    prometheus::exponential_buckets(1e-6, 4.0, 10)
}

fn handles() -> &'static [Histogram] {
    static HANDLES: OnceLock<Vec<Histogram>> = OnceLock::new();
    HANDLES.get_or_init(|| {
        let vec = &super::global().write_stages;
        WriteVerb::ALL
            .iter()
            .flat_map(|verb| {
                WriteStage::ALL
                    .iter()
                    .map(|stage| vec.with_label_values(&[verb.as_str(), stage.as_str()]))
            })
            .collect()
    })
}

/// Records that `stage` of a `verb` took the time since `started`, and returns now, when
/// the next stage starts.
///
/// ```
/// use extension_apiserver_machinery::metrics::{WriteStage, WriteVerb, write_stage};
/// let started = std::time::Instant::now();
/// let next = write_stage(WriteVerb::Create, WriteStage::Decode, started);
/// assert!(next >= started);
/// ```
pub fn write_stage(verb: WriteVerb, stage: WriteStage, started: Instant) -> Instant {
    let now = Instant::now();
    let index = verb as usize * WriteStage::ALL.len() + stage as usize;
    handles()[index].observe((now - started).as_secs_f64());
    now
}
