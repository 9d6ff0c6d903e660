//! OpenTelemetry traces: one span per election transition, exported over
//! OTLP/HTTP (protobuf) by a batch span processor.
//!
//! Off unless configured by the standard environment variables:
//!
//! | variable | effect |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | full URL to POST spans to, used as is |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | base URL; `/v1/traces` is appended |
//! | `OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL` | must be `http/protobuf` (the default) if set |
//! | `OTEL_SERVICE_NAME` | `service.name`; else `service.name` from `OTEL_RESOURCE_ATTRIBUTES`; else `tenure` |
//! | `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none` | traces off |
//!
//! The exporter itself also reads `OTEL_EXPORTER_OTLP_(TRACES_)HEADERS`,
//! `…_TIMEOUT`, `…_COMPRESSION`, the batch processor `OTEL_BSP_*`, and the
//! SDK `OTEL_TRACES_SAMPLER` and `OTEL_RESOURCE_ATTRIBUTES`.
//!
//! # Composing with the log layer
//!
//! [`layer_from_env`] returns a [`TracesLayer`]: the `tracing-opentelemetry`
//! layer with its own per-layer filter (`tenure` targets, `DEBUG` and
//! above), so exporter internals (reqwest, hyper, opentelemetry's own
//! diagnostics) are never exported. The spans [`record`] makes are at
//! `DEBUG`, so the log layer's filter must be a *per-layer* filter: a
//! global `warn` filter would disable them before they reach this layer.
//!
//! ```no_run
//! use tracing_subscriber::{layer::SubscriberExt, util::SubscriberInitExt, Layer, Registry};
//! # fn main() -> Result<(), tenure::telemetry::TelemetryError> {
//! let (otel, guard) = match tenure::telemetry::layer_from_env::<Registry>()? {
//!     Some((layer, guard)) => (Some(layer), Some(guard)),
//!     None => (None, None),
//! };
//! let fmt = tracing_subscriber::fmt::layer()
//!     .with_writer(std::io::stderr)
//!     .with_filter(tracing_subscriber::EnvFilter::new("warn"));
//! let _ = tracing_subscriber::registry().with(otel).with(fmt).try_init();
//! // ... run; dropping `guard` flushes and shuts the exporter down.
//! drop(guard);
//! # Ok(()) }
//! ```
//!
//! The otel layer goes first (`registry().with(otel)`), so its subscriber
//! type parameter is plain [`Registry`](tracing_subscriber::Registry).

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanExporter};
use opentelemetry_sdk::Resource;
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::filter::{Filtered, LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer as _;

use crate::events::{Batch, Event, EventKind, Update};

use super::TelemetryError;

/// `service.name` when nothing else names the service.
pub const DEFAULT_SERVICE_NAME: &str = "tenure";
/// The instrumentation scope (tracer) name.
pub const TRACER_NAME: &str = "tenure";
/// Longest holder string put in a span attribute, in bytes (the longest
/// candidate id tenure accepts: a valid one is never cut).
pub const MAX_HOLDER_ATTRIBUTE_BYTES: usize = crate::election::keys::MAX_CANDIDATE_LEN;
/// How long dropping a [`TracesGuard`] may wait for the last export.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);

/// The layer to add to a `tracing_subscriber` registry: OpenTelemetry
/// export of `tenure`'s own spans (targets `tenure…`, level `DEBUG` and up).
pub type TracesLayer<S> = Filtered<OpenTelemetryLayer<S, SdkTracer>, Targets, S>;

/// Where and as whom to export, read from the `OTEL_*` variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracesConfig {
    /// The full URL spans are POSTed to (…`/v1/traces`).
    pub endpoint: String,
    pub service_name: String,
}

impl TracesConfig {
    /// Reads the process environment; `Ok(None)` when traces are off.
    pub fn from_env() -> Result<Option<Self>, TelemetryError> {
        Self::from_lookup(|key| std::env::var(key).ok())
    }

    /// Like [`from_env`](Self::from_env), reading variables through `get`.
    /// Empty values count as unset.
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, TelemetryError> {
        let var = |key: &str| {
            get(key)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        if var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none")) {
            return Ok(None);
        }
        let endpoint = match (
            var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            var("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(url), _) => url,
            (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
            (None, None) => return Ok(None),
        };
        let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"));
        if let Some(p) = protocol {
            if !p.eq_ignore_ascii_case("http/protobuf") {
                return Err(TelemetryError::UnsupportedProtocol(p));
            }
        }
        let service_name = var("OTEL_SERVICE_NAME")
            .or_else(|| {
                var("OTEL_RESOURCE_ATTRIBUTES").and_then(|attrs| {
                    attrs.split(',').find_map(|kv| {
                        let (k, v) = kv.split_once('=')?;
                        (k.trim() == "service.name" && !v.trim().is_empty())
                            .then(|| v.trim().to_owned())
                    })
                })
            })
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());
        Ok(Some(Self {
            endpoint,
            service_name,
        }))
    }
}

/// Owns the tracer provider: dropping it exports what is buffered and shuts
/// the exporter down, waiting at most [`SHUTDOWN_TIMEOUT`]. The wait
/// blocks the thread; drop it outside async code (or in `spawn_blocking`).
#[derive(Debug)]
pub struct TracesGuard {
    provider: SdkTracerProvider,
}

impl TracesGuard {
    /// Exports every finished span now, and waits for the export.
    pub fn force_flush(&self) -> Result<(), TelemetryError> {
        self.provider.force_flush().map_err(TelemetryError::Traces)
    }

