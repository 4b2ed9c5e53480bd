//! W3C trace context through the process, and spans.
//!
//! Every API request runs with a current [`TraceContext`] (a task-local): the one its
//! `traceparent` names, or a new trace. Its `trace_id` is on every log line of the request
//! (the request span's field); the store keeps the current `traceparent` with every event it
//! writes (`switchboard_store::observe`, installed by [`install_store_observer`]), so that
//! deliveries, made later by any instance, carry a `traceparent` of the same trace; provider
//! calls send it too.
//!
//! With `SWITCHBOARD_OTLP_ENDPOINT` set, [`Span`]s are exported over OTLP/HTTP ([`export`]).
//! Without it a span is only its ids: no allocation beyond them, nothing exported.

pub mod export;

use std::time::SystemTime;

use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use switchboard_domain::trace::TraceContext;

tokio::task_local! {
    static CURRENT: TraceContext;
}

/// The trace context of the work under way in this task, if any.
pub fn current() -> Option<TraceContext> {
    CURRENT.try_with(|c| *c).ok()
}

/// Runs `f` with `ctx` as the current trace context.
pub async fn scope<F: Future>(ctx: TraceContext, f: F) -> F::Output {
    CURRENT.scope(ctx, f).await
}

/// The `traceparent` header value to send on a call made now, if a trace is current.
pub fn traceparent() -> Option<String> {
    current().map(|c| c.to_string())
}

/// What a span is to its trace (OpenTelemetry's span kinds).
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// An API request or a provider callback, received.
    Server,
    /// A call out: a provider request, a webhook attempt.
    Client,
    /// Work inside the process (a store transaction).
    Internal,
}

impl Kind {
    fn otel(self) -> SpanKind {
        match self {
            Kind::Server => SpanKind::Server,
            Kind::Client => SpanKind::Client,
            Kind::Internal => SpanKind::Internal,
        }
    }
}

/// One unit of work in a trace. Ended when dropped (or by [`Span::end_at`]).
pub struct Span {
    ctx: TraceContext,
    otel: Option<opentelemetry_sdk::trace::Span>,
}

fn otel_context(parent: &TraceContext) -> SpanContext {
    SpanContext::new(
        TraceId::from_bytes(parent.trace_id),
        SpanId::from_bytes(parent.span_id),
        if parent.sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        },
        true,
        TraceState::default(),
    )
}

impl Span {
    /// Starts a span: a child of `parent`, or the root of a new trace.
    pub fn start(name: &'static str, kind: Kind, parent: Option<TraceContext>) -> Span {
        Span::start_at(name, kind, parent, &[], None)
    }

    /// Starts a span with links to other traces (a provider callback about a message links to
    /// the trace that sent it) and, when given, an earlier start time.
    pub fn start_at(
        name: &'static str,
        kind: Kind,
        parent: Option<TraceContext>,
        links: &[TraceContext],
        started: Option<SystemTime>,
    ) -> Span {
        let Some(tracer) = export::tracer() else {
            return Span {
                ctx: parent.map_or_else(TraceContext::new_root, |p| p.child()),
                otel: None,
            };
        };
        let cx = match &parent {
            Some(p) => Context::new().with_remote_span_context(otel_context(p)),
            None => Context::new(),
        };
        let mut builder = tracer.span_builder(name).with_kind(kind.otel());
        if !links.is_empty() {
            builder = builder.with_links(
                links
                    .iter()
                    .map(|l| Link::with_context(otel_context(l)))
                    .collect(),
            );
        }
        if let Some(t) = started {
            builder = builder.with_start_time(t);
        }
        let span = tracer.build_with_context(builder, &cx);
        let sc = span.span_context();
        let ctx = if sc.is_valid() {
            TraceContext {
                trace_id: sc.trace_id().to_bytes(),
                span_id: sc.span_id().to_bytes(),
                sampled: sc.is_sampled(),
            }
        } else {
            parent.map_or_else(TraceContext::new_root, |p| p.child())
        };
        Span {
            ctx,
            otel: Some(span),
        }
    }

    /// This span's context: the parent of what it causes, the `traceparent` of its calls.
    pub fn context(&self) -> TraceContext {
        self.ctx
    }

