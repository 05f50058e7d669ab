//! What the connection does with each message from the peer (without ever waiting on
//! it), how calls take and give back credit, and how the connection ends.

use core::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use core::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use volley_proto::rpc::{CLOSING_LEN, CloseReason, ErrorCode, Kind};

use super::{Inner, MAX_PENDING_ANSWERS, lock};
use crate::codec::Codec;
use crate::error::{CallError, Ended};
use crate::link::{LinkError, LinkReceiver, Message};
use crate::service::Service;

impl<S: Service, C: Codec> Inner<S, C> {
    pub(super) async fn acquire(
        &self,
        method: &'static str,
    ) -> Result<OwnedSemaphorePermit, CallError> {
        match self.calls.credit.clone().acquire_owned().await {
            Ok(permit) => Ok(permit),
            Err(_) => Err(self.lost(method, LinkError::Closed, false)),
        }
    }

    /// The error for a call on a connection that has ended; `sent` if the call had been
    /// handed to the link (it may have run), unless the peer closed the connection as
    /// idle: it runs no call that arrives as it does (`keepalive::watch`).
    pub(super) fn lost(&self, method: &'static str, fallback: LinkError, sent: bool) -> CallError {
        let cause = self
            .life
            .failure
            .get()
            .cloned()
            .unwrap_or(Ended::Link(fallback));
        CallError::ConnectionLost {
            method,
            sent: sent && !matches!(cause, Ended::IdleClosed(_)),
            cause,
        }
    }

    /// Ends the connection: every waiting caller gets `cause`, running handlers stop.
    pub(super) fn fail(&self, cause: impl Into<Ended>) {
        if self.life.failure.set(cause.into()).is_err() {
            return;
        }
        self.calls.credit.close();
        lock(&self.calls.waiters).clear();
        for (_, handle) in lock(&self.served.running).drain() {
            if let Some(handle) = handle {
                handle.abort();
            }
        }
        self.sender.close();
        self.life.ended.notify_waiters();
        self.served.idle.notify_waiters();
    }

    /// Sends an error reply from a task of its own, so the reader never waits on the link.
    /// The text is cut to what the peer's largest message leaves room for.
    pub(super) fn answer_error(self: &Arc<Self>, id: u32, code: ErrorCode, text: String) {
        let room = (self.theirs.max_message as usize)
            .min(self.link_max)
            .saturating_sub(crate::link::MAX_HEAD);
        let mut text = text.into_bytes();
        text.truncate(room);
        self.answer(Message::new(Kind::ERROR, id, code.0, Bytes::from(text)));
    }

    /// Sends an answer this end makes itself (an error reply, a pong) from a task of its
    /// own; a peer that has more than [`MAX_PENDING_ANSWERS`] of them unsent (it asks
    /// without reading) is dropped.
    pub(super) fn answer(self: &Arc<Self>, message: Message) {
        if self.served.pending_answers.fetch_add(1, Ordering::SeqCst) >= MAX_PENDING_ANSWERS {
            self.fail(Ended::Flooded(MAX_PENDING_ANSWERS));
            return;
        }
        let inner = self.clone();
        tokio::spawn(async move {
            let _ = inner.sender.send(message).await;
            inner.served.pending_answers.fetch_sub(1, Ordering::SeqCst);
        });
    }

    /// Handles one message from the peer without waiting on anything.
    pub(super) fn dispatch(
        self: &Arc<Self>,
        message: Message,
        oneway: &mpsc::UnboundedSender<Message>,
    ) {
        let head = message.head;
        self.life.heard.fetch_add(1, Ordering::Relaxed);
        if !matches!(head.kind, Kind::PING | Kind::PONG) {
            self.life.activity.fetch_add(1, Ordering::Relaxed);
        }
        match head.kind {
            Kind::PING => self.answer(Message::new(Kind::PONG, 0, head.method, Bytes::new())),
            // Heard, which is all a pong is for.
            Kind::PONG => {}
            Kind::REPLY | Kind::ERROR => {
                let waiter = lock(&self.calls.waiters).remove(&head.call_id);
                match waiter {
                    Some(waiter) => {
                        let _ = waiter.tx.send(message);
                    }
                    None => {
                        self.counters.late_replies.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Kind::CALL => self.start_call(message),
            Kind::ONE_WAY => {
                if self.served.shutting_down.load(Ordering::SeqCst)
                    || !self.served.admit(self.ours.credit)
                {
                    self.counters.oneway_dropped.fetch_add(1, Ordering::Relaxed);
                    crate::log::warn_limited(
                        "one-way call dropped: past this end's credit, or shutting down",
                        &self.who,
                    );
                    return;
                }
                let _ = oneway.send(message);
            }
            Kind::CANCEL => {
                let entry = lock(&self.served.running).remove(&head.call_id);
                if let Some(handle) = entry {
                    if let Some(handle) = handle {
                        handle.abort();
                    }
                    self.counters.cancelled.fetch_add(1, Ordering::Relaxed);
                    self.served.finish_one();
                }
            }
            Kind::CLOSING => {
                let idle = <[u8; CLOSING_LEN]>::try_from(&message.args[..])
                    .map(|ms| Duration::from_millis(u64::from_le_bytes(ms)));
                self.fail(match (CloseReason(head.method), idle) {
                    (CloseReason::IDLE, Ok(idle)) => Ended::IdleClosed(idle),
                    _ => Ended::Link(LinkError::Closed),
                });
            }
            Kind::CREDIT => {
                // Never more than this end has out: a peer cannot inflate its own credit.
                let mut out = self.calls.oneway_out.load(Ordering::Relaxed);
                loop {
                    let back = head.method.min(out);
                    match self.calls.oneway_out.compare_exchange(
                        out,
                        out - back,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => {
                            self.calls.credit.add_permits(back as usize);
                            break;
                        }
                        Err(now) => out = now,
                    }
                }
            }
            kind => self.fail(LinkError::Malformed(
                volley_proto::wire::Error::UnexpectedType {
                    expected: "an rpc message after the hello",
                    found: kind.0,
                },
            )),
        }
    }
}

/// Reads the link until it ends, then fails the connection with the reason.
pub(super) async fn read_loop<S: Service, C: Codec, R: LinkReceiver>(
    inner: Arc<Inner<S, C>>,
    mut receiver: R,
    oneway: mpsc::UnboundedSender<Message>,
) {
    let cause = loop {
        match receiver.recv().await {
            Ok(message) => inner.dispatch(message, &oneway),
            Err(e) => break e,
        }
        if inner.life.failure.get().is_some() {
            return;
        }
    };
    inner.fail(cause);
}
