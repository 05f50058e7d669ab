//! The scp suite's limit: this machine's UDP request/response ceiling for SCP-sized
//! datagrams, a bare echo with no runtime, parsing or wake-ups.

use core::net::SocketAddr;
use core::time::Duration;
use std::thread;
use std::time::Instant;

use volley_proto::scp::{self, MAX_DATA_LEN};

use crate::harness::{Mode, median};

/// The machine's UDP request/response limit for SCP-sized datagrams.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ceiling {
    pub(super) mbit_1: f64,
    pub(super) mbit_16: f64,
    /// 16 in flight, sent as one segmented send and received as one coalesced run.
    pub(super) mbit_16_gso: f64,
}

/// 282-byte requests to a bare echo answering with 270 bytes (a 256-byte write and a
/// 256-byte read reply), 1 and 16 in flight, as Mbit/s of 256-byte payloads. Both ends
/// are plain threads busy-polling non-blocking sockets: no runtime, no parsing, no
/// wake-ups, the fastest request/response loop this machine runs.
pub(super) async fn raw_ceiling(mode: Mode) -> Ceiling {
    tokio::task::spawn_blocking(move || raw_ceiling_blocking(mode))
        .await
        .expect("the ceiling measurement ran")
}

fn raw_ceiling_blocking(mode: Mode) -> Ceiling {
    use core::sync::atomic::{AtomicBool, Ordering};
    use std::net::UdpSocket as StdSocket;
    use std::sync::Arc;

    let server = StdSocket::bind("127.0.0.1:0").expect("bind");
    server.set_nonblocking(true).expect("nonblocking");
    let server_addr = server.local_addr().expect("addr");
    let stop = Arc::new(AtomicBool::new(false));
    let stop_echo = stop.clone();
    let echo = thread::spawn(move || {
        let reply = [0u8; scp::REPLY_HEADER_LEN + MAX_DATA_LEN];
        let mut buf = [0u8; 2048];
        while !stop_echo.load(Ordering::Relaxed) {
            match server.recv_from(&mut buf) {
                Ok((_, from)) => {
                    let _ = server.send_to(&reply, from);
                }
                Err(_) => core::hint::spin_loop(),
            }
        }
    });
    let client = StdSocket::bind("127.0.0.1:0").expect("bind");
    client.connect(server_addr).expect("connect");
    client.set_nonblocking(true).expect("nonblocking");
    let request = [0u8; scp::REQUEST_HEADER_LEN + MAX_DATA_LEN];
    let mut buf = [0u8; 2048];
    let per_round = match mode {
        Mode::Quick => Duration::from_millis(300),
        Mode::Full => Duration::from_secs(1),
    };
    let mut result = [0.0; 2];
    for (i, in_flight) in [1usize, 16].into_iter().enumerate() {
        let mut rates = Vec::new();
        for _ in 0..mode.rounds() {
            for _ in 0..in_flight {
                let _ = client.send(&request);
            }
            let start = Instant::now();
            let mut last_reply = start;
            let mut done = 0u64;
            while start.elapsed() < per_round {
                if client.recv(&mut buf).is_ok() {
                    done += 1;
                    last_reply = Instant::now();
                    let _ = client.send(&request);
                } else if last_reply.elapsed() > Duration::from_millis(100) {
                    // A datagram was lost: put another in flight.
                    last_reply = Instant::now();
                    let _ = client.send(&request);
                }
            }
            rates.push(done as f64 / start.elapsed().as_secs_f64());
            // Drain what is still in flight.
            let drain = Instant::now();
            while drain.elapsed() < Duration::from_millis(20) {
                let _ = client.recv(&mut buf);
            }
        }
        result[i] = median(&rates) * MAX_DATA_LEN as f64 * 8.0 / f64::from(1u32 << 20);
    }
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    Ceiling {
        mbit_1: result[0],
        mbit_16: result[1],
        mbit_16_gso: gso_ceiling(mode, per_round),
    }
}

