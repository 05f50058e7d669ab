//! Services that evolve: a v1 client against a v2 server (a method added, one removed,
//! one whose types changed) and the reverse, over every link. Connecting never fails over
//! the method sets; each call the other end cannot take fails alone, saying why, and the
//! rest go on.

use core::future::Future;
use core::sync::atomic::{AtomicU64, Ordering};

use volley_rpc::link::framed::FramedLink;
use volley_rpc::link::local;
use volley_rpc::link::quic::{self, QuicListener};
use volley_rpc::link::tls::{self, Roots, TlsListener};
use volley_rpc::link::udp::UdpLink;
use volley_rpc::{
    CallError, Config, ConnectError, Context, Endpoint, HandlerError, Peer, ServerHandle, Service,
    serve,
};
use volley_rpc::{Listener, listener_config};
use volley_transport_udp::channel::{ChannelConfig, ChannelEndpoint};

mod secure;
use secure::Pki;
use volley_testkit::within;

mod v1 {
    volley_rpc::service! {
        /// The first version.
        pub service Kv {
            /// Reads a value.
            1 => fn get(key: String) -> u64;
            /// Stores a value.
            2 => fn set(key: String, value: u64);
            /// Gone in v2.
            3 => fn legacy() -> u32;
        }
    }
}

mod v2 {
    volley_rpc::service! {
        /// The second version: `set` takes a u32 now, `legacy` is gone, `count` is new.
        pub service Kv {
            /// Reads a value.
            1 => fn get(key: String) -> u64;
            /// Stores a value (a narrower one).
            2 => fn set(key: String, value: u32);
            /// How many values are stored.
            4 => fn count() -> u64;
        }
    }
}

#[derive(Default)]
struct Store(AtomicU64);

impl v1::KvServer for Store {
    async fn get(&self, _cx: Context<v1::Kv>, key: String) -> Result<u64, HandlerError> {
        Ok(key.len() as u64 + self.0.load(Ordering::Relaxed))
    }

    async fn set(&self, _cx: Context<v1::Kv>, _: String, v: u64) -> Result<(), HandlerError> {
        self.0.store(v, Ordering::Relaxed);
        Ok(())
    }

    async fn legacy(&self, _cx: Context<v1::Kv>) -> Result<u32, HandlerError> {
        Ok(1)
    }
}

impl v2::KvServer for Store {
    async fn get(&self, _cx: Context<v2::Kv>, key: String) -> Result<u64, HandlerError> {
        Ok(key.len() as u64 + self.0.load(Ordering::Relaxed))
    }

    async fn set(&self, _cx: Context<v2::Kv>, _: String, v: u32) -> Result<(), HandlerError> {
        self.0.store(u64::from(v), Ordering::Relaxed);
        Ok(())
    }

    async fn count(&self, _cx: Context<v2::Kv>) -> Result<u64, HandlerError> {
        Ok(1)
    }
}

