//! The generated surface: a client's requests and their options, a server trait's
//! `Context`, one-way methods, and services that differ by direction.

use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Notify;
use volley_rpc::link::framed::FramedLink;
use volley_rpc::link::local;
use volley_rpc::{CallError, Config, Context, Endpoint, HandlerError, serve};
use volley_rpc::{Listener, listener_config};

mod common;
use common::within;

volley_rpc::service! {
    /// Everything a generated client and server trait do.
    pub service Shop {
        /// Echoes the segments back; returns the caller's deadline in ms and the sum of
        /// the two numbers.
        1 => fn mirror(a: u32, b: u32) -> (u64, u64);
        /// Counts, one way.
        2 => oneway fn tick(by: u64);
        /// Parks segments to send back, then fails: nothing may be left behind.
        3 => fn fail_after_parking();
        /// The address the call came from, as the server saw it.
        4 => fn whoami() -> Option<String>;
        /// Never returns.
        5 => fn wait_forever();
    }
}

volley_rpc::service! {
    /// Served by a client: the server calls it back.
    pub service Till {
        /// Twice the number.
        1 => fn double(n: u64) -> u64;
    }
}

#[derive(Default)]
struct State {
    ticks: AtomicU64,
    ticked: Notify,
}

struct Here(Arc<State>);

impl ShopServer for Here {
    async fn mirror(
        &self,
        mut cx: Context<Shop>,
        a: u32,
        b: u32,
    ) -> Result<(u64, u64), HandlerError> {
        let deadline = cx.deadline().map_or(0, |d| d.as_millis() as u64);
        let segments = cx.take_segments();
        cx.reply_segments(segments);
        Ok((deadline, u64::from(a) + u64::from(b)))
    }

    async fn tick(&self, _cx: Context<Shop>, by: u64) -> Result<(), HandlerError> {
        self.0.ticks.fetch_add(by, Ordering::SeqCst);
        self.0.ticked.notify_waiters();
        Ok(())
    }

    async fn fail_after_parking(&self, cx: Context<Shop>) -> Result<(), HandlerError> {
        cx.reply_segments(vec![Bytes::from_static(b"never sent")]);
        Err(HandlerError::msg("failed after parking"))
    }

    async fn whoami(&self, cx: Context<Shop>) -> Result<Option<String>, HandlerError> {
        Ok(cx.connection().peer_addr.map(|a| a.to_string()))
    }

    async fn wait_forever(&self, _cx: Context<Shop>) -> Result<(), HandlerError> {
        core::future::pending().await
    }
}

#[tokio::test]
async fn a_generated_client_calls_a_server_trait() {
    within(30, async {
        let state = Arc::new(State::default());
        let server = Endpoint::<Shop>::new(Config::default())
            .unwrap()
            .serve(Here(state.clone()).into_router());
        let client = Endpoint::<Shop>::new(Config::default()).unwrap();
        let (a, b) = local::pair(64);
        let (_server, peer) = tokio::try_join!(server.connect(a), client.connect(b)).unwrap();
        let shop = ShopClient::new(peer);

        // Arguments by value; the default deadline (60 s) travels with the call.
        assert_eq!(shop.mirror(2, 3).await.unwrap(), (60_000, 5));
        // Options by name; segments come back through the context.
        let blob = Bytes::from(vec![9u8; 1 << 20]);
        let reply = shop
            .mirror(1, 1)
            .segment(blob.clone())
            .segment(Bytes::from_static(b"tail"))
            .deadline(Duration::from_secs(7))
            .reply()
            .await
            .unwrap();
        assert_eq!(reply.value, (7_000, 2));
        assert_eq!(reply.segments, vec![blob, Bytes::from_static(b"tail")]);

        // One way: the effect shows, the call returns without a reply.
        let ticked = state.ticked.notified();
        tokio::pin!(ticked);
        ticked.as_mut().enable();
        shop.tick(5).await.unwrap();
        ticked.await;
        assert_eq!(state.ticks.load(Ordering::SeqCst), 5);

        // A handler that parks segments and fails sends the error, and only the error.
        let err = shop.fail_after_parking().reply().await.unwrap_err();
        assert!(
            matches!(&err, CallError::Handler { method: "fail_after_parking", detail } if detail == "failed after parking"),
            "{err}"
        );
        assert_eq!(shop.mirror(0, 0).reply().await.unwrap().segments, Vec::<Bytes>::new());
        // No address on an in-process link.
        assert_eq!(shop.whoami().await.unwrap(), None);
    })
    .await;
}

#[tokio::test]
async fn a_handler_sees_the_callers_address_over_tcp() {
    within(30, async {
        let endpoint = Endpoint::<Shop>::new(Config::default())
            .unwrap()
            .serve(Here(Arc::default()).into_router());
        let listener = Listener::bind_tcp("127.0.0.1:0".parse().unwrap(), listener_config(4))
            .await
            .unwrap();
        let server = serve(endpoint, listener);
        let addr = server.local_addr().unwrap();
        let link = FramedLink::connect_tcp(addr).await.unwrap();
        let shop = ShopClient::new(
            Endpoint::<Shop>::new(Config::default())
                .unwrap()
                .connect(link)
                .await
                .unwrap(),
        );
        let seen = shop
            .whoami()
            .await
            .unwrap()
            .expect("a TCP peer has an address");
        assert!(seen.starts_with("127.0.0.1:"), "{seen}");
        shop.caller().shutdown().await;
        server.shutdown().await.unwrap();
    })
    .await;
}

