//! The `tenure` binary: parse the command line, hand over to `cli`.

fn main() {
    std::process::exit(tenure::cli::main());
}
