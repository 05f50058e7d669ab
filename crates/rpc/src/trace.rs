//! Trace context across a call (feature `opentelemetry`): the caller's current `tracing`
//! span, as `tracing-opentelemetry` sees it, goes with each call as W3C Trace Context
//! metadata (`traceparent`, `tracestate`), and the handler runs in a span (`rpc.server`,
//! with the method's name) whose parent is the caller's span. A subscriber with
//! `tracing_opentelemetry::layer()` on both ends is all it takes; a call made outside any
//! span, or without such a layer, carries nothing.
//!
//! The format is W3C Trace Context level 1 (`00-<trace id>-<span id>-<flags>`, lowercase
//! hex); a `traceparent` that does not parse is ignored, and the handler's span then has
//! no remote parent.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::metadata::{Metadata, Pairs};

/// The metadata key of the W3C trace parent.
pub const TRACEPARENT: &str = "traceparent";
/// The metadata key of the W3C trace state.
pub const TRACESTATE: &str = "tracestate";

/// Adds the current span's context to `pairs`, unless it has none or the caller set a
/// `traceparent` itself.
pub(crate) fn inject(pairs: &mut Pairs) {
    if pairs.iter().any(|(k, _)| k == TRACEPARENT) {
        return;
    }
    let context = tracing::Span::current().context();
    let span = context.span();
    let sc = span.span_context();
    if !sc.is_valid() {
        return;
    }
    let parent = format!(
        "00-{}-{}-{:02x}",
        sc.trace_id(),
        sc.span_id(),
        sc.trace_flags().to_u8()
    );
    pairs.push((TRACEPARENT.to_owned(), parent.into()));
    let state = sc.trace_state().header();
    if !state.is_empty() {
        pairs.push((TRACESTATE.to_owned(), state.into()));
    }
}

/// The span a handler of `method` runs in: a child of the caller's span when the call's
/// metadata names one, else `None`.
pub(crate) fn handler_span(method: &'static str, metadata: &Metadata) -> Option<tracing::Span> {
    let parent = remote(metadata)?;
    let span = tracing::info_span!("rpc.server", rpc.method = method);
    let context = opentelemetry::Context::new().with_remote_span_context(parent);
    span.set_parent(context).ok()?;
    Some(span)
}

/// The caller's span context from a call's `traceparent` (and `tracestate`).
fn remote(metadata: &Metadata) -> Option<SpanContext> {
    let parent = metadata.get_str(TRACEPARENT)?;
    let mut parts = parent.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let lower_hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if version != "00"
        || parts.next().is_some()
        || !lower_hex(trace, 32)
        || !lower_hex(span, 16)
        || !lower_hex(flags, 2)
    {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
    let state = metadata
        .get_str(TRACESTATE)
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    let context = SpanContext::new(trace, span, flags, true, state);
    context.is_valid().then_some(context)
}
