//! The watcher (being written).
