//! The futures of calls under way: [`ReplyFuture`] and [`ValueFuture`] for a sync call,
//! [`SendFuture`] for a one-way one. Below both the peer and the reconnecting client,
//! which make them, and the requests that await them.

use core::pin::Pin;
use core::task::{Context, Poll};
use core::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::oneshot;
use tokio::time::Sleep;

use crate::codec::Codec;
use crate::error::CallError;
use crate::link::Message;
use crate::peer::{Pending, deadline_exceeded};
use crate::service::Method;
use crate::service::Reply;

pin_project_lite::pin_project! {
    /// A sync call under way (what awaiting a [`WithSegments`](crate::WithSegments) runs): the result and the
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
    /// A sync call under way (what awaiting a [`Request`](crate::Request) runs): its result.
    #[must_use = "futures do nothing unless polled"]
    pub struct ValueFuture<M: Method, C: Codec> {
        #[pin]
        pub(crate) call: ReplyFuture<M, C>,
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

/// A one-way call under way (what awaiting a [`OneWay`](crate::OneWay) runs).
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
