//! Telemetry sinks: Prometheus [`metrics`] and OpenTelemetry [`traces`].
//!
//! Both are fed only by the watcher's [`Update`](crate::events::Update)s
//! ([`Metrics::apply`], [`record`]); neither talks to etcd.

pub mod metrics;
pub mod traces;
pub mod writer;

pub use metrics::{
    cap_label, election_label, merge_clusters, Metrics, MetricsOptions, CONTENT_TYPE,
    DETAIL_METRIC_NAMES, MAX_ELECTION_LABEL_BYTES, MAX_HOLDER_LABEL_BYTES, METRIC_NAMES,
    TERM_DURATION_BUCKETS,
};
pub use traces::{
    layer_from_config, layer_from_env, layer_with_exporter, record, record_batch, record_event,
    TracesConfig, TracesGuard, TracesLayer, DEFAULT_SERVICE_NAME, MAX_HOLDER_ATTRIBUTE_BYTES,
    TRACER_NAME,
};

/// What can go wrong setting telemetry up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A metric could not be created or registered (a bug: the definitions
    /// are static).
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    /// `OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL` asks for a protocol other than
    /// OTLP/HTTP protobuf.
    #[error(
        "unsupported OTLP protocol {0:?}: tenure exports traces over http/protobuf only \
         (unset OTEL_EXPORTER_OTLP_PROTOCOL or set it to http/protobuf)"
    )]
    UnsupportedProtocol(String),
    /// The OTLP exporter could not be built (e.g. an invalid endpoint URL).
    #[error("OTLP trace exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// Flushing or shutting down the trace pipeline failed.
    #[error("traces: {0}")]
    Traces(opentelemetry_sdk::error::OTelSdkError),
}
