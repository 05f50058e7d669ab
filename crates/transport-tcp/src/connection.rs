//! The upper layer: [`Connection`] and [`Pipeline`], requests with ids, replies matched
//! to their waiters, a bounded number in flight, deadlines and cancellation on drop.

use core::fmt;
use core::future::poll_fn;
use core::net::SocketAddr;
use core::task::Poll;
use core::time::Duration;
use std::collections::HashSet;
use std::io;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio::process::{Child, Command};

use crate::config::Config;
use crate::error::Error;
use crate::framed::{Framed, Unsolicited};
use crate::frames::{Frame, Payload};
use crate::sendfile::FileRegion;
use crate::shared::Waiter;
use crate::stats::Stats;

/// A cheap, cloneable handle for requests and their replies over a [`Framed`]
/// connection. When the last handle (and the last [`Pipeline`]) is dropped, the
/// connection closes as by [`Connection::close`].
#[derive(Clone)]
pub struct Connection {
    framed: Framed,
}

/// Requests in flight whose replies come back to one waiter, in any order.
/// Dropping it cancels what is still outstanding.
pub struct Pipeline {
    framed: Framed,
    waiter: Arc<Waiter>,
    outstanding: HashSet<u32>,
}

impl From<Framed> for Connection {
    /// Requests over a framed connection, beside whatever else uses it (replies to the
    /// peer's requests, one-way frames).
    fn from(framed: Framed) -> Self {
        Self { framed }
    }
}

impl Connection {
    /// Starts the reader and writer tasks over the two halves of a stream. Must be
    /// called within a tokio runtime. Frames from the peer that answer no request are
    /// counted and dropped; [`Framed::new`] keeps them.
    pub fn new<R, W>(reader: R, writer: W, config: Config) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Framed::new(reader, writer, config).0.into()
    }

    /// A connection over a TCP stream, with Nagle's algorithm off (the writer batches by
    /// itself). On Linux, file regions ([`Pipeline::send_file`]) go by `sendfile(2)`.
    pub fn from_tcp(stream: TcpStream, config: Config) -> io::Result<Self> {
        Ok(Framed::from_tcp(stream, config)?.0.into())
    }

    /// A connection over a Unix stream socket. On Linux, file regions
    /// ([`Pipeline::send_file`]) go by `sendfile(2)`.
    pub fn from_unix(stream: UnixStream, config: Config) -> Self {
        Framed::from_unix(stream, config).0.into()
    }

    /// Connects over TCP with Nagle's algorithm off (the writer batches by itself).
    pub async fn connect_tcp(addr: SocketAddr, config: Config) -> io::Result<Self> {
        Ok(Framed::connect_tcp(addr, config).await?.0.into())
    }

    /// Connects to a Unix socket.
    pub async fn connect_unix(path: impl AsRef<Path>, config: Config) -> io::Result<Self> {
        Ok(Framed::connect_unix(path, config).await?.0.into())
    }

    /// Spawns `command` and talks to it over a socketpair on its stdin and stdout, as
    /// [`Framed::spawn`] does.
    pub fn spawn(command: &mut Command, config: Config) -> io::Result<(Self, Child)> {
        let (framed, _, child) = Framed::spawn(command, config)?;
        Ok((framed.into(), child))
    }

    /// [`Connection::spawn`], keeping the frames that answer no request.
    pub fn spawn_with_incoming(
        command: &mut Command,
        config: Config,
    ) -> io::Result<(Self, Unsolicited, Child)> {
        let (framed, incoming, child) = Framed::spawn(command, config)?;
        Ok((framed.into(), incoming, child))
    }

    /// The framed connection underneath, for frames that are not requests.
    pub fn framed(&self) -> &Framed {
        &self.framed
    }

    /// A new pipeline on this connection.
    pub fn pipeline(&self) -> Pipeline {
        Pipeline {
            framed: self.framed.clone(),
            waiter: Waiter::new(),
            outstanding: HashSet::new(),
        }
    }

    /// Sends one request (`head` copied, `payload` not) and waits for its reply.
    pub async fn call(&self, ty: u8, head: &[u8], payload: Bytes) -> Result<Frame, Error> {
        let mut pipeline = self.pipeline();
        pipeline.send(ty, head, payload).await?;
        pipeline.recv().await
    }

    /// [`Connection::call`] with a deadline.
    pub async fn call_timeout(
        &self,
        ty: u8,
        head: &[u8],
        payload: Bytes,
        deadline: Duration,
    ) -> Result<Frame, Error> {
        tokio::time::timeout(deadline, self.call(ty, head, payload))
            .await
            .unwrap_or_else(|_| {
                Err(Error::Timeout {
                    what: format!("the reply to a type-{ty} request"),
                    after: deadline,
                })
            })
    }

    /// Stops sending: the writer flushes what is queued and shuts its half down, so the
    /// peer sees end of stream. Replies still arrive until the peer closes.
    pub fn close(&self) {
        self.framed.close();
    }

    /// The error that ended the connection, if it has ended.
    pub fn failure(&self) -> Option<Error> {
        self.framed.failure()
    }

    /// Requests outstanding now.
    pub fn in_flight(&self) -> usize {
        self.framed.shared.in_flight()
    }

    /// The settings in force.
    pub fn config(&self) -> Config {
        self.framed.config()
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        self.framed.stats()
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("config", &self.config())
            .field("in_flight", &self.in_flight())
            .field("failure", &self.failure())
            .finish()
    }
}

