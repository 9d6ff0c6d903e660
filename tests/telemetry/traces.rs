//! Traces: spans per transition, logs, configuration, OTLP/HTTP export.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tenure::election::FenceReason;
use tenure::events::*;
use tenure::telemetry::*;

use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Registry;

use crate::script::*;

fn transitions(t: i64, hostile_holder: &str) -> Update {
    batch(
        460,
        vec![
            ev(451, t - 60 * S, "db", started(451, "alice", 0x1a, None)),
            ev(
                452,
                t - 50 * S,
                "db",
                EventKind::LeaderValueChanged {
                    token: 451,
                    holder: "alice-2".into(),
                    previous: "alice".into(),
                },
            ),
            ev(
                453,
                t - 40 * S,
                "db",
                EventKind::FenceAccepted {
                    resource: "orders".into(),
                    token: 451,
                },
            ),
            ev(
                454,
                t - 30 * S,
                "db",
                ended(451, "alice-2", 0x1a, EndCause::Expired, t - 60 * S),
            ),
            ev(
                455,
                t - 20 * S,
                "db",
                started(455, hostile_holder, 0x1b, Some("alice-2")),
            ),
            ev(
                456,
                t - 10 * S,
                "db",
                EventKind::FenceRefused {
                    resource: "orders".into(),
                    token: 451,
                    reason: FenceReason::TermEnded,
                    current_token: Some(455),
                    current_holder: Some(hostile_holder.into()),
                },
            ),
            ev(
                460,
                t,
                "",
                EventKind::Gap {
                    from_revision: 457,
                    to_revision: 459,
                },
            ),
        ],
    )
}

fn attr(span: &SpanData, key: &str) -> Option<opentelemetry::Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

fn s(v: &str) -> Option<opentelemetry::Value> {
    Some(opentelemetry::Value::from(v.to_owned()))
}

fn i(v: i64) -> Option<opentelemetry::Value> {
    Some(opentelemetry::Value::I64(v))
}

#[test]
fn record_makes_one_span_per_transition_with_attributes() {
    let exporter = InMemorySpanExporter::default();
    let (layer, guard) = layer_with_exporter::<Registry, _>(exporter.clone(), "tenure-test");
    let subscriber = Registry::default().with(layer);
    let huge = "<b>".repeat(1000);
    tracing::subscriber::with_default(subscriber, || {
        record(&transitions(now_ms(), &huge));
        // Updates that are not transitions make no span.
        record(&sampled("db", 1, Some(3)));
        record(&Update::Watch(WatchStatus::EtcdUp(true)));
    });
    guard.force_flush().expect("flush");
    let spans = exporter.get_finished_spans().expect("spans");
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "election.term_started",
            "election.leader_value_changed",
            "election.term_ended",
            "election.term_started",
            "election.fence_refused",
            "watch.gap",
        ]
    );

    let first = &spans[0];
    assert_eq!(attr(first, "election.name"), s("db"));
    assert_eq!(attr(first, "election.token"), i(451));
    assert_eq!(attr(first, "election.holder"), s("alice"));
    assert_eq!(attr(first, "election.previous_holder"), None);
    assert_eq!(attr(first, "election.lease_id"), i(0x1a));
    assert_eq!(attr(first, "election.layout"), s("single-key"));
    assert_eq!(
        attr(first, "election.from_snapshot"),
        Some(opentelemetry::Value::Bool(false))
    );
    assert_eq!(attr(first, "etcd.revision"), i(451));
    assert_eq!(first.instrumentation_scope.name(), TRACER_NAME);

    let proclaim = &spans[1];
    assert_eq!(attr(proclaim, "election.holder"), s("alice-2"));
    assert_eq!(attr(proclaim, "election.previous_holder"), s("alice"));
    assert_eq!(attr(proclaim, "etcd.revision"), i(452));

    let end = &spans[2];
    assert_eq!(attr(end, "election.end_cause"), s("expired"));
    assert_eq!(attr(end, "election.token"), i(451));
    assert_eq!(attr(end, "election.holder"), s("alice-2"));
    assert_eq!(
        attr(end, "election.term_seconds"),
        Some(opentelemetry::Value::F64(30.0))
    );

    let second = &spans[3];
    assert_eq!(attr(second, "election.token"), i(455));
    assert_eq!(attr(second, "election.previous_holder"), s("alice-2"));
    let capped = &huge[..MAX_HOLDER_ATTRIBUTE_BYTES - MAX_HOLDER_ATTRIBUTE_BYTES % 3];
    let holder = attr(second, "election.holder").expect("holder").to_string();
    assert!(holder.len() <= MAX_HOLDER_ATTRIBUTE_BYTES);
    assert!(huge.starts_with(&holder) && holder.starts_with(capped));

    let refused = &spans[4];
    assert_eq!(attr(refused, "fence.resource"), s("orders"));
    assert_eq!(attr(refused, "fence.reason"), s("term_ended"));
    assert_eq!(attr(refused, "election.token"), i(451));
    assert_eq!(attr(refused, "fence.current_token"), i(455));
    assert_eq!(attr(refused, "etcd.revision"), i(456));

    let gap = &spans[5];
    assert_eq!(attr(gap, "gap.from_revision"), i(457));
    assert_eq!(attr(gap, "gap.to_revision"), i(459));
    assert_eq!(attr(gap, "etcd.revision"), i(460));
    assert_eq!(attr(gap, "election.name"), None);
    drop(guard);
}

