//! The families whose series do not multiply with elections (the process's
//! and the fleet-wide ones, [`SeriesScope::Process`]): ordinary metrics of a
//! [`prometheus::Registry`], built from their declarations.

use prometheus::core::Collector;
use prometheus::{
    Counter, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

use crate::events::{EndCause, RestartReason};

use super::families::{get, Id, Kind, SeriesScope};
use super::TelemetryError;

/// The registry metrics, each registered once.
pub(super) struct Process {
    pub margin: HistogramVec,
    pub events: IntCounter,
    pub restarts: IntCounterVec,
    pub revision: IntGauge,
    pub etcd_up: IntGauge,
    pub gaps: IntCounter,
    /// Fleet-wide: seconds two holders acted at once.
    pub overlap: Counter,
    pub overflow: IntCounter,
    pub ignored_keys: IntCounter,
    pub encrypted_values: IntCounter,
    pub leases_lapsed: IntGauge,
    /// Fleet-wide, by cause: Lease handovers.
    pub lease_handover: HistogramVec,
    pub two_primaries: IntCounter,
    pub elections: IntGauge,
    /// Fleet-wide: every election's ended terms.
    pub term_duration: Histogram,
    /// Fleet-wide, by cause.
    pub term_ends: IntCounterVec,
    /// Fleet-wide: candidates queued behind a leader.
    pub candidates_waiting: IntGauge,
}

impl Process {
    /// Creates every [`SeriesScope::Process`] family in `r`, its labelled series
    /// at zero (build info at 1).
    pub fn register(r: &Registry) -> Result<Self, TelemetryError> {
        let p = Self {
            margin: reg(r, histogram_vec(Id::ActingMargin)?)?,
            events: reg(
                r,
                IntCounter::with_opts(opts(Id::WatchEvents, Kind::Counter)?)?,
            )?,
            restarts: reg(r, counter_vec(Id::WatchRestarts)?)?,
            revision: reg(
                r,
                IntGauge::with_opts(opts(Id::WatchRevision, Kind::Gauge)?)?,
            )?,
            etcd_up: reg(r, IntGauge::with_opts(opts(Id::EtcdUp, Kind::Gauge)?)?)?,
            overlap: reg(r, Counter::with_opts(opts(Id::Overlap, Kind::Counter)?)?)?,
            gaps: reg(
                r,
                IntCounter::with_opts(opts(Id::HistoryGaps, Kind::Counter)?)?,
            )?,
            overflow: reg(
                r,
                IntCounter::with_opts(opts(Id::WatchOverflow, Kind::Counter)?)?,
            )?,
            ignored_keys: reg(
                r,
                IntCounter::with_opts(opts(Id::WatchIgnoredKeys, Kind::Counter)?)?,
            )?,
            encrypted_values: reg(
                r,
                IntCounter::with_opts(opts(Id::WatchEncryptedValues, Kind::Counter)?)?,
            )?,
            leases_lapsed: reg(
                r,
                IntGauge::with_opts(opts(Id::LeasesLapsed, Kind::Gauge)?)?,
            )?,
            lease_handover: reg(r, histogram_vec(Id::LeaseHandover)?)?,
            two_primaries: reg(
                r,
                IntCounter::with_opts(opts(Id::TwoPrimaries, Kind::Counter)?)?,
            )?,
            elections: reg(
                r,
                IntGauge::with_opts(opts(Id::WatchElections, Kind::Gauge)?)?,
            )?,
            term_duration: reg(r, histogram(Id::TermDuration)?)?,
            term_ends: reg(r, counter_vec(Id::TermEnds)?)?,
            candidates_waiting: reg(
                r,
                IntGauge::with_opts(opts(Id::CandidatesWaiting, Kind::Gauge)?)?,
            )?,
        };
        let f = get(Id::BuildInfo);
        let build_info = reg(
            r,
            IntGaugeVec::new(opts(Id::BuildInfo, Kind::Gauge)?, f.labels)?,
        )?;
        build_info
            .get_metric_with_label_values(&[env!("CARGO_PKG_VERSION")])?
            .set(1);
        for reason in RestartReason::ALL {
            p.restarts
                .get_metric_with_label_values(&[reason.as_str()])?;
        }
        for cause in EndCause::ALL {
            p.term_ends
                .get_metric_with_label_values(&[cause.as_str()])?;
        }
        // A handover ends a term by another holder's acquisition.
        for cause in [EndCause::Expired, EndCause::TakenOver, EndCause::Unknown] {
            p.lease_handover
                .get_metric_with_label_values(&[cause.as_str()])?;
        }
        for ended in ["lost", "resigned"] {
            p.margin.get_metric_with_label_values(&[ended])?;
        }
        Ok(p)
    }

    /// Adds one to a labelled counter; a label count mismatch (a bug: the
    /// labels are declared) counts nothing rather than panicking.
    pub fn inc(vec: &IntCounterVec, label: &str) {
        if let Ok(c) = vec.get_metric_with_label_values(&[label]) {
            c.inc();
        }
    }
}

fn reg<C: Collector + Clone + 'static>(registry: &Registry, c: C) -> Result<C, TelemetryError> {
    registry.register(Box::new(c.clone()))?;
    Ok(c)
}

/// The name and help of `id`, checking it is declared a registry family of
/// `kind`.
fn opts(id: Id, kind: Kind) -> Result<Opts, TelemetryError> {
    let f = get(id);
    if f.kind != kind || f.scope != SeriesScope::Process {
        return Err(TelemetryError::Metrics(prometheus::Error::Msg(format!(
            "{} is declared a {} of scope {:?}, not a registry {}",
            f.name,
            f.kind.as_str(),
            f.scope,
            kind.as_str()
        ))));
    }
    Ok(Opts::new(f.name, f.help))
}

fn counter_vec(id: Id) -> Result<IntCounterVec, TelemetryError> {
    Ok(IntCounterVec::new(
        opts(id, Kind::Counter)?,
        get(id).labels,
    )?)
}

fn histogram(id: Id) -> Result<Histogram, TelemetryError> {
    opts(id, Kind::Histogram)?;
    let f = get(id);
    Ok(Histogram::with_opts(
        HistogramOpts::new(f.name, f.help).buckets(f.buckets.to_vec()),
    )?)
}

fn histogram_vec(id: Id) -> Result<HistogramVec, TelemetryError> {
    opts(id, Kind::Histogram)?;
    let f = get(id);
    Ok(HistogramVec::new(
        HistogramOpts::new(f.name, f.help).buckets(f.buckets.to_vec()),
        f.labels,
    )?)
}

#[cfg(test)]
mod tests {
    use super::super::families::FAMILIES;
    use super::*;

    #[test]
    fn every_registry_family_is_registered_with_its_declaration() {
        let r = Registry::new();
        Process::register(&r).expect("register");
        let gathered = r.gather();
        let names: Vec<&str> = gathered.iter().map(|mf| mf.name()).collect();
        let declared: Vec<&str> = FAMILIES
            .iter()
            .filter(|f| f.scope == SeriesScope::Process)
            .map(|f| f.name)
            .collect();
        assert_eq!(names, declared);
        for mf in &gathered {
            let f = FAMILIES
                .iter()
                .find(|f| f.name == mf.name())
                .expect("declared");
            assert_eq!(mf.help(), f.help);
            for m in mf.get_metric() {
                let labels: Vec<&str> = m.get_label().iter().map(|l| l.name()).collect();
                assert_eq!(labels, f.labels, "{}", f.name);
            }
        }
    }
}
