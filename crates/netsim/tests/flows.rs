//! The link simulator's flows: closed when idle, the least recently used closed to make
//! room when the cap is reached, and every client served either way.

use core::time::Duration;

use tokio::time::timeout;
use volley_emulator::{Board, BoardConfig};
use volley_netsim::{LinkConfig, LinkSim};
use volley_proto::scp::sdp::Address;
use volley_transport_udp::{ScpClient, ScpConfig};

async fn board() -> Board {
    volley_emulator::testing::board(BoardConfig::default()).await
}

/// One sver through `link` from a fresh socket (a new flow).
async fn sver_through(link: &LinkSim) {
    let mut client = ScpClient::connect(link.local_addr(), ScpConfig::default())
        .await
        .unwrap();
    timeout(Duration::from_secs(10), client.sver(Address::core(0, 0, 0)))
        .await
        .expect("an answer within 10 s")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_flows_are_closed_and_a_returning_client_gets_a_new_one() {
    let board = board().await;
    let config = LinkConfig {
        idle_timeout: Duration::from_millis(50),
        ..LinkConfig::default()
    };
    let link = volley_netsim::testing::relay(board.udp_addr(), config);
    let mut client = ScpClient::connect(link.local_addr(), ScpConfig::default())
        .await
        .unwrap();
    let chip = Address::core(0, 0, 0);
    client.sver(chip).await.unwrap();
    assert_eq!(link.stats().flows, 1);
    // Wait (bounded) for the sweep to close the idle flow.
    timeout(Duration::from_secs(10), async {
        while link.stats().expired == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the idle flow closed within 10 s");
    assert_eq!(link.stats().flows, 0);
    timeout(Duration::from_secs(10), client.sver(chip))
        .await
        .expect("an answer after the flow was closed")
        .unwrap();
    assert_eq!(link.stats().flows, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_flow_cap_the_least_recently_used_flow_makes_room() {
    let board = board().await;
    let config = LinkConfig {
        max_flows: 4,
        ..LinkConfig::default()
    };
    let link = volley_netsim::testing::relay(board.udp_addr(), config);
    for _ in 0..12 {
        sver_through(&link).await;
    }
    let stats = link.stats();
    assert_eq!((stats.flows, stats.evicted), (4, 8), "{stats:?}");
    // Counted before the board even answers, so before the client has its reply.
    assert_eq!(stats.delivered_up, 12);
}
