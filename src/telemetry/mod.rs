//! Metrics and traces (being written).
