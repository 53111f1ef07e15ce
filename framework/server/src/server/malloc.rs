//! Allocator tuning for a long-running server process (glibc only).
//!
//! glibc's malloc gives each thread that meets contention an arena of its own (up to 8 per
//! core), and memory freed in one arena is not reused by another: a server whose requests hop
//! between tokio's worker threads keeps growing. A couple of arenas cost no measurable speed
//! here and keep the resident size per stored object near the object's own size
//! (`book/src/benchmarks.md`).
//!
//! Fast bins are off as well: with few arenas shared by every thread, each allocation past
//! the small sizes (a write's object encoded, a response) first merged every fast-bin chunk
//! back into the heap (`malloc_consolidate` in a profile of creates). Without them small
//! chunks still come from the per-thread cache; measured, a create costs a few percent less
//! CPU, patches and applies the same.
//!
//! A binary that makes another allocator its `#[global_allocator]` (wardle's feature
//! `mimalloc`) still gets these settings: they then tune only what C code (SQLite) allocates
//! through malloc, and cost nothing.

/// Arenas [`APIServer::run`](super::APIServer::run) allows unless told otherwise.
pub const DEFAULT_MALLOC_ARENA_MAX: u32 = 2;

/// Caps glibc's malloc arenas at `max`, unless `MALLOC_ARENA_MAX` is set in the environment
/// (the operator's word wins). Arenas already made stay; the cap holds for new ones, so call
/// it before the server's threads get busy. Does nothing where the allocator is not glibc's.
pub(crate) fn limit_arenas(max: u32) {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        set_arena_max(max);
    }
    // The operator's tunables win here too.
    if std::env::var_os("GLIBC_TUNABLES").is_none() {
        disable_fast_bins();
    }
}

/// `M_ARENA_MAX` of glibc's `<malloc.h>`.
const M_ARENA_MAX: i32 = -8;
/// `M_MXFAST` of glibc's `<malloc.h>`: the largest fast-bin chunk, 0 for none.
const M_MXFAST: i32 = 1;

fn set_arena_max(max: u32) {
    set(M_ARENA_MAX, i32::try_from(max).unwrap_or(i32::MAX));
}

fn disable_fast_bins() {
    set(M_MXFAST, 0);
}

/// glibc's `mallopt(param, value)`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set(param: i32, value: i32) {
    unsafe extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    // SAFETY: mallopt only changes malloc's tuning parameters; glibc takes its own lock for
    // that, so calling it while other threads allocate is allowed.
    unsafe {
        mallopt(param, value);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set(_param: i32, _value: i32) {}
