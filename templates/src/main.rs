//! `{{project-name}}`: serves `{{group}}/{{version}}`.

use extension_apiserver::prelude::*;

/// With the feature `mimalloc`, mimalloc serves Rust's allocations instead of glibc's malloc,
/// told to give memory back as soon as it is free (unless `MIMALLOC_PURGE_DELAY` or
/// `MIMALLOC_ARENA_EAGER_COMMIT` say otherwise): with its defaults it keeps 15 MiB more at
/// idle (the framework's book: Benchmarks, "memory at rest and per object").
#[cfg(feature = "mimalloc")]
mod allocator {
    use std::ffi::{c_char, c_int, c_long, CStr};

    #[global_allocator]
    static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

    // mimalloc's own API, linked with the allocator.
    unsafe extern "C" {
        fn mi_option_set(option: c_int, value: c_long);
        fn getenv(name: *const c_char) -> *const c_char;
    }

    /// An ELF constructor: runs before `main` and the first allocation.
    #[used]
    #[unsafe(link_section = ".init_array")]
    static SET_OPTIONS: extern "C" fn() = set_options;

    extern "C" fn set_options() {
        // `mi_option_purge_delay` and `mi_option_arena_eager_commit` of mimalloc v3's
        // `mi_option_e`, read here without allocating.
        let options: [(c_int, &CStr); 2] = [
            (15, c"MIMALLOC_PURGE_DELAY"),
            (4, c"MIMALLOC_ARENA_EAGER_COMMIT"),
        ];
        for (option, variable) in options {
            // SAFETY: getenv reads the environment, mi_option_set a number in mimalloc's
            // table; neither allocates, and nothing else runs yet.
            unsafe {
                if getenv(variable.as_ptr()).is_null() {
                    mi_option_set(option, 0);
                }
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), ServerError> {
    APIServer::from_args_about(env!("CARGO_PKG_DESCRIPTION"))
        .openapi_info("{{kind}}", env!("CARGO_PKG_VERSION"))
        .group({{crate_name}}::api_group())
        .run()
        .await
}
