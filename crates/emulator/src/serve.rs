//! Serving the board: the UDP task (batched receives and replies, delayed replies on a
//! schedule) and the TCP listener with a task per connection.

use core::sync::atomic::Ordering;
use std::io;
use std::sync::Arc;

use bytes::Bytes;
use std::time::Instant;
use tokio::net::{TcpListener, UdpSocket};
use volley_proto::scp::MAX_DATAGRAM_LEN;
use volley_proto::wire::frame;
use volley_transport_tcp::{Accepted, Config, Framed, Listener, ServerConfig};
use volley_transport_udp::SCP_FRAME_TYPE;
use volley_transport_udp::datagrams::{Datagrams, Sent};

use crate::logic::{Action, Fabric, Outcome, Schedule, Shared, on_datagram};
use crate::pacer::Pacer;

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => core::future::pending().await,
    }
}

/// The UDP side: drains every ready datagram, answers each through a transient tag, and
/// sends each batch of replies in as few system calls as the kernel allows; a reply
/// that is due later goes to the pacer, whose thread sends it on time. After traffic it
/// polls the socket for `spin` before parking, as a board's dedicated core would answer
/// without a wake-up, yielding the CPU between polls: a spin that only hinted the CPU
/// held a core the client and the link simulator needed whenever the machine had none to
/// spare.
pub(crate) async fn serve_udp(
    socket: UdpSocket,
    fabric: Arc<Fabric>,
    pacer: Arc<Pacer>,
    index: usize,
) -> io::Result<()> {
    let mut io = Datagrams::new(&socket);
    let mut out = [0u8; MAX_DATAGRAM_LEN];
    let spin = fabric.config.spin;
    let shared = &fabric.boards[index];
    let board = Board {
        socket: &socket,
        fabric: &fabric,
        pacer: &pacer,
        index,
    };
    loop {
        socket.readable().await?;
        let mut active = false;
        loop {
            match io.rx().try_recv(&socket, false) {
                Ok(()) => {
                    active = true;
                    board.answer(&mut io, &mut out).await;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                // ICMP errors from earlier replies to vanished clients.
                Err(_) => continue,
            }
        }
        if active && !spin.is_zero() {
            let mut until = Instant::now() + spin;
            loop {
                match io.rx().try_recv(&socket, true) {
                    Ok(()) => {
                        until = Instant::now() + spin;
                        board.answer(&mut io, &mut out).await;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if Instant::now() >= until {
                            break;
                        }
                        // Not `spin_loop`: see above.
                        std::thread::yield_now();
                    }
                    Err(_) => {}
                }
            }
        }
        count_sent(shared, io.tx().flush(&socket).await);
    }
}

/// What one board's UDP task answers with.
struct Board<'a> {
    socket: &'a UdpSocket,
    fabric: &'a Fabric,
    pacer: &'a Pacer,
    index: usize,
}

impl Board<'_> {
    /// Handles the datagrams of one receive call and sends their replies (or hands them
    /// to the pacer).
    async fn answer(&self, io: &mut Datagrams, out: &mut [u8; MAX_DATAGRAM_LEN]) {
        let shared = &self.fabric.boards[self.index];
        let (rx, tx) = io.halves();
        for (datagram, from) in rx.datagrams() {
            let Some(from) = from else { continue };
            match on_datagram(self.fabric, self.index, Instant::now(), datagram, out) {
                Outcome::Now(len) => {
                    count_sent(shared, tx.queue(self.socket, &out[..len], from).await);
                }
                Outcome::At(at, len) => self.pacer.send_at(at, &out[..len], from, self.index),
                Outcome::Nothing => {}
            }
        }
        count_sent(shared, tx.flush(self.socket).await);
    }
}

/// Counts the replies a send delivered (a failed send loses them, as a dropped reply).
fn count_sent(shared: &Shared, sent: io::Result<Sent>) {
    if let Ok(sent) = sent {
        shared
            .replies
            .fetch_add(sent.datagrams as u64, Ordering::Relaxed);
    }
}

/// Most delayed replies one TCP connection holds; past it the connection takes no more
/// requests until some are sent (the UDP side is bounded by its transient tags).
const MAX_DELAYED: usize = 16 * 1024;
/// Bytes of replies queued for one TCP connection's socket before it takes no more
/// requests.
const REPLY_BUDGET: usize = 1 << 20;
/// Requests read ahead of the one being answered, per TCP connection.
const READ_AHEAD: usize = 256;

/// The TCP side: a framed listener (it backs off while out of file descriptors, and
/// caps the connections open) and a task per connection.
pub(crate) async fn serve_tcp(listener: TcpListener, fabric: Arc<Fabric>) -> io::Result<()> {
    let config = ServerConfig {
        connection: Config {
            max_frame_len: frame::HEADER_LEN + MAX_DATAGRAM_LEN,
            write_budget: REPLY_BUDGET,
            incoming_queue: READ_AHEAD,
            idle_timeout: None,
            ..ServerConfig::default().connection
        },
        max_connections: fabric.config.max_tcp_connections,
        ..ServerConfig::default()
    };
    let listener = Listener::from_tcp(listener, config);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                connections.spawn(serve_connection(accepted?, fabric.clone()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One TCP connection: SCP requests in frames, framed replies out (written together by
/// the connection's writer). No transient tags over TCP (there is no IPTag to hold).
/// Every queue is bounded: while a reply waits for room in the writer's budget, or
/// `MAX_DELAYED` replies wait for their time, no request is taken, and once
/// `READ_AHEAD` are waiting the connection stops reading.
async fn serve_connection(accepted: Accepted, fabric: Arc<Fabric>) {
    let shared = &fabric.boards[0];
    let Accepted {
        framed,
        mut incoming,
        ..
    } = accepted;
    let mut out = [0u8; MAX_DATAGRAM_LEN];
    let mut delayed: Schedule<(u32, Vec<u8>)> = Schedule::default();
    loop {
        tokio::select! {
            biased;
            request = incoming.recv(), if delayed.len() < MAX_DELAYED => {
                let Ok(request) = request else { return };
                if request.ty != SCP_FRAME_TYPE {
                    // Not SCP: whatever the peer is, it is not a host talking to a board.
                    return;
                }
                let action = fabric.handle(0, &request.body, &mut out);
                if let Action::Reply { len, delay } = action {
                    if delay.is_zero() {
                        if reply(&framed, shared, request.id, &out[..len]).await.is_err() {
                            return;
                        }
                    } else {
                        delayed.push(Instant::now() + delay, (request.id, out[..len].to_vec()));
                    }
                }
            }
            () = sleep_until(delayed.next_at()) => {}
        }
        let now = Instant::now();
        while let Some((id, bytes)) = delayed.pop_due(now) {
            if reply(&framed, shared, id, &bytes).await.is_err() {
                return;
            }
        }
    }
}

/// Queues one reply (waiting for room in the writer's budget) and counts it.
async fn reply(framed: &Framed, shared: &Shared, id: u32, bytes: &[u8]) -> Result<(), ()> {
    framed
        .send(SCP_FRAME_TYPE, id, bytes, Bytes::new())
        .await
        .map_err(drop)?;
    shared.replies.fetch_add(1, Ordering::Relaxed);
    Ok(())
}
