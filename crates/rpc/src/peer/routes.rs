//! The handlers a connection serves, with their types erased: what a
//! [`Router`](crate::Router) becomes once an endpoint serves it.

use core::pin::Pin;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::Peer;
use crate::error::HandlerError;
use crate::link::{Message, Payload};

/// A result encoded for the wire.
pub(crate) struct Encoded {
    pub(crate) args: Payload,
    pub(crate) segments: Vec<Bytes>,
}

pub(crate) type HandlerFuture = Pin<Box<dyn Future<Output = Result<Encoded, HandlerError>> + Send>>;

type Erased<R, C> = dyn Fn(Message, Peer<R, C>) -> HandlerFuture + Send + Sync;

/// A method's name and its type-erased handler.
pub(crate) type Route<R, C> = (&'static str, Arc<Erased<R, C>>);

/// A router with the served service's type erased, as a connection holds it.
pub(crate) struct Routes<R, C> {
    /// The served service's fingerprint, for the hello, and its name, for errors.
    pub(crate) fingerprint: u64,
    pub(crate) service: &'static str,
    /// The served service's methods, for the method table.
    pub(crate) table: &'static [crate::service::MethodEntry],
    pub(crate) handlers: HashMap<u32, Route<R, C>>,
}

impl<R, C> Routes<R, C> {
    pub(crate) fn get(&self, id: u32) -> Option<&Route<R, C>> {
        self.handlers.get(&id)
    }
}