    /// Exports what is buffered and shuts down, reporting failures (drop
    /// does the same, silently).
    pub fn shutdown(self) -> Result<(), TelemetryError> {
        self.provider
            .shutdown_with_timeout(SHUTDOWN_TIMEOUT)
            .map_err(TelemetryError::Traces)
    }

    /// The provider, for tracers outside `tracing`.
    pub fn provider(&self) -> &SdkTracerProvider {
        &self.provider
    }
}

impl Drop for TracesGuard {
    fn drop(&mut self) {
        // An error here is AlreadyShutdown (after shutdown()) or a failed
        // last export: nothing left to do about either.
        let _ = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
    }
}

/// The traces layer configured by the environment (see the module
/// documentation), or `Ok(None)` when no OTLP endpoint is set.
pub fn layer_from_env<S>() -> Result<Option<(TracesLayer<S>, TracesGuard)>, TelemetryError>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    match TracesConfig::from_env()? {
        Some(config) => layer_from_config(&config).map(Some),
        None => Ok(None),
    }
}

/// The traces layer exporting over OTLP/HTTP protobuf to
/// `config.endpoint`, with a batch span processor.
pub fn layer_from_config<S>(
    config: &TracesConfig,
) -> Result<(TracesLayer<S>, TracesGuard), TelemetryError>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(config.endpoint.clone())
        .build()?;
    Ok(layer_with_exporter(exporter, &config.service_name))
}

/// The traces layer exporting to `exporter` through a batch span processor
/// (tests pass `opentelemetry_sdk::trace::InMemorySpanExporter`).
pub fn layer_with_exporter<S, E>(exporter: E, service_name: &str) -> (TracesLayer<S>, TracesGuard)
where
    S: Subscriber + for<'span> LookupSpan<'span>,
    E: SpanExporter + 'static,
{
    let resource = Resource::builder()
        .with_service_name(service_name.to_owned())
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let scope = InstrumentationScope::builder(TRACER_NAME)
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let tracer = provider.tracer_with_scope(scope);
    let filter = Targets::new().with_target("tenure", LevelFilter::DEBUG);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(filter);
    (layer, TracesGuard { provider })
}

/// `s` cut to at most `max` bytes, on a char boundary.
fn cap(s: &str, max: usize) -> &str {
    super::metrics::cap_label(s, max)
}

fn name(s: &str) -> &str {
    cap(s, crate::election::keys::MAX_NAME_LEN)
}

fn holder(s: &str) -> &str {
    cap(s, MAX_HOLDER_ATTRIBUTE_BYTES)
}

/// Records the transitions in `update` as spans: see [`record_event`].
/// Cheap when no subscriber wants `DEBUG` spans of this module.
pub fn record(update: &Update) {
    if let Update::Batch(batch) = update {
        record_batch(batch);
    }
}

/// [`record`] of one batch.
pub fn record_batch(batch: &Batch) {
    for event in &batch.events {
        record_event(event);
    }
}

/// One span per transition and fence refusal, each with a `DEBUG` event
/// inside it (so the log layer prints it with its fields):
///
/// | span | attributes |
/// |---|---|
/// | `election.term_started` | `election.name`, `election.token`, `election.holder`, `election.previous_holder`, `election.lease_id`, `election.layout`, `election.from_snapshot`, `etcd.revision` |
/// | `election.term_ended` | `election.name`, `election.token`, `election.holder`, `election.end_cause`, `election.lease_id`, `election.term_seconds`, `election.started_revision`, `etcd.revision` |
/// | `election.leader_value_changed` | `election.name`, `election.token`, `election.holder`, `election.previous_holder`, `etcd.revision` |
/// | `election.fence_refused` | `election.name`, `election.token` (the refused one), `fence.resource`, `fence.reason`, `fence.current_token`, `election.holder` (the leader then), `etcd.revision` |
/// | `watch.gap` | `gap.from_revision`, `gap.to_revision`, `etcd.revision` |
/// | `watch.reset` | `gap.from_revision` (old timeline), `gap.to_revision` (new), `etcd.cluster_id`, `etcd.revision` |
///
/// `FenceAccepted` makes no span (it is the common case; it is counted in
/// the metrics). Holders are capped at [`MAX_HOLDER_ATTRIBUTE_BYTES`].
pub fn record_event(event: &Event) {
    match &event.kind {
        EventKind::TermStarted { .. }
        | EventKind::TermEnded { .. }
        | EventKind::LeaderValueChanged { .. } => record_term(event),
        EventKind::Gap { .. } | EventKind::Reset { .. } | EventKind::Unobserved { .. } => {
            record_watch(event)
        }
        EventKind::FenceRefused { .. }
        | EventKind::CandidateQueued { .. }
        | EventKind::CandidateLeft { .. } => record_refusal_or_queue(event),
        EventKind::FenceAccepted { .. }
        | EventKind::NameCollision { .. }
        | EventKind::TwoPrimaries { .. }
        | EventKind::Acting { .. } => {}
    }
}

