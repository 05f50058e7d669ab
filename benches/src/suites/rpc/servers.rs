//! The rpc suite's servers, all on one current-thread runtime on a thread of their own:
//! volley over TCP (bincode and postcard), Unix and in-process links, tarpc 0.38 as its
//! users write it, the raw length-delimited baseline, and ARTIQ's service.

use super::*;

// ---------------------------------------------------------------------------------------
// The servers, all on one current-thread runtime.

pub(super) struct Servers {
    /// volley, tarpc and the raw baseline on tokio's default multi-thread runtime.
    pub(super) default: light::DefaultServers,
    pub(super) volley: SocketAddr,
    pub(super) postcard: SocketAddr,
    pub(super) unix: PathBuf,
    pub(super) tarpc: SocketAddr,
    pub(super) raw: SocketAddr,
    pub(super) artiq: SocketAddr,
    /// Server ends of in-process links go here to be served.
    pub(super) local: tokio::sync::mpsc::UnboundedSender<(LocalLink, PoolConfig)>,
    /// Server ends of in-process links to ARTIQ's service go here to be served.
    pub(super) artiq_local: tokio::sync::mpsc::UnboundedSender<(LocalLink, PoolConfig)>,
    /// Queues of the raw in-process anchor go here to be served.
    pub(super) raw_local: tokio::sync::mpsc::UnboundedSender<tokio::sync::mpsc::Receiver<RawCall>>,
}

/// A call of the raw in-process anchor: no codec, no ids, no framing; the reply comes on
/// its own oneshot.
pub(super) struct RawCall {
    pub(super) work: Work,
    pub(super) index: u64,
    pub(super) len: usize,
    pub(super) body: Bytes,
    pub(super) reply: tokio::sync::oneshot::Sender<RawReply>,
}

/// What the raw in-process server answers.
pub(super) enum RawReply {
    Echo(u64),
    Put(u64, u64),
    Get(Bytes),
}

/// volley's bench service over TCP on a port of its own (what the light-load table and the
/// matrix suite serve), on the runtime it is called from.
pub(crate) async fn bench_tcp_server() -> volley_rpc::ServerHandle {
    let endpoint = Endpoint::<Bench>::new(Config::default())
        .expect("settings")
        .serve(service::router(Arc::new(BenchState::default())));
    let listener = Listener::bind_tcp(
        "127.0.0.1:0".parse().expect("an address"),
        volley_rpc::listener_config(64),
    )
    .await
    .expect("bind");
    serve(endpoint, listener)
}

/// tarpc's bench server over TCP on a port of its own, on the runtime it is called from;
/// its address.
pub(super) async fn tarpc_tcp_server(pattern: Bytes) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = volley_transport_tcp::tune(&stream);
            tarpc_serve(length_delimited(stream), pattern.clone());
        }
    });
    addr
}

/// The raw baseline's server over TCP on a port of its own, a task per connection, on the
/// runtime it is called from; its address.
pub(super) async fn raw_tcp_server(pattern: Bytes) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = volley_transport_tcp::tune(&stream);
            tokio::spawn(raw_server(stream, pattern.clone()));
        }
    });
    addr
}

