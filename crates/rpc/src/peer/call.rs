//! The call path: a sync call registers its waiter, waits for credit, encodes its
//! arguments into a pool buffer and hands the message to the link; [`Pending`] takes the
//! call back if it is dropped before its reply.

use core::sync::atomic::Ordering;
use core::time::Duration;
use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, oneshot};
use volley_proto::rpc::{CAP_METADATA, ErrorCode, Head, Kind};

use super::{Inner, Peer, lock, own_timer};
use crate::codec::{Codec, CodecError};
use crate::error::CallError;
use crate::link::{INLINE, Payload, TrySendError};
use crate::link::{LinkError, Message};
use crate::pool::PoolBuf;
use crate::reply::{ReplyFuture, SendFuture};
use crate::service::{Method, Reply, Service};

impl<S: Service, C: Codec> Peer<S, C> {
    /// Calls `M` and waits for its result.
    pub async fn call<M: Method<Service = S>>(
        &self,
        args: &M::Args,
    ) -> Result<M::Output, CallError> {
        Ok(self.call_with::<M>(args, Vec::new(), None).await?.value)
    }

    /// Calls `M` with bulk segments (sent uncopied) and an optional deadline (sent to the
    /// peer, which gives up at it too; `None` takes [`Config::default_deadline`](crate::Config::default_deadline)); returns the result and the segments that came with
    /// it. Waits first for the peer's credit. Dropping the future before it completes
    /// cancels the call at the peer.
    pub async fn call_with<M: Method<Service = S>>(
        &self,
        args: &M::Args,
        segments: Vec<Bytes>,
        deadline: Option<Duration>,
    ) -> Result<Reply<M::Output>, CallError> {
        let deadline = deadline.or(self.inner.config.default_deadline);
        let message = self
            .message::<M>(Kind::CALL, args, segments, deadline)
            .await?;
        self.dispatch::<M>(message, deadline).await
    }

    /// A sync call's message on its way: credit, the waiter, the send, the reply.
    async fn dispatch<M: Method<Service = S>>(
        &self,
        message: Message,
        deadline: Option<Duration>,
    ) -> Result<Reply<M::Output>, CallError> {
        let inner = &self.inner;
        let permit = inner.acquire(M::NAME).await?;
        let (guard, rx) = self.register(message.head.call_id, permit, deadline);
        self.send_and_wait::<M>(message, guard, rx, deadline).await
    }

    /// Sends a registered call (waiting while the link is full) and waits for its reply.
    async fn send_and_wait<M: Method<Service = S>>(
        &self,
        message: Message,
        mut guard: Pending<S, C>,
        rx: oneshot::Receiver<Message>,
        deadline: Option<Duration>,
    ) -> Result<Reply<M::Output>, CallError> {
        let inner = &self.inner;
        if let Err(e) = inner.sender.send(message).await {
            guard.disarm();
            return Err(inner.lost(M::NAME, e, false));
        }
        inner.sent();
        let reply = match own_timer(deadline) {
            Some(after) => match tokio::time::timeout(after, rx).await {
                Ok(reply) => reply,
                Err(_) => return Err(deadline_exceeded::<M>(after)),
            },
            None => rx.await,
        };
        guard.finish::<M>(reply, deadline)
    }

    /// A sync call of `M` whose arguments are encoded already (after a metadata block if
    /// `metadata`): a call with metadata, and what a
    /// [`Reconnecting`](crate::Reconnecting) client sends again over a new connection
    /// when the last one ended before the call went out.
    pub(crate) async fn call_encoded<M: Method<Service = S>>(
        &self,
        args: Payload,
        segments: Vec<Bytes>,
        deadline: Option<Duration>,
        metadata: bool,
    ) -> Result<Reply<M::Output>, CallError> {
        let deadline = deadline.or(self.inner.config.default_deadline);
        self.served::<M>()?;
        let message = self.message_in::<M>(args, Kind::CALL, segments, deadline, metadata)?;
        self.dispatch::<M>(message, deadline).await
    }

    /// A one-way call of `M` whose arguments are encoded already (as
    /// [`call_encoded`](Self::call_encoded)).
    pub(crate) async fn send_encoded<M: Method<Service = S>>(
        &self,
        args: Payload,
        segments: Vec<Bytes>,
        metadata: bool,
    ) -> Result<(), CallError> {
        self.served::<M>()?;
        let message = self.message_in::<M>(args, Kind::ONE_WAY, segments, None, metadata)?;
        self.send_message::<M>(message).await
    }

