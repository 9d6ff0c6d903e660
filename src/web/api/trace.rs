//! Request spans: one per request, for the whole router.

use std::time::Instant;

use axum::extract::Request;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;

/// A span per request, a child of the caller's W3C `traceparent` when it
/// sends one, with method, route, status and latency.
pub async fn trace_requests(req: Request, next: Next) -> Response {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing::Instrument;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    struct Headers<'a>(&'a HeaderMap);
    impl opentelemetry::propagation::Extractor for Headers<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(|v| v.to_str().ok())
        }
        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(|k| k.as_str()).collect()
        }
    }

    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let span = tracing::debug_span!("http.request", "http.request.method" = %method, "url.path" = %path, "http.response.status_code" = tracing::field::Empty);
    if req.headers().contains_key("traceparent") {
        let parent = opentelemetry_sdk::propagation::TraceContextPropagator::new()
            .extract(&Headers(req.headers()));
        let _ = span.set_parent(parent);
    }
    let started = Instant::now();
    let resp = next.run(req).instrument(span.clone()).await;
    span.record("http.response.status_code", resp.status().as_u16());
    tracing::debug!(parent: &span, %method, %path, status = resp.status().as_u16(), elapsed_ms = started.elapsed().as_secs_f64() * 1000.0, "request");
    resp
}
