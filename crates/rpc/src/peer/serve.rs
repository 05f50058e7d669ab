//! Serving the peer's calls: sync calls run at once in the reader when they finish at
//! their first poll, else in a task of their own; one-way calls one after another in
//! the order sent, their credit given back in batches.

use core::any::Any;
use core::panic::AssertUnwindSafe;
use core::sync::atomic::Ordering;
use core::time::Duration;
use std::sync::Arc;

use bytes::Bytes;
use futures::FutureExt;
use tokio::sync::mpsc;
use volley_proto::rpc::{ErrorCode, Head, Kind};

use super::routes::{Encoded, HandlerFuture};
use super::{Inner, Peer, Served, lock};
use crate::codec::Codec;
use crate::error::HandlerError;
use crate::link::{Message, TrySendError};
use crate::service::Service;

impl<S, C> Served<S, C> {
    /// A call of the peer's has finished here.
    pub(super) fn finish_one(&self) {
        if self.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// Takes a credit slot for a call of the peer's; false if it is past this end's
    /// `credit`.
    pub(super) fn admit(&self, credit: u32) -> bool {
        let before = self.in_flight.fetch_add(1, Ordering::SeqCst);
        if before >= credit as usize {
            self.finish_one();
            return false;
        }
        true
    }
}

impl<S: Service, C: Codec> Inner<S, C> {
    pub(super) fn start_call(self: &Arc<Self>, message: Message) {
        let head = message.head;
        if self.served.shutting_down.load(Ordering::SeqCst) {
            return self.answer_error(
                head.call_id,
                ErrorCode::SHUTTING_DOWN,
                "the peer is shutting down".into(),
            );
        }
        if !self.served.admit(self.ours.credit) {
            self.counters.busy.fetch_add(1, Ordering::Relaxed);
            return self.answer_error(
                head.call_id,
                ErrorCode::BUSY,
                format!("{} calls in flight, the credit given", self.ours.credit),
            );
        }
        // Admitted first, then the door looked at: the keepalive task closes it first,
        // then looks at what is admitted, so a call either holds the connection open or
        // is refused unrun (see `keepalive::watch`).
        if self.served.idle_closing.load(Ordering::SeqCst) {
            self.served.finish_one();
            return self.answer_error(
                head.call_id,
                ErrorCode::SHUTTING_DOWN,
                "the peer is closing the connection as idle".into(),
            );
        }
        let handler = self
            .served
            .router
            .as_ref()
            .and_then(|router| router.get(head.method))
            .map(|(_, handler)| handler.clone());
        let Some(handler) = handler else {
            self.served.finish_one();
            return self.answer_error(
                head.call_id,
                ErrorCode::UNKNOWN_METHOD,
                format!("no method {} here", head.method),
            );
        };
        if lock(&self.served.running).contains_key(&head.call_id) {
            self.served.finish_one();
            crate::log::warn_limited("the peer reused the id of a call still running", &self.who);
            return self.answer_error(
                head.call_id,
                ErrorCode::PROTOCOL,
                format!("call id {} is already running here", head.call_id),
            );
        }
        self.counters.calls_served.fetch_add(1, Ordering::Relaxed);
        let mut future = handler(message, Peer::handle(self));
        // Most handlers finish at their first poll: run that here, and spawn a task only
        // for one that has to wait (a task per call costs more than the call). A call
        // finished here never enters `running`: nothing can cancel it meanwhile.
        let first = std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().now_or_never()));
        let outcome = match first {
            Ok(Some(outcome)) => outcome,
            Ok(None) => {
                // In the table before the task exists, so a task that ends at once finds
                // its entry.
                lock(&self.served.running).insert(head.call_id, None);
                let inner = self.clone();
                let task = tokio::spawn(async move {
                    let outcome = run_handler(future, head.deadline_us).await;
                    inner.reply(head.call_id, outcome).await;
                });
                if let Some(slot) = lock(&self.served.running).get_mut(&head.call_id) {
                    *slot = Some(task.abort_handle());
                }
                return;
            }
            Err(panic) => Err(HandlerError::with_code(
                ErrorCode::PANIC,
                panic_text(&*panic),
            )),
        };
        let reply = self.reply_message(head.call_id, outcome);
        match self.sender.try_send(reply) {
            Err(TrySendError::Full(reply)) => {
                // The link is at capacity: finish sending from a task.
                let inner = self.clone();
                tokio::spawn(async move {
                    let _ = inner.sender.send(reply).await;
                    inner.served.finish_one();
                });
            }
            Ok(()) | Err(TrySendError::Failed(_)) => self.served.finish_one(),
        }
    }

    /// Sends a finished call's reply (or error), unless a cancel came first, and frees its
    /// credit.
    async fn reply(self: Arc<Self>, call_id: u32, outcome: Result<Encoded, HandlerError>) {
        if lock(&self.served.running).remove(&call_id).is_some() {
            let reply = self.reply_message(call_id, outcome);
            let _ = self.sender.send(reply).await;
            self.served.finish_one();
        }
    }

    /// A finished call's reply (or error), sized for the peer.
    fn reply_message(&self, call_id: u32, outcome: Result<Encoded, HandlerError>) -> Message {
        let mut reply = match outcome {
            Ok(encoded) => Message {
                head: Head {
                    kind: Kind::REPLY,
                    call_id,
                    method: 0,
                    deadline_us: None,
                    metadata: false,
                },
                args: encoded.args,
                segments: encoded.segments,
            },
            Err(e) => Message::new(Kind::ERROR, call_id, e.code.0, Bytes::from(e.message)),
        };
        // The peer's limit, or the link's if lower: a reply the link cannot carry would
        // otherwise fail to send and leave the caller waiting for its deadline.
        let max = (self.theirs.max_message as usize).min(self.link_max);
        if reply.wire_len() > max || reply.segments.len() > volley_proto::rpc::MAX_SEGMENTS {
            let text = format!(
                "the reply is {} bytes in {} segments; the caller takes at most {max} bytes",
                reply.wire_len(),
                reply.segments.len()
            );
            reply = Message::new(
                Kind::ERROR,
                call_id,
                ErrorCode::TOO_LARGE.0,
                Bytes::from(text),
            );
        }
        reply
    }
}

