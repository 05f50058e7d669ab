//! A traced call (feature `opentelemetry`): the caller's span goes with the call as W3C
//! trace context, and the handler runs in a child span of it, in the same trace. Here both
//! ends share one process and one tracer; a real deployment gives each its own
//! `tracing-opentelemetry` layer and exporter (OTLP, Jaeger), and the spans join up in
//! the collector all the same.
//!
//! `cargo run -p volley-rpc --example traced` prints `ok` last.

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use volley_rpc::link::framed::FramedLink;
use volley_rpc::{CallError, Config, Context, Endpoint, HandlerError, serve};
use volley_rpc::{Listener, listener_config};

volley_rpc::service! {
    /// Orders.
    pub service Orders {
        /// Places an order; gives the trace id the handler ran in.
        1 => fn place(item: String) -> String;
    }
}

struct Shop;

impl OrdersServer for Shop {
    async fn place(&self, _cx: Context<Orders>, item: String) -> Result<String, HandlerError> {
        // Runs in `rpc.server`, a child of the caller's `checkout` span.
        let trace = tracing::Span::current()
            .context()
            .span()
            .span_context()
            .trace_id();
        tracing::info!(%item, "placing");
        Ok(trace.to_string())
    }
}

/// The caller's side: a span of its own, which the call carries to the server.
#[tracing::instrument(skip(orders))]
async fn checkout(orders: &OrdersClient, item: &str) -> Result<(String, String), CallError> {
    let ours = tracing::Span::current()
        .context()
        .span()
        .span_context()
        .trace_id();
    let theirs = orders.place(item.to_owned()).await?;
    Ok((ours.to_string(), theirs))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn core::error::Error>> {
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("traced-example")));
    tracing::subscriber::set_global_default(subscriber)?;

    let listener = Listener::bind_tcp("127.0.0.1:0".parse()?, listener_config(8)).await?;
    let server = serve(
        Endpoint::<Orders>::new(Config::default())?.serve(Shop.into_router()),
        listener,
    );
    let addr = server.local_addr().ok_or("the server has no address")?;
    let link = FramedLink::connect_tcp(addr).await?;
    let orders = OrdersClient::new(
        Endpoint::<Orders>::new(Config::default())?
            .connect(link)
            .await?,
    );

    let (ours, theirs) = checkout(&orders, "tea").await?;
    assert_eq!(ours, theirs, "the handler ran in the caller's trace");
    println!("caller and handler share trace {ours}");
    orders.caller().shutdown().await;
    server.shutdown().await?;
    println!("ok");
    Ok(())
}
