//! Authentication at the hello: a server that checks tokens admits the right one and
//! refuses a missing or wrong one at once, with a typed error at the client.

use core::net::SocketAddr;
use core::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use volley_rpc::link::framed::FramedLink;
use volley_rpc::{AuthRequest, Config, ConnectError, Endpoint, ServerHandle, ServerStats, serve};
use volley_rpc::{Listener, listener_config};

mod common;
use common::{Seen, Test, server_router, test::Echo, within};

async fn server(endpoint: Endpoint<Test>) -> (ServerHandle, SocketAddr) {
    let listener = Listener::bind_tcp("127.0.0.1:0".parse().unwrap(), listener_config(8))
        .await
        .unwrap();
    let server = serve(endpoint, listener);
    let addr = server.local_addr().unwrap();
    (server, addr)
}

async fn client(
    addr: SocketAddr,
    token: Option<&str>,
) -> Result<volley_rpc::Peer<Test>, ConnectError> {
    let mut endpoint = Endpoint::<Test>::new(Config::default()).unwrap();
    if let Some(token) = token {
        endpoint = endpoint.token(token.to_owned()).unwrap();
    }
    endpoint
        .connect(FramedLink::connect_tcp(addr).await.unwrap())
        .await
}

#[tokio::test]
async fn a_token_check_admits_the_right_token_only() {
    within(30, async {
        let endpoint = Endpoint::<Test>::new(Config::default())
            .unwrap()
            .serve(server_router(Arc::new(Seen::default())))
            .require_token("s3cret")
            .unwrap();
        let (server, addr) = server(endpoint).await;
        let good = client(addr, Some("s3cret")).await.unwrap();
        assert_eq!(good.call::<Echo>(&"in".into()).await.unwrap(), "in");
        for token in [None, Some("s3creT"), Some("s3cret-and-more")] {
            let refused = client(addr, token).await.unwrap_err();
            assert!(
                matches!(refused, ConnectError::Unauthenticated),
                "{token:?}: {refused}"
            );
            assert_eq!(refused.to_string(), "unauthenticated");
        }
        // The refusals cost the admitted connection nothing.
        assert_eq!(good.call::<Echo>(&"still".into()).await.unwrap(), "still");
        // The server counts them for a program that does not read its log (the count
        // follows the refusal the client already has).
        let counted = |s: ServerStats| s.connected == 1 && s.refused == 3 && s.unauthenticated == 3;
        while !counted(server.stats()) {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

/// An address that keeps failing is refused at once, its token not even looked at, for
/// a while; the check sees it again afterwards.
#[tokio::test]
async fn failures_past_three_refuse_an_address_unchecked() {
    within(30, async {
        let checks = Arc::new(AtomicUsize::new(0));
        let counted = checks.clone();
        let endpoint = Endpoint::<Test>::new(Config::default())
            .unwrap()
            .serve(server_router(Arc::new(Seen::default())))
            .authenticate(move |request: AuthRequest| {
                counted.fetch_add(1, Ordering::SeqCst);
                core::future::ready(request.token.as_deref() == Some(&b"s3cret"[..]))
            });
        let (_server, addr) = server(endpoint).await;
        for _ in 0..4 {
            assert!(client(addr, Some("wrong")).await.is_err());
        }
        assert_eq!(
            checks.load(Ordering::SeqCst),
            4,
            "the fourth failure starts the penalty"
        );
        // Within the penalty even the right token is refused, unchecked.
        let refused = client(addr, Some("s3cret")).await.unwrap_err();
        assert!(
            matches!(refused, ConnectError::Unauthenticated),
            "{refused}"
        );
        assert_eq!(checks.load(Ordering::SeqCst), 4, "refused without a check");
    })
    .await;
}

/// What a check saw: the peer's address and its token.
type Checked = (Option<SocketAddr>, Option<Vec<u8>>);

#[tokio::test]
async fn a_check_sees_the_address_and_the_token() {
    within(30, async {
        let seen: Arc<Mutex<Vec<Checked>>> = Arc::default();
        let log = seen.clone();
        let endpoint = Endpoint::<Test>::new(Config::default())
            .unwrap()
            .serve(server_router(Arc::new(Seen::default())))
            .authenticate(move |request: AuthRequest| {
                let log = log.clone();
                async move {
                    let token = request.token.map(|t| t.to_vec());
                    let admit = token.as_deref() == Some(b"ok".as_slice());
                    log.lock()
                        .unwrap()
                        .push((request.connection.peer_addr, token));
                    admit
                }
            });
        let (_server, addr) = server(endpoint).await;
        client(addr, Some("ok")).await.unwrap();
        assert!(matches!(
            client(addr, Some("no")).await,
            Err(ConnectError::Unauthenticated)
        ));
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        assert!(
            seen.iter()
                .all(|(a, _)| a.is_some_and(|a| a.ip().is_loopback()))
        );
        assert_eq!(seen[0].1.as_deref(), Some(b"ok".as_slice()));
        assert_eq!(seen[1].1.as_deref(), Some(b"no".as_slice()));
    })
    .await;
}

#[test]
fn tokens_are_checked_before_anything_connects() {
    let empty = Endpoint::<Test>::new(Config::default()).unwrap().token("");
    assert!(matches!(empty, Err(ConnectError::Config(_))));
    let long = Endpoint::<Test>::new(Config::default())
        .unwrap()
        .require_token(vec![7u8; 513]);
    assert!(matches!(long, Err(ConnectError::Config(_))));
}
