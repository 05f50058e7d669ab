//! The driver: the window and what is kept beside it while an operation runs (spare
//! buffers, the epoch, what came back instead of replies), and the loop that fills the
//! window, sends, waits and applies replies until the operation is done.

use std::io;
use std::time::Instant as StdInstant;

use tokio::net::UdpSocket;
use volley_proto::scp::window::{Event, ReplyOutcome, ScpProtocol, Window};
use volley_proto::scp::{self, ReturnCode};
use volley_proto::time::Instant;

use super::ops::{Chunks, Token, build, describe};
use super::{NoReply, Op, ScpClient, ScpError};
use crate::datagrams::{Datagrams, refused};

/// The window and what the driver keeps beside it while an operation runs.
#[derive(Debug)]
pub(super) struct Driver {
    pub(super) window: Window<ScpProtocol, Token>,
    pub(super) epoch: StdInstant,
    /// Request buffers returned by the window, for reuse.
    pub(super) spare: Vec<Vec<u8>>,
    /// Whether the board has ever answered (after that, "connection refused" is loss,
    /// as while a board reboots; before it, nothing listens there).
    pub(super) heard: bool,
    /// Datagrams that did not parse during this operation, and the first one's error.
    pub(super) garbage: (u64, Option<volley_proto::wire::Error>),
    /// Data bytes of reads and writes completed during this operation.
    pub(super) done: u64,
}

impl ScpClient {
    pub(super) async fn drive(
        &mut self,
        ops: &mut [Op<'_>],
        mut progress: impl FnMut(u64),
    ) -> Result<(), ScpError> {
        let mut chunks = Chunks::new(ops)?;
        let refused_before = self.refused;
        let mut reported = 0;
        loop {
            let now = self.driver.now();
            let window = &mut self.driver.window;
            window.handle_timeout(now);
            if let Some(Event::TimedOut {
                token,
                tries,
                request,
                busy,
                ..
            }) = window.poll_event()
            {
                self.driver.spare.push(request);
                let (cmd, chip, address) = describe(ops, &token);
                tracing::debug!(%cmd, %chip, address, tries, "a request gave up");
                let why = match (busy, self.driver.garbage) {
                    (Some((code, replies)), _) => NoReply::Busy {
                        code: ReturnCode(code),
                        replies,
                        tries,
                    },
                    _ if self.refused > refused_before => NoReply::Refused {
                        reports: self.refused - refused_before,
                    },
                    (None, (replies, Some(first))) => NoReply::Garbage { replies, first },
                    (None, _) => NoReply::Silence,
                };
                return Err(ScpError::Timeout {
                    cmd,
                    chip,
                    address,
                    tries,
                    elapsed_ms: (now - token.first_sent).as_millis(),
                    why,
                });
            }
            // Fill the window, plus one request queued behind it so a freed slot
            // refills at once.
            while self.driver.window.outstanding() + self.driver.window.queued()
                <= self.window_size()
            {
                let Some(mut token) = chunks.next(ops) else {
                    break;
                };
                token.first_sent = now;
                let bytes = build(ops, &token, self.driver.spare.pop().unwrap_or_default())?;
                self.driver
                    .window
                    .push(bytes, token)
                    .map_err(|refused| ScpError::Wire(refused.error))?;
            }
            self.refused += self
                .link
                .send_ready(&mut self.driver.window, now, self.peer)
                .await?;
            if self.driver.window.is_idle() {
                if self.driver.done != reported {
                    progress(self.driver.done);
                }
                return Ok(());
            }
            self.refused += self
                .link
                .recv_ready(&mut self.driver, ops, self.spin)
                .await?;
            if self.refused > refused_before && !self.driver.heard {
                return Err(ScpError::Refused { peer: self.peer });
            }
            if self.driver.done != reported {
                reported = self.driver.done;
                progress(reported);
            }
        }
    }
}

impl Driver {
    pub(super) fn now(&self) -> Instant {
        Instant::from_micros(self.epoch.elapsed().as_micros() as u64)
    }

    /// Handles every reply that is ready, without waiting (after the reactor saw the
    /// socket readable); returns how many "connection refused" reports came instead.
    pub(super) fn drain(
        &mut self,
        socket: &UdpSocket,
        io: &mut Datagrams,
        ops: &mut [Op<'_>],
    ) -> Result<u64, ScpError> {
        let mut refused_count = 0;
        loop {
            match io.rx().try_recv(socket, false) {
                Ok(()) => self.on_batch(io, ops)?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(refused_count),
                Err(e) if refused(&e) => refused_count += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Applies every reply of the last receive call.
    pub(super) fn on_batch(&mut self, io: &Datagrams, ops: &mut [Op<'_>]) -> Result<(), ScpError> {
        let now = self.now();
        io.datagrams()
            .try_for_each(|(datagram, _)| self.on_reply(ops, now, datagram))
    }

    /// Applies one reply to the window and, if it completes a request, to its operation.
    pub(super) fn on_reply(
        &mut self,
        ops: &mut [Op<'_>],
        now: Instant,
        datagram: &[u8],
    ) -> Result<(), ScpError> {
        self.heard = true;
        match self.window.handle_reply(now, datagram) {
            ReplyOutcome::Completed { token, request, .. } => {
                self.spare.push(request);
                // The window has already checked the header; take the body from the view.
                let packet = scp::Packet::new_checked(datagram)?;
                let body = packet.body();
                // The window only completes requests of this operation (an interrupted
                // one's are abandoned first), and every range is still checked: a reply
                // is never written anywhere but its own chunk.
                let Some(op) = ops.get_mut(token.op) else {
                    return Err(not_ours(&token));
                };
                match op {
                    Op::Read { chip, address, buf } => {
                        if body.len() != token.len {
                            return Err(ScpError::ReadLength {
                                chip: *chip,
                                address: address.wrapping_add(token.offset as u32),
                                expected: token.len,
                                got: body.len(),
                            });
                        }
                        let Some(chunk) = buf.get_mut(token.offset..token.offset + token.len)
                        else {
                            return Err(not_ours(&token));
                        };
                        chunk.copy_from_slice(body);
                    }
                    Op::Raw { reply, .. } => {
                        reply.clear();
                        reply.extend_from_slice(body);
                    }
                    Op::Write { .. } | Op::WriteFrom { .. } | Op::Fill { .. } => {}
                }
                self.done += token.len as u64;
                Ok(())
            }
            ReplyOutcome::Failed {
                token,
                code,
                request,
            } => {
                self.spare.push(request);
                let (cmd, chip, address) = describe(ops, &token);
                Err(ScpError::Rc {
                    rc: ReturnCode(code),
                    cmd,
                    chip,
                    address,
                })
            }
            ReplyOutcome::Unknown => {
                if let Err(e) = scp::Packet::new_checked(datagram) {
                    self.garbage.0 += 1;
                    self.garbage.1.get_or_insert(e);
                }
                Ok(())
            }
            ReplyOutcome::RetryLater | ReplyOutcome::Duplicate | ReplyOutcome::Abandoned => Ok(()),
        }
    }
}

/// A completed request whose chunk lies outside the operation it names: a bug, reported
/// as an error rather than a panic or a write elsewhere.
fn not_ours(token: &Token) -> ScpError {
    ScpError::InvalidArgument(format!(
        "internal error: a reply for bytes {}..{} of operation {}, which has no such chunk",
        token.offset,
        token.offset + token.len,
        token.op
    ))
}
