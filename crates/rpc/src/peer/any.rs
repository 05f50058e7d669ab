//! [`AnySender`]: the link's sender as a peer holds it, one shape for every link (the
//! built-in ones and any other crate's): a message is queued at once through
//! [`LinkSender::try_send`] when the link has room, and waits in a boxed
//! [`LinkSender::send`] only when it has not.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::link::{LinkError, LinkSender, Message, TrySendError};

/// The link's sender, its type erased.
#[derive(Clone)]
pub(super) struct AnySender(Arc<dyn DynSender>);

trait DynSender: Send + Sync {
    fn try_send(&self, message: Message) -> Result<(), TrySendError>;
    fn send_boxed(&self, message: Message) -> BoxFuture<'_, Result<(), LinkError>>;
    fn close_link(&self);
}

impl<T: LinkSender> DynSender for T {
    fn try_send(&self, message: Message) -> Result<(), TrySendError> {
        LinkSender::try_send(self, message)
    }

    fn send_boxed(&self, message: Message) -> BoxFuture<'_, Result<(), LinkError>> {
        Box::pin(LinkSender::send(self, message))
    }

    fn close_link(&self) {
        LinkSender::close(self);
    }
}

impl AnySender {
    pub(super) fn new<T: LinkSender>(sender: T) -> Self {
        Self(Arc::new(sender))
    }

    /// Queues `message`, waiting while the link is at capacity.
    pub(super) async fn send(&self, message: Message) -> Result<(), LinkError> {
        match self.0.try_send(message) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(message)) => self.0.send_boxed(message).await,
            Err(TrySendError::Failed(e)) => Err(e),
        }
    }

    /// Queues `message` if the link has room now.
    pub(super) fn try_send(&self, message: Message) -> Result<(), TrySendError> {
        self.0.try_send(message)
    }

    pub(super) fn close(&self) {
        self.0.close_link();
    }
}
