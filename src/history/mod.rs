//! SQLite history (being written).
