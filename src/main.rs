//! The `tenure` binary: parse the command line, hand over to `cli`.

fn main() {
    limit_malloc_arenas();
    // The one exit (clippy.toml): everything below returns its code here,
    // after its destructors ran.
    #[allow(clippy::disallowed_methods)]
    std::process::exit(tenure::cli::main());
}

/// glibc gives each thread that allocates its own arena (up to 8 per
/// core) and keeps what is freed in it: a scrape of 100,000 elections, the
/// incident view and the overview rendered at once on three threads held
/// three sets of freed memory. Two arenas (an operator's
/// `MALLOC_ARENA_MAX` wins): peak RSS under that load 284–325 MB → 205–212
/// MB, start-up unchanged (BENCHMARKS.md). Called
/// before any thread exists, as `mallopt` requires. The one `unsafe` of
/// the project (the library forbids it).
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt changes allocator settings; called first in
        // main, while the process has one thread and no allocation is in
        // flight. Its result (0 on failure) only means the default stays.
        #[allow(unsafe_code)]
        unsafe {
            nix::libc::mallopt(nix::libc::M_ARENA_MAX, 2);
        }
    }
}
