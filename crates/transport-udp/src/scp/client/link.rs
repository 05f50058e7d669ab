//! The link to the board: a connected UDP socket with batched I/O, or a TCP stream to
//! volley's emulator carrying the same datagrams in frames. The driver sees two calls:
//! `send_ready` (everything the window has to send) and `recv_ready` (wait for replies or
//! the next deadline, and apply every reply that is ready).

use core::net::SocketAddr;
use std::io;
use std::time::Instant as StdInstant;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use volley_proto::scp;
use volley_proto::scp::window::{ScpProtocol, Window};
use volley_proto::time::Instant;
use volley_proto::wire::frame::{self, Decoder};

use super::driver::Driver;
use super::ops::Token;
use super::{Op, ScpError};
use crate::SCP_FRAME_TYPE;
use crate::datagrams::{Datagrams, refused};

#[derive(Debug)]
pub(super) enum Link {
    /// The socket and its batched I/O.
    Udp(UdpSocket, Box<Datagrams>),
    Tcp(TcpLink),
}

#[derive(Debug)]
pub(super) struct TcpLink {
    pub(super) stream: TcpStream,
    pub(super) read_buf: BytesMut,
    pub(super) write_buf: Vec<u8>,
    /// Bytes of `write_buf` already written (all of it between calls, unless a call was
    /// interrupted mid-write).
    pub(super) written: usize,
    pub(super) decoder: Decoder,
}

impl Link {
    /// A TCP stream to volley's emulator, with its buffers.
    pub(super) fn tcp(stream: TcpStream) -> Self {
        Self::Tcp(TcpLink {
            stream,
            read_buf: BytesMut::with_capacity(64 * 1024),
            write_buf: Vec::with_capacity(16 * 1024),
            written: 0,
            decoder: Decoder::new(frame::HEADER_LEN + scp::MAX_DATAGRAM_LEN),
        })
    }

    /// Drops datagrams queued and not yet sent (they carry abandoned requests).
    pub(super) fn discard_unsent(&mut self) {
        match self {
            Self::Udp(_, io) => io.tx().discard(),
            // A stream begun on a frame must finish it, or lose its framing: a buffer
            // partly written is kept whole (its requests' replies will be recognised
            // as abandoned), one not begun is dropped.
            Self::Tcp(tcp) => {
                if tcp.written == 0 {
                    tcp.write_buf.clear();
                }
            }
        }
    }

    /// Sends everything `window` has ready; returns how many "connection refused"
    /// reports came back (an earlier ICMP error on the socket).
    pub(super) async fn send_ready(
        &mut self,
        window: &mut Window<ScpProtocol, Token>,
        now: Instant,
        peer: SocketAddr,
    ) -> Result<u64, ScpError> {
        let mut refused = 0;
        match self {
            Self::Udp(socket, io) => {
                // Everything ready goes out in as few system calls as the kernel allows.
                // A "connection refused" (an earlier ICMP error) is counted: before the
                // board has ever answered it fails the operation, after that it is loss.
                while let Some(datagram) = window.poll_transmit(now) {
                    refused += io.tx().queue(socket, datagram, peer).await?.refused as u64;
                }
                refused += io.tx().flush(socket).await?.refused as u64;
            }
            Self::Tcp(tcp) => {
                // Small packets: coalesced into one write (copying 282 bytes is cheaper
                // than a slice per packet). What an interrupted call left half written
                // goes first, so the stream's frames stay whole.
                while let Some(datagram) = window.poll_transmit(now) {
                    let seq = u32::from(scp::Packet::new_unchecked(datagram).seq());
                    let header = frame::Header::new(SCP_FRAME_TYPE, seq, datagram.len())?;
                    tcp.write_buf.extend_from_slice(&header.emit());
                    tcp.write_buf.extend_from_slice(datagram);
                }
                while tcp.written < tcp.write_buf.len() {
                    let n = tcp.stream.write(&tcp.write_buf[tcp.written..]).await?;
                    if n == 0 {
                        return Err(ScpError::Closed);
                    }
                    tcp.written += n;
                }
                tcp.write_buf.clear();
                tcp.written = 0;
            }
        }
        Ok(refused)
    }

    /// Waits for replies or the window's next retransmit deadline and hands every reply
    /// that is ready to `core` before returning (one wake-up per batch); on a link whose
    /// smoothed RTT is within `spin`, polls for that long before parking. Returns how many
    /// "connection refused" reports came instead.
    pub(super) async fn recv_ready(
        &mut self,
        core: &mut Driver,
        ops: &mut [Op<'_>],
        spin_for: core::time::Duration,
    ) -> Result<u64, ScpError> {
        let mut refused_count = 0;
        let deadline = core.window.poll_timeout().map(|t| {
            tokio::time::Instant::from_std(
                core.epoch + core::time::Duration::from_micros(t.as_micros()),
            )
        });
        let sleep = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => core::future::pending().await,
            }
        };
        let spin = core
            .window
            .rtt()
            .srtt()
            .is_some_and(|srtt| core::time::Duration::from(srtt) <= spin_for);
        match self {
            Self::Udp(socket, io) => {
                if spin {
                    // Spin, then park (the ARTIQ lesson): on a fast link the reply often
                    // arrives before a sleep and wake-up would even finish.
                    let until = StdInstant::now() + spin_for;
                    loop {
                        match io.rx().try_recv(socket, true) {
                            Ok(()) => {
                                core.on_batch(io, ops)?;
                                // Back to sending at once: the slots just freed are
                                // refilled before anything else (another receive call
                                // here would mostly find nothing; the next receive
                                // takes whatever else has come).
                                return Ok(0);
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                                if StdInstant::now() >= until {
                                    break;
                                }
                                core::hint::spin_loop();
                            }
                            Err(e) if refused(&e) => return Ok(1),
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
                tokio::select! {
                    biased;
                    ready = socket.readable() => {
                        ready?;
                        refused_count += core.drain(socket, io, ops)?;
                    }
                    () = sleep => {}
                }
            }
            Self::Tcp(tcp) => {
                tokio::select! {
                    biased;
                    n = tcp.stream.read_buf(&mut tcp.read_buf) => {
                        if n? == 0 {
                            return Err(ScpError::Closed);
                        }
                        let now = core.now();
                        while let Some((frame, used)) = tcp.decoder.decode(&tcp.read_buf)? {
                            if frame.ty != SCP_FRAME_TYPE {
                                return Err(ScpError::InvalidArgument(format!(
                                    "the board sent a frame of type {:#04x}, not SCP ({SCP_FRAME_TYPE:#04x})",
                                    frame.ty
                                )));
                            }
                            // Taken off the buffer before it is applied: a reply that
                            // fails its operation is not seen again by the next one.
                            let whole = tcp.read_buf.split_to(used);
                            core.on_reply(ops, now, &whole[frame::HEADER_LEN..])?;
                        }
                        if tcp.read_buf.capacity() < 4096 {
                            tcp.read_buf.reserve(64 * 1024);
                        }
                    }
                    () = sleep => {}
                }
            }
        }
        Ok(refused_count)
    }
}
