//! [`Request`] and [`OneWay`]: a call a generated client has prepared, with its options
//! set by name before it is awaited.

use core::future::IntoFuture;
use core::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::codec::Codec;
use crate::error::CallError;
use crate::peer::Peer;
use crate::router::Reply;
use crate::service::Method;

/// A sync call to method `M`, ready to go: `.await` it for the result.
///
/// ```no_run
/// # use core::time::Duration;
/// # use bytes::Bytes;
/// # volley_rpc::service! {
/// #     /// A store.
/// #     pub service Store {
/// #         /// Stores the segments under a name.
/// #         1 => fn put(name: String) -> u64;
/// #     }
/// # }
/// # async fn f(client: StoreClient) -> Result<(), volley_rpc::CallError> {
/// let blob = Bytes::from(vec![0u8; 1 << 20]);
/// let stored = client
///     .put("blob".into())
///     .segments(vec![blob])
///     .deadline(Duration::from_secs(2))
///     .await?;
/// # Ok(())
/// # }
/// ```
#[must_use = "a request does nothing until it is awaited"]
pub struct Request<'a, M: Method, C: Codec> {
    peer: &'a Peer<M::Service, C>,
    args: M::Args,
    segments: Vec<Bytes>,
    deadline: Option<Duration>,
}

impl<'a, M: Method, C: Codec> Request<'a, M, C> {
    /// A call of `M` with `args` on `peer`, no segments, the configured deadline.
    pub fn new(peer: &'a Peer<M::Service, C>, args: M::Args) -> Self {
        Self {
            peer,
            args,
            segments: Vec::new(),
            deadline: None,
        }
    }

    /// Bulk segments to send beside the arguments, uncopied (replacing any set before).
    pub fn segments(mut self, segments: Vec<Bytes>) -> Self {
        self.segments = segments;
        self
    }

    /// One more bulk segment.
    pub fn segment(mut self, segment: Bytes) -> Self {
        self.segments.push(segment);
        self
    }

    /// How long to wait for the reply (the peer stops the handler at it too), instead of
    /// [`Config::default_deadline`](crate::Config::default_deadline).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Awaits to the result *and* the segments that came back with it.
    pub fn reply(self) -> WithSegments<'a, M, C> {
        WithSegments(self)
    }

    async fn send(self) -> Result<Reply<M::Output>, CallError> {
        self.peer
            .call_with::<M>(&self.args, self.segments, self.deadline)
            .await
    }
}

impl<'a, M: Method, C: Codec> IntoFuture for Request<'a, M, C> {
    type Output = Result<M::Output, CallError>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.send().await.map(|reply| reply.value) })
    }
}

/// A [`Request`] that awaits to a [`Reply`]: the result and the segments that came back.
#[must_use = "a request does nothing until it is awaited"]
pub struct WithSegments<'a, M: Method, C: Codec>(Request<'a, M, C>);

impl<'a, M: Method, C: Codec> IntoFuture for WithSegments<'a, M, C> {
    type Output = Result<Reply<M::Output>, CallError>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.0.send())
    }
}

/// A one-way call to method `M`, ready to go: `.await` it to send (it waits for the
/// peer's credit, not for the call to run).
#[must_use = "a one-way call does nothing until it is awaited"]
pub struct OneWay<'a, M: Method, C: Codec> {
    peer: &'a Peer<M::Service, C>,
    args: M::Args,
    segments: Vec<Bytes>,
}

impl<'a, M: Method, C: Codec> OneWay<'a, M, C> {
    /// A one-way call of `M` with `args` on `peer`, no segments.
    pub fn new(peer: &'a Peer<M::Service, C>, args: M::Args) -> Self {
        Self {
            peer,
            args,
            segments: Vec::new(),
        }
    }

    /// Bulk segments to send beside the arguments, uncopied (replacing any set before).
    pub fn segments(mut self, segments: Vec<Bytes>) -> Self {
        self.segments = segments;
        self
    }

    /// One more bulk segment.
    pub fn segment(mut self, segment: Bytes) -> Self {
        self.segments.push(segment);
        self
    }
}

impl<'a, M: Method, C: Codec> IntoFuture for OneWay<'a, M, C> {
    type Output = Result<(), CallError>;
    type IntoFuture = BoxFuture<'a, Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.peer.send::<M>(&self.args, self.segments).await })
    }
}