    /// Registers call `id`'s waiter, holding `permit` until the reply comes; a long
    /// `deadline` is kept by the connection's sweep.
    fn register(
        &self,
        id: u32,
        permit: OwnedSemaphorePermit,
        deadline: Option<Duration>,
    ) -> (Pending<S, C>, oneshot::Receiver<Message>) {
        let (tx, rx) = oneshot::channel();
        self.inner.calls.add_waiter(id, tx, deadline);
        let guard = Pending {
            inner: self.inner.clone(),
            id,
            permit: Some(permit),
        };
        (guard, rx)
    }

    /// Starts a sync call of `M` without waiting where nothing makes it wait (a pool
    /// buffer free, credit left, room on the link), which is almost always: then the call
    /// is on the link and the future only waits for its reply. Where something would
    /// wait, the rest goes on in a boxed future.
    pub(crate) fn start_call<M: Method<Service = S>>(
        &self,
        args: M::Args,
        segments: Vec<Bytes>,
        deadline: Option<Duration>,
    ) -> ReplyFuture<M, C> {
        let deadline = deadline.or(self.inner.config.default_deadline);
        if let Err(e) = self.served::<M>() {
            return ReplyFuture::ready(Err(e));
        }
        let encoded = match self.encode_now::<M>(&args) {
            Ok(Some(encoded)) => encoded,
            Ok(None) => {
                let peer = self.clone();
                return ReplyFuture::slow(Box::pin(async move {
                    peer.call_with::<M>(&args, segments, deadline).await
                }));
            }
            Err(e) => return ReplyFuture::ready(Err(e)),
        };
        let message = match self.message_in::<M>(encoded, Kind::CALL, segments, deadline, false) {
            Ok(message) => message,
            Err(e) => return ReplyFuture::ready(Err(e)),
        };
        let Ok(permit) = self.inner.calls.credit.clone().try_acquire_owned() else {
            let peer = self.clone();
            return ReplyFuture::slow(Box::pin(async move {
                peer.dispatch::<M>(message, deadline).await
            }));
        };
        let (mut guard, rx) = self.register(message.head.call_id, permit, deadline);
        match self.inner.sender.try_send(message) {
            Ok(()) => {
                self.inner.sent();
                ReplyFuture::waiting(guard, rx, deadline)
            }
            Err(TrySendError::Full(message)) => {
                let peer = self.clone();
                ReplyFuture::slow(Box::pin(async move {
                    peer.send_and_wait::<M>(message, guard, rx, deadline).await
                }))
            }
            Err(TrySendError::Failed(e)) => {
                guard.disarm();
                ReplyFuture::ready(Err(self.inner.lost(M::NAME, e, false)))
            }
        }
    }

    /// Starts a one-way call of `M` as [`start_call`](Self::start_call) does.
    pub(crate) fn start_send<M: Method<Service = S>>(
        &self,
        args: M::Args,
        segments: Vec<Bytes>,
    ) -> SendFuture {
        let slow = |peer: Self, args: M::Args, segments| -> SendFuture {
            SendFuture::slow(Box::pin(
                async move { peer.send::<M>(&args, segments).await },
            ))
        };
        if let Err(e) = self.served::<M>() {
            return SendFuture::ready(Err(e));
        }
        let encoded = match self.encode_now::<M>(&args) {
            Ok(Some(encoded)) => encoded,
            Ok(None) => return slow(self.clone(), args, segments),
            Err(e) => return SendFuture::ready(Err(e)),
        };
        let message = match self.message_in::<M>(encoded, Kind::ONE_WAY, segments, None, false) {
            Ok(message) => message,
            Err(e) => return SendFuture::ready(Err(e)),
        };
        let Ok(permit) = self.inner.calls.credit.clone().try_acquire_owned() else {
            let peer = self.clone();
            return SendFuture::slow(Box::pin(
                async move { peer.send_message::<M>(message).await },
            ));
        };
        // The credit comes back in a credit message, not with a reply.
        permit.forget();
        self.inner.calls.oneway_out.fetch_add(1, Ordering::Relaxed);
        match self.inner.sender.try_send(message) {
            Ok(()) => {
                self.inner.sent();
                SendFuture::ready(Ok(()))
            }
            Err(TrySendError::Full(message)) => {
                let peer = self.clone();
                SendFuture::slow(Box::pin(async move { peer.deliver::<M>(message).await }))
            }
            Err(TrySendError::Failed(e)) => {
                SendFuture::ready(Err(self.inner.lost(M::NAME, e, false)))
            }
        }
    }

    /// Calls `M` one way: no reply. Waits for the peer's credit (given back as the peer
    /// finishes one-way calls), so a fast caller cannot bury a slow peer. The peer starts
    /// one-way handlers in the order sent; their errors are logged and counted there.
    pub async fn send<M: Method<Service = S>>(
        &self,
        args: &M::Args,
        segments: Vec<Bytes>,
    ) -> Result<(), CallError> {
        let message = self
            .message::<M>(Kind::ONE_WAY, args, segments, None)
            .await?;
        self.send_message::<M>(message).await
    }

