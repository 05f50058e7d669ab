//! Per-call metadata: pairs sent with a call reach its handler (sync and one-way, over a
//! peer and a reconnecting client), limits are checked before anything is sent and again
//! by the callee, and a peer that takes none is told apart.

use core::time::Duration;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use volley_proto::rpc::{CodecId, Head, Hello, Kind, WIRE_VERSION};
use volley_rpc::link::framed::FramedLink;
use volley_rpc::link::{LinkReceiver, LinkSender, Message, MessageLink, local};
use volley_rpc::{
    CallError, Config, Context, Endpoint, HandlerError, Reconnecting, Service, serve,
};
use volley_rpc::{Listener, listener_config};
use volley_testkit::within;

volley_rpc::service! {
    /// Shows what came with a call.
    pub service Show {
        /// The pairs that came with the call, as text.
        1 => fn pairs() -> Vec<(String, String)>;
        /// Records the `tenant` pair, one way.
        2 => oneway fn note();
    }
}

/// What `note` recorded, and a signal for each record.
#[derive(Default)]
struct Here(Mutex<Vec<Option<String>>>, tokio::sync::Notify);

impl Here {
    /// The notes once there are `n` of them.
    async fn notes(&self, n: usize) -> Vec<Option<String>> {
        loop {
            let recorded = self.1.notified();
            tokio::pin!(recorded);
            recorded.as_mut().enable();
            let notes = self.0.lock().unwrap().clone();
            if notes.len() >= n {
                return notes;
            }
            recorded.await;
        }
    }
}

impl ShowServer for Arc<Here> {
    async fn pairs(&self, cx: Context<Show>) -> Result<Vec<(String, String)>, HandlerError> {
        let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
        Ok(cx
            .metadata()
            .iter()
            .map(|(k, v)| (k.to_owned(), text(v)))
            .collect())
    }

    async fn note(&self, cx: Context<Show>) -> Result<(), HandlerError> {
        let tenant = cx.metadata().get_str("tenant").map(str::to_owned);
        self.0.lock().unwrap().push(tenant);
        self.1.notify_waiters();
        Ok(())
    }
}

