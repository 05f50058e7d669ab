//! Batched UDP I/O: many datagrams per system call.
//!
//! Sending, consecutive datagrams of one size for one destination are gathered into
//! one buffer and handed to the kernel in one `send` with UDP generic segmentation
//! offload (`UDP_SEGMENT`): the kernel, or the NIC, cuts it into the original
//! datagrams, so the peer sees exactly what one `send` per datagram would have sent.
//! Receiving, with `UDP_GRO` a run of same-sized datagrams that arrived back to back
//! comes up in one `recvmsg`, with its segment size in a control message.
//!
//! Only what this needs is switched on (no timestamps, no packet info): one datagram
//! at a time costs what a plain `send` and `recv` cost. Where the kernel lacks either
//! offload (or the platform is not Linux), each call carries one datagram.
//!
//! The system calls go through `nix`'s safe wrappers; this module holds no `unsafe`.

use core::net::SocketAddr;
use std::io;

use tokio::io::Interest;
use tokio::net::UdpSocket;

/// One receive buffer holds a whole coalesced run (the kernel caps one at 64 KiB).
const RECV_LEN: usize = 1 << 16;
/// A batch never exceeds what one UDP send can carry.
const MAX_BATCH_BYTES: usize = 65_000;
/// The kernel's limit on segments per send (`UDP_MAX_SEGMENTS`, 64 before Linux 6.9).
const MAX_SEGMENTS: usize = 64;

/// Batched sending and receiving on one UDP socket: the two halves borrow apart, so
/// replies can be queued while a received batch is being read.
#[derive(Debug)]
pub struct Datagrams {
    rx: Receiver,
    tx: Sender,
}

/// Receives runs of datagrams.
#[derive(Debug)]
pub struct Receiver {
    buf: Box<[u8]>,
    cmsg: Vec<u8>,
    len: usize,
    stride: usize,
    from: Option<SocketAddr>,
    /// Receive system calls that returned datagrams (polls that found nothing are not
    /// counted).
    syscalls: u64,
}

/// Sends runs of datagrams with one call each.
#[derive(Debug)]
pub struct Sender {
    /// Datagrams waiting to be sent, back to back, all `segment` bytes long but the
    /// last (which may be shorter and then closes the batch).
    buf: Vec<u8>,
    segment: usize,
    count: usize,
    closed: bool,
    dest: Option<SocketAddr>,
    /// The socket's `UDP_SEGMENT` setting (0: off): every send longer than it is cut.
    gso_size: usize,
    /// Segments per send; 1 where the kernel does not segment.
    max_segments: usize,
    /// Send system calls made.
    syscalls: u64,
}

/// What a flush did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// Datagrams handed to the kernel.
    pub datagrams: usize,
    /// Datagrams dropped because the destination refused them (ICMP port unreachable).
    pub refused: usize,
}

impl Datagrams {
    /// Prepares `socket` (non-blocking, as every tokio socket is) for batched I/O.
    pub fn new(socket: &UdpSocket) -> Self {
        let gro = sys::enable_gro(socket);
        Self {
            rx: Receiver {
                buf: vec![0; if gro { RECV_LEN } else { 2048 }].into_boxed_slice(),
                cmsg: sys::cmsg_buffer(),
                len: 0,
                stride: 0,
                from: None,
                syscalls: 0,
            },
            tx: Sender {
                buf: Vec::new(),
                segment: 0,
                count: 0,
                closed: false,
                dest: None,
                gso_size: 0,
                max_segments: if sys::GSO { MAX_SEGMENTS } else { 1 },
                syscalls: 0,
            },
        }
    }

    /// System calls that moved datagrams, both ways.
    pub fn syscalls(&self) -> u64 {
        self.rx.syscalls + self.tx.syscalls
    }

    /// The datagrams the last receive call brought (see [`Receiver::datagrams`]).
    pub fn datagrams(&self) -> impl Iterator<Item = (&[u8], Option<SocketAddr>)> + '_ {
        self.rx.datagrams()
    }

    /// The receiving half.
    pub fn rx(&mut self) -> &mut Receiver {
        &mut self.rx
    }

    /// The sending half.
    pub fn tx(&mut self) -> &mut Sender {
        &mut self.tx
    }

    /// Both halves at once, borrowed apart: replies can be queued on one while a
    /// received batch is read from the other.
    pub fn halves(&mut self) -> (&mut Receiver, &mut Sender) {
        (&mut self.rx, &mut self.tx)
    }
}