    /// A one-way call's message on its way: credit, then the send.
    async fn send_message<M: Method<Service = S>>(
        &self,
        message: Message,
    ) -> Result<(), CallError> {
        let inner = &self.inner;
        let permit = inner.acquire(M::NAME).await?;
        // The credit comes back in a credit message, not with a reply.
        permit.forget();
        inner.calls.oneway_out.fetch_add(1, Ordering::Relaxed);
        self.deliver::<M>(message).await
    }

    /// Hands a one-way call to the link, waiting while it is full, and counts it.
    async fn deliver<M: Method<Service = S>>(&self, message: Message) -> Result<(), CallError> {
        let inner = &self.inner;
        inner
            .sender
            .send(message)
            .await
            .map_err(|e| inner.lost(M::NAME, e, false))?;
        inner.sent();
        Ok(())
    }

    /// Encodes a call and checks its size against the peer's largest message.
    async fn message<M: Method<Service = S>>(
        &self,
        kind: Kind,
        args: &M::Args,
        segments: Vec<Bytes>,
        deadline: Option<Duration>,
    ) -> Result<Message, CallError> {
        // Before waiting for a buffer: a call on an ended connection, or of a method the
        // peer does not serve so, fails at once.
        self.alive::<M>()?;
        self.served::<M>()?;
        let encoded = self.encode(args).await.map_err(encode_failed::<M>)?;
        self.message_in::<M>(encoded, kind, segments, deadline, false)
    }

    /// `Ok` if the peer serves `M` with `M`'s types, as far as its method table says
    /// (a peer without one matched the whole service at the hello).
    fn served<M: Method<Service = S>>(&self) -> Result<(), CallError> {
        let Some(methods) = &self.inner.their_methods else {
            return Ok(());
        };
        match methods.binary_search_by_key(&M::ID, |m| m.id) {
            Err(_) => Err(CallError::Unimplemented {
                method: M::NAME,
                id: M::ID,
            }),
            Ok(i) if methods[i].types != M::TYPES || methods[i].one_way != M::ONE_WAY => {
                Err(CallError::TypesDiffer {
                    method: M::NAME,
                    ours: M::TYPES,
                    theirs: methods[i].types,
                })
            }
            Ok(_) => Ok(()),
        }
    }

    /// `Ok` while the connection is up; else the error a call of `M` gets.
    fn alive<M: Method<Service = S>>(&self) -> Result<(), CallError> {
        match self.inner.life.failure.get() {
            Some(cause) => Err(CallError::ConnectionLost {
                method: M::NAME,
                cause: cause.clone(),
                sent: false,
            }),
            None => Ok(()),
        }
    }

    /// Encodes a call's arguments without waiting: inline when small, else into a pool
    /// buffer; `Ok(None)` when that needs a buffer and none is free now.
    fn encode_now<M: Method<Service = S>>(
        &self,
        args: &M::Args,
    ) -> Result<Option<Payload>, CallError> {
        if let Some(small) = encode_small::<C, _>(args) {
            return Ok(Some(small));
        }
        let Some(buf) = self.inner.pool.get_now() else {
            return Ok(None);
        };
        encode_into::<C, _>(buf, args)
            .map(Some)
            .map_err(encode_failed::<M>)
    }

    /// [`message`](Self::message) with the arguments encoded (after a metadata block
    /// if `metadata`, which the peer must take).
    fn message_in<M: Method<Service = S>>(
        &self,
        args: Payload,
        kind: Kind,
        segments: Vec<Bytes>,
        deadline: Option<Duration>,
        metadata: bool,
    ) -> Result<Message, CallError> {
        self.alive::<M>()?;
        if metadata && self.inner.theirs.capabilities & CAP_METADATA == 0 {
            return Err(CallError::Metadata {
                method: M::NAME,
                problem: "the peer takes no per-call metadata (a build from before it)".into(),
            });
        }
        let message = Message {
            head: Head {
                kind,
                call_id: self.inner.calls.next_id.fetch_add(1, Ordering::Relaxed),
                method: M::ID,
                deadline_us: deadline.map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
                metadata,
            },
            args,
            segments,
        };
        let max = self.inner.theirs.max_message as usize;
        if message.segments.len() > volley_proto::rpc::MAX_SEGMENTS || message.wire_len() > max {
            return Err(CallError::TooLarge {
                method: M::NAME,
                len: message.wire_len(),
                max,
            });
        }
        Ok(message)
    }