fn pair(k: &str, v: &str) -> (String, String) {
    (k.to_owned(), v.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairs_reach_the_handler_and_limits_are_checked_before_sending() {
    within(30, async {
        let here = Arc::new(Here::default());
        let server = Endpoint::<Show>::new(Config::default())
            .unwrap()
            .serve(here.clone().into_router());
        let (a, b) = local::pair(64);
        let client = Endpoint::<Show>::new(Config::default()).unwrap();
        let (_served, peer) = tokio::try_join!(server.connect(a), client.connect(b)).unwrap();
        let show = ShowClient::new(peer);

        assert_eq!(show.pairs().await.unwrap(), []);
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let got = show
            .pairs()
            .metadata("traceparent", traceparent)
            .metadata("tenant", Bytes::from_static(b"blue"))
            .await
            .unwrap();
        assert_eq!(
            got,
            [pair("traceparent", traceparent), pair("tenant", "blue")]
        );

        show.note().metadata("tenant", "green").await.unwrap();
        show.note().await.unwrap();
        // One-way calls run in the order sent.
        assert_eq!(here.notes(2).await, [Some("green".to_owned()), None]);

        // Checked here, before anything is sent: a bad key, too much in all.
        for (key, len) in [("Upper", 1), ("ok", 5000)] {
            let err = show
                .pairs()
                .metadata(key, vec![b'x'; len])
                .await
                .unwrap_err();
            assert!(matches!(err, CallError::Metadata { .. }), "{err}");
            assert!(!err.may_have_run());
        }
        // The connection goes on.
        assert_eq!(
            show.pairs().metadata("a", "b").await.unwrap(),
            [pair("a", "b")]
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_client_sends_them_too() {
    within(30, async {
        let listener = Listener::bind_tcp("127.0.0.1:0".parse().unwrap(), listener_config(8))
            .await
            .unwrap();
        let endpoint = Endpoint::<Show>::new(Config::default())
            .unwrap()
            .serve(Arc::new(Here::default()).into_router());
        let server = serve(endpoint, listener);
        let addr = server.local_addr().unwrap();
        let client = Reconnecting::new(
            Endpoint::<Show>::new(Config::default()).unwrap(),
            move || FramedLink::connect_tcp(addr),
        );
        let show = ShowClient::new(client.clone());
        let got = show.pairs().metadata("tenant", "red").await.unwrap();
        assert_eq!(got, [pair("tenant", "red")]);
        client.shutdown().await;
        server.shutdown().await.unwrap();
    })
    .await;
}

/// A peer of a build from before metadata: its hello sets no capability, and a call with
/// metadata fails here, unsent. A malformed block from a raw peer is refused by the
/// callee with a decode error, and the connection goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_peer_and_a_malformed_block() {
    within(30, async {
        let (a, b) = local::pair(64);
        let (tx, mut rx) = b.split();
        let old = Hello {
            version: WIRE_VERSION,
            codec: CodecId::BINCODE2,
            max_message: 1 << 20,
            credit: 8,
            fingerprint: Show::FINGERPRINT,
            calls: Show::FINGERPRINT,
            capabilities: 0,
        };
        let hello = Message::new(Kind::HELLO, 0, 0, Bytes::copy_from_slice(&old.emit()));
        tx.send(hello).await.unwrap();
        let client = Endpoint::<Show>::new(Config::default()).unwrap();
        let show = ShowClient::new(client.connect(a).await.unwrap());
        let err = show.pairs().metadata("k", "v").await.unwrap_err();
        assert!(
            err.to_string().contains("takes no per-call metadata"),
            "{err}"
        );
        assert_eq!(
            rx.recv().await.unwrap().head.kind,
            Kind::HELLO,
            "only the hello went"
        );

        // The callee's own check.
        let server = Endpoint::<Show>::new(Config::default())
            .unwrap()
            .serve(Arc::new(Here::default()).into_router());
        let (a, b) = local::pair(64);
        let (tx, mut rx) = b.split();
        tx.send(Message::new(
            Kind::HELLO,
            0,
            0,
            Bytes::copy_from_slice(&old.emit()),
        ))
        .await
        .unwrap();
        let _served = server.connect(a).await.unwrap();
        assert_eq!(rx.recv().await.unwrap().head.kind, Kind::HELLO);
        let head = |id| Head {
            kind: Kind::CALL,
            call_id: id,
            method: 1,
            deadline_us: None,
            metadata: true,
        };
        // A block that claims 9 bytes of entries and holds 3.
        let lying = Message {
            head: head(1),
            args: Bytes::from_static(&[9, 0, 1, b'k', 0]).into(),
            segments: Vec::new(),
        };
        tx.send(lying).await.unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(reply.head.kind, Kind::ERROR);
        assert!(String::from_utf8_lossy(&reply.args).contains("bad metadata"));
        // A good block, then the (empty) arguments: served.
        let good = Message {
            head: head(2),
            args: Bytes::from_static(&[5, 0, 1, b'k', 1, 0, b'v']).into(),
            segments: Vec::new(),
        };
        tx.send(good).await.unwrap();
        let reply = rx.recv().await.unwrap();
        assert_eq!(
            reply.head.kind,
            Kind::REPLY,
            "{:?}",
            String::from_utf8_lossy(&reply.args)
        );
    })
    .await;
}

/// A server that authorises per method, from a per-call token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_authorises_per_method_from_a_per_call_token() {
    within(30, async {
        let router = Arc::new(Here::default()).into_router().authorize(|call| {
            call.method != "pairs" || call.metadata.get("token") == Some(&b"s3cret"[..])
        });
        let server = Endpoint::<Show>::new(Config::default())
            .unwrap()
            .serve(router);
        let (a, b) = local::pair(64);
        let client = Endpoint::<Show>::new(Config::default()).unwrap();
        let (_served, peer) = tokio::try_join!(server.connect(a), client.connect(b)).unwrap();
        let show = ShowClient::new(peer);
        for token in [None, Some("wrong")] {
            let call = show.pairs();
            let call = match token {
                Some(t) => call.metadata("token", t),
                None => call,
            };
            let err = call.await.unwrap_err();
            assert!(matches!(err, CallError::Unauthorized { .. }), "{err}");
            assert_eq!(
                err.to_string(),
                "rpc pairs: not authorised: the server's check refused this call"
            );
        }
        let got = show.pairs().metadata("token", "s3cret").await.unwrap();
        assert_eq!(got, [pair("token", "s3cret")]);
        // Another method needs no token.
        show.note().await.unwrap();
    })
    .await;
}