/// Connects `client` to `server` over each link in turn and runs `check` on each;
/// `test` names the test's scratch directory.
async fn over_every_link<A: Service, B: Service, F, Fut>(
    test: &str,
    server: Endpoint<A>,
    client: Endpoint<B>,
    check: F,
) where
    F: Fn(&'static str, Peer<B>) -> Fut,
    Fut: Future<Output = ()>,
{
    let pki = Pki::new(test);
    let (cert, key, _) = pki.issue("server", &["localhost"], &[]);
    let server_tls = tls::server_config(&cert, &key, None).unwrap();
    let client_tls = tls::client_config(Roots::File(&pki.ca()), None).unwrap();
    let name = || tls::server_name("localhost").unwrap();
    let config = Config::default();
    let listener = || async {
        Listener::bind_tcp("127.0.0.1:0".parse().unwrap(), listener_config(8))
            .await
            .unwrap()
    };
    let mut servers: Vec<ServerHandle> = Vec::new();

    let (a, b) = local::pair(64);
    let (_serving, peer) = tokio::try_join!(server.connect(a), client.connect(b)).unwrap();
    check("in process", peer).await;

    servers.push(serve(server.clone(), listener().await));
    let addr = servers[0].local_addr().unwrap();
    let link = FramedLink::connect_tcp(addr).await.unwrap();
    check("tcp", client.connect(link).await.unwrap()).await;

    let tls_listener = TlsListener::new(listener().await, server_tls.clone());
    servers.push(serve(server.clone(), tls_listener));
    let addr = servers[1].local_addr().unwrap();
    let link = tls::connect(addr, name(), client_tls.clone())
        .await
        .unwrap();
    check("tls", client.connect(link).await.unwrap()).await;

    let path = pki.dir.join("server.sock");
    let unix = tokio::net::UnixListener::bind(&path).unwrap();
    let unix = Listener::from_unix(unix, listener_config(8));
    servers.push(serve(server.clone(), unix));
    let link = FramedLink::connect_unix(&path).await.unwrap();
    check("unix", client.connect(link).await.unwrap()).await;

    let quic = QuicListener::bind("127.0.0.1:0".parse().unwrap(), server_tls, &config, 8).unwrap();
    servers.push(serve(server.clone(), quic));
    let addr = servers[3].local_addr().unwrap();
    let link = quic::connect(addr, name(), client_tls, &config)
        .await
        .unwrap();
    check("quic", client.connect(link).await.unwrap()).await;

    let any = "127.0.0.1:0".parse().unwrap();
    let channel = ChannelEndpoint::bind(any, ChannelConfig::server())
        .await
        .unwrap();
    let addr = channel.local_addr();
    servers.push(serve(server, channel));
    let ours = ChannelEndpoint::bind(any, ChannelConfig::client())
        .await
        .unwrap();
    let link = UdpLink::new(ours.connect(addr).await.unwrap());
    check("udp", client.connect(link).await.unwrap()).await;

    for server in servers {
        server.shutdown().await.unwrap();
    }
}

fn endpoint<S: Service>() -> Endpoint<S> {
    Endpoint::<S>::new(Config::default()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_client_calls_a_v2_server() {
    within(60, async {
        let server = endpoint::<v2::Kv>().serve(v2::KvServer::into_router(Store::default()));
        over_every_link(
            "evolve-v1-v2",
            server,
            endpoint::<v1::Kv>(),
            |link, peer| async move {
                let kv = v1::KvClient::new(peer);
                assert_eq!(kv.get("ab".into()).await.unwrap(), 2, "{link}");
                let err = kv.legacy().await.unwrap_err();
                assert!(
                    matches!(err, CallError::Unimplemented { id: 3, .. }),
                    "{link}: {err}"
                );
                assert_eq!(
                    err.to_string(),
                    "rpc legacy: the peer does not serve this method (id 3)"
                );
                let err = kv.set("k".into(), 5).await.unwrap_err();
                assert!(
                    matches!(err, CallError::TypesDiffer { .. }),
                    "{link}: {err}"
                );
                assert!(
                    err.to_string()
                        .starts_with("rpc set: the peer declares this method with other types")
                );
                assert!(!err.may_have_run());
                // The connection goes on.
                assert_eq!(kv.get("abc".into()).await.unwrap(), 3, "{link}");
                kv.caller().shutdown().await;
            },
        )
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v2_client_calls_a_v1_server() {
    within(60, async {
        let server = endpoint::<v1::Kv>().serve(v1::KvServer::into_router(Store::default()));
        over_every_link(
            "evolve-v2-v1",
            server,
            endpoint::<v2::Kv>(),
            |link, peer| async move {
                let kv = v2::KvClient::new(peer);
                assert_eq!(kv.get("a".into()).await.unwrap(), 1, "{link}");
                let err = kv.count().await.unwrap_err();
                assert!(
                    matches!(err, CallError::Unimplemented { id: 4, .. }),
                    "{link}: {err}"
                );
                let err = kv.set("k".into(), 5).await.unwrap_err();
                assert!(
                    matches!(err, CallError::TypesDiffer { .. }),
                    "{link}: {err}"
                );
                assert_eq!(kv.get("ab".into()).await.unwrap(), 2, "{link}");
                kv.caller().shutdown().await;
            },
        )
        .await;
    })
    .await;
}

volley_rpc::service! {
    /// Another service altogether.
    pub service Other {
        /// Reads a value.
        1 => fn get(key: String) -> u64;
    }
}

/// The method sets may differ; the service may not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_another_service_is_refused_at_the_hello() {
    within(30, async {
        let server = endpoint::<v2::Kv>().serve(v2::KvServer::into_router(Store::default()));
        let (a, b) = local::pair(64);
        let client = endpoint::<Other>();
        let (served, called) = tokio::join!(server.connect(a), client.connect(b));
        let err = called.unwrap_err();
        assert!(matches!(err, ConnectError::OtherService { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "rpc hello: this end calls the service Other, the peer serves Kv"
        );
        // The server took the client's empty table (a client serves nothing); the
        // client's refusal then closes the connection.
        if let Ok(served) = served {
            let cause = tokio::time::timeout(core::time::Duration::from_secs(5), served.closed())
                .await
                .expect("the refused connection closes");
            let _ = cause;
        }
    })
    .await;
}