impl Pipeline {
    /// Queues a request once a slot is free and returns its id. `head` (the small part of
    /// the body) is copied; `payload` follows it on the wire uncopied.
    pub async fn send(&mut self, ty: u8, head: &[u8], payload: Bytes) -> Result<u32, Error> {
        self.send_inner(ty, None, head, Payload::Mem(payload)).await
    }

    /// [`Pipeline::send`] with a file region as the payload. On Linux, over the
    /// sockets of [`Connection::from_unix`], [`Connection::from_tcp`] and the
    /// constructors built on them, the kernel sends the region from the page cache
    /// (`sendfile(2)`): its bytes are never copied into or out of this process. Over any
    /// other stream the writer reads the region in itself, a chunk at a time.
    pub async fn send_file(
        &mut self,
        ty: u8,
        head: &[u8],
        region: FileRegion,
    ) -> Result<u32, Error> {
        self.send_inner(ty, None, head, Payload::File(region)).await
    }

    /// [`Pipeline::send`] with the id chosen by the caller. Fails with
    /// [`Error::IdInUse`] if a request with that id is outstanding.
    pub async fn send_with_id(
        &mut self,
        ty: u8,
        id: u32,
        head: &[u8],
        payload: Bytes,
    ) -> Result<u32, Error> {
        self.send_inner(ty, Some(id), head, Payload::Mem(payload))
            .await
    }

    async fn send_inner(
        &mut self,
        ty: u8,
        fixed_id: Option<u32>,
        head: &[u8],
        payload: Payload,
    ) -> Result<u32, Error> {
        let shared = &self.framed.shared;
        // A failed connection has closed its slots: the wait below ends at once with
        // the failure, as does `outgoing` after it.
        let slot = shared
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| shared.failure().unwrap_or(Error::Shutdown))?;
        // The frame takes its share of the write budget first (which may wait), then
        // gets its id: between registering the id and queueing the frame nothing waits,
        // so a caller that gives up (drops this future) never leaves an id behind.
        let mut outgoing = shared.outgoing(ty, 0, head, payload).await?;
        let id = shared.register(fixed_id, &self.waiter, slot)?;
        outgoing.set_id(id);
        match shared.queue(outgoing) {
            Ok(()) => {
                self.outstanding.insert(id);
                Ok(id)
            }
            Err(e) => {
                shared.forget([id]);
                Err(e)
            }
        }
    }

    /// The next reply to any of this pipeline's requests.
    pub async fn recv(&mut self) -> Result<Frame, Error> {
        if self.outstanding.is_empty() {
            return Err(Error::NothingOutstanding);
        }
        let shared = &self.framed.shared;
        let reply = poll_fn(|cx| {
            if let Some(reply) = self.waiter.take_or_register(cx.waker()) {
                return Poll::Ready(Ok(reply));
            }
            // Registered before checking for failure, so a failure recorded after the
            // check still finds the waker.
            match shared.failure() {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            }
        })
        .await?;
        self.outstanding.remove(&reply.id);
        Ok(reply)
    }

    /// [`Pipeline::recv`] with a deadline.
    pub async fn recv_timeout(&mut self, deadline: Duration) -> Result<Frame, Error> {
        tokio::time::timeout(deadline, self.recv())
            .await
            .unwrap_or_else(|_| {
                Err(Error::Timeout {
                    what: format!("one of {} outstanding replies", self.outstanding.len()),
                    after: deadline,
                })
            })
    }

    /// Requests sent whose replies have not been taken by `recv`.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        // Cancel: forget the ids (their slots free now; late replies count as unmatched).
        self.framed.shared.forget(self.outstanding.iter().copied());
    }
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("outstanding", &self.outstanding.len())
            .finish()
    }
}