    /// Encodes a value: inline when small, else into a buffer from this connection's
    /// pool (waiting for one if none is free).
    pub(crate) async fn encode<T: Serialize + ?Sized>(
        &self,
        value: &T,
    ) -> Result<Payload, CodecError> {
        if let Some(small) = encode_small::<C, _>(value) {
            return Ok(small);
        }
        encode_into::<C, _>(self.inner.pool.get().await, value)
    }
}

/// The error of a call of `M` whose arguments could not be encoded.
pub(crate) fn encode_failed<M: Method>(source: CodecError) -> CallError {
    CallError::Encode {
        method: M::NAME,
        source,
    }
}

/// `value` encoded inline, if its encoding fits there.
fn encode_small<C: Codec, T: Serialize + ?Sized>(value: &T) -> Option<Payload> {
    let mut bytes = [0; INLINE];
    let len = C::encode_small(value, &mut bytes)?;
    Payload::from_written(bytes, len)
}

/// `value` encoded into `buf`, frozen (sharing the buffer's memory).
fn encode_into<C: Codec, T: Serialize + ?Sized>(
    mut buf: PoolBuf,
    value: &T,
) -> Result<Payload, CodecError> {
    C::encode(value, &mut buf)?;
    Ok(buf.freeze().into())
}

/// A sync call waiting for its reply: dropped early, it withdraws the waiter and tells
/// the peer to cancel; the credit comes back once the cancel is queued, so the peer has
/// freed the slot before this end uses it again.
pub(crate) struct Pending<S: Service, C: Codec> {
    inner: Arc<Inner<S, C>>,
    id: u32,
    permit: Option<OwnedSemaphorePermit>,
}

impl<S: Service, C: Codec> Pending<S, C> {
    /// The reply came (or the waiter ended): withdraws the waiter and frees the credit,
    /// and gives what the reply means for the caller.
    pub(crate) fn finish<M: Method>(
        &mut self,
        reply: Result<Message, oneshot::error::RecvError>,
        deadline: Option<Duration>,
    ) -> Result<Reply<M::Output>, CallError> {
        // The waiter is gone from the table already: whoever completed the one-shot
        // (the reader with the reply, or the connection's end) took it out.
        self.permit = None;
        self.inner.finish::<M>(reply, deadline)
    }

    fn disarm(&mut self) {
        lock(&self.inner.calls.waiters).remove(&self.id);
        self.permit = None;
    }
}

impl<S: Service, C: Codec> Drop for Pending<S, C> {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        lock(&self.inner.calls.waiters).remove(&self.id);
        if self.inner.life.failure.get().is_some() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let sender = self.inner.sender.clone();
        let cancel = Message::new(Kind::CANCEL, self.id, 0, Bytes::new());
        runtime.spawn(async move {
            let _ = sender.send(cancel).await;
            drop(permit);
        });
    }
}

/// The error of a call whose deadline passed.
pub(crate) fn deadline_exceeded<M: Method>(after: Duration) -> CallError {
    CallError::DeadlineExceeded {
        method: M::NAME,
        after,
    }
}

impl<S: Service, C: Codec> Inner<S, C> {
    /// Counts a call sent.
    fn sent(&self) {
        self.counters.calls_sent.fetch_add(1, Ordering::Relaxed);
        self.life.activity.fetch_add(1, Ordering::Relaxed);
    }

    /// What a sync call's reply (or its waiter's end) means for its caller.
    pub(crate) fn finish<M: Method>(
        &self,
        reply: Result<Message, oneshot::error::RecvError>,
        deadline: Option<Duration>,
    ) -> Result<Reply<M::Output>, CallError> {
        let Ok(reply) = reply else {
            return Err(self.lost(M::NAME, LinkError::Closed, true));
        };
        match reply.head.kind {
            Kind::REPLY => {
                let value = C::decode(&reply.args).map_err(|source| CallError::DecodeReply {
                    method: M::NAME,
                    source,
                })?;
                Ok(Reply {
                    value,
                    segments: reply.segments,
                })
            }
            _ => {
                let code = ErrorCode(reply.head.method);
                if code == ErrorCode::SHUTTING_DOWN {
                    self.life.draining.store(true, Ordering::Relaxed);
                }
                let detail = String::from_utf8_lossy(&reply.args).into_owned();
                Err(match (code, deadline) {
                    (ErrorCode::DEADLINE, Some(after)) => deadline_exceeded::<M>(after),
                    (ErrorCode::TOO_LARGE, _) => CallError::TooLarge {
                        method: M::NAME,
                        len: 0,
                        max: self.ours.max_message as usize,
                    },
                    _ => CallError::from_reply(M::NAME, M::ID, code, detail),
                })
            }
        }
    }
}
