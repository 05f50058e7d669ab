//! The test service, its handlers, and helpers shared by the RPC tests.
#![allow(dead_code, unreachable_pub)]

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use core::time::Duration;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::Notify;
use volley_rpc::link::local;
use volley_rpc::{Codec, Config, Endpoint, HandlerError, Peer, Reply, Router};
pub use volley_testkit::within;

volley_rpc::service! {
    /// Everything the tests exercise.
    pub service Test {
        /// The string back.
        1 => fn echo(args: String) -> String;
        /// Sleeps this many milliseconds; counts starts and drops of unfinished runs.
        2 => fn sleep(args: u64);
        /// Fails with this message.
        3 => fn fail(args: String);
        /// Panics.
        4 => fn panic();
        /// One way: records its argument in order.
        5 => oneway fn record(args: u64);
        /// The segments back, and their total length.
        6 => fn bulk() -> u64;
        /// Calls the client's `Double` with the argument and returns the answer + 1.
        7 => fn call_back(args: u64) -> u64;
        /// Served by the client: twice the argument.
        8 => fn double(args: u64) -> u64;
        /// Nobody serves it.
        9 => fn unrouted();
        /// Waits until released; counts how many run at once.
        10 => fn blocked();
        /// The deadline the handler saw, in microseconds (0 for none).
        11 => fn see_deadline() -> u64;
        /// Borrowed decode: the length of the string argument, read without a copy.
        12 => fn borrow(args: String) -> u64;
    }
}

/// What the server's handlers saw.
#[derive(Default)]
pub struct Seen {
    pub recorded: Mutex<Vec<u64>>,
    pub sleeps_started: AtomicU64,
    pub sleeps_dropped: AtomicU64,
    pub blocked_now: AtomicUsize,
    pub blocked_max: AtomicUsize,
    pub release: Notify,
    pub segment_ptrs: Mutex<Vec<usize>>,
    /// The peer address each echo's handler saw in its call's connection.
    pub echoed_from: Mutex<Vec<Option<core::net::SocketAddr>>>,
}

/// Counts a drop that happens before `done` is set: a handler cancelled mid-run.
struct DropProbe<'a> {
    seen: &'a Seen,
    done: bool,
}

impl Drop for DropProbe<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.seen.sleeps_dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

pub fn server_router<C: Codec>(seen: Arc<Seen>) -> Router<Test, Test, C> {
    let s1 = seen.clone();
    let s2 = seen.clone();
    let s3 = seen.clone();
    let s4 = seen.clone();
    let s5 = seen;
    Router::new()
        .route(test::Echo, move |call| {
            let from = call.connection().peer_addr;
            s5.echoed_from.lock().unwrap().push(from);
            async move { Ok(Reply::new(call.args)) }
        })
        .route(test::Sleep, move |call| {
            let seen = s1.clone();
            async move {
                seen.sleeps_started.fetch_add(1, Ordering::SeqCst);
                let mut probe = DropProbe {
                    seen: &seen,
                    done: false,
                };
                tokio::time::sleep(Duration::from_millis(call.args)).await;
                probe.done = true;
                Ok(Reply::new(()))
            }
        })
        .route(test::Fail, |call| async move {
            Err(HandlerError::msg(call.args))
        })
        .route(test::Panic, |_call| async move {
            if true {
                panic!("the handler gave up");
            }
            Ok(Reply::new(()))
        })
        .route(test::Record, move |call| {
            let seen = s2.clone();
            async move {
                if call.args == u64::MAX {
                    return Err(HandlerError::msg("a one-way call that fails"));
                }
                seen.recorded.lock().unwrap().push(call.args);
                Ok(Reply::new(()))
            }
        })
        .route(test::Bulk, move |mut call| {
            let seen = s3.clone();
            async move {
                let segments = call.take_segments();
                let len = segments.iter().map(Bytes::len).sum::<usize>() as u64;
                seen.segment_ptrs
                    .lock()
                    .unwrap()
                    .extend(segments.iter().map(|s| s.as_ptr() as usize));
                Ok(Reply::with_segments(len, segments))
            }
        })
        .route(test::CallBack, |call| async move {
            let doubled = call.peer().call::<test::Double>(&call.args).await?;
            Ok(Reply::new(doubled + 1))
        })
        .route(test::Blocked, move |_call| {
            let seen = s4.clone();
            async move {
                let now = seen.blocked_now.fetch_add(1, Ordering::SeqCst) + 1;
                seen.blocked_max.fetch_max(now, Ordering::SeqCst);
                let released = seen.release.notified();
                released.await;
                seen.blocked_now.fetch_sub(1, Ordering::SeqCst);
                Ok(Reply::new(()))
            }
        })
        .route(test::SeeDeadline, |call| async move {
            Ok(Reply::new(
                call.deadline().map_or(0, |d| d.as_micros() as u64),
            ))
        })
        .route(test::Borrow, |call| async move {
            let borrowed: &str = call.decode()?;
            let raw = call.raw_args().as_ptr_range();
            assert!(raw.contains(&borrowed.as_ptr()), "decoded in place");
            Ok(Reply::new(borrowed.len() as u64))
        })
}

