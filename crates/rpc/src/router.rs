//! [`Router`]: the handlers an end serves, by method; [`Call`] and [`Reply`], what a
//! handler takes and gives.

use core::marker::PhantomData;
use core::pin::Pin;
use core::time::Duration;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;
use volley_proto::wire::rpc::ErrorCode;

use crate::codec::{Bincode, Codec, CodecError};
use crate::error::HandlerError;
use crate::link::Message;
use crate::peer::Peer;
use crate::service::{Method, Service};

/// A call as its handler sees it.
pub struct Call<M: Method, C: Codec = Bincode> {
    /// The decoded arguments.
    pub args: M::Args,
    /// The bulk segments that came with them: slices of the receive buffer, uncopied.
    pub segments: Vec<Bytes>,
    raw: Bytes,
    deadline: Option<Duration>,
    peer: Peer<M::Service, C>,
}

impl<M: Method, C: Codec> Call<M, C> {
    /// The arguments as they arrived, encoded.
    pub fn raw_args(&self) -> &Bytes {
        &self.raw
    }

    /// Decodes the arguments again as `T`, which may borrow from them (`&str`, `&[u8]`),
    /// so a handler can read large strings without copying them.
    pub fn decode<'a, T: Deserialize<'a>>(&'a self) -> Result<T, CodecError> {
        C::decode(&self.raw)
    }

    /// The time the caller still waits, as it was when the call arrived.
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// What is known of the connection the call came on (the peer's address).
    pub fn connection(&self) -> &crate::link::ConnectionInfo {
        self.peer.connection()
    }

    /// The connection the call came on: call back into the caller with it.
    pub fn peer(&self) -> &Peer<M::Service, C> {
        &self.peer
    }
}

/// A result and the bulk segments to send beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply<T> {
    /// The result.
    pub value: T,
    /// Bulk segments, sent uncopied.
    pub segments: Vec<Bytes>,
}

impl<T> Reply<T> {
    /// A result without segments.
    pub fn new(value: T) -> Self {
        Self {
            value,
            segments: Vec::new(),
        }
    }

    /// A result with bulk segments.
    pub fn with_segments(value: T, segments: Vec<Bytes>) -> Self {
        Self { value, segments }
    }
}

impl<T> From<T> for Reply<T> {
    fn from(value: T) -> Self {
        Self::new(value)
    }
}

/// A result encoded for the wire.
pub(crate) struct Encoded {
    pub(crate) args: Bytes,
    pub(crate) segments: Vec<Bytes>,
}

pub(crate) type HandlerFuture = Pin<Box<dyn Future<Output = Result<Encoded, HandlerError>> + Send>>;

type Erased<S, C> = dyn Fn(Message, Peer<S, C>) -> HandlerFuture + Send + Sync;

/// A method's name and its type-erased handler.
pub(crate) type Route<S, C> = (&'static str, Arc<Erased<S, C>>);

/// The handlers one end serves, by method id.
///
/// ```
/// use volley_rpc::{Reply, Router};
///
/// volley_rpc::service! {
///     /// A counter.
///     pub service Counter {
///         /// Adds to the count.
///         1 => Add(u64) -> u64;
///     }
/// }
///
/// let router = Router::<Counter>::new().route(Add, |call| async move {
///     Ok(Reply::new(call.args + 1))
/// });
/// assert_eq!(router.len(), 1);
/// ```
pub struct Router<S, C = Bincode> {
    handlers: HashMap<u32, Route<S, C>>,
    _s: PhantomData<fn() -> S>,
}

impl<S: Service, C: Codec> Default for Router<S, C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S: Service, C: Codec> Router<S, C> {
    /// No handlers yet.
    pub fn new() -> Self {
        Self {
            handlers: HashMap::new(),
            _s: PhantomData,
        }
    }

    /// Serves `method` with `handler` (`.route(Put, |call| async move { .. })`). Panics if
    /// the method already has a handler (a programming error, found at start-up).
    ///
    /// A handler runs in the connection's reader until it first waits (most handlers
    /// never do, and a task per call would cost more than the call); one that waits goes
    /// on in a task of its own. So a handler should not compute for long without
    /// awaiting: put heavy work in `tokio::task::spawn_blocking`.
    pub fn route<M, F, Fut>(mut self, _method: M, handler: F) -> Self
    where
        M: Method<Service = S>,
        F: Fn(Call<M, C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Reply<M::Output>, HandlerError>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let erased = move |message: Message, peer: Peer<S, C>| -> HandlerFuture {
            let handler = handler.clone();
            Box::pin(async move {
                let args: M::Args = C::decode(&message.args)
                    .map_err(|e| HandlerError::with_code(ErrorCode::DECODE, e))?;
                let call = Call {
                    args,
                    segments: message.segments,
                    raw: message.args,
                    deadline: message.head.deadline_us.map(Duration::from_micros),
                    peer: peer.clone(),
                };
                let reply = handler(call).await?;
                let args = peer
                    .encode(&reply.value)
                    .await
                    .map_err(|e| HandlerError::msg(format!("cannot encode the result: {e}")))?;
                Ok(Encoded {
                    args,
                    segments: reply.segments,
                })
            })
        };
        let previous = self.handlers.insert(M::ID, (M::NAME, Arc::new(erased)));
        assert!(
            previous.is_none(),
            "method {} (id {}) of {} has two handlers",
            M::NAME,
            M::ID,
            S::NAME
        );
        self
    }

    /// Methods served.
    pub fn len(&self) -> usize {
        self.handlers.len()
    }

    /// Whether no method is served.
    pub fn is_empty(&self) -> bool {
        self.handlers.is_empty()
    }

    pub(crate) fn get(&self, id: u32) -> Option<&Route<S, C>> {
        self.handlers.get(&id)
    }
}
