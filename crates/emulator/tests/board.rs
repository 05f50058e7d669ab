//! The emulator against the bytes rig 2.4.1 and SpiNNMan put on the wire,
//! its errors, and its transient-tag pool.

use core::time::Duration;

use tokio::net::UdpSocket;
use tokio::time::timeout;
use volley_emulator::{Board, BoardConfig};
use volley_proto::scp::fixtures::{READ_REP, READ_REQ, SVER_REP, SVER_REQ, WRITE_REP, WRITE_REQ};
use volley_proto::scp::{ReplyRepr, ReturnCode};

const WAIT: Duration = Duration::from_secs(5);

async fn board(config: BoardConfig) -> (Board, UdpSocket) {
    let board = volley_emulator::testing::board(config).await;
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.connect(board.udp_addr()).await.unwrap();
    (board, socket)
}

async fn exchange(socket: &UdpSocket, request: &[u8]) -> Vec<u8> {
    socket.send(request).await.unwrap();
    let mut buf = [0u8; 512];
    let n = timeout(WAIT, socket.recv(&mut buf))
        .await
        .expect("the board did not answer within 5 s")
        .unwrap();
    buf[..n].to_vec()
}

#[tokio::test]
async fn answers_rigs_captured_requests_byte_for_byte() {
    let (board, socket) = board(BoardConfig::default()).await;
    assert_eq!(exchange(&socket, SVER_REQ).await, SVER_REP);
    assert_eq!(exchange(&socket, WRITE_REQ).await, WRITE_REP);
    assert_eq!(
        board.read_memory(1, 2, 0x6024_0002, 6).unwrap(),
        [0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]
    );
    board.write_memory(1, 2, 0x6024_0000, &[0, 1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(exchange(&socket, READ_REQ).await, READ_REP);
    // SpiNNMan's form of the same read (source 255, 255) gets the same data back.
    let mut spinnman = READ_REQ.to_vec();
    spinnman[8] = 0xff;
    spinnman[9] = 0xff;
    let reply = exchange(&socket, &spinnman).await;
    assert_eq!(&reply[14..], &READ_REP[14..]);
    assert_eq!(board.stats().replies, 4);
}

#[tokio::test]
async fn bad_requests_get_the_return_codes_scamp_gives() {
    let (board, socket) = board(BoardConfig::default()).await;
    let rc = |reply: Vec<u8>| ReplyRepr::parse(&reply).unwrap().rc;

    // Under 24 bytes of SDP: RC_LEN, seq echoed.
    let reply = exchange(&socket, &READ_REQ[..20]).await;
    assert_eq!((rc(reply.clone()), reply[12]), (ReturnCode::LEN, 2));
    // Unknown command.
    let mut unknown = READ_REQ.to_vec();
    unknown[10] = 99;
    assert_eq!(rc(exchange(&socket, &unknown).await), ReturnCode::CMD);
    // Read of 257 bytes, a bad data type, and an address outside SDRAM.
    let mut long = READ_REQ.to_vec();
    long[18..22].copy_from_slice(&257u32.to_le_bytes());
    assert_eq!(rc(exchange(&socket, &long).await), ReturnCode::ARG);
    let mut ty = READ_REQ.to_vec();
    ty[22] = 7;
    assert_eq!(rc(exchange(&socket, &ty).await), ReturnCode::ARG);
    let mut outside = READ_REQ.to_vec();
    outside[14..18].copy_from_slice(&0x1000u32.to_le_bytes());
    assert_eq!(rc(exchange(&socket, &outside).await), ReturnCode::ARG);
    // A chip that is not on the board.
    let mut far = READ_REQ.to_vec();
    far[7] = 40;
    assert_eq!(rc(exchange(&socket, &far).await), ReturnCode::ROUTE);

    // Oversize datagrams are dropped; the next request is still answered.
    socket.send(&[0u8; 300]).await.unwrap();
    assert_eq!(rc(exchange(&socket, SVER_REQ).await), ReturnCode::OK);
    assert_eq!(board.stats().dropped_oversize, 1);
    assert_eq!(board.stats().error_replies, 6);
}

#[tokio::test]
async fn requests_beyond_the_transient_tag_pool_are_dropped() {
    // Every reply takes 300 ms: the pool of 8 tags fills, the 9th and 10th are dropped.
    let (board, socket) = board(BoardConfig {
        processing_delay: Duration::from_millis(300),
        ..BoardConfig::default()
    })
    .await;
    for seq in 0..10u8 {
        let mut request = SVER_REQ.to_vec();
        request[12] = seq;
        socket.send(&request).await.unwrap();
    }
    let mut seqs = Vec::new();
    let mut buf = [0u8; 512];
    for _ in 0..8 {
        let n = timeout(WAIT, socket.recv(&mut buf))
            .await
            .expect("a reply")
            .unwrap();
        seqs.push(ReplyRepr::parse(&buf[..n]).unwrap().seq);
    }
    seqs.sort();
    assert_eq!(seqs, (0..8).collect::<Vec<u16>>());
    assert_eq!(board.stats().dropped_no_tag, 2);
    // With the tags free again, a new request is answered.
    assert_eq!(exchange(&socket, SVER_REQ).await.len(), SVER_REP.len());
}

/// A storm of 128 MiB FILLs to 63 chips (8 GB when fills allocated their bytes) holds
/// no memory, and a 64 KiB write and read-back in the middle of it is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_fills_holds_no_memory_and_leaves_room_to_work() {
    use volley_emulator::{SDRAM_BASE, SDRAM_SIZE};
    use volley_proto::scp;
    use volley_proto::scp::sdp::Address;
    use volley_transport_udp::{ScpClient, ScpConfig};

    let config = BoardConfig {
        memory_budget: 4 << 20,
        ..BoardConfig::default()
    };
    let (board, storm) = board(config).await;
    let storm = tokio::spawn(async move {
        let mut datagram = [0u8; scp::MAX_DATAGRAM_LEN];
        for round in 0..4u32 {
            // Every chip but (3, 4), whose memory the client below checks.
            for chip in (0..64u8).filter(|&c| c != 3 * 8 + 4) {
                let mut request = scp::fill_request(
                    Address::core(chip / 8, chip % 8, 0),
                    SDRAM_BASE,
                    round,
                    SDRAM_SIZE,
                );
                request.sdp.flags = scp::sdp::Flags::NO_REPLY;
                let n = request.emit(&mut datagram).unwrap();
                storm.send(&datagram[..n]).await.unwrap();
            }
        }
    });
    let mut client = ScpClient::connect(board.udp_addr(), ScpConfig::default().with_window(8))
        .await
        .unwrap();
    let chip = Address::core(3, 4, 0);
    let data: Vec<u8> = (0..64 * 1024u32).map(|i| (i * 13) as u8).collect();
    timeout(WAIT, async {
        client.write(chip, SDRAM_BASE + 4096, &data).await.unwrap();
        let back = client
            .read_bytes(chip, SDRAM_BASE + 4096, data.len())
            .await
            .unwrap();
        assert!(back == data, "read back during a fill storm differs");
    })
    .await
    .expect("a 64 KiB write and read-back within 5 s of a fill storm");
    storm.await.unwrap();
    let held = board.stats().memory_bytes;
    assert!(held <= 4 << 20, "{held} bytes held");

    // Past the budget: RC_BUF, and memory unchanged.
    let big = vec![1u8; 8 << 20];
    let err = client
        .write(chip, SDRAM_BASE + (64 << 20), &big)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("RC_BUF"), "{err}");
    assert!(board.stats().memory_bytes <= 4 << 20);
}
