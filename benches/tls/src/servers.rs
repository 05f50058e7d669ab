//! The servers, all on one runtime on a thread of their own (a current-thread one, or
//! tokio's default multi-thread one, as the rpc suite runs its own): raw tokio-rustls, tarpc over tokio-rustls, tonic over TLS and
//! plain, volley over TLS, plain TCP and QUIC, and a raw quinn stream. Every TLS server
//! uses the certificate made here; the raw, tarpc and volley ones the very same rustls
//! configuration (volley's `tls::server_config`: ring, TLS 1.3).

use core::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tonic::codegen::tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use volley_rpc_bench::{self as service, Bench, BenchState};

/// The read buffer of the buffered tokio-rustls anchor: volley's TLS link's size.
pub const READ_BUFFER: usize = 64 * 1024;
use volley_rpc::link::quic::QuicListener;
use volley_rpc::link::tls::{self, TlsListener};
use volley_rpc::{Config, Endpoint, ServerHandle, serve};
use volley_rpc::{Listener, listener_config};

use crate::grpc::BenchService;
use volley_benches::suites::rpc::peers::{length_delimited, raw_server, tarpc_serve};

/// HTTP/2 windows for tonic, both ends: large enough that a 1 MiB message never waits
/// for a window update (tonic's own defaults are smaller).
pub const H2_WINDOW: u32 = 8 << 20;

/// Where each server listens.
pub struct Addrs {
    pub raw_tls: SocketAddr,
    /// Raw tokio-rustls reading through a 64 KiB buffer, as volley's TLS link does.
    pub raw_tls_buffered: SocketAddr,
    pub tarpc_tls: SocketAddr,
    pub tonic_tls: SocketAddr,
    pub tonic_plain: SocketAddr,
    pub volley_tls: SocketAddr,
    pub volley_tcp: SocketAddr,
    pub volley_quic: SocketAddr,
    pub raw_quic: SocketAddr,
}

/// The raw tokio-rustls anchor's server on a port of its own, each accepted socket
/// wrapped by `wrap` (itself, or a read buffer) before the handshake; its address.
async fn raw_tls_server<S>(
    acceptor: TlsAcceptor,
    pattern: Bytes,
    wrap: fn(TcpStream) -> S,
) -> SocketAddr
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let listener = tcp_listener().await;
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = volley_transport_tcp::tune(&stream);
            let (accept, p) = (acceptor.clone(), pattern.clone());
            tokio::spawn(async move {
                if let Ok(stream) = accept.accept(wrap(stream)).await {
                    raw_server(stream, p).await;
                }
            });
        }
    });
    addr
}

/// Starts every server on a thread of its own, on a current-thread runtime or (`default`)
/// on tokio's default multi-thread one; returns their addresses.
pub fn start(dir: &Path, pattern: Bytes, default: bool) -> Addrs {
    let (cert, key) = (dir.join("server.pem"), dir.join("server.key"));
    // The handles keep volley's servers running.
    let make = move || async move { bind_all(&cert, &key, pattern).await };
    match default {
        true => volley_benches::harness::serve_on_workers(make),
        false => volley_benches::harness::serve_on_thread(make),
    }
}

async fn tcp_listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0").await.expect("bind")
}

