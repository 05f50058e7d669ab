//! The call path: a sync call registers its waiter, waits for credit, encodes its
//! arguments into a pool buffer and hands the message to the link; [`Pending`] takes the
//! call back if it is dropped before its reply.

use super::*;

impl<S: Service, C: Codec> Peer<S, C> {
    /// Calls `M` and waits for its result.
    pub async fn call<M: Method<Service = S>>(
        &self,
        args: &M::Args,
    ) -> Result<M::Output, CallError> {
        Ok(self.call_with::<M>(args, Vec::new(), None).await?.value)
    }

    /// Calls `M` with bulk segments (sent uncopied) and an optional deadline (sent to the
    /// peer, which gives up at it too; `None` takes [`Config::default_deadline`]); returns the result and the segments that came with
    /// it. Waits first for the peer's credit. Dropping the future before it completes
    /// cancels the call at the peer.
    pub async fn call_with<M: Method<Service = S>>(
        &self,
        args: &M::Args,
        segments: Vec<Bytes>,
        deadline: Option<Duration>,
    ) -> Result<Reply<M::Output>, CallError> {
        let inner = &self.inner;
        let deadline = deadline.or(inner.config.default_deadline);
        let message = self
            .message::<M>(Kind::CALL, args, segments, deadline)
            .await?;
        let permit = inner.acquire(M::NAME).await?;
        let id = message.head.call_id;
        let (tx, rx) = oneshot::channel();
        lock(&inner.waiters).insert(id, tx);
        let mut guard = Pending {
            inner: inner.clone(),
            id,
            permit: Some(permit),
        };
        if let Err(e) = inner.sender.send(message).await {
            guard.disarm();
            return Err(inner.lost(M::NAME, e));
        }
        inner.counters.calls_sent.fetch_add(1, Ordering::Relaxed);
        inner.activity.fetch_add(1, Ordering::Relaxed);
        let reply = match deadline {
            Some(after) => match tokio::time::timeout(after, rx).await {
                Ok(reply) => reply,
                Err(_) => {
                    return Err(CallError::DeadlineExceeded {
                        method: M::NAME,
                        after,
                    });
                }
            },
            None => rx.await,
        };
        guard.disarm();
        let Ok(reply) = reply else {
            return Err(inner.lost(M::NAME, LinkError::Closed));
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
                let detail = String::from_utf8_lossy(&reply.args).into_owned();
                Err(match (code, deadline) {
                    (ErrorCode::DEADLINE, Some(after)) => CallError::DeadlineExceeded {
                        method: M::NAME,
                        after,
                    },
                    (ErrorCode::TOO_LARGE, _) => CallError::TooLarge {
                        method: M::NAME,
                        len: 0,
                        max: inner.ours.max_message as usize,
                    },
                    _ => CallError::from_reply(M::NAME, M::ID, code, detail),
                })
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
        let inner = &self.inner;
        let message = self
            .message::<M>(Kind::ONE_WAY, args, segments, None)
            .await?;
        let permit = inner.acquire(M::NAME).await?;
        // The credit comes back in a credit message, not with a reply.
        permit.forget();
        inner.oneway_out.fetch_add(1, Ordering::Relaxed);
        inner
            .sender
            .send(message)
            .await
            .map_err(|e| inner.lost(M::NAME, e))?;
        inner.counters.calls_sent.fetch_add(1, Ordering::Relaxed);
        inner.activity.fetch_add(1, Ordering::Relaxed);
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
        if let Some(cause) = self.inner.failure.get() {
            return Err(CallError::ConnectionLost {
                method: M::NAME,
                cause: cause.clone(),
            });
        }
        let args = self
            .encode(args)
            .await
            .map_err(|source| CallError::Encode {
                method: M::NAME,
                source,
            })?;
        let message = Message {
            head: Head {
                kind,
                call_id: self.inner.next_id.fetch_add(1, Ordering::Relaxed),
                method: M::ID,
                deadline_us: deadline.map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            },
            args,
            segments,
        };
        let max = self.inner.theirs.max_message as usize;
        if message.segments.len() > volley_proto::wire::rpc::MAX_SEGMENTS
            || message.wire_len() > max
        {
            return Err(CallError::TooLarge {
                method: M::NAME,
                len: message.wire_len(),
                max,
            });
        }
        Ok(message)
    }

    /// Encodes a value into a buffer from this connection's pool.
    pub(crate) async fn encode<T: Serialize + ?Sized>(
        &self,
        value: &T,
    ) -> Result<Bytes, CodecError> {
        let mut buf = self.inner.pool.get().await;
        C::encode(value, &mut buf)?;
        Ok(buf.freeze())
    }
}

/// A sync call waiting for its reply: dropped early, it withdraws the waiter and tells
/// the peer to cancel; the credit comes back once the cancel is queued, so the peer has
/// freed the slot before this end uses it again.
struct Pending<S: Service, C: Codec> {
    inner: Arc<Inner<S, C>>,
    id: u32,
    permit: Option<OwnedSemaphorePermit>,
}

impl<S: Service, C: Codec> Pending<S, C> {
    fn disarm(&mut self) {
        lock(&self.inner.waiters).remove(&self.id);
        self.permit = None;
    }
}

impl<S: Service, C: Codec> Drop for Pending<S, C> {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        lock(&self.inner.waiters).remove(&self.id);
        if self.inner.failure.get().is_some() {
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
