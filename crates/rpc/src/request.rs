//! [`Request`] and [`OneWay`]: a call a generated client has prepared, with its options
//! set by name before it is awaited.

use core::future::IntoFuture;
use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::oneshot;
use tokio::time::Sleep;

use crate::codec::Codec;
use crate::error::CallError;
use crate::link::Message;
use crate::metadata::Pairs;
use crate::peer::{Pending, deadline_exceeded};
use crate::reconnecting::Caller;
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

pin_project_lite::pin_project! {
    /// A sync call under way (what awaiting a [`WithSegments`] runs): the result and the
    /// segments that came back. Dropped before it completes, it cancels the call at the
    /// peer.
    #[must_use = "futures do nothing unless polled"]
    pub struct ReplyFuture<M: Method, C: Codec> {
        #[pin]
        state: State<M, C>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<M: Method, C: Codec> {
        // Finished before the first poll (an error found at once).
        Ready { result: Option<Result<Reply<M::Output>, CallError>> },
        // Something had to wait: the rest of the call, boxed.
        Slow { future: BoxFuture<'static, Result<Reply<M::Output>, CallError>> },
        // On the link: waiting for the reply, until the deadline.
        Waiting {
            guard: Pending<M::Service, C>,
            rx: oneshot::Receiver<Message>,
            #[pin]
            sleep: Option<Sleep>,
            deadline: Option<Duration>,
        },
    }
}

impl<M: Method, C: Codec> ReplyFuture<M, C> {
    pub(crate) fn ready(result: Result<Reply<M::Output>, CallError>) -> Self {
        Self {
            state: State::Ready {
                result: Some(result),
            },
        }
    }

    pub(crate) fn slow(future: BoxFuture<'static, Result<Reply<M::Output>, CallError>>) -> Self {
        Self {
            state: State::Slow { future },
        }
    }

    pub(crate) fn waiting(
        guard: Pending<M::Service, C>,
        rx: oneshot::Receiver<Message>,
        deadline: Option<Duration>,
    ) -> Self {
        Self {
            state: State::Waiting {
                guard,
                rx,
                // A long deadline is kept by the connection's sweep, which answers the
                // waiter itself; a short one by a timer here.
                sleep: crate::peer::own_timer(deadline).map(tokio::time::sleep),
                deadline,
            },
        }
    }
}

impl<M: Method, C: Codec> Future for ReplyFuture<M, C> {
    type Output = Result<Reply<M::Output>, CallError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Ready { result } => Poll::Ready(
                result
                    .take()
                    .expect("a call's future polled after it completed"),
            ),
            StateProj::Slow { future } => future.as_mut().poll(cx),
            StateProj::Waiting {
                guard,
                rx,
                sleep,
                deadline,
            } => {
                if let Poll::Ready(reply) = Pin::new(rx).poll(cx) {
                    return Poll::Ready(guard.finish::<M>(reply, *deadline));
                }
                let expired = sleep.as_pin_mut().is_some_and(|s| s.poll(cx).is_ready());
                match *deadline {
                    // Dropping the future then withdraws the waiter and cancels the call.
                    Some(after) if expired => Poll::Ready(Err(deadline_exceeded::<M>(after))),
                    _ => Poll::Pending,
                }
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// A sync call under way (what awaiting a [`Request`] runs): its result.
    #[must_use = "futures do nothing unless polled"]
    pub struct ValueFuture<M: Method, C: Codec> {
        #[pin]
        call: ReplyFuture<M, C>,
    }
}

impl<M: Method, C: Codec> Future for ValueFuture<M, C> {
    type Output = Result<M::Output, CallError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project()
            .call
            .poll(cx)
            .map(|reply| reply.map(|r| r.value))
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

/// A one-way call under way (what awaiting a [`OneWay`] runs).
#[must_use = "futures do nothing unless polled"]
pub struct SendFuture(SendState);

enum SendState {
    Ready(Option<Result<(), CallError>>),
    Slow(BoxFuture<'static, Result<(), CallError>>),
}

impl SendFuture {
    pub(crate) fn ready(result: Result<(), CallError>) -> Self {
        Self(SendState::Ready(Some(result)))
    }

    pub(crate) fn slow(future: BoxFuture<'static, Result<(), CallError>>) -> Self {
        Self(SendState::Slow(future))
    }
}

impl Future for SendFuture {
    type Output = Result<(), CallError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            SendState::Ready(result) => Poll::Ready(
                result
                    .take()
                    .expect("a call's future polled after it completed"),
            ),
            SendState::Slow(future) => future.as_mut().poll(cx),
        }
    }
}
