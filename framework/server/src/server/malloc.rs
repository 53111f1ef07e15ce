//! Allocator tuning for a long-running server process (glibc only).
//!
//! glibc's malloc gives each thread that meets contention an arena of its own (up to 8 per
//! core), and memory freed in one arena is not reused by another: a server whose requests hop
//! between tokio's worker threads keeps growing. A couple of arenas cost no measurable speed
//! here and keep the resident size per stored object near the object's own size
//! (`book/src/benchmarks.md`). One arena would hold less still (15–75 B per cached object
//! at 10,000 on etcd3), but every thread then takes the one arena's lock for each allocation:
//! on two cores it doubled the CPU of a create, a patch and an apply on the memory backend,
//! so the default stays two.
//!
//! The default cap is set as the process starts, before `main` (an ELF constructor): glibc
//! gives every thread that allocates before a cap an arena of its own for good, and the
//! runtime's threads (started by `#[tokio::main]` before
//! [`APIServer::run`](super::APIServer::run) is reached) made one or two arenas beyond it, a
//! different number from run to run.
//!
//! Fast bins are off as well: with few arenas shared by every thread, each allocation past
//! the small sizes (a write's object encoded, a response) first merged every fast-bin chunk
//! back into the heap (`malloc_consolidate` in a profile of creates). Without them small
//! chunks still come from the per-thread cache; measured, a create costs a few percent less
//! CPU, patches and applies the same.
//!
//! Memory freed after a burst of requests goes back to the system once the server is quiet
//! (`malloc_trim`, at the first quarter second with little CPU used after some work): glibc
//! returns only the top of a heap by itself, so the pages a load
//! freed in the middle of the heaps (request buffers, encoded bodies, the watch cache's
//! replaced buffers) would otherwise stay resident for good, a fixed cost of every load
//! counted in the RSS as if it were held by the objects.
//!
//! A binary that makes another allocator its `#[global_allocator]` (wardle's feature
//! `mimalloc`) still gets these settings: they then tune only what C code (SQLite) allocates
//! through malloc, and cost nothing.

use std::time::Duration;

/// Arenas [`APIServer::run`](super::APIServer::run) allows unless told otherwise.
pub const DEFAULT_MALLOC_ARENA_MAX: u32 = 2;

/// Runs before `main` and before any thread is started: an ELF constructor, as C's
/// `__attribute__((constructor))`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[used]
#[unsafe(link_section = ".init_array")]
static LIMIT_ARENAS_AT_START: extern "C" fn() = limit_arenas_at_start;

/// The default arena cap ([`DEFAULT_MALLOC_ARENA_MAX`]), unless `MALLOC_ARENA_MAX` is set.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" fn limit_arenas_at_start() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        set_arena_max(DEFAULT_MALLOC_ARENA_MAX);
    }
}

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

/// How often [`trim_when_quiet`] looks at the process's CPU time.
const TICK: Duration = Duration::from_millis(250);

/// A tick in which the process used less CPU than this counts as quiet (2% of one core).
const QUIET: Duration = Duration::from_millis(5);

/// CPU the process must have used since the last trim for a quiet tick to trim again: a
/// load worth giving memory back after, not the idle server's timers.
const WORTH_TRIMMING: Duration = Duration::from_millis(100);

/// [`trim_when_quiet`] running until dropped.
pub(crate) struct Trimmer(tokio::task::JoinHandle<()>);

impl Trimmer {
    /// Starts [`trim_when_quiet`] on the current tokio runtime.
    pub(crate) fn spawn() -> Self {
        Self(tokio::spawn(trim_when_quiet()))
    }
}

impl Drop for Trimmer {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Gives memory the allocator holds free back to the system whenever the server turns quiet
/// after some work: every [`TICK`] it reads the process's CPU time, and at the first quiet
/// tick after [`WORTH_TRIMMING`] of CPU it calls glibc's `malloc_trim(0)`, which releases the
/// free pages of every arena, not only the top of each. The cost, once per burst of work: a
/// walk of the free chunks and one `madvise` per free run of pages (174 after 3,000 creates
/// on SQLite), then page faults when the next burst uses those pages again. Does nothing
/// where the allocator is not glibc's.
async fn trim_when_quiet() {
    let Some(start) = process_cpu() else {
        return;
    };
    let mut quiet = Quiet::new(start);
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(now) = process_cpu() else {
            return;
        };
        if quiet.tick(now) {
            trim();
            // The trim's own CPU is not work to trim after.
            quiet.trimmed(process_cpu().unwrap_or(now));
        }
    }
}

/// When to trim, from the process's CPU time read at each tick.
#[derive(Debug)]
struct Quiet {
    /// The CPU time at the last tick.
    last: Duration,
    /// CPU used since the last trim.
    since_trim: Duration,
}

impl Quiet {
    fn new(cpu: Duration) -> Self {
        Self {
            last: cpu,
            since_trim: Duration::ZERO,
        }
    }

    /// Whether to trim now, the process's CPU time being `cpu`: this tick was quiet, and the
    /// process worked enough since the last trim.
    fn tick(&mut self, cpu: Duration) -> bool {
        let used = cpu.saturating_sub(self.last);
        self.last = cpu;
        self.since_trim += used;
        used < QUIET && self.since_trim >= WORTH_TRIMMING
    }

