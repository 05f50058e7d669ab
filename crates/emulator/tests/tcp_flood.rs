//! A host that floods the board's TCP side with requests and reads no replies, while the
//! board delays each reply: the board stops reading that connection once its queues are
//! full, so its memory stays bounded, and every request it took is answered in order.

use core::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use volley_emulator::{Board, BoardConfig};
use volley_proto::scp::fixtures::{SVER_REP, SVER_REQ};
use volley_proto::wire::frame::{Decoder, Header};
use volley_transport_udp::SCP_FRAME_TYPE;

/// This process's resident memory, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("a VmRSS line");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_against_a_delayed_board_is_held_back_with_memory_bounded() {
    let config = BoardConfig {
        processing_delay: Duration::from_millis(200),
        ..BoardConfig::default()
    };
    let board = Board::bind(
        "127.0.0.1:0".parse().unwrap(),
        Some("127.0.0.1:0".parse().unwrap()),
        config,
    )
    .await
    .unwrap();
    let mut stream = TcpStream::connect(board.tcp_addr().unwrap()).await.unwrap();
    let before = rss();

    // Up to a million version requests (35 MB), 64 KiB at a time, until the board has
    // stopped taking them for half a second.
    let total = 1_000_000u32;
    let mut sent = 0u32;
    let mut chunk = Vec::with_capacity(64 * 1024);
    let held_back = loop {
        if sent == total {
            break false;
        }
        chunk.clear();
        while sent < total && chunk.len() + 64 < 64 * 1024 {
            let header = Header::new(SCP_FRAME_TYPE, sent, SVER_REQ.len()).unwrap();
            chunk.extend_from_slice(&header.emit());
            chunk.extend_from_slice(SVER_REQ);
            sent += 1;
        }
        let write = tokio::time::timeout(Duration::from_millis(500), stream.write_all(&chunk));
        match write.await {
            Ok(written) => written.unwrap(),
            Err(_) => break true,
        }
    };
    let grown = rss().saturating_sub(before);
    let stats = board.stats();
    assert!(
        held_back,
        "the board took all {total} requests without holding back"
    );
    // Replies already handed to the connection's writer sit in its 1 MiB budget or in
    // the kernel's socket buffers (whose size the kernel tunes); what the board itself
    // holds is the requests taken but not yet answered: at most its 16 Ki delayed
    // replies and the one waiting for room in the writer.
    let backlog = stats.requests - stats.replies;
    assert!(
        backlog <= 16 * 1024 + 1,
        "the board holds {backlog} requests it could not answer yet (took {}, answered {})",
        stats.requests,
        stats.replies
    );
    assert!(
        grown < 48 << 20,
        "memory grew by {} MiB during the flood",
        grown >> 20
    );

    // Every request taken so far is answered, in order, with the version reply.
    let decoder = Decoder::default();
    let mut buf = bytes::BytesMut::with_capacity(1 << 20);
    let mut next = 0u32;
    let want = 20_000u32;
    tokio::time::timeout(Duration::from_secs(60), async {
        while next < want {
            if stream.read_buf(&mut buf).await.unwrap() == 0 {
                panic!("the board closed the connection after {next} replies");
            }
            while let Ok(Some((frame, used))) = decoder.decode(&buf) {
                assert_eq!((frame.ty, frame.id), (SCP_FRAME_TYPE, next));
                assert_eq!(frame.body, SVER_REP);
                next += 1;
                let _ = buf.split_to(used);
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("only {next} of {want} replies within 60 s"));
    board.shutdown().await;
}