/// The server calls `Till` back; the client serves it.
struct Register;

impl ShopServer<Till> for Register {
    async fn mirror(&self, cx: Context<Till>, a: u32, b: u32) -> Result<(u64, u64), HandlerError> {
        let till = TillClient::new(cx.peer().clone());
        Ok((
            till.double(u64::from(a)).await?,
            till.double(u64::from(b)).await?,
        ))
    }

    async fn tick(&self, _cx: Context<Till>, _by: u64) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn fail_after_parking(&self, _cx: Context<Till>) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn whoami(&self, _cx: Context<Till>) -> Result<Option<String>, HandlerError> {
        Ok(None)
    }

    async fn wait_forever(&self, _cx: Context<Till>) -> Result<(), HandlerError> {
        Ok(())
    }
}

struct Doubler;

impl TillServer<Shop> for Doubler {
    async fn double(&self, _cx: Context<Shop>, n: u64) -> Result<u64, HandlerError> {
        Ok(n * 2)
    }
}

#[tokio::test]
async fn each_direction_has_its_own_service_and_the_hello_checks_both() {
    within(30, async {
        let server = Endpoint::<Till>::new(Config::default())
            .unwrap()
            .serve(Register.into_router());
        let client = Endpoint::<Shop>::new(Config::default())
            .unwrap()
            .serve(Doubler.into_router());
        let (a, b) = local::pair(64);
        let (_server, peer) = tokio::try_join!(server.connect(a), client.connect(b)).unwrap();
        assert_eq!(
            peer.peer_hello().calls,
            <Till as volley_rpc::Service>::FINGERPRINT
        );
        let shop = ShopClient::new(peer);
        assert_eq!(shop.mirror(3, 4).await.unwrap(), (6, 8));

        // A client that serves nothing connects (its method table lists nothing); the
        // server's calls back to it fail alone, each saying the client does not serve it.
        let bare = Endpoint::<Shop>::new(Config::default()).unwrap();
        let (a, b) = local::pair(64);
        let (server_end, bare_end) = tokio::join!(server.connect(a), bare.connect(b));
        let (server_end, bare_end) = (server_end.unwrap(), ShopClient::new(bare_end.unwrap()));
        let back = TillClient::new(server_end);
        let err = back.double(2).await.unwrap_err();
        assert!(
            matches!(err, CallError::Unimplemented { id: 1, .. }),
            "{err}"
        );
        // The handler that calls back fails with that error; the connection goes on.
        let err = bare_end.mirror(1, 2).await.unwrap_err();
        assert!(
            err.to_string().contains("does not serve this method"),
            "{err}"
        );
        assert_eq!(bare_end.whoami().await.unwrap(), None);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_must_wait_for_credit_or_room_still_complete() {
    within(30, async {
        let state = Arc::new(State::default());
        // One call in flight at a time, and a link that holds one message.
        let server = Endpoint::<Shop>::new(Config {
            credit: 1,
            ..Config::default()
        })
        .unwrap()
        .serve(Here(state.clone()).into_router());
        let client = Endpoint::<Shop>::new(Config::default()).unwrap();
        let (a, b) = local::pair(1);
        let (_server, peer) = tokio::try_join!(server.connect(a), client.connect(b)).unwrap();
        let shop = ShopClient::new(peer);
        let calls = (0..32u32).map(|i| {
            let shop = shop.clone();
            tokio::spawn(async move { shop.mirror(i, 1).await })
        });
        let ticks = (0..32u64).map(|_| {
            let shop = shop.clone();
            tokio::spawn(async move { shop.tick(1).await })
        });
        let ticks: Vec<_> = ticks.collect();
        for (i, call) in calls.enumerate() {
            assert_eq!(call.await.unwrap().unwrap().1, i as u64 + 1);
        }
        for tick in ticks {
            tick.await.unwrap().unwrap();
        }
        // Every one-way call ran: a sync call after them finds all 32 (they run in order,
        // the sync call may overtake the last ones, so wait for the count).
        while state.ticks.load(Ordering::SeqCst) < 32 {
            let ticked = state.ticked.notified();
            tokio::pin!(ticked);
            ticked.as_mut().enable();
            if state.ticks.load(Ordering::SeqCst) >= 32 {
                break;
            }
            ticked.await;
        }
        // A deadline that passes gives the error naming the method, and the call is
        // cancelled at the server (its credit comes back: the next call goes through).
        let slow = shop
            .wait_forever()
            .deadline(Duration::from_millis(50))
            .await
            .unwrap_err();
        assert!(
            matches!(
                slow,
                CallError::DeadlineExceeded {
                    method: "wait_forever",
                    ..
                }
            ),
            "{slow}"
        );
        assert_eq!(shop.mirror(1, 2).await.unwrap().1, 3);
    })
    .await;
}
