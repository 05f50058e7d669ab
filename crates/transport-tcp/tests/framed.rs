//! The symmetric layer: both ends calling on one connection, replies and one-way frames
//! that take no request slot, every queue bounded (the writer's byte budget, the
//! incoming queue, pausing), large frames never copied on either side, the idle timeout.

use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use std::io;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use volley_proto::wire::frame::Header;
use volley_testkit::within;
use volley_transport_tcp::{
    Config, Connection, Error, FRAME_COST, Framed, Role, Unsolicited, testing,
};

/// Whether `f` is still pending after `ms` (for "this must wait" checks).
async fn still_waiting<T>(ms: u64, f: impl Future<Output = T>) -> bool {
    tokio::time::timeout(Duration::from_millis(ms), f)
        .await
        .is_err()
}

fn payload(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

fn pair(a: Config, b: Config) -> ((Framed, Unsolicited), (Framed, Unsolicited)) {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let (r, w) = tokio::io::split(ours);
    let (r2, w2) = tokio::io::split(theirs);
    (Framed::new(r, w, a), Framed::new(r2, w2, b))
}

/// Answers each incoming frame with its body reversed, same type and id.
async fn reverser(framed: Framed, mut incoming: Unsolicited) {
    while let Ok(frame) = incoming.recv().await {
        let mut body = frame.body.to_vec();
        body.reverse();
        if framed
            .send(frame.ty, frame.id, &[], body.into())
            .await
            .is_err()
        {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_ends_call_each_other_on_one_connection() {
    within(30, async {
        let acceptor = Config {
            role: Role::Acceptor,
            ..Config::default()
        };
        let ((a, a_in), (b, b_in)) = pair(Config::default(), acceptor);
        tokio::spawn(reverser(a.clone(), a_in));
        tokio::spawn(reverser(b.clone(), b_in));
        let (a, b) = (Connection::from(a), Connection::from(b));
        let calls = |conn: Connection, tag: u8| async move {
            let mut pipeline = conn.pipeline();
            let mut ids = Vec::new();
            for i in 0..200u32 {
                ids.push(
                    pipeline
                        .send(tag, &i.to_be_bytes(), Bytes::new())
                        .await
                        .unwrap(),
                );
            }
            for _ in 0..200 {
                let reply = pipeline.recv().await.unwrap();
                assert_eq!(reply.ty, tag);
                let mut body = reply.body.to_vec();
                body.reverse();
                let i = u32::from_be_bytes(body.try_into().unwrap());
                assert_eq!(reply.id, ids[i as usize]);
            }
            ids
        };
        let (from_a, from_b) = tokio::join!(calls(a.clone(), 1), calls(b.clone(), 2));
        assert!(
            from_a.iter().all(|id| id % 2 == 1),
            "the initiator's ids are odd"
        );
        assert!(
            from_b.iter().all(|id| id % 2 == 0),
            "the acceptor's ids are even"
        );
        // Each end answered the other's 200 calls and matched its own 200 replies.
        for conn in [&a, &b] {
            let stats = conn.stats();
            assert_eq!((stats.incoming, stats.unmatched), (200, 0));
            assert_eq!(stats.frames_received, 400);
        }
    })
    .await;
}

#[tokio::test]
async fn replies_and_one_way_frames_take_no_request_slot() {
    within(30, async {
        let ((a, _a_in), (_b, mut b_in)) = pair(
            Config {
                max_in_flight: 1,
                ..Config::default()
            },
            Config::default(),
        );
        let conn = Connection::from(a.clone());
        let mut pipeline = conn.pipeline();
        pipeline.send(1, b"call", Bytes::new()).await.unwrap();
        // The one slot is taken: another request waits for it...
        let mut second = conn.pipeline();
        assert!(still_waiting(100, second.send(1, b"waits", Bytes::new())).await);
        // ...but one-way frames go at once, and arrive in order.
        for i in 0..100u32 {
            a.send(7, i, b"one-way", Bytes::new()).await.unwrap();
        }
        let first = b_in.recv().await.unwrap();
        assert_eq!(&first.body[..], b"call");
        for i in 0..100u32 {
            let frame = b_in.recv().await.unwrap();
            assert_eq!(
                (frame.ty, frame.id, &frame.body[..]),
                (7, i, &b"one-way"[..])
            );
        }
    })
    .await;
}

/// A stream that takes no bytes at all until its peer is gone: a peer that never reads.
struct Stuck;

impl AsyncWrite for Stuck {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, _: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Pending
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Pending
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Pending
    }
}

impl AsyncRead for Stuck {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Pending
    }
}

#[tokio::test]
async fn every_send_waits_on_the_write_budget() {
    within(30, async {
        let budget = 64 * 1024;
        let (framed, _incoming) = Framed::new(
            Stuck,
            Stuck,
            Config {
                write_budget: budget,
                ..Config::default()
            },
        );
        let conn = Connection::from(framed.clone());
        // Each frame costs its bytes in memory plus what its descriptor holds.
        let frame = 4096 + FRAME_COST + 4;
        let mut queued = 0;
        let mut pipelines = Vec::new();
        // One-way frames, replies and requests all count against the budget, and the
        // writer never gets a byte out: sends stop once it is full.
        for i in 0u32.. {
            let body = payload(4096, i as u8);
            let sent = match i % 3 {
                0 => still_waiting(200, framed.send(1, i, b"head", body)).await,
                1 => still_waiting(200, framed.send(2, i, b"repl", body)).await,
                _ => {
                    let mut pipeline = conn.pipeline();
                    let waiting = still_waiting(200, pipeline.send(3, b"call", body)).await;
                    // Keep the request outstanding (it stays queued either way).
                    pipelines.push(pipeline);
                    waiting
                }
            };
            if sent {
                break;
            }
            queued += frame;
            assert_eq!(framed.stats().queued, queued as u64);
            assert!(
                queued <= budget,
                "{queued} bytes queued past a budget of {budget}"
            );
        }
        assert!(
            queued + frame > budget,
            "stopped at {queued} bytes, well short of {budget}"
        );
    })
    .await;
}

#[tokio::test]
async fn a_full_incoming_queue_stops_the_reader_and_loses_nothing() {
    within(30, async {
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        let (r, w) = tokio::io::split(ours);
        let (framed, mut incoming) = Framed::new(
            r,
            w,
            Config {
                incoming_queue: 4,
                ..Config::default()
            },
        );
        // The peer sends far more than the pipe holds; nobody takes frames, so the
        // reader stops and the peer's writes stop with it.
        let frames = 20_000u32;
        let mut wire = Vec::new();
        for i in 0..frames {
            wire.extend_from_slice(&Header::new(5, i, 8).unwrap().emit());
            wire.extend_from_slice(&u64::from(i).to_be_bytes());
        }
        let mut writer = tokio::spawn(async move {
            theirs.write_all(&wire).await.unwrap();
            theirs
        });
        assert!(
            still_waiting(300, &mut writer).await,
            "the peer wrote everything: nothing held it back"
        );
        let received = framed.stats().frames_received;
        assert!(
            received < u64::from(frames) / 2,
            "{received} frames read with the application taking none"
        );
        for i in 0..frames {
            let frame = incoming.recv().await.unwrap();
            assert_eq!(
                (frame.id, &frame.body[..]),
                (i, &u64::from(i).to_be_bytes()[..])
            );
        }
        drop(writer.await.unwrap());
    })
    .await;
}

#[tokio::test]
async fn pausing_one_connection_stalls_no_other() {
    within(30, async {
        let ((a, mut a_in), (a_peer, _)) = pair(Config::default(), Config::default());
        let ((_b, mut b_in), (b_peer, _)) = pair(Config::default(), Config::default());
        a.pause_reading();
        for i in 0..10u32 {
            a_peer.send(1, i, b"to a", Bytes::new()).await.unwrap();
            b_peer.send(1, i, b"to b", Bytes::new()).await.unwrap();
        }
        for i in 0..10u32 {
            assert_eq!(b_in.recv().await.unwrap().id, i);
        }
        assert!(
            still_waiting(200, a_in.recv()).await,
            "a paused connection read on"
        );
        a.resume_reading();
        for i in 0..10u32 {
            assert_eq!(a_in.recv().await.unwrap().id, i);
        }
    })
    .await;
}

/// Reads at most `max` bytes per call: a frame arrives in many pieces.
struct Trickle<S> {
    inner: S,
    max: usize,
}

impl<S: AsyncRead + Unpin> AsyncRead for Trickle<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let max = self.max.min(buf.remaining());
        let mut limited = ReadBuf::new(buf.initialize_unfilled_to(max));
        let polled = Pin::new(&mut self.inner).poll_read(cx, &mut limited);
        let n = limited.filled().len();
        buf.advance(n);
        polled
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_frames_are_never_copied_on_either_side() {
    within(60, async {
        let config = Config {
            max_frame_len: 2 << 20,
            ..Config::default()
        };
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let (r, w) = tokio::io::split(ours);
        // Reads of odd sizes, so frames start and end anywhere in a read.
        let reader = Trickle {
            inner: r,
            max: 100_003,
        };
        let conn = Connection::new(reader, w, config);
        tokio::spawn(testing::echo(theirs));
        let mut pipeline = conn.pipeline();
        let sizes = [
            1 << 20,
            700_001,
            3,
            1_500_000,
            40_000,
            1 << 20,
            9,
            2_000_000,
        ];
        let mut held = Vec::new();
        for (i, &len) in sizes.iter().cycle().take(40).enumerate() {
            let body = payload(len, i as u8);
            pipeline.send(1, &[], body.clone()).await.unwrap();
            let reply = pipeline.recv().await.unwrap();
            assert!(
                reply.body == body,
                "frame {i} of {len} bytes came back different"
            );
            // Keep some replies alive, so buffers cannot all be reused in place.
            if i % 3 == 0 {
                held.push(reply);
            }
        }
        let stats = conn.stats();
        assert_eq!(stats.bytes_moved, 0, "the reader moved a partly read frame");
        // Only the 3- and 9-byte payloads are under the copy threshold.
        assert_eq!(
            stats.bytes_copied,
            5 * (3 + 9),
            "the writer copied a large payload"
        );
    })
    .await;
}

#[tokio::test]
async fn an_idle_peer_is_timed_out_with_a_clear_error() {
    within(30, async {
        let ((a, mut a_in), (_b, _b_in)) = pair(
            Config {
                idle_timeout: Some(Duration::from_millis(100)),
                ..Config::default()
            },
            Config::default(),
        );
        let e = a_in.recv().await.unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "timed out after 100ms waiting for a byte from an idle peer"
        );
        assert_eq!(a.failure(), Some(e));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_go_out_back_to_back_and_only_small_ones_are_copied() {
    within(30, async {
        let ((a, _a_in), (_b, mut b_in)) = pair(Config::default(), Config::default());
        let small = payload(10, 1);
        let big = payload(100_000, 2);
        let empty = Bytes::new();
        let big2 = payload(70_000, 3);
        a.send_segments(
            7,
            42,
            b"head",
            vec![small.clone(), big.clone(), empty, big2.clone()],
        )
        .await
        .unwrap();
        let frame = b_in.recv().await.unwrap();
        assert_eq!((frame.ty, frame.id), (7, 42));
        let mut want = b"head".to_vec();
        for piece in [&small, &big, &big2] {
            want.extend_from_slice(piece);
        }
        assert_eq!(frame.body, want);
        // The writer counts what it copies: the 10-byte piece, not the large ones.
        assert_eq!(a.stats().bytes_copied, 10);
    })
    .await;
}

/// Queues `frames` small frames before the writer runs (a current-thread runtime runs it
/// only when this task waits), checks they all arrive in order, and gives the writes
/// the sender made.
async fn writes_for(frames: u32, config: Config) -> u64 {
    let (ours, theirs) = tokio::net::UnixStream::pair().unwrap();
    let (a, _a_in) = Framed::from_unix(ours, config);
    let (_b, mut b_in) = Framed::from_unix(theirs, Config::default());
    for id in 0..frames {
        a.try_send_parts(9, id, b"h", payload(16, id as u8), Vec::new())
            .expect("room in the write budget");
    }
    for id in 0..frames {
        let frame = b_in.recv().await.unwrap();
        assert_eq!(frame.id, id, "frames arrive in the order sent");
        assert_eq!(&frame.body[1..], &payload(16, id as u8)[..]);
    }
    let stats = a.stats();
    assert_eq!(stats.frames_sent, u64::from(frames));
    stats.writes
}

#[tokio::test]
async fn the_writer_writes_at_most_write_batch_frames_at_once() {
    within(30, async {
        let parts = writes_for(
            100,
            Config {
                write_batch: 10,
                ..Config::default()
            },
        )
        .await;
        assert_eq!(parts, 10, "100 queued frames, 10 a write");
        let whole = writes_for(100, Config::default()).await;
        assert_eq!(whole, 1, "by default all that is queued goes in one write");
        // Zero is raised to one frame a write, not a writer that never writes.
        let ones = writes_for(
            3,
            Config {
                write_batch: 0,
                ..Config::default()
            },
        )
        .await;
        assert_eq!(ones, 3);
    })
    .await;
}
