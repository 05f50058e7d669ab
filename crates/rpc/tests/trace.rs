//! A traced call (feature `opentelemetry`): the handler's span is a child of the caller's
//! span, in the same trace, across a real connection; a call outside any span carries no
//! trace context, and a traceparent the caller sets itself is kept.

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use volley_rpc::link::framed::FramedLink;
use volley_rpc::{Config, Context, Endpoint, HandlerError, serve};
use volley_rpc::{Listener, listener_config};
use volley_testkit::within;

volley_rpc::service! {
    /// Says which trace a handler runs in.
    pub service Traced {
        /// The handler's trace id and its parent's span id (hex), and the traceparent
        /// that came, if any.
        1 => fn whose() -> (String, Option<String>);
    }
}

struct Here;

impl TracedServer for Here {
    async fn whose(&self, cx: Context<Traced>) -> Result<(String, Option<String>), HandlerError> {
        let context = tracing::Span::current().context();
        let trace = context.span().span_context().trace_id().to_string();
        let came = cx.metadata().get_str("traceparent").map(str::to_owned);
        Ok((trace, came))
    }
}

#[test]
fn the_handler_runs_in_the_callers_trace() {
    // One tracer and subscriber for both ends (they share the process).
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    tracing::subscriber::set_global_default(subscriber).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(within(30, async {
        let listener = Listener::bind_tcp("127.0.0.1:0".parse().unwrap(), listener_config(4))
            .await
            .unwrap();
        let endpoint = Endpoint::<Traced>::new(Config::default())
            .unwrap()
            .serve(Here.into_router());
        let server = serve(endpoint, listener);
        let addr = server.local_addr().unwrap();
        let link = FramedLink::connect_tcp(addr).await.unwrap();
        let peer = Endpoint::<Traced>::new(Config::default())
            .unwrap()
            .connect(link)
            .await
            .unwrap();
        let client = TracedClient::new(peer);

        let outer = tracing::info_span!("caller");
        let caller_trace = outer.context().span().span_context().trace_id().to_string();
        // As a caller in an instrumented function makes it: inside the span.
        let (handler_trace, came) = async { client.whose().await }
            .instrument(outer)
            .await
            .unwrap();
        assert_eq!(
            handler_trace, caller_trace,
            "the handler's span is in the caller's trace"
        );
        let came = came.expect("a traceparent went with the call");
        assert!(came.starts_with(&format!("00-{caller_trace}-")), "{came}");

        // Outside any span: no trace context goes, and the handler's trace is its own.
        let (own, came) = client.whose().await.unwrap();
        assert_eq!(came, None);
        assert_ne!(own, caller_trace);

        // One the caller sets itself is kept, and is the handler's parent.
        let mine = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let (trace, came) = async { client.whose().metadata("traceparent", mine).await }
            .instrument(tracing::info_span!("another"))
            .await
            .unwrap();
        assert_eq!(came.as_deref(), Some(mine));
        assert_eq!(trace, "4bf92f3577b34da6a3ce929d0e0e4736");
        server.shutdown().await.unwrap();
    }));
}
