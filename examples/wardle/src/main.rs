//! `wardle`: the sample-apiserver's API served by `apiserver`.

use apiserver::ApiServer;

fn main() {
    limit_malloc_arenas();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    let served = match runtime {
        Ok(runtime) => runtime.block_on(serve()),
        Err(e) => Err(e.into()),
    };
    if let Err(e) = served {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    apiserver::server::init_logging();
    ApiServer::from_args_about(env!("CARGO_PKG_DESCRIPTION"))
        .openapi_info("Wardle", env!("CARGO_PKG_VERSION"))
        .group(wardle::api_group())
        .run()
        .await?;
    Ok(())
}

/// glibc's malloc gives each thread that meets contention an arena of its own (up to 8 per
/// core), and memory freed in one arena is not reused by another: a server whose requests hop
/// between worker threads keeps growing. Two arenas cost no measurable speed here and keep the
/// resident size per stored object near the object's own size (book/src/benchmarks.md).
/// Set before any thread starts; `MALLOC_ARENA_MAX` in the environment still wins.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_malloc_arenas() {
    /// `M_ARENA_MAX` of glibc's `<malloc.h>`.
    const M_ARENA_MAX: i32 = -8;
    extern "C" {
        fn mallopt(param: i32, value: i32) -> i32;
    }
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only changes malloc's tuning; it is called before any other thread
        // exists.
        unsafe {
            mallopt(M_ARENA_MAX, 2);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas() {}
