//! The level of the child spans of a request (`authentication`, `authorization`,
//! `admission`, `storage`): `debug` for logs, `info` while spans are exported
//! (`--tracing-config-file`), so that the default log filter (`info`) lets the exporter see
//! them without turning on debug logs.

use std::sync::atomic::{AtomicBool, Ordering};

static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported now.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Spans are exported from now on, or no longer.
pub fn set_exporting(on: bool) {
    EXPORTING.store(on, Ordering::Relaxed);
}

/// A child span of the request: `info` while exporting, `debug` otherwise.
#[macro_export]
macro_rules! child_span {
    ($($args:tt)*) => {
        if $crate::spans::exporting() {
            ::tracing::info_span!($($args)*)
        } else {
            ::tracing::debug_span!($($args)*)
        }
    };
}

pub use child_span;
