//! A key-value service over TCP: served by a server-trait implementation, called through
//! the generated client. Sync calls, a one-way call, bulk values both ways (sent and
//! received without a copy) and a deadline.
//!
//! `cargo run -p volley-rpc --example kv` prints `ok` last.

use core::time::Duration;

use bytes::Bytes;
use volley_rpc::link::framed::FramedLink;
use volley_rpc::{CallError, Config, Endpoint, serve};
use volley_rpc::{Listener, listener_config};

use volley_rpc_example_kv::{Kv, KvClient, KvServer, Store};

#[tokio::main]
async fn main() -> Result<(), Box<dyn core::error::Error>> {
    // The server: every connection the listener accepts is served by one `Store`.
    let listener = Listener::bind_tcp("127.0.0.1:0".parse()?, listener_config(64)).await?;
    let endpoint = Endpoint::<Kv>::new(Config::default())?.serve(Store::default().into_router());
    let server = serve(endpoint, listener);
    let addr = server.local_addr().ok_or("the server has no address")?;

    // The client.
    let link = FramedLink::connect_tcp(addr).await?;
    let peer = Endpoint::<Kv>::new(Config::default())?
        .connect(link)
        .await?;
    let kv = KvClient::new(peer);

    // A value goes up as a bulk segment beside the key.
    let value = Bytes::from((0..1 << 20).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let replaced = kv.put("a".into()).segment(value.clone()).await?;
    assert_eq!(replaced, None);
    let replaced = kv.put("a".into()).segment(value.clone()).await?;
    assert_eq!(replaced, Some(1 << 20));

    // And comes back as one: `.reply()` gives the result and the segments.
    let got = kv.get("a".into()).reply().await?;
    assert!(got.value);
    assert_eq!(
        got.segments,
        vec![value],
        "the value came back byte for byte"
    );
    println!("put and got back {} bytes", 1 << 20);

    // One way: no reply. The next sync call waits (bounded) for its effect.
    kv.remove("a".into()).await?;
    let left = kv
        .wait_for("a".into(), false)
        .deadline(Duration::from_secs(5))
        .await?;
    assert_eq!(left, 0);
    println!("removed one way; {left} keys left");

    // A deadline: the caller gives up at it, and the server stops the handler.
    let late = kv
        .wait_for("never".into(), true)
        .deadline(Duration::from_millis(100))
        .await;
    match late {
        Err(CallError::DeadlineExceeded { method, after }) => {
            println!("{method} gave up after {after:?}");
        }
        other => return Err(format!("expected the deadline to pass, got {other:?}").into()),
    }

    kv.caller().shutdown().await;
    server.shutdown().await?;
    println!("ok");
    Ok(())
}
