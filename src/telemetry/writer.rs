//! The shared history's writer: which replica writes, and how
//! many of its commits the database's writer fence refused. Registered by
//! `tenure serve` into [`Metrics`]' registry, beside (not inside) the
//! families of [`Metrics::new`].

use prometheus::{IntCounter, IntGauge};

use super::metrics::families::{HISTORY_COMMITS_REFUSED, HISTORY_WRITER};
use super::{Metrics, TelemetryError};

/// `tenure_history_writer` and `tenure_history_commits_refused_total`.
#[derive(Debug, Clone)]
pub struct HistoryWriterMetrics {
    /// 1 while this replica is the history writer, else 0.
    pub writer: IntGauge,
    /// Commits the writer fence refused: this replica wrote with a token
    /// older than one that had already written (it lost its term).
    pub refused: IntCounter,
}

impl HistoryWriterMetrics {
    /// Creates both families in `metrics`' registry.
    pub fn register(metrics: &Metrics) -> Result<Self, TelemetryError> {
        let writer = IntGauge::new(HISTORY_WRITER.name, HISTORY_WRITER.help)?;
        let refused = IntCounter::new(HISTORY_COMMITS_REFUSED.name, HISTORY_COMMITS_REFUSED.help)?;
        metrics.registry().register(Box::new(writer.clone()))?;
        metrics.registry().register(Box::new(refused.clone()))?;
        Ok(HistoryWriterMetrics { writer, refused })
    }
}
