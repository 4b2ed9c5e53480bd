//! Span export over OTLP/HTTP (protobuf), when `SWITCHBOARD_OTLP_ENDPOINT` is set.
//!
//! The OpenTelemetry SDK batches finished spans on a thread of its own (a bounded queue: when a
//! collector is slow or down, spans are dropped, never requests slowed) and its exporter
//! encodes them; the HTTP request goes through a reqwest client of ours, run on the service's
//! runtime. Without the setting nothing is set up and [`tracer`] is `None`.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracer, SdkTracerProvider};

static EXPORT: OnceLock<(SdkTracerProvider, SdkTracer)> = OnceLock::new();

/// The tracer, when spans are exported.
pub fn tracer() -> Option<&'static SdkTracer> {
    EXPORT.get().map(|(_, t)| t)
}

/// The exporter's HTTP: our reqwest client, on the runtime that was current at start-up (the
/// SDK's export thread blocks on the answer; the runtime does the I/O).
#[derive(Debug)]
struct RuntimeClient {
    http: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(
        &self,
        request: axum::http::Request<Bytes>,
    ) -> Result<axum::http::Response<Bytes>, HttpError> {
        let http = self.http.clone();
        let request = reqwest::Request::try_from(request)?;
        self.runtime
            .spawn(async move {
                let response = http.execute(request).await?;
                let mut out = axum::http::Response::builder().status(response.status());
                if let Some(headers) = out.headers_mut() {
                    *headers = response.headers().clone();
                }
                let body = response.bytes().await?;
                Ok::<_, HttpError>(out.body(body)?)
            })
            .await?
    }
}

/// Sets up export to `{base}/v1/traces` (once per process; must be called on the runtime).
pub fn init(base: &str, timeout: Duration) -> anyhow::Result<()> {
    if EXPORT.get().is_some() {
        return Ok(());
    }
    let http = reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(RuntimeClient {
            http,
            runtime: tokio::runtime::Handle::current(),
        })
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(format!("{base}/v1/traces"))
        .with_timeout(timeout)
        .build()?;
    let provider = SdkTracerProvider::builder()
        .with_span_processor(BatchSpanProcessor::builder(exporter).build())
        .with_resource(
            Resource::builder()
                .with_service_name("switchboard")
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build(),
        )
        .build();
    let tracer = provider.tracer("switchboard");
    let _ = EXPORT.set((provider, tracer));
    Ok(())
}

/// Sends what is still queued (at shutdown).
pub fn flush() {
    if let Some((provider, _)) = EXPORT.get()
        && let Err(e) = provider.force_flush()
    {
        tracing::warn!("spans not exported at shutdown: {e}");
    }
}
