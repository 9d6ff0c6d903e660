//! Benchmarks against baselines in the same run (being written).
fn main() {}
