//! [`Request`] and [`OneWay`]: a call a generated client has prepared, with its options
//! set by name before it is awaited.

use core::future::IntoFuture;
use core::time::Duration;

use bytes::Bytes;

use crate::codec::Codec;
use crate::error::CallError;
use crate::metadata::Pairs;
use crate::reconnecting::Caller;
use crate::reply::{ReplyFuture, SendFuture, ValueFuture};
use crate::service::{Method, Reply};

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
    caller: &'a Caller<M::Service, C>,
    args: M::Args,
    segments: Vec<Bytes>,
    deadline: Option<Duration>,
    metadata: Pairs,
}

impl<'a, M: Method, C: Codec> Request<'a, M, C> {
    /// A call of `M` with `args` through `caller`, no segments, the configured deadline.
    pub fn new(caller: &'a Caller<M::Service, C>, args: M::Args) -> Self {
        Self {
            caller,
            args,
            segments: Vec::new(),
            deadline: None,
            metadata: Pairs::new(),
        }
    }

    /// Sends `key` = `value` with the call, for the handler's
    /// [`Context::metadata`](crate::Context::metadata) (see [`Metadata`](crate::Metadata)
    /// for the limits, checked before anything is sent).
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.metadata.push((key.into(), value.into()));
        self
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
    /// [`Config::default_deadline`](crate::Config::default_deadline). A deadline of a
    /// second or more is checked by the connection every 10 ms, so it fires up to 10 ms
    /// late (never early); a shorter one has a timer of its own.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Awaits to the result *and* the segments that came back with it.
    pub fn reply(self) -> WithSegments<'a, M, C> {
        WithSegments(self)
    }
}

impl<M: Method, C: Codec> IntoFuture for Request<'_, M, C> {
    type Output = Result<M::Output, CallError>;
    type IntoFuture = ValueFuture<M, C>;

    /// Starts the call: in the common case it is on the link before the first poll.
    fn into_future(self) -> Self::IntoFuture {
        ValueFuture {
            call: WithSegments(self).into_future(),
        }
    }
}

/// A [`Request`] that awaits to a [`Reply`]: the result and the segments that came back.
#[must_use = "a request does nothing until it is awaited"]
pub struct WithSegments<'a, M: Method, C: Codec>(Request<'a, M, C>);

impl<M: Method, C: Codec> IntoFuture for WithSegments<'_, M, C> {
    type Output = Result<Reply<M::Output>, CallError>;
    type IntoFuture = ReplyFuture<M, C>;

    fn into_future(self) -> Self::IntoFuture {
        #[allow(unused_mut, reason = "changed only with the opentelemetry feature")]
        let Request {
            caller,
            args,
            segments,
            deadline,
            mut metadata,
        } = self.0;
        #[cfg(feature = "opentelemetry")]
        crate::trace::inject(&mut metadata);
        caller.start_call::<M>(args, segments, deadline, metadata)
    }
}

/// A one-way call to method `M`, ready to go: `.await` it to send (it waits for the
/// peer's credit, not for the call to run).
#[must_use = "a one-way call does nothing until it is awaited"]
pub struct OneWay<'a, M: Method, C: Codec> {
    caller: &'a Caller<M::Service, C>,
    args: M::Args,
    segments: Vec<Bytes>,
    metadata: Pairs,
}

impl<'a, M: Method, C: Codec> OneWay<'a, M, C> {
    /// A one-way call of `M` with `args` through `caller`, no segments.
    pub fn new(caller: &'a Caller<M::Service, C>, args: M::Args) -> Self {
        Self {
            caller,
            args,
            segments: Vec::new(),
            metadata: Pairs::new(),
        }
    }

    /// Sends `key` = `value` with the call, as [`Request::metadata`] does.
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.metadata.push((key.into(), value.into()));
        self
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

impl<M: Method, C: Codec> IntoFuture for OneWay<'_, M, C> {
    type Output = Result<(), CallError>;
    type IntoFuture = SendFuture;

    /// Starts the call: in the common case it is on the link before the first poll.
    fn into_future(self) -> Self::IntoFuture {
        #[allow(unused_mut, reason = "changed only with the opentelemetry feature")]
        let mut metadata = self.metadata;
        #[cfg(feature = "opentelemetry")]
        crate::trace::inject(&mut metadata);
        self.caller
            .start_send::<M>(self.args, self.segments, metadata)
    }
}