#[test]
fn spans_outside_tenure_are_not_exported() {
    let exporter = InMemorySpanExporter::default();
    let (layer, guard) = layer_with_exporter::<Registry, _>(exporter.clone(), "tenure-test");
    tracing::subscriber::with_default(Registry::default().with(layer), || {
        let _a = tracing::info_span!(target: "h2::proto", "noise").entered();
        let _b = tracing::info_span!(target: "reqwest::connect", "noise").entered();
        let _c = tracing::trace_span!("too_fine").entered(); // below DEBUG
    });
    guard.force_flush().unwrap();
    assert!(exporter.get_finished_spans().unwrap().is_empty());
}

/// A `MakeWriter` into a shared buffer.
#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buf {
    type Writer = Buf;
    fn make_writer(&'a self) -> Buf {
        self.clone()
    }
}

#[test]
fn transitions_show_in_debug_logs_and_not_at_warn() {
    use tracing_subscriber::filter::LevelFilter;
    use tracing_subscriber::Layer as _;
    for (level, shown) in [(LevelFilter::DEBUG, true), (LevelFilter::WARN, false)] {
        let buf = Buf::default();
        let fmt = tracing_subscriber::fmt::layer()
            .with_writer(buf.clone())
            .with_ansi(false)
            .with_filter(level);
        tracing::subscriber::with_default(Registry::default().with(fmt), || {
            record(&transitions(now_ms(), "bob\n<evil>"));
        });
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(out.contains("election.term_started"), shown, "{out}");
        assert_eq!(out.contains("election.holder=\"alice\""), shown, "{out}");
        assert_eq!(out.contains("fence.reason=\"term_ended\""), shown, "{out}");
        // A holder's newline does not forge a log line.
        assert!(!out.contains("\n<evil>"), "{out}");
    }
}

