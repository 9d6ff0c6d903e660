//! The SQLite history store: no etcd needed.

mod files;
mod fixtures;
mod load;
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