    /// Whether the span is exported (attributes are only worth computing then).
    pub fn is_recording(&self) -> bool {
        self.otel.is_some()
    }

    pub fn attr(&mut self, key: &'static str, value: impl Into<opentelemetry::Value>) {
        if let Some(s) = &mut self.otel {
            s.set_attribute(KeyValue::new(key, value));
        }
    }

    pub fn rename(&mut self, name: String) {
        if let Some(s) = &mut self.otel {
            s.update_name(name);
        }
    }

    /// Marks the span failed, with a description (never a secret or a body).
    pub fn fail(&mut self, description: String) {
        if let Some(s) = &mut self.otel {
            s.set_status(Status::error(description));
        }
    }

    /// Ends the span at `ended` (a span recorded after the fact).
    pub fn end_at(mut self, ended: SystemTime) {
        if let Some(s) = &mut self.otel {
            s.end_with_timestamp(ended);
        }
    }
}

/// The store's view of tracing: the current `traceparent`, and a span per committed write
/// transaction of a traced task (when spans are exported).
struct StoreObserver;

impl switchboard_store::observe::StoreObserver for StoreObserver {
    fn current_trace(&self) -> Option<String> {
        traceparent()
    }

    fn transaction(&self, started: SystemTime, ended: SystemTime, committed: bool) {
        if let Some(parent) = current() {
            transaction_span(parent, started, ended, committed);
        }
    }

    fn transaction_in(
        &self,
        traceparent: &str,
        started: SystemTime,
        ended: SystemTime,
        committed: bool,
    ) {
        if let Some(parent) = TraceContext::parse(traceparent) {
            transaction_span(parent, started, ended, committed);
        }
    }

    fn group_committed(&self, records: usize) {
        metrics::counter!("switchboard_send_group_commits_total").increment(1);
        metrics::counter!("switchboard_send_group_records_total").increment(records as u64);
    }

    fn storage_failed(
        &self,
        fault: switchboard_store::health::StorageFault,
        error: &str,
        first: bool,
    ) {
        use switchboard_store::health::StorageFault;
        metrics::counter!("switchboard_storage_errors_total", "kind" => fault.as_str())
            .increment(1);
        metrics::gauge!("switchboard_storage_writable").set(0.0);
        if first {
            match fault {
                StorageFault::Full => tracing::error!(
                    error,
                    "writes fail: the database's storage is full; requests that write get 507 storage_full and /readyz answers 503 until space is freed, then writes resume by themselves"
                ),
                StorageFault::Io => tracing::error!(
                    error,
                    "writes fail: the database's storage reported an I/O error; requests that write get 503 service_unavailable and /readyz answers 503 until a write succeeds again"
                ),
            }
        }
    }

    fn storage_recovered(&self) {
        metrics::gauge!("switchboard_storage_writable").set(1.0);
        tracing::info!("writes succeed again: the database's storage takes writes");
    }
}

/// A `store.transaction` span, recorded after the fact (when spans are exported).
fn transaction_span(parent: TraceContext, started: SystemTime, ended: SystemTime, committed: bool) {
    if export::tracer().is_none() {
        return;
    }
    let mut span = Span::start_at(
        "store.transaction",
        Kind::Internal,
        Some(parent),
        &[],
        Some(started),
    );
    if !committed {
        span.fail("the transaction did not commit".into());
    }
    span.end_at(ended);
}

/// Lets the store read the current trace (once per process).
pub fn install_store_observer() {
    switchboard_store::observe::install(Box::new(StoreObserver));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_current_context_is_scoped_to_the_task() {
        assert_eq!(current(), None);
        let root = TraceContext::new_root();
        let seen = scope(root, async { traceparent() }).await;
        assert_eq!(seen, Some(root.to_string()));
        assert_eq!(current(), None);
    }

    #[test]
    fn without_export_a_span_is_a_child_of_its_parent() {
        let parent = TraceContext::new_root();
        let span = Span::start("x", Kind::Client, Some(parent));
        assert!(!span.is_recording());
        assert_eq!(span.context().trace_id, parent.trace_id);
        assert_ne!(span.context().span_id, parent.span_id);
        let root = Span::start("y", Kind::Server, None);
        assert_ne!(root.context().trace_id, parent.trace_id);
    }
}
