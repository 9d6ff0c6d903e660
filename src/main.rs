//! The `tenure` binary: parse the command line, hand over to `cli`.

fn main() {
    // The one exit (clippy.toml): everything below returns its code here,
    // after its destructors ran.
    #[allow(clippy::disallowed_methods)]
    std::process::exit(tenure::cli::main());
}
