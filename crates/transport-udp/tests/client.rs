//! ScpClient against the emulator, directly and through the link simulator: bulk
//! transfers verified byte for byte, errors, timeouts, auto window, TCP.

use core::future::Future;
use core::time::Duration;
use std::time::Instant;

use volley_proto::window::Rto;
use volley_proto::wire::scp::{self, Command, ReturnCode};
use volley_proto::wire::sdp::Address;
use volley_transport_udp::{
    Board, BoardConfig, LinkConfig, LinkSim, Op, ScpClient, ScpConfig, ScpError, WindowSize,
};

const SDRAM: u32 = 0x6000_0000;

/// Fails the test if `f` takes longer than `secs`.
async fn within<T>(secs: u64, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .unwrap_or_else(|_| panic!("test did not finish within {secs} s"))
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// A client for a port nothing listens on (a socket bound, then dropped), with a fixed
/// retransmit timeout of `timeout_ms` and `tries` sends per request.
async fn dead_board_client(timeout_ms: u64, tries: u32, base: ScpConfig) -> ScpClient {
    let addr = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config = ScpConfig {
        rto: Rto::Fixed(volley_proto::time::Duration::from_millis(timeout_ms)),
        max_tries: tries,
        ..base
    };
    ScpClient::connect(addr, config).await.unwrap()
}

async fn board() -> Board {
    Board::bind(
        "127.0.0.1:0".parse().unwrap(),
        Some("127.0.0.1:0".parse().unwrap()),
        BoardConfig::default(),
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_mib_survive_loss_duplication_and_reordering() {
    within(120, async {
        let board = board().await;
        let link = LinkSim::start(
            "127.0.0.1:0".parse().unwrap(),
            board.udp_addr(),
            LinkConfig {
                loss: 0.05,
                dup: 0.01,
                reorder: 0.01,
                seed: 42,
                ..LinkConfig::default()
            },
        )
        .unwrap();
        let config = ScpConfig {
            max_tries: 10,
            ..ScpConfig::default().with_window(16)
        };
        let mut client = ScpClient::connect(link.local_addr(), config).await.unwrap();
        let chip = Address::core(0, 0, 0);
        let data = pattern(10 << 20, 1);
        client.write(chip, SDRAM, &data).await.unwrap();
        let back = client.read_bytes(chip, SDRAM, data.len()).await.unwrap();
        assert!(
            back == data,
            "10 MiB read back differ from what was written"
        );
        assert_eq!(board.read_memory(0, 0, SDRAM, 4096).unwrap(), data[..4096]);
        let stats = client.stats();
        let net = link.stats();
        assert!(
            net.dropped > 0 && net.duplicated > 0 && net.reordered > 0,
            "{net:?}"
        );
        assert!(stats.retransmits > 0, "{stats:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_board_times_out_after_n_tries() {
    within(30, async {
        let mut client = dead_board_client(100, 3, ScpConfig::default()).await;
        let start = Instant::now();
        let err = client
            .read_bytes(Address::core(0, 0, 0), SDRAM, 1024)
            .await
            .unwrap_err();
        let elapsed = start.elapsed();
        assert!(
            matches!(
                err,
                ScpError::Timeout {
                    cmd: Command::READ,
                    tries: 3,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("timed out after 3 tries"), "{err}");
        // 3 tries x 100 ms, give or take a timer tick and scheduling.
        assert!(elapsed >= Duration::from_millis(290), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fatal_return_codes_name_the_chip_and_address() {
    within(30, async {
        let board = board().await;
        let mut client = ScpClient::connect(board.udp_addr(), ScpConfig::default())
            .await
            .unwrap();
        let chip = Address::core(2, 3, 1);
        let err = client.read_bytes(chip, 0x1000, 16).await.unwrap_err();
        assert!(
            matches!(
                err,
                ScpError::Rc {
                    rc: ReturnCode::ARG,
                    address: 0x1000,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "read to chip (2, 3, 1) at 0x00001000 failed: RC_ARG"
        );
        let unknown = scp::RequestRepr::new(chip, Command(99), [0; 3], &[]);
        assert!(matches!(
            client.raw(unknown).await,
            Err(ScpError::Rc {
                rc: ReturnCode::CMD,
                ..
            })
        ));
        // The client carries on after errors.
        client.write(chip, SDRAM + 1, &[1, 2, 3]).await.unwrap();
        assert_eq!(
            client.read_bytes(chip, SDRAM + 1, 3).await.unwrap(),
            [1, 2, 3][..]
        );
        assert!(matches!(
            client.read_bytes(chip, u32::MAX - 2, 16).await,
            Err(ScpError::InvalidArgument(_))
        ));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_window_sets_the_tag_timeout_and_uses_the_pool() {
    within(60, async {
        let board = Board::bind(
            "127.0.0.1:0".parse().unwrap(),
            None,
            BoardConfig {
                // A quarter of replies vanish inside the board and hold their tag.
                reply_loss: 0.25,
                seed: 3,
                ..BoardConfig::default()
            },
        )
        .await
        .unwrap();
        let config = ScpConfig {
            window: WindowSize::Auto,
            max_tries: 20,
            ..ScpConfig::default()
        };
        // The TTO request itself may be lost; retried like any other.
        let mut client = ScpClient::connect(board.udp_addr(), config).await.unwrap();
        assert_eq!(client.window_size(), 8);
        assert_eq!(board.tto(), 1);
        let data = pattern(64 * 1024, 9);
        client
            .write(Address::core(0, 0, 0), SDRAM, &data)
            .await
            .unwrap();
        let back = client
            .read_bytes(Address::core(0, 0, 0), SDRAM, data.len())
            .await
            .unwrap();
        assert!(back == data);
        assert!(board.stats().replies_lost > 0);
        // The retransmit timeout never fell below twice the 10 ms tag timeout.
        assert!(client.stats().rto >= volley_proto::time::Duration::from_millis(20));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_chips_in_one_window_and_fill() {
    within(60, async {
        let board = board().await;
        let mut client = ScpClient::connect(board.udp_addr(), ScpConfig::default().with_window(16))
            .await
            .unwrap();
        let chips = [
            Address::core(0, 0, 0),
            Address::core(1, 1, 0),
            Address::core(7, 7, 3),
        ];
        let blocks: Vec<Vec<u8>> = (0..3).map(|i| pattern(5000 + i * 77, i as u32)).collect();
        let mut ops: Vec<Op<'_>> = chips
            .iter()
            .zip(&blocks)
            .map(|(chip, data)| Op::Write {
                chip: *chip,
                address: SDRAM + 3,
                data,
            })
            .collect();
        ops.push(Op::Fill {
            chip: chips[1],
            address: SDRAM + 0x10_0000,
            value: 0xDEAD_BEEF,
            len: 64,
        });
        client.execute(&mut ops).await.unwrap();
        for ((chip, data), i) in chips.iter().zip(&blocks).zip(0..) {
            assert_eq!(
                board
                    .read_memory(chip.x, chip.y, SDRAM + 3, data.len())
                    .unwrap(),
                *data,
                "chip {i}"
            );
        }
        let mut bufs = [vec![0u8; 5000], vec![0u8; 5077], vec![0u8; 64]];
        let [a, b, c] = &mut bufs;
        client
            .execute(&mut [
                Op::Read {
                    chip: chips[0],
                    address: SDRAM + 3,
                    buf: a,
                },
                Op::Read {
                    chip: chips[1],
                    address: SDRAM + 3,
                    buf: b,
                },
                Op::Read {
                    chip: chips[1],
                    address: SDRAM + 0x10_0000,
                    buf: c,
                },
            ])
            .await
            .unwrap();
        assert_eq!(bufs[0], blocks[0]);
        assert_eq!(bufs[1], blocks[1]);
        assert!(bufs[2].chunks(4).all(|w| w == 0xDEAD_BEEFu32.to_le_bytes()));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_workload_over_tcp() {
    within(60, async {
        let board = board().await;
        let mut client = ScpClient::connect_tcp(
            board.tcp_addr().unwrap(),
            ScpConfig::default().with_window(16),
        )
        .await
        .unwrap();
        let chip = Address::core(0, 0, 0);
        let data = pattern(1 << 20, 5);
        client.write(chip, SDRAM, &data).await.unwrap();
        assert!(client.read_bytes(chip, SDRAM, data.len()).await.unwrap() == data);
        let version = client.sver(chip).await.unwrap();
        assert_eq!(version.buffer_size, 256);
        assert_eq!(client.stats().retransmits, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_batch_leaves_nothing_behind_for_the_next() {
    within(30, async {
        // Nothing listens: a batch of many chunks times out, several at once.
        let mut client = dead_board_client(20, 2, ScpConfig::default().with_window(8)).await;
        let chip = Address::core(0, 0, 0);
        let mut big = vec![0u8; 64 * 1024];
        let mut small = vec![0u8; 4];
        let mut ops = [
            Op::Read {
                chip,
                address: SDRAM,
                buf: &mut small,
            },
            Op::Read {
                chip,
                address: SDRAM,
                buf: &mut big,
            },
        ];
        assert!(matches!(
            client.execute(&mut ops).await,
            Err(ScpError::Timeout { .. })
        ));
        // The next operation, with fewer ops, sees only its own outcome.
        let mut one = [0u8; 4];
        let err = client.read(chip, SDRAM, &mut one).await.unwrap_err();
        assert!(matches!(err, ScpError::Timeout { tries: 2, .. }), "{err}");
    })
    .await;
}

/// A window's worth of requests leaves in one segmented send and its replies come back
/// in one coalesced receive: far fewer system calls than datagrams, the same bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_of_requests_shares_system_calls() {
    let board = board().await;
    let mut client = ScpClient::connect(board.udp_addr(), ScpConfig::default().with_window(16))
        .await
        .unwrap();
    let chip = Address::core(0, 0, 0);
    let data = pattern(1 << 20, 9);
    within(30, client.write(chip, SDRAM, &data)).await.unwrap();
    let back = within(30, client.read_bytes(chip, SDRAM, data.len()))
        .await
        .unwrap();
    assert!(back == data, "read back differs");
    let stats = client.stats();
    let datagrams = 2 * (stats.sent + stats.retransmits);
    assert!(
        stats.syscalls * 2 < datagrams,
        "{} system calls for {datagrams} datagrams each way: not batched",
        stats.syscalls
    );
    // One datagram at a time still works, one call each way.
    let mut lone = ScpClient::connect(board.udp_addr(), ScpConfig::default().with_window(1))
        .await
        .unwrap();
    let back = within(30, lone.read_bytes(chip, SDRAM, 4096))
        .await
        .unwrap();
    assert_eq!(back, data[..4096]);
}