impl Receiver {
    /// One receive call without waiting; `WouldBlock` if nothing is ready. Read what
    /// came with [`Self::datagrams`].
    ///
    /// `poll` asks the kernel even when the reactor has not seen the socket become
    /// readable (for busy-polling while the reactor is not running); otherwise a
    /// `WouldBlock` also tells the reactor to wait for the next readiness event.
    pub fn try_recv(&mut self, socket: &UdpSocket, poll: bool) -> io::Result<()> {
        let mut recv = || sys::recv(socket, &mut self.buf, &mut self.cmsg);
        let (len, stride, from) = if poll {
            recv()
        } else {
            socket.try_io(Interest::READABLE, recv)
        }?;
        self.syscalls += 1;
        self.len = len;
        self.stride = stride;
        self.from = from;
        Ok(())
    }

    /// The datagrams the last successful [`Self::try_recv`] brought, in order, with
    /// their source.
    pub fn datagrams(&self) -> impl Iterator<Item = (&[u8], Option<SocketAddr>)> + '_ {
        let data = &self.buf[..self.len];
        let stride = if self.stride == 0 {
            data.len()
        } else {
            self.stride
        };
        // An empty datagram is still one datagram.
        let empty = data.is_empty().then_some(data);
        data.chunks(stride.max(1))
            .chain(empty)
            .map(|datagram| (datagram, self.from))
    }
}

impl Sender {
    /// Queues `datagram` for `dest`, first sending what is queued if the two cannot
    /// share one segmented send.
    pub async fn queue(
        &mut self,
        socket: &UdpSocket,
        datagram: &[u8],
        dest: SocketAddr,
    ) -> io::Result<Sent> {
        // (An empty datagram cannot be a segment: it travels alone.)
        let fits = self.count > 0
            && !self.closed
            && !datagram.is_empty()
            && self.dest == Some(dest)
            && datagram.len() <= self.segment
            && self.count < self.max_segments
            && self.buf.len() + datagram.len() <= MAX_BATCH_BYTES;
        let sent = if self.count > 0 && !fits {
            self.flush(socket).await?
        } else {
            Sent::default()
        };
        if self.count == 0 {
            self.segment = datagram.len();
            self.dest = Some(dest);
        }
        self.closed = datagram.len() < self.segment;
        self.buf.extend_from_slice(datagram);
        self.count += 1;
        Ok(sent)
    }

    /// Drops everything queued, unsent.
    pub fn discard(&mut self) {
        self.buf.clear();
        self.count = 0;
        self.closed = false;
        self.dest = None;
    }

    /// Sends everything queued, waiting for room in the socket's buffer if need be.
    pub async fn flush(&mut self, socket: &UdpSocket) -> io::Result<Sent> {
        let Some(dest) = self.dest.filter(|_| self.count > 0) else {
            return Ok(Sent::default());
        };
        let count = self.count;
        let result = match self.send(socket, dest, 0..self.buf.len(), count > 1).await {
            Ok(()) => Ok(Sent {
                datagrams: count,
                refused: 0,
            }),
            Err(e) if refused(&e) => Ok(Sent {
                datagrams: 0,
                refused: count,
            }),
            // The kernel would not segment (no offload on this route): stop asking,
            // and send these one by one.
            Err(e) if count > 1 && offload_refused(&e) => {
                tracing::debug!("UDP segmentation offload refused ({e}); sending one by one");
                self.max_segments = 1;
                self.send_each(socket, dest).await
            }
            Err(e) => Err(e),
        };
        self.discard();
        result
    }

    async fn send_each(&mut self, socket: &UdpSocket, dest: SocketAddr) -> io::Result<Sent> {
        let mut sent = Sent::default();
        let mut at = 0;
        while at < self.buf.len() {
            let end = (at + self.segment).min(self.buf.len());
            match self.send(socket, dest, at..end, false).await {
                Ok(()) => sent.datagrams += 1,
                Err(e) if refused(&e) => sent.refused += 1,
                Err(e) => return Err(e),
            }
            at = end;
        }
        Ok(sent)
    }