    /// A trim ended with the process's CPU time at `cpu`.
    fn trimmed(&mut self, cpu: Duration) {
        self.last = cpu;
        self.since_trim = Duration::ZERO;
    }
}

/// CPU time used by every thread of the process (`CLOCK_PROCESS_CPUTIME_ID`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn process_cpu() -> Option<Duration> {
    use std::ffi::{c_int, c_long};
    /// `struct timespec` of glibc on Linux: `time_t` is a `long` (without `_TIME_BITS=64`).
    #[repr(C)]
    struct Timespec {
        tv_sec: c_long,
        tv_nsec: c_long,
    }
    const CLOCK_PROCESS_CPUTIME_ID: c_int = 2;
    unsafe extern "C" {
        fn clock_gettime(clock: c_int, time: *mut Timespec) -> c_int;
    }
    let mut time = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to the pointer it is given, a valid local.
    let status = unsafe { clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &mut time) };
    let secs = u64::try_from(time.tv_sec).ok()?;
    let nanos = u32::try_from(time.tv_nsec).ok()?;
    (status == 0).then(|| Duration::new(secs, nanos))
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn process_cpu() -> Option<Duration> {
    None
}

/// glibc's `malloc_trim(0)`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    unsafe extern "C" {
        fn malloc_trim(pad: usize) -> i32;
    }
    // SAFETY: malloc_trim takes each arena's lock while it releases that arena's free pages;
    // other threads may allocate meanwhile.
    unsafe {
        malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// glibc's `M_ARENA_MAX` as set (its `mp_.arena_max` is not readable; `mallinfo2` does
    /// not count arenas): the arenas of a process whose threads all allocated at once.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn the_cap_holds_from_the_start() {
        if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
            return;
        }
        // Threads that allocate side by side, each taking an arena if glibc lets it.
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    barrier.wait();
                    let held: Vec<Vec<u8>> = (0..1000).map(|i| vec![1; 2000 + i]).collect();
                    std::hint::black_box(&held).len()
                })
            })
            .collect();
        threads
            .into_iter()
            .for_each(|t| assert_eq!(t.join().unwrap(), 1000));
        assert!(
            arenas() <= DEFAULT_MALLOC_ARENA_MAX as usize,
            "{} arenas",
            arenas()
        );
    }

    /// How many arenas glibc made: the `<heap nr=` entries of `malloc_info`.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn arenas() -> usize {
        use std::ffi::c_int;
        unsafe extern "C" {
            fn open_memstream(buffer: *mut *mut u8, size: *mut usize) -> *mut std::ffi::c_void;
            fn malloc_info(options: c_int, stream: *mut std::ffi::c_void) -> c_int;
            fn fclose(stream: *mut std::ffi::c_void) -> c_int;
            fn free(pointer: *mut u8);
        }
        let (mut buffer, mut size) = (std::ptr::null_mut(), 0);
        // SAFETY: open_memstream writes into a buffer of its own, freed with `free` after
        // `fclose`; malloc_info writes XML to the stream.
        let xml = unsafe {
            let stream = open_memstream(&mut buffer, &mut size);
            assert!(!stream.is_null());
            malloc_info(0, stream);
            fclose(stream);
            let xml =
                String::from_utf8_lossy(std::slice::from_raw_parts(buffer, size)).into_owned();
            free(buffer);
            xml
        };
        xml.matches("<heap nr=").count()
    }

    #[test]
    fn trims_at_the_first_quiet_tick_after_work() {
        let mut quiet = Quiet::new(Duration::ZERO);
        // An idle server's timers: quiet ticks, not yet worth a trim.
        let mut cpu = Duration::ZERO;
        for _ in 0..50 {
            cpu += MS;
            assert!(!quiet.tick(cpu));
        }
        // A load: busy ticks never trim, however much they used.
        for _ in 0..4 {
            cpu += 200 * MS;
            assert!(!quiet.tick(cpu));
        }
        // Its end: the first quiet tick trims, and once.
        cpu += MS;
        assert!(quiet.tick(cpu));
        cpu += 3 * MS;
        quiet.trimmed(cpu);
        for _ in 0..10 {
            cpu += MS;
            assert!(!quiet.tick(cpu));
        }
    }

    #[test]
    fn a_trickle_of_requests_trims_now_and_then() {
        let mut quiet = Quiet::new(Duration::ZERO);
        let mut cpu = Duration::ZERO;
        let mut trims = 0;
        // 4 ms a tick (quiet), 100 ms of it every 25 ticks.
        for _ in 0..100 {
            cpu += 4 * MS;
            if quiet.tick(cpu) {
                trims += 1;
                quiet.trimmed(cpu);
            }
        }
        assert_eq!(trims, 4);
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn the_process_cpu_time_counts_this_process_work() {
        let before = process_cpu().expect("CLOCK_PROCESS_CPUTIME_ID");
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < 20 * MS {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let after = process_cpu().expect("CLOCK_PROCESS_CPUTIME_ID");
        assert!(after > before, "{before:?} then {after:?}");
        // What a trim does cannot be seen from here (the allocator decides); it must not fail.
        trim();
    }
}