#[test]
fn config_from_environment_variables() {
    let cfg = |vars: &[(&str, &str)]| {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        TracesConfig::from_lookup(move |k| {
            vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    };
    assert_eq!(cfg(&[]).unwrap(), None);
    assert_eq!(cfg(&[("OTEL_SERVICE_NAME", "x")]).unwrap(), None);
    assert_eq!(cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")]).unwrap(), None);

    let c = cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")])
        .unwrap()
        .unwrap();
    assert_eq!(c.endpoint, "http://127.0.0.1:4318/v1/traces");
    assert_eq!(c.service_name, DEFAULT_SERVICE_NAME);
    assert_eq!(c.service_name, "tenure");

    let c = cfg(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://127.0.0.1:2/custom",
        ),
        ("OTEL_SERVICE_NAME", "svc"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(c.endpoint, "http://127.0.0.1:2/custom");
    assert_eq!(c.service_name, "svc");

    let c = cfg(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "a=b, service.name = from-attrs ,c=d",
        ),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(c.service_name, "from-attrs");

    for off in [
        ("OTEL_SDK_DISABLED", "true"),
        ("OTEL_SDK_DISABLED", "TRUE"),
        ("OTEL_TRACES_EXPORTER", "none"),
    ] {
        assert_eq!(
            cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"), off]).unwrap(),
            None,
            "{off:?}"
        );
    }
    for (var, proto) in [
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
    ] {
        let err = cfg(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
            (var, proto),
        ])
        .unwrap_err();
        assert!(
            matches!(&err, TelemetryError::UnsupportedProtocol(p) if p == proto),
            "{err}"
        );
    }
}

#[test]
fn layer_from_env_is_off_without_an_endpoint() {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
    if set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        eprintln!("skipped: an OTLP endpoint is set in this environment");
        return;
    }
    assert!(layer_from_env::<Registry>().unwrap().is_none());
}

#[test]
fn an_invalid_endpoint_is_an_error() {
    let config = TracesConfig {
        endpoint: "http://[::1".into(),
        service_name: "tenure".into(),
    };
    let err = layer_from_config::<Registry>(&config).err().expect("error");
    assert!(matches!(err, TelemetryError::Exporter(_)), "{err}");
}

/// What the loopback receiver got.
struct Received {
    path: String,
    content_type: String,
    body: Vec<u8>,
}

#[test]
fn otlp_http_export_reaches_a_loopback_receiver() {
    use axum::{body::Bytes, extract::OriginalUri, http::HeaderMap, http::StatusCode};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message as _;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Received>();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    assert!(addr.ip().is_loopback());
    let receive = move |uri: OriginalUri, headers: HeaderMap, body: Bytes| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Received {
                path: uri.path().to_owned(),
                content_type: headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned(),
                body: body.to_vec(),
            });
            StatusCode::OK
        }
    };
    let app = axum::Router::new().fallback(receive);
    rt.spawn(async move { axum::serve(listener, app).await });

    let base = format!("http://{addr}");
    let config = TracesConfig::from_lookup(|k| match k {
        "OTEL_EXPORTER_OTLP_ENDPOINT" => Some(base.clone()),
        "OTEL_SERVICE_NAME" => Some("tenure-otlp-test".into()),
        _ => None,
    })
    .unwrap()
    .unwrap();
    assert_eq!(config.endpoint, format!("http://{addr}/v1/traces"));
    let (layer, guard) = layer_from_config::<Registry>(&config).expect("layer");
    tracing::subscriber::with_default(Registry::default().with(layer), || {
        record(&transitions(now_ms(), "bob"));
    });
    guard.shutdown().expect("export and shut down");

    let mut spans = Vec::new();
    let mut service_names = Vec::new();
    while let Ok(r) = rx.recv_timeout(Duration::from_secs(if spans.is_empty() { 20 } else { 1 })) {
        assert_eq!(r.path, "/v1/traces");
        assert_eq!(r.content_type, "application/x-protobuf");
        let req = ExportTraceServiceRequest::decode(r.body.as_slice()).expect("protobuf");
        for rs in req.resource_spans {
            for kv in rs.resource.iter().flat_map(|r| r.attributes.iter()) {
                if kv.key == "service.name" {
                    service_names.push(kv.value.clone().and_then(|v| v.value));
                }
            }
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
    }
    assert_eq!(
        service_names,
        [Some(Any::StringValue("tenure-otlp-test".into()))]
    );
    assert_eq!(
        spans.len(),
        6,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let get = |span: &opentelemetry_proto::tonic::trace::v1::Span, key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone())
            .and_then(|v| v.value)
    };
    let started = spans
        .iter()
        .find(|s| {
            s.name == "election.term_started"
                && get(s, "election.token") == Some(Any::IntValue(455))
        })
        .expect("term_started span");
    assert_eq!(
        get(started, "election.name"),
        Some(Any::StringValue("db".into()))
    );
    assert_eq!(
        get(started, "election.holder"),
        Some(Any::StringValue("bob".into()))
    );
    assert_eq!(
        get(started, "election.previous_holder"),
        Some(Any::StringValue("alice-2".into()))
    );
    assert_eq!(get(started, "etcd.revision"), Some(Any::IntValue(455)));
    let ended = spans
        .iter()
        .find(|s| s.name == "election.term_ended")
        .expect("term_ended span");
    assert_eq!(
        get(ended, "election.end_cause"),
        Some(Any::StringValue("expired".into()))
    );
    let refused = spans
        .iter()
        .find(|s| s.name == "election.fence_refused")
        .expect("fence_refused span");
    assert_eq!(
        get(refused, "fence.reason"),
        Some(Any::StringValue("term_ended".into()))
    );
    assert_eq!(
        get(refused, "fence.resource"),
        Some(Any::StringValue("orders".into()))
    );
    rt.shutdown_timeout(Duration::from_secs(1));
}
