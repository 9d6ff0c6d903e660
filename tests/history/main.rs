//! The SQLite history store: no etcd needed.
// Tests, benches and their harness assert with unwrap/expect, spawn bare tasks
// and read the wall clock: the lints of Cargo.toml and clippy.toml hold src/.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

mod acting;
mod clusters;
mod files;
mod fixtures;
mod load;
mod pending;
mod store;
mod summary;

use std::path::Path;

use tenure::history::*;

#[allow(dead_code)]
fn assert_send_sync(_: &Path) {
    fn is<T: Send + Sync>() {}
    is::<Store>();
    is::<Reader>();
    is::<HistoryError>();
}