pub(super) fn start_servers(dir: PathBuf) -> Servers {
    let default = light::start_default_servers();
    harness::serve_on_thread(move || async move {
        let state = Arc::new(BenchState::default());
        let listener = |addr: &str| {
            let addr: SocketAddr = addr.parse().expect("an address");
            Listener::bind_tcp(addr, volley_rpc::listener_config(64))
        };
        let bincode = Endpoint::<Bench, Bincode>::new(Config::default())
            .expect("settings")
            .serve(service::router(state.clone()));
        let postcard = Endpoint::<Bench, Postcard>::new(Config::default())
            .expect("settings")
            .serve(service::router(state.clone()));
        let v = serve(
            bincode.clone(),
            listener("127.0.0.1:0").await.expect("bind"),
        );
        let p = serve(postcard, listener("127.0.0.1:0").await.expect("bind"));
        let path = dir.join("rpc.sock");
        let _ = std::fs::remove_file(&path);
        let unix = Listener::from_unix(
            tokio::net::UnixListener::bind(&path).expect("bind a unix socket"),
            volley_rpc::listener_config(64),
        );
        let u = serve(bincode.clone(), unix);

        let epoch = Instant::now();
        let zeros = Bytes::from(vec![0u8; MIB]);
        let array = LeArray::from_slice(&vec![123i32; MIB / 4]).into_bytes();
        let artiq = Endpoint::<Artiq>::new(Config::default())
            .expect("settings")
            .serve(artiq_router(
                zeros.clone(),
                array.clone(),
                Arc::new(Arrivals::default()),
                epoch,
            ));
        let (artiq_zeros, artiq_array) = (zeros, array);
        let a = serve(artiq, listener("127.0.0.1:0").await.expect("bind"));

        let pattern = service::pattern(PATTERN);
        let tarpc_addr = tarpc_tcp_server(pattern.clone()).await;
        let raw_addr = raw_tcp_server(pattern).await;

        let (local_tx, local_rx) = tokio::sync::mpsc::unbounded_channel();
        let state2 = state.clone();
        serve_local(local_rx, move |link, pool| {
            let endpoint = Endpoint::<Bench>::new(Config {
                pool,
                ..Config::default()
            })
            .expect("settings")
            .serve(service::router(state2.clone()));
            async move {
                if let Ok(peer) = endpoint.connect(link).await {
                    peer.closed().await;
                }
            }
        });
        let (artiq_local_tx, artiq_local_rx) = tokio::sync::mpsc::unbounded_channel();
        serve_local(artiq_local_rx, move |link, pool| {
            let endpoint = Endpoint::<Artiq>::new(Config {
                pool,
                ..Config::default()
            })
            .expect("settings")
            .serve(artiq_router(
                artiq_zeros.clone(),
                artiq_array.clone(),
                Arc::new(Arrivals::default()),
                epoch,
            ));
            async move {
                if let Ok(peer) = endpoint.connect(link).await {
                    peer.closed().await;
                }
            }
        });
        let (raw_local_tx, mut raw_local_rx) =
            tokio::sync::mpsc::unbounded_channel::<tokio::sync::mpsc::Receiver<RawCall>>();
        let raw_pattern = service::pattern(PATTERN);
        tokio::spawn(async move {
            while let Some(queue) = raw_local_rx.recv().await {
                tokio::spawn(raw_local_server(queue, raw_pattern.clone()));
            }
        });
        let servers = Servers {
            default,
            volley: v.local_addr().expect("address"),
            postcard: p.local_addr().expect("address"),
            unix: path,
            tarpc: tarpc_addr,
            raw: raw_addr,
            artiq: a.local_addr().expect("address"),
            local: local_tx,
            artiq_local: artiq_local_tx,
            raw_local: raw_local_tx,
        };
        (servers, (v, p, u, a))
    })
}

/// This end of a new in-process link whose other end goes to `server` (one of
/// [`Servers`]' in-process channels), to be served with `pool`.
pub(super) fn local_to(
    server: &tokio::sync::mpsc::UnboundedSender<(LocalLink, PoolConfig)>,
    pool: PoolConfig,
) -> LocalLink {
    let (ours, theirs) = local::pair(1024);
    server.send((theirs, pool)).expect("the server thread runs");
    ours
}

/// Serves each in-process link that comes on `links`, with its pool settings, by `serve`.
fn serve_local<F, Fut>(
    mut links: tokio::sync::mpsc::UnboundedReceiver<(LocalLink, PoolConfig)>,
    serve: F,
) where
    F: Fn(LocalLink, PoolConfig) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        while let Some((link, pool)) = links.recv().await {
            tokio::spawn(serve(link, pool));
        }
    });
}

/// The raw in-process anchor's server: one task answering the queue's calls in order.
async fn raw_local_server(mut queue: tokio::sync::mpsc::Receiver<RawCall>, pattern: Bytes) {
    while let Some(call) = queue.recv().await {
        let reply = match call.work {
            Work::Echo => RawReply::Echo(call.index),
            Work::Put => RawReply::Put(
                call.body.len() as u64,
                xxhash_rust::xxh3::xxh3_64(&call.body),
            ),
            Work::Get => {
                let start = service::offset(call.index);
                RawReply::Get(pattern.slice(start..start + call.len))
            }
        };
        let _ = call.reply.send(reply);
    }
}
