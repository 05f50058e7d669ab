//! [`Context`]: what a generated server trait's method is given beside its arguments.

use core::time::Duration;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use serde::Deserialize;

use crate::codec::{Bincode, Codec, CodecError};
use crate::link::{ConnectionInfo, Message, Payload};
use crate::metadata::Metadata;
use crate::peer::Peer;
use crate::service::Service;

/// One call as its handler sees it, beside the arguments: the bulk segments that came
/// with it, the caller's deadline, the connection (to call back on, and what is known of
/// it), and a way to send segments back with the result. A generated server trait's
/// methods take one; a [`Router::route`](crate::Router::route) handler's
/// [`Call`](crate::Call) is one with the decoded arguments beside it.
///
/// `R` is the service this end calls on the connection (the one it serves, unless its
/// endpoint says otherwise); `C` the codec.
///
/// ```
/// use bytes::Bytes;
/// use volley_rpc::{Context, HandlerError};
///
/// volley_rpc::service! {
///     /// Echoes bulk data.
///     pub service Loopback {
///         /// Sends the segments back; returns their total length.
///         1 => fn mirror() -> u64;
///     }
/// }
///
/// struct Here;
///
/// impl LoopbackServer for Here {
///     async fn mirror(&self, mut cx: Context<Loopback>) -> Result<u64, HandlerError> {
///         let segments = cx.take_segments();
///         let len = segments.iter().map(Bytes::len).sum::<usize>();
///         cx.reply_segments(segments);
///         Ok(len as u64)
///     }
/// }
/// # let _ = Here.into_router();
/// ```
pub struct Context<R, C = Bincode> {
    segments: Vec<Bytes>,
    metadata: Metadata,
    raw: Payload,
    deadline: Option<Duration>,
    call_id: u32,
    peer: Peer<R, C>,
    /// The segments to send back with the result: this call's own, taken by its
    /// handler's wrapper once the handler has returned.
    pub(crate) reply: ReplySegments,
}

/// The segments a handler gives to send back with its result, shared by the call's
/// [`Context`] and the step that sends the reply.
#[derive(Clone, Default)]
pub(crate) struct ReplySegments(Arc<Mutex<Vec<Bytes>>>);

impl ReplySegments {
    /// The segments given, leaving none.
    pub(crate) fn take(&self) -> Vec<Bytes> {
        core::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn set(&self, segments: Vec<Bytes>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = segments;
    }
}

impl<R: Service, C: Codec> Context<R, C> {
    pub(crate) fn new(
        message: Message,
        metadata: Metadata,
        peer: Peer<R, C>,
        reply: ReplySegments,
    ) -> Self {
        Self {
            segments: message.segments,
            metadata,
            raw: message.args,
            deadline: message.head.deadline_us.map(Duration::from_micros),
            call_id: message.head.call_id,
            peer,
            reply,
        }
    }

    /// The metadata the call came with (see [`Metadata`](crate::Metadata)).
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The bulk segments that came with the call: slices of the receive buffer, uncopied.
    pub fn segments(&self) -> &[Bytes] {
        &self.segments
    }

    /// Takes the segments out (to keep or send on without copying).
    pub fn take_segments(&mut self) -> Vec<Bytes> {
        core::mem::take(&mut self.segments)
    }

    /// The arguments as they arrived, encoded: decode them again with `C::decode` to
    /// borrow large strings or byte slices from them rather than copy.
    pub fn raw_args(&self) -> &Payload {
        &self.raw
    }

    /// Decodes the arguments again as `T`, which may borrow from them (`&str`, `&[u8]`),
    /// so a handler can read large strings without copying them.
    pub fn decode<'a, T: Deserialize<'a>>(&'a self) -> Result<T, CodecError> {
        C::decode(&self.raw)
    }

    /// The time the caller still waited when the call arrived (the handler is stopped at
    /// it), if the call has a deadline.
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// What is known of the connection the call came on (the peer's address).
    pub fn connection(&self) -> &ConnectionInfo {
        self.peer.connection()
    }

    /// The connection the call came on: call the caller back with it (through the
    /// generated client of `R`: `RClient::new(cx.peer().clone())`). This handle does not
    /// hold the connection open.
    pub fn peer(&self) -> &Peer<R, C> {
        &self.peer
    }

    /// Sends `segments` back with the result (uncopied), replacing any given before. A
    /// one-way call has no reply: its segments are dropped. (A [`Router::route`]
    /// handler's [`Reply`](crate::Reply) carries its own; these go back only when it
    /// carries none.)
    ///
    /// [`Router::route`]: crate::Router::route
    pub fn reply_segments(&self, segments: Vec<Bytes>) {
        self.reply.set(segments);
    }
}

impl<R, C> core::fmt::Debug for Context<R, C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Context")
            .field("call_id", &self.call_id)
            .field("segments", &self.segments.len())
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}