async fn bind_all(cert: &Path, key: &Path, pattern: Bytes) -> (Addrs, Vec<ServerHandle>) {
    let config = tls::server_config(cert, key, None).expect("TLS settings");
    let acceptor = TlsAcceptor::from(config.clone());

    // Raw tokio-rustls: length-delimited frames answered in order; then the same reading
    // the socket through a 64 KiB buffer (volley's TLS link does).
    let raw_tls = raw_tls_server(acceptor.clone(), pattern.clone(), |s| s).await;
    let raw_tls_buffered = raw_tls_server(acceptor.clone(), pattern.clone(), |s| {
        tokio::io::BufReader::with_capacity(READ_BUFFER, s)
    })
    .await;

    // tarpc over tokio-rustls, as its TLS example does.
    let tarpc = tcp_listener().await;
    let tarpc_tls = tarpc.local_addr().expect("address");
    let (accept, p) = (acceptor, pattern.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = tarpc.accept().await {
            let _ = volley_transport_tcp::tune(&stream);
            let (accept, p) = (accept.clone(), p.clone());
            tokio::spawn(async move {
                if let Ok(stream) = accept.accept(stream).await {
                    tarpc_serve(length_delimited(stream), p);
                }
            });
        }
    });

    // tonic, TLS and plain.
    let identity = Identity::from_pem(
        std::fs::read(cert).expect("the certificate"),
        std::fs::read(key).expect("the key"),
    );
    let tonic_tls = tonic(
        Some(ServerTlsConfig::new().identity(identity)),
        pattern.clone(),
    )
    .await;
    let tonic_plain = tonic(None, pattern.clone()).await;

    // volley: TLS, plain TCP, QUIC.
    let state = Arc::new(BenchState::default());
    let endpoint = Endpoint::<Bench>::new(Config::default())
        .expect("settings")
        .serve(service::router(state));
    let listener = || async {
        Listener::bind_tcp(
            "127.0.0.1:0".parse().expect("an address"),
            listener_config(64),
        )
        .await
        .expect("bind")
    };
    let tls_server = serve(
        endpoint.clone(),
        TlsListener::new(listener().await, config.clone()),
    );
    let volley_tls = tls_server.local_addr().expect("address");
    let tcp_server = serve(endpoint.clone(), listener().await);
    let volley_tcp = tcp_server.local_addr().expect("address");
    let quic = QuicListener::bind(
        "127.0.0.1:0".parse().expect("an address"),
        config.clone(),
        &Config::default(),
        64,
    )
    .expect("bind");
    let quic_server = serve(endpoint, quic);
    let volley_quic = quic_server.local_addr().expect("address");

    // A raw quinn stream per connection, the same frames as raw tokio-rustls.
    let crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(config).expect("a QUIC TLS config");
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(Arc::new(volley_rpc::link::quic::transport_config(
        &Config::default(),
    )));
    let endpoint =
        quinn::Endpoint::server(server, "127.0.0.1:0".parse().expect("an address")).expect("bind");
    let raw_quic = endpoint.local_addr().expect("address");
    tokio::spawn(async move {
        while let Some(incoming) = endpoint.accept().await {
            let p = pattern.clone();
            tokio::spawn(async move {
                let Ok(connection) = incoming.await else {
                    return;
                };
                if let Ok((send, recv)) = connection.accept_bi().await {
                    raw_server(tokio::io::join(recv, send), p).await;
                }
            });
        }
    });
    let addrs = Addrs {
        raw_tls,
        raw_tls_buffered,
        tarpc_tls,
        tonic_tls,
        tonic_plain,
        volley_tls,
        volley_tcp,
        volley_quic,
        raw_quic,
    };
    (addrs, vec![tls_server, tcp_server, quic_server])
}

/// A tonic server, with TLS if given, at its best settings for these calls.
async fn tonic(tls: Option<ServerTlsConfig>, pattern: Bytes) -> SocketAddr {
    let listener = tcp_listener().await;
    let addr = listener.local_addr().expect("address");
    let mut builder = Server::builder()
        .initial_stream_window_size(H2_WINDOW)
        .initial_connection_window_size(H2_WINDOW);
    if let Some(tls) = tls {
        builder = builder.tls_config(tls).expect("tonic TLS settings");
    }
    let incoming = TcpListenerStream::new(listener).map(|stream| {
        stream.inspect(|s| {
            let _ = volley_transport_tcp::tune(s);
        })
    });
    // One service, routing its own methods: no router needed.
    tokio::spawn(async move {
        if let Err(e) = builder
            .serve_with_incoming(BenchService { pattern }, incoming)
            .await
        {
            eprintln!("volley-bench-tls: the tonic server failed: {e}");
        }
    });
    addr
}