/// Runs a handler with its deadline, turning a panic into an error.
async fn run_handler(
    future: HandlerFuture,
    deadline_us: Option<u64>,
) -> Result<Encoded, HandlerError> {
    let caught = AssertUnwindSafe(future).catch_unwind();
    let outcome = match deadline_us {
        Some(us) => {
            let after = Duration::from_micros(us);
            match tokio::time::timeout(after, caught).await {
                Ok(outcome) => outcome,
                Err(_) => {
                    return Err(HandlerError::with_code(
                        ErrorCode::DEADLINE,
                        format!("the handler ran past the call's deadline of {after:?}"),
                    ));
                }
            }
        }
        None => caught.await,
    };
    outcome.unwrap_or_else(|panic| {
        Err(HandlerError::with_code(
            ErrorCode::PANIC,
            panic_text(&*panic),
        ))
    })
}

fn panic_text(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".into()
    }
}

/// Runs one-way calls one after another, in the order they came, and gives their credit
/// back in batches.
pub(super) async fn oneway_loop<S: Service, C: Codec>(
    inner: Arc<Inner<S, C>>,
    mut queue: mpsc::UnboundedReceiver<Message>,
) {
    let batch = (inner.ours.credit / 4).max(1);
    let mut owed = 0u32;
    while let Some(message) = queue.recv().await {
        let method = message.head.method;
        let handler = inner
            .served
            .router
            .as_ref()
            .and_then(|router| router.get(method))
            .map(|(name, handler)| (*name, handler.clone()));
        match handler {
            Some((name, handler)) => {
                let future = handler(message, Peer::handle(&inner));
                if let Err(e) = run_handler(future, None).await {
                    inner.counters.oneway_failed.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(method = name, code = %e.code, "one-way call failed: {}", e.message);
                    crate::log::warn_limited(
                        "one-way calls failed (counted in PeerStats::oneway_failed)",
                        &inner.who,
                    );
                }
            }
            None => {
                inner.counters.oneway_failed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(method, "one-way call to a method this end does not serve");
                crate::log::warn_limited(
                    "one-way call to a method this end does not serve",
                    &inner.who,
                );
            }
        }
        inner.served.finish_one();
        owed += 1;
        if owed >= batch || queue.is_empty() {
            let credit = Message::new(Kind::CREDIT, 0, owed, Bytes::new());
            if inner.sender.send(credit).await.is_err() {
                return;
            }
            owed = 0;
        }
        if inner.life.failure.get().is_some() {
            return;
        }
    }
}