pub fn client_router<C: Codec>() -> Router<Test, Test, C> {
    Router::new().route(
        test::Double,
        |call| async move { Ok(Reply::new(call.args * 2)) },
    )
}

/// Which link a test's pair runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Two tasks in one process.
    Local,
    /// volley's UDP channel over loopback.
    Udp,
}

impl Link {
    /// Every link the shared tests run over.
    pub const ALL: [Self; 2] = [Self::Local, Self::Udp];
}

/// A server and a client joined by `link`.
pub async fn pair(
    link: Link,
    server: Config,
    client: Config,
) -> (Peer<Test>, Peer<Test>, Arc<Seen>) {
    match link {
        Link::Local => local_pair(server, client).await,
        Link::Udp => udp_pair(server, client).await,
    }
}

/// The two ends of the test service: the server with its handlers, the client serving
/// the callbacks, and what the server's handlers saw.
fn ends(server: Config, client: Config) -> (Endpoint<Test>, Endpoint<Test>, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let server_end = Endpoint::<Test>::new(server)
        .unwrap()
        .serve(server_router(seen.clone()));
    let client_end = Endpoint::<Test>::new(client)
        .unwrap()
        .serve(client_router());
    (server_end, client_end, seen)
}

/// A server and a client joined by the UDP channel over loopback.
pub async fn udp_pair(server: Config, client: Config) -> (Peer<Test>, Peer<Test>, Arc<Seen>) {
    use volley_rpc::link::udp::UdpLink;
    use volley_transport_udp::channel::{ChannelConfig, ChannelEndpoint};
    let (server_end, client_end, seen) = ends(server, client);
    within(10, async {
        let theirs = ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), ChannelConfig::server())
            .await
            .unwrap();
        let ours = ChannelEndpoint::bind("127.0.0.1:0".parse().unwrap(), ChannelConfig::client())
            .await
            .unwrap();
        let (a, b) = tokio::join!(ours.connect(theirs.local_addr()), theirs.accept());
        let (c, s) = tokio::try_join!(
            client_end.connect(UdpLink::new(a.unwrap())),
            server_end.connect(UdpLink::new(b.unwrap()))
        )
        .unwrap();
        (s, c, seen)
    })
    .await
}

/// A server and a client joined by an in-process link.
pub async fn local_pair(server: Config, client: Config) -> (Peer<Test>, Peer<Test>, Arc<Seen>) {
    let (server_end, client_end, seen) = ends(server, client);
    let (a, b) = local::pair(64);
    let (s, c) = within(10, async {
        tokio::try_join!(server_end.connect(a), client_end.connect(b)).unwrap()
    })
    .await;
    (s, c, seen)
}

pub fn payload(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect::<Vec<u8>>()
        .into()
}
