//! ScpClient against the emulator, directly and through the link simulator: bulk
//! transfers verified byte for byte, errors, timeouts, auto window, TCP.

use core::time::Duration;
use std::time::Instant;

use volley_emulator::{Board, BoardConfig};
use volley_netsim::LinkConfig;
use volley_proto::scp::sdp::Address;
use volley_proto::scp::window::Rto;
use volley_proto::scp::{self, Command, ReturnCode};
use volley_testkit::within;
use volley_transport_udp::{NoReply, Op, ScpClient, ScpConfig, ScpError, Source, WindowSize};

const SDRAM: u32 = 0x6000_0000;

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

/// A client for a board that never answers (a socket bound and kept silent), with a
/// fixed retransmit timeout of `timeout_ms` and `tries` sends per request; the socket is
/// returned to keep it open.
async fn dead_board_client(
    timeout_ms: u64,
    tries: u32,
    base: ScpConfig,
) -> (ScpClient, std::net::UdpSocket) {
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let config = ScpConfig {
        rto: Rto::Fixed(volley_proto::time::Duration::from_millis(timeout_ms)),
        max_tries: tries,
        ..base
    };
    let client = ScpClient::connect(silent.local_addr().unwrap(), config)
        .await
        .unwrap();
    (client, silent)
}

/// A fake board that answers every datagram with `answer(request)`, until dropped.
async fn fake_board(
    answer: impl Fn(&[u8]) -> Vec<u8> + Send + 'static,
) -> (core::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = socket.recv_from(&mut buf).await {
            let _ = socket.send_to(&answer(&buf[..n]), from).await;
        }
    });
    (addr, task)
}

fn fixed(timeout_ms: u64, tries: u32) -> ScpConfig {
    ScpConfig {
        rto: Rto::Fixed(volley_proto::time::Duration::from_millis(timeout_ms)),
        max_tries: tries,
        ..ScpConfig::default()
    }
}