/// The same echo with 16 datagrams per system call each way: the client sends them as
/// one `UDP_SEGMENT` send, the echo receives them as one `UDP_GRO` run and answers with
/// one segmented send. What volley's window can reach at best on this machine.
fn gso_ceiling(mode: Mode, per_round: Duration) -> f64 {
    use core::sync::atomic::{AtomicBool, Ordering};
    use std::net::UdpSocket as StdSocket;
    use std::sync::Arc;

    use nix::sys::socket::{setsockopt, sockopt};

    const BATCH: usize = 16;
    const REQUEST: usize = scp::REQUEST_HEADER_LEN + MAX_DATA_LEN;
    const REPLY: usize = scp::REPLY_HEADER_LEN + MAX_DATA_LEN;
    let offload = |socket: &StdSocket, segment: usize| {
        setsockopt(socket, sockopt::UdpGroSegment, &true).expect("UDP_GRO");
        setsockopt(socket, sockopt::UdpGsoSegment, &(segment as i32)).expect("UDP_SEGMENT");
        socket.set_nonblocking(true).expect("nonblocking");
    };
    // Datagrams in what one receive returned: `len` bytes in runs of the GRO size.
    let received = |socket: &StdSocket, buf: &mut [u8], cmsg: &mut Vec<u8>| {
        use nix::sys::socket::{ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg};
        use std::os::fd::AsRawFd;
        let mut iov = [std::io::IoSliceMut::new(buf)];
        let msg =
            recvmsg::<SockaddrStorage>(socket.as_raw_fd(), &mut iov, Some(cmsg), MsgFlags::empty())
                .ok()?;
        let stride = msg.cmsgs().ok()?.find_map(|c| match c {
            ControlMessageOwned::UdpGroSegments(size) => usize::try_from(size).ok(),
            _ => None,
        });
        let from = msg.address.and_then(|a| {
            a.as_sockaddr_in()
                .map(|v4| SocketAddr::from((v4.ip(), v4.port())))
        });
        Some((stride.map_or(1, |s| msg.bytes.div_ceil(s.max(1))), from))
    };

    let server = StdSocket::bind("127.0.0.1:0").expect("bind");
    offload(&server, REPLY);
    let server_addr = server.local_addr().expect("addr");
    let stop = Arc::new(AtomicBool::new(false));
    let stop_echo = stop.clone();
    let echo = thread::spawn(move || {
        let replies = vec![0u8; REPLY * BATCH];
        let mut buf = vec![0u8; 1 << 16];
        let mut cmsg = nix::cmsg_space!(i32);
        while !stop_echo.load(Ordering::Relaxed) {
            match received(&server, &mut buf, &mut cmsg) {
                Some((n, Some(from))) => {
                    let _ = server.send_to(&replies[..REPLY * n.min(BATCH)], from);
                }
                _ => core::hint::spin_loop(),
            }
        }
    });
    let client = StdSocket::bind("127.0.0.1:0").expect("bind");
    client.connect(server_addr).expect("connect");
    offload(&client, REQUEST);
    let requests = vec![0u8; REQUEST * BATCH];
    let mut buf = vec![0u8; 1 << 16];
    let mut cmsg = nix::cmsg_space!(i32);
    let mut rates = Vec::new();
    for _ in 0..mode.rounds() {
        let start = Instant::now();
        let mut done = 0usize;
        let mut waiting = 0usize;
        let mut sent_at = start;
        while start.elapsed() < per_round {
            // A batch lost (in part) for 100 ms: send a fresh one.
            if waiting == 0 || sent_at.elapsed() > Duration::from_millis(100) {
                let _ = client.send(&requests);
                waiting = BATCH;
                sent_at = Instant::now();
            }
            if let Some((n, _)) = received(&client, &mut buf, &mut cmsg) {
                done += n;
                waiting = waiting.saturating_sub(n);
            }
        }
        rates.push(done as f64 / start.elapsed().as_secs_f64());
        let drain = Instant::now();
        while drain.elapsed() < Duration::from_millis(20) {
            let _ = received(&client, &mut buf, &mut cmsg);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    median(&rates) * MAX_DATA_LEN as f64 * 8.0 / f64::from(1u32 << 20)
}
