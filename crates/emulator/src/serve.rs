//! Serving the board: the UDP task (batched receives and replies, delayed replies on a
//! schedule) and the TCP listener with a task per connection.

use core::net::SocketAddr;
use core::sync::atomic::Ordering;
use std::io;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::time::Instant;
use volley_proto::wire::frame::{self, Decoder};
use volley_proto::wire::scp::MAX_DATAGRAM_LEN;
use volley_transport_udp::SCP_FRAME_TYPE;
use volley_transport_udp::datagrams::{Datagrams, Sent};

use crate::logic::{Action, Schedule, Shared, on_datagram};

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => core::future::pending().await,
    }
}

/// The UDP side: drains every ready datagram, answers each through a transient tag, and
/// sends each batch of replies in as few system calls as the kernel allows. After
/// traffic it polls the socket for `spin` before parking, as a board's dedicated core
/// would answer without a wake-up, yielding the CPU between polls: a spin that only
/// hinted the CPU held a core the client and the link simulator needed whenever the
/// machine had none to spare (on one core, or two with one busy elsewhere, a 16-deep SCP
/// window through a 1 ms link lost a quarter of its throughput to it, its RTT inflated
/// from 1.0 to 1.35 ms).
pub(crate) async fn serve_udp(socket: UdpSocket, shared: Arc<Shared>) -> io::Result<()> {
    let mut io = Datagrams::new(&socket);
    let mut out = [0u8; MAX_DATAGRAM_LEN];
    let mut delayed: Schedule<(Vec<u8>, SocketAddr)> = Schedule::default();
    let spin = shared.config.spin;
    loop {
        let mut active = false;
        tokio::select! {
            biased;
            ready = socket.readable() => {
                ready?;
                loop {
                    match io.rx.try_recv(&socket, false) {
                        Ok(()) => {
                            active = true;
                            answer(&socket, &mut io, &shared, &mut out, &mut delayed).await;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        // ICMP errors from earlier replies to vanished clients.
                        Err(_) => continue,
                    }
                }
            }
            () = sleep_until(delayed.next_at()) => {}
        }
        if active && !spin.is_zero() {
            let mut until = std::time::Instant::now() + spin;
            loop {
                match io.rx.try_recv(&socket, true) {
                    Ok(()) => {
                        until = std::time::Instant::now() + spin;
                        answer(&socket, &mut io, &shared, &mut out, &mut delayed).await;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if std::time::Instant::now() >= until {
                            break;
                        }
                        // Not `spin_loop`: see above.
                        std::thread::yield_now();
                    }
                    Err(_) => {}
                }
                if delayed.next_at().is_some_and(|at| at <= Instant::now()) {
                    break;
                }
            }
        }
        let now = Instant::now();
        while let Some((reply, to)) = delayed.pop_due(now) {
            let sent = io.tx.queue(&socket, &reply, to).await;
            count_sent(&shared, sent);
        }
        count_sent(&shared, io.tx.flush(&socket).await);
    }
}

/// Handles the datagrams of one receive call and sends their replies.
async fn answer(
    socket: &UdpSocket,
    io: &mut Datagrams,
    shared: &Shared,
    out: &mut [u8; MAX_DATAGRAM_LEN],
    delayed: &mut Schedule<(Vec<u8>, SocketAddr)>,
) {
    for (datagram, from) in io.rx.datagrams() {
        let Some(from) = from else { continue };
        if let Some(len) = on_datagram(shared, Instant::now(), datagram, from, out, delayed) {
            count_sent(shared, io.tx.queue(socket, &out[..len], from).await);
        }
    }
    count_sent(shared, io.tx.flush(socket).await);
}

/// Counts the replies a send delivered (a failed send loses them, as a dropped reply).
fn count_sent(shared: &Shared, sent: io::Result<Sent>) {
    if let Ok(sent) = sent {
        shared
            .replies
            .fetch_add(sent.datagrams as u64, Ordering::Relaxed);
    }
}

pub(crate) async fn serve_tcp(listener: TcpListener, shared: Arc<Shared>) -> io::Result<()> {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                connections.spawn(serve_connection(stream, shared.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One TCP connection: frames in, framed replies out, all replies to one read written
/// together. No transient tags over TCP (there is no IPTag to hold).
async fn serve_connection(mut stream: TcpStream, shared: Arc<Shared>) {
    let decoder = Decoder::new(frame::HEADER_LEN + MAX_DATAGRAM_LEN);
    let mut read_buf = BytesMut::with_capacity(64 * 1024);
    let mut write_buf = Vec::with_capacity(64 * 1024);
    let mut replies = 0u64;
    let mut out = [0u8; MAX_DATAGRAM_LEN];
    let mut delayed: Schedule<Vec<u8>> = Schedule::default();
    loop {
        tokio::select! {
            biased;
            n = stream.read_buf(&mut read_buf) => {
                match n {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let now = Instant::now();
                loop {
                    let (id, used, action) = match decoder.decode(&read_buf) {
                        Ok(Some((frame, used))) if frame.ty == SCP_FRAME_TYPE => {
                            let mut state = shared.lock();
                            let datagram = &read_buf[frame::HEADER_LEN..used];
                            (frame.id, used, shared.handle(&mut state, datagram, &mut out))
                        }
                        Ok(None) => break,
                        // A frame of another type or a broken length: the stream's framing
                        // cannot be trusted any more.
                        Ok(Some(_)) | Err(_) => return,
                    };
                    let _ = read_buf.split_to(used);
                    if let Action::Reply { len, delay } = action {
                        let Ok(header) = frame::Header::new(SCP_FRAME_TYPE, id, len) else { return };
                        if delay.is_zero() {
                            replies += 1;
                            write_buf.extend_from_slice(&header.encode());
                            write_buf.extend_from_slice(&out[..len]);
                        } else {
                            let mut framed = header.encode().to_vec();
                            framed.extend_from_slice(&out[..len]);
                            delayed.push(now + delay, framed);
                        }
                    }
                }
                if read_buf.capacity() < 4096 {
                    read_buf.reserve(64 * 1024);
                }
            }
            () = sleep_until(delayed.next_at()) => {}
        }
        let now = Instant::now();
        while let Some(framed) = delayed.pop_due(now) {
            replies += 1;
            write_buf.extend_from_slice(&framed);
        }
        if !write_buf.is_empty() {
            if stream.write_all(&write_buf).await.is_err() {
                return;
            }
            shared.replies.fetch_add(replies, Ordering::Relaxed);
            replies = 0;
            write_buf.clear();
        }
    }
}
