//! A [`Reconnecting`] client across a server's crash and restart (plain TCP and TLS)
//! under 64 callers, an idle close, and a server that is not there.

use core::net::SocketAddr;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;
use std::sync::Arc;

use tokio::time::Instant;
use volley_rpc::Ended;
use volley_rpc::link::framed::FramedLink;
use volley_rpc::link::tls::{self, Roots, TlsListener};
use volley_rpc::{CallError, Config, Context, Endpoint, HandlerError, Reconnecting, ServerHandle};
use volley_rpc::{Listener, listener_config};

mod secure;
use volley_testkit::within;

volley_rpc::service! {
    /// A counter.
    pub service Count {
        /// Adds to it; gives the new total.
        1 => fn add(by: u64) -> u64;
        /// Waits `ms` milliseconds; gives them back.
        2 => fn hold(ms: u64) -> u64;
    }
}

struct Counter(AtomicU64);

/// Holds started, on any server of this file (only one test holds).
static HOLDING: AtomicU64 = AtomicU64::new(0);

impl CountServer for Counter {
    async fn add(&self, _cx: Context<Count>, by: u64) -> Result<u64, HandlerError> {
        Ok(self.0.fetch_add(by, Ordering::Relaxed) + by)
    }

    async fn hold(&self, _cx: Context<Count>, ms: u64) -> Result<u64, HandlerError> {
        HOLDING.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(ms)
    }
}

/// How the tests reach the server.
#[derive(Clone)]
enum Transport {
    Tcp,
    Tls(Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>),
}

impl Transport {
    fn tls() -> Self {
        let pki = secure::Pki::new("reconnect");
        let (cert, key, _) = pki.issue("server", &["localhost", "127.0.0.1"], &[]);
        let server = tls::server_config(&cert, &key, None).unwrap();
        let client = tls::client_config(Roots::File(&pki.ca()), None).unwrap();
        Self::Tls(server, client)
    }

    /// A server on `addr` (port 0: any), with `config`.
    async fn serve(&self, addr: SocketAddr, config: Config) -> ServerHandle {
        let listener = Listener::bind_tcp(addr, listener_config(256))
            .await
            .unwrap();
        let endpoint = Endpoint::<Count>::new(config)
            .unwrap()
            .serve(Counter(AtomicU64::new(0)).into_router());
        match self {
            Self::Tcp => volley_rpc::serve(endpoint, listener),
            Self::Tls(server, _) => {
                volley_rpc::serve(endpoint, TlsListener::new(listener, server.clone()))
            }
        }
    }

    fn client(&self, addr: SocketAddr, config: Config) -> CountClient {
        let endpoint = Endpoint::<Count>::new(config).unwrap();
        let client = match self.clone() {
            Self::Tcp => Reconnecting::new(endpoint, move || FramedLink::connect_tcp(addr)),
            Self::Tls(_, tls) => Reconnecting::new(endpoint, move || {
                tls::connect(addr, tls::server_name("localhost").unwrap(), tls.clone())
            }),
        };
        CountClient::new(client)
    }
}

fn reconnecting(client: &CountClient) -> &Reconnecting<Count> {
    match client.caller() {
        volley_rpc::Caller::Reconnecting(r) => r,
        volley_rpc::Caller::Peer(_) => unreachable!("made reconnecting"),
    }
}

