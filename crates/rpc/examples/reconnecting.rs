//! A client that outlives its server: the key-value service restarted on the same port
//! while a [`Reconnecting`] client keeps calling. Calls made while the server is away
//! wait for it (up to their deadline) and go through once it is back; only a call in
//! flight at the moment of the crash could fail, and its error says so.
//!
//! `cargo run -p volley-rpc --example reconnecting` prints `ok` last.

use core::net::SocketAddr;
use core::time::Duration;

use bytes::Bytes;
use volley_rpc::link::framed::FramedLink;
use volley_rpc::{Config, Endpoint, Reconnecting, ServerHandle, serve};
use volley_rpc::{Listener, listener_config};

use volley_rpc_example_kv::{Kv, KvClient, KvServer, Store};

async fn server(addr: SocketAddr) -> Result<ServerHandle, Box<dyn core::error::Error>> {
    let listener = Listener::bind_tcp(addr, listener_config(64)).await?;
    let endpoint = Endpoint::<Kv>::new(Config::default())?.serve(Store::default().into_router());
    Ok(serve(endpoint, listener))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn core::error::Error>> {
    let first = server("127.0.0.1:0".parse()?).await?;
    let addr = first.local_addr().ok_or("the server has no address")?;

    // Nothing connects yet: the first call does.
    let endpoint = Endpoint::<Kv>::new(Config::default())?;
    let client = Reconnecting::new(endpoint, move || FramedLink::connect_tcp(addr));
    let kv = KvClient::new(client.clone());
    let value = Bytes::from_static(b"kept until the crash");
    assert_eq!(kv.put("a".into()).segment(value).await?, None);

    // The server goes away at once, as a crash would, and its store with it. A call made
    // in the instant before the client sees the connection close would fail, saying it
    // may have run; here we wait until the client has seen it.
    let connection = client.current().ok_or("connected by the first call")?;
    first.abort().await;
    println!("the connection ended: {}", connection.closed().await);

    // A call now waits for a server; one comes back on the same port 300 ms later.
    let call = tokio::spawn({
        let kv = kv.clone();
        async move { kv.get("a".into()).deadline(Duration::from_secs(5)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = server(addr).await?;
    let present = call.await??;
    assert!(!present, "a new server, a new (empty) store");
    assert_eq!(client.reconnects(), 1);
    println!("reconnected after the restart; calls made meanwhile waited and went through");

    client.shutdown().await;
    second.shutdown().await?;
    println!("ok");
    Ok(())
}
