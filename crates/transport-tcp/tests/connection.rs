//! The framed connection under scripted and hostile IO: partial reads, short writes,
//! `WouldBlock`, a peer that stalls, closes or sends garbage; zero-copy and backpressure.

use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;
use std::collections::HashMap;
use std::io::{self, IoSlice};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};
use volley_proto::wire::frame::{Decoder, HEADER_LEN, Header};
use volley_testkit::within;
use volley_transport_tcp::{Config, Connection, Error, FileRegion, testing};

/// A stream that moves at most `max` bytes per call and says "not ready" (waking itself
/// at once, as a socket's `WouldBlock` then readiness would) on every other call.
struct Choppy {
    inner: DuplexStream,
    max: usize,
    flip: bool,
    vectored: bool,
}

impl Choppy {
    fn stall(&mut self, cx: &mut Context<'_>) -> bool {
        self.flip = !self.flip;
        if self.flip {
            cx.waker().wake_by_ref();
        }
        self.flip
    }
}

impl AsyncRead for Choppy {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.stall(cx) {
            return Poll::Pending;
        }
        let max = self.max.min(buf.remaining());
        let mut small = vec![0u8; max];
        let mut small_buf = ReadBuf::new(&mut small);
        match Pin::new(&mut self.inner).poll_read(cx, &mut small_buf) {
            Poll::Ready(Ok(())) => {
                buf.put_slice(small_buf.filled());
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl AsyncWrite for Choppy {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.stall(cx) {
            return Poll::Pending;
        }
        let max = self.max.min(buf.len());
        Pin::new(&mut self.inner).poll_write(cx, &buf[..max])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // Short vectored writes: only part of the first slices.
        let first: Vec<u8> = bufs
            .iter()
            .flat_map(|b| b.iter().copied())
            .take(self.max)
            .collect();
        self.poll_write(cx, &first)
    }

    fn is_write_vectored(&self) -> bool {
        self.vectored
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn payload(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<_>>()
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survives_partial_reads_short_writes_and_would_block() {
    within(60, async {
        for vectored in [true, false] {
            let (ours, theirs) = tokio::io::duplex(4096);
            let choppy = Choppy {
                inner: ours,
                max: 7,
                flip: false,
                vectored,
            };
            let (read, write) = tokio::io::split(choppy);
            let conn = Connection::new(
                read,
                write,
                Config {
                    max_in_flight: 16,
                    ..Config::default()
                },
            );
            tokio::spawn(testing::echo(theirs));
            let mut pipeline = conn.pipeline();
            let mut expected = HashMap::new();
            for i in 0..200u32 {
                let body = payload((i as usize * 37) % 3000, i as u8);
                let id = loop {
                    // Keep at most 16 outstanding: drain one when the window is full.
                    if pipeline.outstanding() < 16 {
                        break pipeline
                            .send(3, &i.to_be_bytes(), body.clone())
                            .await
                            .unwrap();
                    }
                    let reply = pipeline.recv().await.unwrap();
                    assert_eq!(reply.body, expected.remove(&reply.id).unwrap());
                };
                let mut whole = BytesMut::from(&i.to_be_bytes()[..]);
                whole.extend_from_slice(&body);
                expected.insert(id, whole.freeze());
            }
            while pipeline.outstanding() > 0 {
                let reply = pipeline.recv().await.unwrap();
                assert_eq!(reply.ty, 3);
                assert_eq!(
                    reply.body,
                    expected.remove(&reply.id).unwrap(),
                    "vectored={vectored}"
                );
            }
            assert!(expected.is_empty());
            let stats = conn.stats();
            assert_eq!(stats.frames_sent, 200);
            assert!(stats.writes > 200, "short writes: {stats:?}");
        }
    })
    .await;
}

/// Records where every slice handed to a vectored write points.
struct Recording {
    inner: DuplexStream,
    seen: Arc<Mutex<Vec<(usize, usize)>>>,
}

impl AsyncRead for Recording {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Recording {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.seen
            .lock()
            .unwrap()
            .push((buf.as_ptr() as usize, buf.len()));
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.seen
            .lock()
            .unwrap()
            .extend(bufs.iter().map(|b| (b.as_ptr() as usize, b.len())));
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[tokio::test]
async fn large_payloads_reach_the_socket_uncopied() {
    within(30, async {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (read, write) = tokio::io::split(Recording {
            inner: ours,
            seen: seen.clone(),
        });
        let conn = Connection::new(read, write, Config::default());
        tokio::spawn(testing::echo(theirs));
        let big = payload(64 * 1024, 1);
        let reply = conn.call(9, b"head", big.clone()).await.unwrap();
        assert_eq!(&reply.body[4..], &big[..]);
        let slices = seen.lock().unwrap().clone();
        assert!(
            slices.iter().any(|&(ptr, _)| ptr == big.as_ptr() as usize),
            "the payload's own memory was never handed to the socket: {slices:?}"
        );
        assert_eq!(conn.stats().bytes_copied, 0);
        // A tiny payload is coalesced (copied) instead of costing an iovec entry.
        conn.call(9, b"", Bytes::from_static(b"tiny"))
            .await
            .unwrap();
        assert_eq!(conn.stats().bytes_copied, 4);
    })
    .await;
}

#[tokio::test]
async fn read_buffers_are_reused_once_replies_are_dropped() {
    within(60, async {
        let conn = echoed(Config::default());
        let mut pipeline = conn.pipeline();
        // Echoed frames a little under a read chunk, 8 in flight, each checked and
        // dropped as it arrives (as a download writes each block and lets it go).
        let rounds = 200u32;
        let (mut sent, mut got) = (0u32, 0u32);
        while got < rounds {
            while sent < rounds && sent - got < 8 {
                let body = payload(200 * 1024, sent as u8);
                pipeline.send(2, &sent.to_be_bytes(), body).await.unwrap();
                sent += 1;
            }
            let reply = pipeline.recv().await.unwrap();
            let n = u32::from_be_bytes(reply.body[..4].try_into().unwrap());
            assert_eq!(&reply.body[4..], &payload(200 * 1024, n as u8)[..]);
            got += 1;
        }
        let stats = conn.stats();
        assert_eq!(stats.frames_received, u64::from(rounds));
        assert!(
            stats.read_buffers <= 16,
            "{} read buffers allocated for {rounds} replies: they are not being reused",
            stats.read_buffers
        );
    })
    .await;
}

/// Reads frames and keeps them, answering nothing, until told; returns them.
async fn read_frames(stream: &mut DuplexStream, n: usize) -> Vec<(u8, u32, Vec<u8>)> {
    let decoder = Decoder::default();
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    while frames.len() < n {
        stream.read_buf(&mut buf).await.unwrap();
        while let Ok(Some((frame, used))) = decoder.decode(&buf) {
            frames.push((frame.ty, frame.id, frame.body.to_vec()));
            let _ = buf.split_to(used);
        }
    }
    frames
}

/// A connection over an in-memory pipe to an echo peer.
fn echoed(config: Config) -> Connection {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let (read, write) = tokio::io::split(ours);
    tokio::spawn(testing::echo(theirs));
    Connection::new(read, write, config)
}

/// A connection over an in-memory pipe, and the far end of the pipe.
fn connected(max_in_flight: usize) -> (Connection, DuplexStream) {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let (read, write) = tokio::io::split(ours);
    let config = Config {
        max_in_flight,
        ..Config::default()
    };
    (Connection::new(read, write, config), theirs)
}

fn frame(ty: u8, id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Header::new(ty, id, body.len()).unwrap().emit().to_vec();
    out.extend_from_slice(body);
    out
}

#[tokio::test]
async fn in_flight_is_bounded_and_replies_may_come_in_any_order() {
    within(30, async {
        let (conn, mut theirs) = connected(4);
        let mut pipeline = conn.pipeline();
        for i in 0..4u8 {
            pipeline.send(1, &[i], Bytes::new()).await.unwrap();
        }
        assert_eq!(conn.in_flight(), 4);
        // A fifth request waits for a slot.
        assert!(
            pipeline
                .send(1, &[4], Bytes::new())
                .now_or_never()
                .is_none()
        );
        let frames = read_frames(&mut theirs, 4).await;
        // Answer in reverse order.
        let mut answers = Vec::new();
        for (ty, id, body) in frames.iter().rev() {
            answers.extend(frame(*ty + 100, *id, body));
        }
        theirs.write_all(&answers).await.unwrap();
        let mut got = Vec::new();
        for _ in 0..4 {
            let reply = pipeline.recv().await.unwrap();
            assert_eq!(reply.ty, 101);
            got.push(reply.body[0]);
        }
        assert_eq!(got, [3, 2, 1, 0]);
        // Slots are free again.
        pipeline.send(1, &[5], Bytes::new()).await.unwrap();
        assert_eq!(conn.in_flight(), 1);
        assert!(pipeline.recv().now_or_never().is_none());
    })
    .await;
}

#[tokio::test]
async fn dropping_a_pipeline_cancels_its_requests() {
    within(30, async {
        let (conn, mut theirs) = connected(2);
        let mut pipeline = conn.pipeline();
        pipeline.send(1, b"a", Bytes::new()).await.unwrap();
        pipeline.send(1, b"b", Bytes::new()).await.unwrap();
        let frames = read_frames(&mut theirs, 2).await;
        drop(pipeline);
        assert_eq!(conn.in_flight(), 0);
        // Late replies to cancelled requests are counted and dropped; the connection works.
        theirs
            .write_all(&frame(2, frames[0].1, b"late"))
            .await
            .unwrap();
        let echo = tokio::spawn(async move {
            let frames = read_frames(&mut theirs, 1).await;
            theirs
                .write_all(&frame(2, frames[0].1, b"fresh"))
                .await
                .unwrap();
            theirs
        });
        let reply = conn.call(1, b"c", Bytes::new()).await.unwrap();
        assert_eq!(&reply.body[..], b"fresh");
        assert_eq!(conn.stats().unmatched, 1);
        drop(echo.await.unwrap());
    })
    .await;
}

#[tokio::test]
async fn every_waiter_hears_when_the_peer_closes_or_sends_garbage() {
    within(30, async {
        for garbage in [false, true] {
            let (conn, mut theirs) = connected(Config::default().max_in_flight);
            let mut a = conn.pipeline();
            let mut b = conn.pipeline();
            a.send(1, b"x", Bytes::new()).await.unwrap();
            b.send(1, b"y", Bytes::new()).await.unwrap();
            read_frames(&mut theirs, 2).await;
            if garbage {
                theirs
                    .write_all(&[0xff, 0xff, 0xff, 0xff, 0])
                    .await
                    .unwrap();
            } else {
                drop(theirs);
            }
            let (ea, eb) = (a.recv().await.unwrap_err(), b.recv().await.unwrap_err());
            if garbage {
                assert!(matches!(ea, Error::Protocol(_)), "{ea}");
                assert!(ea.to_string().contains("frame too large"), "{ea}");
            } else {
                assert_eq!(ea, Error::Closed);
            }
            assert_eq!(ea, eb);
            // And so does anyone who tries later.
            assert_eq!(conn.call(1, b"z", Bytes::new()).await.unwrap_err(), ea);
        }
    })
    .await;
}

#[tokio::test]
async fn deadlines_and_limits_are_clear_errors() {
    within(30, async {
        let (conn, _silent) = connected(Config::default().max_in_flight);
        let err = conn
            .call_timeout(7, b"", Bytes::new(), Duration::from_millis(50))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert!(err.to_string().contains("type-7"), "{err}");
        let huge = Bytes::from(vec![0u8; 300 * 1024]);
        assert!(matches!(
            conn.call(1, b"", huge).await,
            Err(Error::TooLarge { .. })
        ));
        let mut empty = conn.pipeline();
        assert_eq!(empty.recv().await.unwrap_err(), Error::NothingOutstanding);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_child_process_tcp_and_unix_sockets() {
    within(30, async {
        // `cat` echoes the frames back: same type, same id.
        let (conn, mut child) = Connection::spawn(
            tokio::process::Command::new("cat").kill_on_drop(true),
            Config::default(),
        )
        .unwrap();
        let body = payload(100_000, 3);
        let reply = conn.call(4, b"", body.clone()).await.unwrap();
        assert_eq!(reply.body, body);
        conn.close();
        assert!(child.wait().await.unwrap().success());

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            testing::echo(stream).await;
        });
        let conn = Connection::connect_tcp(addr, Config::default())
            .await
            .unwrap();
        assert_eq!(
            conn.call(1, b"tcp", Bytes::new()).await.unwrap().body,
            Bytes::from_static(b"tcp")
        );

        let path =
            std::env::temp_dir().join(format!("volley-tcp-test-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            testing::echo(stream).await;
        });
        let conn = Connection::connect_unix(&path, Config::default())
            .await
            .unwrap();
        assert_eq!(
            conn.call(1, b"unix", Bytes::new()).await.unwrap().body,
            Bytes::from_static(b"unix")
        );
        let _ = std::fs::remove_file(&path);
    })
    .await;
}

#[tokio::test]
async fn a_child_that_exits_closes_the_connection_while_its_command_lives() {
    within(30, async {
        // The command outlives the spawn, as a caller's usually does: its copy of the
        // child's end of the socketpair must not keep the stream open.
        let mut command = tokio::process::Command::new("sh");
        command.args(["-c", "exit 0"]).kill_on_drop(true);
        let (conn, mut child) = Connection::spawn(&mut command, Config::default()).unwrap();
        assert!(child.wait().await.unwrap().success());
        let err = conn
            .call_timeout(1, b"anyone?", Bytes::new(), Duration::from_secs(10))
            .await
            .unwrap_err();
        // End of stream, or a broken pipe if the writer gets there first; never the
        // deadline.
        assert!(
            matches!(err, Error::Closed)
                || matches!(err, Error::Io { kind, .. } if kind == io::ErrorKind::BrokenPipe),
            "{err}"
        );
        drop(command);
    })
    .await;
}

#[test]
fn header_len_matches_the_wire() {
    assert_eq!(HEADER_LEN, 9);
}

#[tokio::test]
async fn dropping_every_handle_closes_the_stream() {
    within(30, async {
        let (conn, mut theirs) = connected(4);
        let pipeline = conn.pipeline();
        drop(conn);
        // A pipeline still holds the connection open.
        assert!(theirs.read_u8().now_or_never().is_none());
        drop(pipeline);
        let mut rest = Vec::new();
        assert_eq!(
            theirs.read_to_end(&mut rest).await.unwrap(),
            0,
            "the peer sees end of stream"
        );
    })
    .await;
}

#[tokio::test]
async fn heads_of_any_length_arrive_intact() {
    within(30, async {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let (read, write) = tokio::io::split(ours);
        let conn = Connection::new(read, write, Config::default());
        tokio::spawn(testing::echo(theirs));
        for len in [0usize, 1, 63, 64, 65, 1000] {
            let head: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let reply = conn.call(2, &head, Bytes::from_static(b"!")).await.unwrap();
            assert_eq!(&reply.body[..len], &head[..], "head of {len} bytes");
            assert_eq!(&reply.body[len..], b"!");
        }
    })
    .await;
}

/// A file under the system's temporary directory, removed on drop.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn with(name: &str, bytes: &[u8]) -> Self {
        let path = std::env::temp_dir().join(format!("volley-tcp-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        Self(path)
    }

    fn open(&self) -> Arc<std::fs::File> {
        Arc::new(std::fs::File::open(&self.0).unwrap())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::test]
async fn file_regions_go_by_the_kernel_over_sockets_unless_read_in_and_are_read_in_elsewhere() {
    within(30, async {
        let content = payload(600 * 1024, 9);
        let file = TempFile::with("regions", &content);
        // Frames up to 1 MiB, so that a region can be longer than the writer's chunk.
        let config = Config {
            max_frame_len: 1 << 20,
            ..Config::default()
        };
        let (ours, theirs) = tokio::net::UnixStream::pair().unwrap();
        let unix = Connection::from_unix(ours, config);
        tokio::spawn(testing::echo(theirs));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        tokio::spawn(testing::echo(accepted.unwrap().0));
        let tcp = Connection::from_tcp(client.unwrap(), config).unwrap();
        let linux = cfg!(target_os = "linux");
        for (conn, kernel) in [(unix, linux), (tcp, linux), (echoed(config), false)] {
            let mut pipeline = conn.pipeline();
            // Regions of several sizes and offsets (one longer than the writer's
            // read-in chunk), with memory payloads between them, all in flight at once.
            let regions = [
                (1000u64, 200_000usize),
                (0, 1),
                (4096, 300_000),
                (7, 70_000),
            ];
            let mut expected = HashMap::new();
            // Regions 1 and 2 (the one longer than the chunk) are read in by the writer
            // even where the kernel could send them.
            let read_in = |i: usize| i == 1 || i == 2;
            for (i, &(offset, len)) in regions.iter().enumerate() {
                let region = FileRegion::new(file.open(), offset, len);
                let region = if read_in(i) { region.read_in() } else { region };
                assert_eq!(region.by_kernel(), !read_in(i));
                let id = pipeline.send_file(3, &[i as u8], region).await.unwrap();
                let mut want = vec![i as u8];
                want.extend_from_slice(&content[offset as usize..][..len]);
                expected.insert(id, want);
                let id = pipeline
                    .send(4, b"mem", payload(2000, i as u8))
                    .await
                    .unwrap();
                let mut want = b"mem".to_vec();
                want.extend_from_slice(&payload(2000, i as u8));
                expected.insert(id, want);
            }
            for _ in 0..expected.len() {
                let reply = pipeline.recv().await.unwrap();
                assert_eq!(
                    &reply.body[..],
                    &expected[&reply.id][..],
                    "reply {}",
                    reply.id
                );
            }
            let sent: usize = regions
                .iter()
                .enumerate()
                .filter(|&(i, _)| !read_in(i))
                .map(|(_, r)| r.1)
                .sum();
            let stats = conn.stats();
            assert_eq!(
                stats.file_bytes_sent,
                if kernel { sent as u64 } else { 0 },
                "kernel sending expected: {kernel}"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn a_file_region_past_the_end_of_its_file_fails_the_connection_clearly() {
    within(30, async {
        let file = TempFile::with("short", &payload(1000, 1));
        let (ours, theirs) = tokio::net::UnixStream::pair().unwrap();
        let socket = Connection::from_unix(ours, Config::default());
        tokio::spawn(testing::echo(theirs));
        for conn in [socket, echoed(Config::default())] {
            let mut pipeline = conn.pipeline();
            let region = FileRegion::new(file.open(), 500, 1000);
            pipeline.send_file(3, b"", region).await.unwrap();
            let err = pipeline.recv().await.unwrap_err();
            assert!(
                matches!(&err, Error::Io { kind: io::ErrorKind::UnexpectedEof, message }
                    if message.contains("past the end of its file")),
                "{err:?}"
            );
            // Every later request hears the same.
            assert!(pipeline.send(1, b"x", Bytes::new()).await.is_err());
        }
    })
    .await;
}