/// 64 callers call without pause while the server crashes and comes back on the same
/// port: no call hangs, each one succeeds or fails saying it was in flight, and calls
/// succeed again within a second of the server's return.
async fn crash_and_restart(transport: Transport) {
    let server = transport
        .serve("127.0.0.1:0".parse().unwrap(), Config::default())
        .await;
    let addr = server.local_addr().unwrap();
    let client = transport.client(addr, Config::default());
    client.add(0).await.expect("the first call connects");

    let stop = Arc::new(AtomicBool::new(false));
    // When the server is back: calls that succeed after it count toward the second.
    let back: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let mut callers = Vec::new();
    for _ in 0..64 {
        let (client, stop, back) = (client.clone(), stop.clone(), back.clone());
        callers.push(tokio::spawn(async move {
            let (mut ok, mut lost, mut first_ok_after_back) = (0u64, 0u64, None);
            while !stop.load(Ordering::Relaxed) {
                let call = client.add(1).deadline(Duration::from_secs(5));
                match tokio::time::timeout(Duration::from_secs(10), call).await {
                    Err(_) => panic!("a call outlived its deadline by 5 s"),
                    Ok(Ok(_)) => {
                        ok += 1;
                        let back = *back.lock().unwrap();
                        if let (Some(at), None) = (back, first_ok_after_back) {
                            first_ok_after_back = Some(at.elapsed());
                        }
                    }
                    Ok(Err(CallError::ConnectionLost { sent: true, .. })) => lost += 1,
                    Ok(Err(e)) => panic!("a call failed other than in flight: {e}"),
                }
            }
            (ok, lost, first_ok_after_back)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.abort().await;
    // Down long enough for the callers to find it gone and wait.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let server = transport.serve(addr, Config::default()).await;
    *back.lock().unwrap() = Some(Instant::now());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut lost) = (0, 0);
    for caller in callers {
        let (o, l, after) = caller.await.unwrap();
        (ok, lost) = (ok + o, lost + l);
        let after = after.expect("every caller succeeds after the server is back");
        assert!(
            after < Duration::from_secs(1),
            "first success {after:?} after the return"
        );
    }
    assert!(ok > 64, "{ok} calls succeeded");
    assert!(lost <= 64, "{lost} calls lost: more than were in flight");
    assert_eq!(reconnecting(&client).reconnects(), 1);
    client.caller().shutdown().await;
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_tcp_server_is_reconnected_under_64_callers() {
    within(30, crash_and_restart(Transport::Tcp)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_tls_server_is_reconnected_under_64_callers() {
    within(30, crash_and_restart(Transport::tls())).await;
}

/// A TCP server that pings after `keepalive_ms` and closes a connection idle for
/// `idle_ms`, and a reconnecting client of it.
async fn idle_server(keepalive_ms: u64, idle_ms: u64) -> (ServerHandle, CountClient) {
    let idle = Config {
        keepalive: Some(Duration::from_millis(keepalive_ms)),
        idle_timeout: Some(Duration::from_millis(idle_ms)),
        ..Config::default()
    };
    let server = Transport::Tcp
        .serve("127.0.0.1:0".parse().unwrap(), idle)
        .await;
    let client = Transport::Tcp.client(server.local_addr().unwrap(), Config::default());
    (server, client)
}

/// A client quiet for longer than the server's idle timeout: the server says why it
/// closes, the client reports it as an idle close, and the next call goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_close_is_reported_as_one_and_the_next_call_reconnects() {
    within(30, async {
        let (server, client) = idle_server(100, 300).await;
        assert_eq!(client.add(2).await.unwrap(), 2);
        let first = reconnecting(&client).current().unwrap();
        let cause = tokio::time::timeout(Duration::from_secs(5), first.closed())
            .await
            .expect("the server closes the idle connection");
        assert!(matches!(cause, Ended::IdleClosed(_)), "{cause}");
        assert!(
            cause
                .to_string()
                .starts_with("closed by the server after 0.3"),
            "{cause}"
        );
        assert_eq!(client.add(3).await.unwrap(), 5, "the next call reconnects");
        // The server counted the idle close, for a program that does not read its log.
        while server.stats().idle_closed < 1 {
            tokio::task::yield_now().await;
        }
        assert_eq!(server.stats().connected, 2);
        assert_eq!(reconnecting(&client).reconnects(), 1);
        client.caller().shutdown().await;
        server.shutdown().await.unwrap();
    })
    .await;
}

/// A graceful restart: while the old server drains a running call, calls it answers
/// "shutting down" (they never ran) go to the server that takes its place, and succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_a_draining_server_refuses_go_to_the_next_one() {
    within(30, async {
        let old = Transport::Tcp
            .serve("127.0.0.1:0".parse().unwrap(), Config::default())
            .await;
        let addr = old.local_addr().unwrap();
        let client = Transport::Tcp.client(addr, Config::default());
        assert_eq!(client.add(1).await.unwrap(), 1);
        let first = reconnecting(&client).current().unwrap();
        let running = {
            let client = client.clone();
            tokio::spawn(async move { client.hold(600).await })
        };
        while HOLDING.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let shutdown = tokio::spawn(old.shutdown());
        // The old server now refuses new calls on the connection: seen through it.
        loop {
            match first.call::<count::Add>(&0).await {
                Ok(_) => tokio::task::yield_now().await,
                Err(CallError::ShuttingDown { .. }) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert!(first.draining());
        let call = {
            let client = client.clone();
            tokio::spawn(async move { client.add(10).deadline(Duration::from_secs(10)).await })
        };
        // The old server let go of the address at once: the next one binds it.
        let new = Transport::Tcp.serve(addr, Config::default()).await;
        assert_eq!(
            call.await.unwrap().unwrap(),
            10,
            "the call ran on the new server"
        );
        assert_eq!(
            running.await.unwrap().unwrap(),
            600,
            "the running call finished"
        );
        shutdown.await.unwrap().unwrap();
        assert_eq!(reconnecting(&client).reconnects(), 1);
        client.caller().shutdown().await;
        new.shutdown().await.unwrap();
    })
    .await;
}

/// Calls paced at about the server's idle timeout, so that some cross its idle close:
/// none fails (one the close cut off never ran there, and goes again on a new connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_crossing_an_idle_close_go_again() {
    within(60, async {
        let (server, client) = idle_server(10, 50).await;
        let mut total = 0;
        for i in 0..100u64 {
            // 40..60 ms apart, around the 50 ms timeout and its 10 ms tick.
            tokio::time::sleep(Duration::from_micros(40_000 + i * 7919 % 20_000)).await;
            total += 1;
            let got = client.add(1).deadline(Duration::from_secs(5)).await;
            assert_eq!(got.unwrap(), total, "call {i}");
        }
        assert!(
            reconnecting(&client).reconnects() > 5,
            "only {} idle closes: the pacing missed the timeout",
            reconnecting(&client).reconnects()
        );
        client.caller().shutdown().await;
        server.shutdown().await.unwrap();
    })
    .await;
}

/// No server: a call waits for one up to its deadline, then says why there was none; a
/// server that appears meanwhile takes the waiting call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waits_for_a_server_up_to_its_deadline() {
    within(30, async {
        // A port nobody listens on: bound, then closed.
        let addr = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap()
        };
        let client = Transport::Tcp.client(addr, Config::default());
        let start = Instant::now();
        let err = client
            .add(1)
            .deadline(Duration::from_millis(400))
            .await
            .unwrap_err();
        assert!(start.elapsed() >= Duration::from_millis(400));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        assert!(matches!(err, CallError::Unavailable { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("no connection to the server within 400ms"),
            "{text}"
        );
        assert!(text.contains("refused"), "{text}");
        assert!(!err.may_have_run());

        let waiting = {
            let client = client.clone();
            tokio::spawn(async move { client.add(7).deadline(Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let server = Transport::Tcp.serve(addr, Config::default()).await;
        assert_eq!(waiting.await.unwrap().unwrap(), 7);
        assert_eq!(
            reconnecting(&client).reconnects(),
            0,
            "the first connection"
        );
        client.caller().shutdown().await;
        let after = client.add(1).await.unwrap_err();
        assert!(after.to_string().contains("shut down"), "{after}");
        server.shutdown().await.unwrap();
    })
    .await;
}