async fn board() -> Board {
    volley_emulator::testing::board_with_tcp(BoardConfig::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_mib_survive_loss_duplication_and_reordering() {
    within(120, async {
        let board = board().await;
        let link = volley_netsim::testing::relay(
            board.udp_addr(),
            LinkConfig {
                loss: 0.05,
                dup: 0.01,
                reorder: 0.01,
                seed: 42,
                ..LinkConfig::default()
            },
        );
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
        let (mut client, _silent) = dead_board_client(100, 3, ScpConfig::default()).await;
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
        assert!(
            err.to_string().contains("timed out after 3 tries")
                && err.to_string().ends_with(": no reply"),
            "{err}"
        );
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
        let (mut client, _silent) =
            dead_board_client(20, 2, ScpConfig::default().with_window(8)).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_is_connection_refused_at_once() {
    within(30, async {
        let addr = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut client = ScpClient::connect(addr, ScpConfig::default())
            .await
            .unwrap();
        let start = Instant::now();
        let err = client
            .read_bytes(Address::core(0, 0, 0), SDRAM, 1024)
            .await
            .unwrap_err();
        assert!(
            matches!(err, ScpError::Refused { peer } if peer == addr),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            format!("connection refused: nothing is listening at {addr}")
        );
        // The first ICMP report, not 9 s of retries.
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        assert!(client.stats().refused >= 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_board_busy_for_every_try_says_so() {
    within(30, async {
        let (addr, _board) = fake_board(|request| {
            let mut reply = request.to_vec();
            // Swap the SDP ports round as a board does, and answer RC_P2P_BUSY.
            reply[10..12].copy_from_slice(&ReturnCode::P2P_BUSY.0.to_le_bytes());
            reply.truncate(14);
            reply
        })
        .await;
        let mut client = ScpClient::connect(addr, fixed(20, 4)).await.unwrap();
        let err = client
            .read_bytes(Address::core(0, 0, 0), SDRAM, 16)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                ScpError::Timeout {
                    tries: 4,
                    why: NoReply::Busy { replies: 4, .. },
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .ends_with("board busy (RC_P2P_BUSY) for all 4 tries"),
            "{err}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_board_answering_garbage_says_what_did_not_parse() {
    within(30, async {
        let (addr, _board) = fake_board(|_| vec![0xde, 0xad, 0xbe]).await;
        let mut client = ScpClient::connect(addr, fixed(20, 3)).await.unwrap();
        let err = client
            .read_bytes(Address::core(0, 0, 0), SDRAM, 16)
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(
                err,
                ScpError::Timeout {
                    why: NoReply::Garbage { replies: 3, .. },
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(text.contains("3 replies that did not parse: "), "{text}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_settings_and_lengths_are_refused_before_anything_is_sent() {
    within(30, async {
        let board = board().await;
        for config in [
            ScpConfig::default().with_window(65_537),
            ScpConfig::default().with_window(0),
            fixed(0, 3),
            fixed(10, 0),
            fixed(3_600_001, 3),
        ] {
            let err = ScpClient::connect(board.udp_addr(), config.clone())
                .await
                .unwrap_err();
            assert!(matches!(err, ScpError::Config(_)), "{config:?}: {err}");
        }
        let err = ScpClient::connect(board.udp_addr(), ScpConfig::default().with_window(65_537))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("1..=1024"), "{err}");
        let mut client = ScpClient::connect(board.udp_addr(), ScpConfig::default())
            .await
            .unwrap();
        let chip = Address::core(0, 0, 0);
        // Checked before a byte is allocated: these used to overflow or abort.
        for len in [usize::MAX, 30_000_000_000] {
            let err = client.read_bytes(chip, SDRAM, len).await.unwrap_err();
            assert!(
                err.to_string()
                    .contains("past the end of the 32-bit address space"),
                "{err}"
            );
        }
        assert_eq!(client.stats().sent, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_write_is_one_operation_with_progress() {
    within(60, async {
        let board = board().await;
        let mut client = ScpClient::connect(board.udp_addr(), ScpConfig::default().with_window(16))
            .await
            .unwrap();
        let chip = Address::core(0, 0, 0);
        let data = pattern((1 << 20) + 17, 11);
        let mut reader = std::io::BufReader::new(&data[..]);
        let mut seen = Vec::new();
        let len = data.len() as u32;
        client
            .execute_with_progress(
                &mut [Op::WriteFrom {
                    chip,
                    address: SDRAM,
                    len,
                    source: Source(&mut reader),
                }],
                |done| seen.push(done),
            )
            .await
            .unwrap();
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "progress went backwards"
        );
        assert_eq!(seen.last(), Some(&u64::from(len)));
        assert!(seen.len() > 10, "{} progress calls", seen.len());
        let back = client.read_bytes(chip, SDRAM, data.len()).await.unwrap();
        assert!(back == data, "streamed write read back differs");

        // A source shorter than promised is a clear error, not a short write.
        let short = vec![1u8; 1000];
        let err = client
            .execute(&mut [Op::WriteFrom {
                chip,
                address: SDRAM,
                len: 4096,
                source: Source(&mut &short[..]),
            }])
            .await
            .unwrap_err();
        assert!(matches!(err, ScpError::Source(_)), "{err}");
        assert!(err.to_string().contains("of the 4096 promised"), "{err}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_names_are_resolved_and_tried_in_turn() {
    within(30, async {
        let board = board().await;
        let port = board.udp_addr().port();
        let mut client =
            ScpClient::connect_host(&format!("localhost:{port}"), false, ScpConfig::default())
                .await
                .unwrap();
        assert_eq!(client.peer().port(), port);
        let back = client
            .read_bytes(Address::core(0, 0, 0), SDRAM, 512)
            .await
            .unwrap();
        assert_eq!(back.len(), 512);
        // localhost may resolve to ::1 first while the board listens on 127.0.0.1 only:
        // an address where nothing listens is passed over at its first refusal.
        let closed = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let start = Instant::now();
        let client =
            ScpClient::connect_any(&[closed, board.udp_addr()], false, ScpConfig::default())
                .await
                .unwrap();
        assert_eq!(client.peer(), board.udp_addr());
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        let err = ScpClient::connect_any(&[closed, closed], false, ScpConfig::default())
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("no address answered")
                && err.to_string().contains("connection refused"),
            "{err}"
        );
        let err = ScpClient::connect_host("no-such-host.invalid:1", false, ScpConfig::default())
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("cannot resolve `no-such-host.invalid:1`"),
            "{err}"
        );
    })
    .await;
}
