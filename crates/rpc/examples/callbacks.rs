//! A server that calls back into its clients, each end serving its own service: the hub
//! serves `Hub` and calls `Subscriber` back; a client calls `Hub` and serves `Subscriber`.
//! A client that serves nothing still connects (its method table lists no method), and
//! each callback to it fails alone, saying it does not serve that method.
//!
//! `cargo run -p volley-rpc --example callbacks` prints `ok` last.

use std::sync::Mutex;

use volley_rpc::link::local;
use volley_rpc::{CallError, Config, Context, Endpoint, HandlerError};

volley_rpc::service! {
    /// What the hub serves.
    pub(crate) service Hub {
        /// Sends `count` events on `topic` back to the caller, one call each, then a
        /// one-way `done`; returns the sum of what the subscriber answered.
        1 => fn subscribe(topic: String, count: u32) -> u64;
    }
}

volley_rpc::service! {
    /// What a subscriber serves: the hub calls it back.
    pub(crate) service Subscriber {
        /// One event; the subscriber answers with a number of its own.
        1 => fn event(topic: String, n: u32) -> u64;
        /// The topic ends. One way.
        2 => oneway fn done(topic: String);
    }
}

/// The hub: serves `Hub`, calls `Subscriber` back on the connection a call came on.
struct Center;

impl HubServer<Subscriber> for Center {
    async fn subscribe(
        &self,
        cx: Context<Subscriber>,
        topic: String,
        count: u32,
    ) -> Result<u64, HandlerError> {
        let subscriber = SubscriberClient::new(cx.peer().clone());
        let mut sum = 0;
        for n in 0..count {
            sum += subscriber.event(topic.clone(), n).await?;
        }
        subscriber.done(topic).await?;
        Ok(sum)
    }
}

/// A subscriber: notes what it was sent.
#[derive(Default)]
struct Notes {
    seen: Mutex<Vec<String>>,
}

impl SubscriberServer<Hub> for std::sync::Arc<Notes> {
    async fn event(&self, _cx: Context<Hub>, topic: String, n: u32) -> Result<u64, HandlerError> {
        self.seen.lock().unwrap().push(format!("{topic} {n}"));
        Ok(u64::from(n) * 10)
    }

    async fn done(&self, _cx: Context<Hub>, topic: String) -> Result<(), HandlerError> {
        self.seen.lock().unwrap().push(format!("{topic} done"));
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn core::error::Error>> {
    // The hub's endpoint calls `Subscriber` and serves `Hub`.
    let hub = Endpoint::<Subscriber>::new(Config::default())?.serve(Center.into_router());
    // A client's calls `Hub` and serves `Subscriber`.
    let notes = std::sync::Arc::new(Notes::default());
    let client = Endpoint::<Hub>::new(Config::default())?.serve(notes.clone().into_router());

    let (a, b) = local::pair(64);
    let (_hub_side, peer) = tokio::try_join!(hub.connect(a), client.connect(b))?;
    let hub_client = HubClient::new(peer);
    let sum = hub_client.subscribe("weather".into(), 3).await?;
    assert_eq!(sum, 10 + 20, "the subscriber's answers, summed by the hub");
    // `done` is one way and may still be on its way: the hub's reply does not wait for it.
    hub_client.caller().shutdown().await;
    let seen = notes.seen.lock().unwrap().clone();
    assert_eq!(&seen[..3], ["weather 0", "weather 1", "weather 2"]);
    println!("the hub called back: {}", seen.join(", "));

    // A client that calls `Hub` but serves nothing connects; the hub's callback to it
    // fails alone, and the hub's handler says so to the caller.
    let bare = Endpoint::<Hub>::new(Config::default())?;
    let (a, b) = local::pair(64);
    let (_hub_end, bare_end) = tokio::try_join!(hub.connect(a), bare.connect(b))?;
    let bare_client = HubClient::new(bare_end);
    match bare_client.subscribe("rain".into(), 1).await {
        Err(CallError::Handler { detail, .. }) if detail.contains("does not serve") => {
            println!("a client that serves nothing: {detail}");
        }
        other => return Err(format!("the callback should fail alone, got {other:?}").into()),
    }
    println!("ok");
    Ok(())
}