    /// Sends `buf[range]`: cut into `segment`-byte datagrams if `segmented`, else whole.
    async fn send(
        &mut self,
        socket: &UdpSocket,
        dest: SocketAddr,
        range: core::ops::Range<usize>,
        segmented: bool,
    ) -> io::Result<()> {
        let len = range.len();
        // The socket option applies to every send: set it when a batch needs another
        // size, and clear it before a lone datagram it would cut.
        let want = if segmented {
            Some(self.segment)
        } else if self.gso_size != 0 && len > self.gso_size {
            Some(0)
        } else {
            None
        };
        if let Some(size) = want.filter(|&s| s != self.gso_size) {
            self.syscalls += 1;
            sys::set_segment(socket, size)?;
            self.gso_size = size;
        }
        self.syscalls += 1;
        socket.send_to(&self.buf[range], dest).await.map(|_| ())
    }
}

/// Whether a segmented send failed because this route cannot segment. A device that
/// cannot says so only by failing the send with `EIO` (no checksum offload, so the kernel
/// will not segment) or `EINVAL` (a segment size it does not take); quinn-udp stops
/// segmenting on those two (`quinn-udp/src/unix.rs`). `ENOPROTOOPT` and `EOPNOTSUPP` are
/// what a kernel or socket without `UDP_SEGMENT` answers. Anything else is a real error.
#[cfg(target_os = "linux")]
fn offload_refused(e: &io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EIO | Errno::EINVAL | Errno::ENOPROTOOPT | Errno::EOPNOTSUPP)
    )
}

/// Elsewhere nothing is segmented, so nothing is refused for it.
#[cfg(not(target_os = "linux"))]
fn offload_refused(_: &io::Error) -> bool {
    false
}

/// Whether `e` is the kernel passing on an ICMP port-unreachable (nothing listening).
pub fn refused(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::ConnectionRefused
}

/// Asks the kernel to report ICMP errors on this unconnected socket (`IP_RECVERR`), each
/// with the address it concerns: without it Linux reports them only on connected
/// sockets. Each report then surfaces once as a [`refused`] error from the next send or
/// receive, and [`take_refusals`] says whom it was about. Returns whether the kernel
/// agreed. A socket that turns this on must call [`take_refusals`] on every such error,
/// since the reports wait in the socket's receive buffer until read.
pub fn report_refusals(socket: &UdpSocket) -> bool {
    sys::report_refusals(socket)
}

/// The destinations the kernel reported unreachable since the last call (from the
/// socket's error queue; at most 1024 a call, so one call's work is bounded).
pub fn take_refusals(socket: &UdpSocket, out: &mut Vec<SocketAddr>) {
    sys::take_refusals(socket, out);
}

/// The system calls: Linux's offloads through `nix`.
#[cfg(target_os = "linux")]
mod sys {
    use core::net::{SocketAddr, SocketAddrV6};
    use std::io::{self, IoSliceMut};
    use std::os::fd::AsRawFd;

    use nix::cmsg_space;
    use nix::sys::socket::{
        ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg, setsockopt, sockopt,
    };
    use tokio::net::UdpSocket;

    /// Segmentation offload can be asked for.
    pub(super) const GSO: bool = true;

    /// Asks for coalesced receives; `false` where the kernel does not offer them.
    pub(super) fn enable_gro(socket: &UdpSocket) -> bool {
        setsockopt(socket, sockopt::UdpGroSegment, &true).is_ok()
    }

    /// Asks for ICMP errors with their addresses (v4, and v6 on a v6 socket).
    pub(super) fn report_refusals(socket: &UdpSocket) -> bool {
        let v4 = setsockopt(socket, sockopt::Ipv4RecvErr, &true).is_ok();
        let v6 = setsockopt(socket, sockopt::Ipv6RecvErr, &true).is_ok();
        v4 || v6
    }

