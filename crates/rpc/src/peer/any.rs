//! [`AnySender`]: the link's sender as a peer holds it: the links volley provides
//! without indirection (a match, no virtual call, no box per send), any other boxed.

use core::any::Any;
use std::sync::Arc;

#[cfg(feature = "tcp")]
use crate::link::framed::FramedSender;
#[cfg(feature = "local")]
use crate::link::local::LocalSender;
#[cfg(feature = "udp")]
use crate::link::udp::UdpSender;
use crate::link::{LinkError, LinkSender, Message};

/// The link's sender: the links volley provides without indirection, others boxed.
#[derive(Clone)]
pub(super) enum AnySender {
    #[cfg(feature = "tcp")]
    Framed(FramedSender),
    #[cfg(feature = "local")]
    Local(LocalSender),
    #[cfg(feature = "udp")]
    Udp(UdpSender),
    Other(Arc<dyn DynSender>),
}

pub(super) trait DynSender: Send + Sync {
    fn send_boxed(&self, message: Message)
    -> futures::future::BoxFuture<'_, Result<(), LinkError>>;
    fn close_link(&self);
}

impl<T: LinkSender> DynSender for T {
    fn send_boxed(
        &self,
        message: Message,
    ) -> futures::future::BoxFuture<'_, Result<(), LinkError>> {
        Box::pin(LinkSender::send(self, message))
    }
    fn close_link(&self) {
        LinkSender::close(self);
    }
}

impl AnySender {
    pub(super) fn new<T: LinkSender>(sender: T) -> Self {
        let any: Box<dyn Any> = Box::new(sender);
        #[cfg(feature = "tcp")]
        let any = match any.downcast::<FramedSender>() {
            Ok(framed) => return Self::Framed(*framed),
            Err(any) => any,
        };
        #[cfg(feature = "local")]
        let any = match any.downcast::<LocalSender>() {
            Ok(local) => return Self::Local(*local),
            Err(any) => any,
        };
        #[cfg(feature = "udp")]
        let any = match any.downcast::<UdpSender>() {
            Ok(udp) => return Self::Udp(*udp),
            Err(any) => any,
        };
        match any.downcast::<T>() {
            Ok(other) => Self::Other(Arc::new(*other)),
            Err(_) => unreachable!("a box holds the type it was made from"),
        }
    }

    pub(super) async fn send(&self, message: Message) -> Result<(), LinkError> {
        match self {
            #[cfg(feature = "tcp")]
            Self::Framed(s) => LinkSender::send(s, message).await,
            #[cfg(feature = "local")]
            Self::Local(s) => LinkSender::send(s, message).await,
            #[cfg(feature = "udp")]
            Self::Udp(s) => LinkSender::send(s, message).await,
            Self::Other(s) => s.send_boxed(message).await,
        }
    }

    pub(super) fn close(&self) {
        match self {
            #[cfg(feature = "tcp")]
            Self::Framed(s) => LinkSender::close(s),
            #[cfg(feature = "local")]
            Self::Local(s) => LinkSender::close(s),
            #[cfg(feature = "udp")]
            Self::Udp(s) => LinkSender::close(s),
            Self::Other(s) => s.close_link(),
        }
    }
}