/// A term's start, end or new leader value.
fn record_term(event: &Event) {
    let election = name(&event.election);
    match &event.kind {
        EventKind::TermStarted {
            token,
            holder: h,
            lease_id,
            layout,
            previous_holder,
            from_snapshot,
        } => {
            let span = tracing::debug_span!(
                "election.term_started",
                election.name = election,
                election.token = *token,
                election.holder = holder(h),
                election.previous_holder = previous_holder.as_deref().map(holder),
                election.lease_id = *lease_id,
                election.layout = %layout,
                election.from_snapshot = *from_snapshot,
                etcd.revision = event.revision,
            );
            let _entered = span.enter();
            tracing::debug!("term started");
        }
        EventKind::TermEnded {
            token,
            holder: h,
            lease_id,
            cause,
            started_revision,
            started_at_ms,
            ..
        } => {
            let term_seconds = event.at_ms.saturating_sub(*started_at_ms).max(0) as f64 / 1000.0;
            let span = tracing::debug_span!(
                "election.term_ended",
                election.name = election,
                election.token = *token,
                election.holder = holder(h),
                election.end_cause = cause.as_str(),
                election.lease_id = *lease_id,
                election.term_seconds = term_seconds,
                election.started_revision = *started_revision,
                etcd.revision = event.revision,
            );
            let _entered = span.enter();
            tracing::debug!("term ended");
        }
        EventKind::LeaderValueChanged {
            token,
            holder: h,
            previous,
        } => {
            let span = tracing::debug_span!(
                "election.leader_value_changed",
                election.name = election,
                election.token = *token,
                election.holder = holder(h),
                election.previous_holder = holder(previous),
                etcd.revision = event.revision,
            );
            let _entered = span.enter();
            tracing::debug!("leader value changed");
        }
        _ => {}
    }
}

/// What the watch could not see: a gap, a reset, changes replayed.
fn record_watch(event: &Event) {
    match &event.kind {
        EventKind::Gap {
            from_revision,
            to_revision,
        } => {
            let span = tracing::debug_span!(
                "watch.gap",
                gap.from_revision = *from_revision,
                gap.to_revision = *to_revision,
                etcd.revision = event.revision,
            );
            let _entered = span.enter();
            tracing::debug!("history gap: etcd compacted revisions before they were seen");
        }
        EventKind::Reset {
            from_revision,
            to_revision,
            cluster_id,
            ..
        } => {
            let span = tracing::debug_span!(
                "watch.reset",
                gap.from_revision = *from_revision,
                gap.to_revision = *to_revision,
                etcd.cluster_id = *cluster_id,
                etcd.revision = event.revision,
            );
            let _entered = span.enter();
            tracing::debug!("etcd timeline reset: a restore or a new cluster");
        }
        EventKind::Unobserved {
            from_revision,
            to_revision,
            ..
        } => {
            let span = tracing::debug_span!(
                "watch.unobserved",
                gap.from_revision = *from_revision,
                gap.to_revision = *to_revision,
                etcd.revision = event.revision,
            );
            let _entered = span.enter();
            tracing::debug!(
                "changes replayed after a reconnect or restart: their times are bounds"
            );
        }
        _ => {}
    }
}

/// A fence's refusal, or a candidate queued or gone.
fn record_refusal_or_queue(event: &Event) {
    let election = name(&event.election);
    match &event.kind {
        EventKind::FenceRefused {
            resource,
            token,
            reason,
            current_token,
            current_holder,
        } => {
            let span = tracing::debug_span!(
                "election.fence_refused",
                election.name = election,
                election.token = *token,
                fence.resource = name(resource),
                fence.reason = reason.as_str(),
                fence.current_token = *current_token,
                election.holder = current_holder.as_deref().map(holder),
                etcd.revision = event.revision,
            );
            let _entered = span.enter();
            tracing::debug!("fence refused");
        }
        EventKind::CandidateQueued {
            token,
            holder: h,
            lease_id,
        }
        | EventKind::CandidateLeft {
            token,
            holder: h,
            lease_id,
        } => {
            let span = tracing::debug_span!(
                "election.queue",
                election.name = election,
                election.queue_change = event.kind.name(),
                election.token = *token,
                election.holder = holder(h),
                election.lease_id = *lease_id,
                etcd.revision = event.revision,
            );
            let _entered = span.enter();
            tracing::debug!("queue changed");
        }
        _ => {}
    }
}