    /// Reads the error queue: each port unreachable's original destination.
    pub(super) fn take_refusals(socket: &UdpSocket, out: &mut Vec<SocketAddr>) {
        let mut payload = [0u8; 64];
        let mut cmsg = cmsg_space!(nix::libc::sock_extended_err, nix::libc::sockaddr_in6);
        for _ in 0..1024 {
            let mut iov = [IoSliceMut::new(&mut payload)];
            let Ok(msg) = recvmsg::<SockaddrStorage>(
                socket.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
            ) else {
                return;
            };
            let refused = msg.cmsgs().is_ok_and(|mut cmsgs| {
                cmsgs.any(|c| match c {
                    ControlMessageOwned::Ipv4RecvErr(e, _)
                    | ControlMessageOwned::Ipv6RecvErr(e, _) => {
                        e.ee_errno == nix::libc::ECONNREFUSED as u32
                    }
                    _ => false,
                })
            });
            if let Some(to) = msg
                .address
                .and_then(|a| socket_addr(&a))
                .filter(|_| refused)
            {
                out.push(to);
            }
        }
    }

    fn socket_addr(a: &SockaddrStorage) -> Option<SocketAddr> {
        a.as_sockaddr_in()
            .map(|v4| SocketAddr::from((v4.ip(), v4.port())))
            .or_else(|| {
                // Flow label and scope kept: a link-local peer needs its interface.
                a.as_sockaddr_in6().map(|v6| {
                    SocketAddrV6::new(v6.ip(), v6.port(), v6.flowinfo(), v6.scope_id()).into()
                })
            })
    }

    /// Room for the one control message asked for (the GRO segment size).
    pub(super) fn cmsg_buffer() -> Vec<u8> {
        cmsg_space!(i32)
    }

    /// Sets `UDP_SEGMENT` (0 turns it off).
    pub(super) fn set_segment(socket: &UdpSocket, size: usize) -> io::Result<()> {
        let size = i32::try_from(size).map_err(|_| io::ErrorKind::InvalidInput)?;
        Ok(setsockopt(socket, sockopt::UdpGsoSegment, &size)?)
    }

    /// One `recvmsg`: bytes received, the segment size (0 if one datagram) and source.
    pub(super) fn recv(
        socket: &UdpSocket,
        buf: &mut [u8],
        cmsg: &mut [u8],
    ) -> io::Result<(usize, usize, Option<SocketAddr>)> {
        let mut iov = [IoSliceMut::new(buf)];
        let msg = recvmsg::<SockaddrStorage>(
            socket.as_raw_fd(),
            &mut iov,
            Some(cmsg),
            MsgFlags::empty(),
        )?;
        let mut stride = 0;
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::UdpGroSegments(size) = c {
                    stride = usize::try_from(size).unwrap_or(0);
                }
            }
        }
        let from = msg.address.and_then(|a| socket_addr(&a));
        Ok((msg.bytes, stride, from))
    }
}

/// Elsewhere: one datagram per call.
#[cfg(not(target_os = "linux"))]
mod sys {
    use core::net::SocketAddr;
    use std::io;

    use tokio::net::UdpSocket;

    pub(super) const GSO: bool = false;

    pub(super) fn enable_gro(_: &UdpSocket) -> bool {
        false
    }

    pub(super) fn report_refusals(_: &UdpSocket) -> bool {
        false
    }

    pub(super) fn take_refusals(_: &UdpSocket, _: &mut Vec<SocketAddr>) {}

    pub(super) fn cmsg_buffer() -> Vec<u8> {
        Vec::new()
    }

    pub(super) fn set_segment(_: &UdpSocket, _: usize) -> io::Result<()> {
        Err(io::ErrorKind::Unsupported.into())
    }

    pub(super) fn recv(
        socket: &UdpSocket,
        buf: &mut [u8],
        _: &mut [u8],
    ) -> io::Result<(usize, usize, Option<SocketAddr>)> {
        let (n, from) = socket.try_recv_from(buf)?;
        Ok((n, 0, Some(from)))
    }
}

#[cfg(test)]
mod tests {
    use core::time::Duration;

    use super::*;

    /// Datagrams of `len` bytes, each filled with its own tag byte.
    fn datagram(tag: u8, len: usize) -> Vec<u8> {
        vec![tag; len]
    }

    async fn bound() -> UdpSocket {
        UdpSocket::bind("127.0.0.1:0").await.expect("bind")
    }

    /// Everything `rx` receives (through `Datagrams`, GRO on) until `n` datagrams came.
    async fn receive(rx: &UdpSocket, io: &mut Datagrams, n: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        while got.len() < n {
            tokio::time::timeout(Duration::from_secs(5), rx.readable())
                .await
                .expect("datagrams arrive within 5 s")
                .expect("readable");
            match io.rx.try_recv(rx, false) {
                Ok(()) => got.extend(io.rx.datagrams().map(|(d, _)| d.to_vec())),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("receive failed: {e}"),
            }
        }
        got
    }

    #[tokio::test]
    async fn batches_arrive_as_the_datagrams_that_were_queued() {
        let (tx, rx, other) = (bound().await, bound().await, bound().await);
        let (to, to_other) = (
            rx.local_addr().expect("addr"),
            other.local_addr().expect("addr"),
        );
        let mut out = Datagrams::new(&tx);
        let mut inp = Datagrams::new(&rx);
        let mut inp_other = Datagrams::new(&other);
        // Equal sizes then a shorter last one (one batch); a longer one (a new batch);
        // tiny ones (another segment size); a lone large one after them (which the
        // socket's segment setting must not cut); then another destination.
        let plan: Vec<(Vec<u8>, SocketAddr)> = vec![
            (datagram(1, 300), to),
            (datagram(2, 300), to),
            (datagram(3, 300), to),
            (datagram(4, 100), to),
            (datagram(5, 400), to),
            (datagram(6, 10), to),
            (datagram(7, 10), to),
            (datagram(8, 10), to),
            (datagram(9, 1200), to),
            (datagram(10, 0), to),
            (datagram(11, 20), to_other),
        ];
        let mut sent = 0;
        for (d, dest) in &plan {
            sent += out.tx.queue(&tx, d, *dest).await.expect("queue").datagrams;
        }
        sent += out.tx.flush(&tx).await.expect("flush").datagrams;
        assert_eq!(sent, plan.len());
        assert!(
            out.tx.syscalls < plan.len() as u64,
            "batched: {} calls for {} datagrams",
            out.tx.syscalls,
            plan.len()
        );
        let expected: Vec<Vec<u8>> = plan[..10].iter().map(|(d, _)| d.clone()).collect();
        assert_eq!(receive(&rx, &mut inp, expected.len()).await, expected);
        if inp.rx.buf.len() == RECV_LEN {
            // With GRO, the runs that left as one send arrive in one receive.
            assert!(
                inp.rx.syscalls < expected.len() as u64,
                "coalesced: {} receive calls for {} datagrams",
                inp.rx.syscalls,
                expected.len()
            );
        }
        assert_eq!(
            receive(&other, &mut inp_other, 1).await,
            vec![datagram(11, 20)]
        );
    }

    #[tokio::test]
    async fn ipv6_batches_name_their_source() {
        let bind = || UdpSocket::bind("[::1]:0");
        let (tx, rx) = (
            bind().await.expect("bind ::1"),
            bind().await.expect("bind ::1"),
        );
        let to = rx.local_addr().expect("addr");
        let mut out = Datagrams::new(&tx);
        let mut inp = Datagrams::new(&rx);
        for tag in 1..=3 {
            out.tx
                .queue(&tx, &datagram(tag, 64), to)
                .await
                .expect("queue");
        }
        assert_eq!(out.tx.flush(&tx).await.expect("flush").datagrams, 3);
        let got = receive(&rx, &mut inp, 3).await;
        assert_eq!(got, vec![datagram(1, 64), datagram(2, 64), datagram(3, 64)]);
        let sources: Vec<_> = inp.rx.datagrams().map(|(_, from)| from).collect();
        assert!(
            sources
                .iter()
                .all(|&from| from == Some(tx.local_addr().expect("addr"))),
            "sources {sources:?}"
        );
    }

    #[tokio::test]
    async fn a_refused_batch_is_counted_not_fatal() {
        let tx = bound().await;
        let gone = bound().await;
        let to = gone.local_addr().expect("addr");
        drop(gone);
        tx.connect(to).await.expect("connect");
        let mut out = Datagrams::new(&tx);
        // The first send draws the ICMP error; a later one reports it.
        let mut refused = 0;
        for _ in 0..20 {
            for _ in 0..4 {
                refused += out
                    .tx
                    .queue(&tx, &[0; 50], to)
                    .await
                    .expect("queue")
                    .refused;
            }
            refused += out.tx.flush(&tx).await.expect("flush").refused;
            if refused > 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(refused > 0, "the port-unreachable reached the sender");
    }
}
