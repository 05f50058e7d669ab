//! [`Router`]: the handlers an end serves, by method; [`Call`], what a handler takes
//! (it gives a [`Reply`]).

use core::marker::PhantomData;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use volley_proto::rpc::ErrorCode;

use crate::codec::{Bincode, Codec};
use crate::context::{Context, ReplySegments};
use crate::error::HandlerError;
use crate::link::Message;
use crate::metadata::Metadata;
use crate::peer::Peer;
use crate::peer::routes::{Encoded, HandlerFuture, Routes};
use crate::service::{Method, Reply, Service};

/// A call as a [`Router::route`] handler sees it: the decoded arguments beside the
/// call's [`Context`] (its segments, metadata, deadline and connection), which it
/// dereferences to. (A generated server trait's methods take the [`Context`] and the
/// arguments apart instead.) `R` is the service this end calls back.
pub struct Call<M: Method, R: Service = <M as Method>::Service, C: Codec = Bincode> {
    /// The decoded arguments.
    pub args: M::Args,
    cx: Context<R, C>,
}

impl<M: Method, R: Service, C: Codec> core::ops::Deref for Call<M, R, C> {
    type Target = Context<R, C>;

    fn deref(&self) -> &Context<R, C> {
        &self.cx
    }
}

impl<M: Method, R: Service, C: Codec> core::ops::DerefMut for Call<M, R, C> {
    fn deref_mut(&mut self) -> &mut Context<R, C> {
        &mut self.cx
    }
}

/// The handlers one end serves, by method: service `S`'s methods, served by an end that
/// calls service `R` back (the same by default), with codec `C`.
///
/// A generated server trait makes one ([`into_router`](crate::service!)); by hand,
/// [`route`](Self::route) takes a method and a handler:
///
/// ```
/// use volley_rpc::{Reply, Router};
///
/// volley_rpc::service! {
///     /// A counter.
///     pub service Counter {
///         /// Adds one.
///         1 => fn add(n: u64) -> u64;
///     }
/// }
///
/// let router = Router::<Counter>::new().route(counter::Add, |call| async move {
///     Ok(Reply::new(call.args + 1))
/// });
/// assert_eq!(router.len(), 1);
/// ```
pub struct Router<S, R = S, C = Bincode> {
    routes: Routes<R, C>,
    /// The check every call passes before its handler runs, once set.
    authorize: Arc<OnceLock<Box<Authorize>>>,
    _s: PhantomData<fn() -> S>,
}

/// What a router's [`authorize`](Router::authorize) check sees of a call.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct CallCheck<'a> {
    /// The method's name.
    pub method: &'static str,
    /// Its id.
    pub id: u32,
    /// The metadata the call came with (a per-call token, say).
    pub metadata: &'a Metadata,
    /// What is known of the connection (the peer's address, its TLS identity).
    pub connection: &'a crate::link::ConnectionInfo,
}

type Authorize = dyn Fn(&CallCheck<'_>) -> bool + Send + Sync;

impl<S: Service, R: Service, C: Codec> Default for Router<S, R, C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S: Service, R: Service, C: Codec> Router<S, R, C> {
    /// No handlers yet.
    pub fn new() -> Self {
        Self {
            routes: Routes {
                fingerprint: S::FINGERPRINT,
                service: S::NAME,
                table: S::TABLE,
                handlers: HashMap::new(),
            },
            authorize: Arc::default(),
            _s: PhantomData,
        }
    }

    /// Serves `method` with `handler` (`.route(Put, |call| async move { .. })`), which
    /// takes a [`Call`] and gives a [`Reply`]. Panics if the method already has a
    /// handler (a programming error, found at start-up).
    ///
    /// A handler runs in the connection's reader until it first waits (most handlers
    /// never do, and a task per call would cost more than the call); one that waits goes
    /// on in a task of its own. So a handler should not compute for long without
    /// awaiting: put heavy work in `tokio::task::spawn_blocking`.
    pub fn route<M, F, Fut>(self, _method: M, handler: F) -> Self
    where
        M: Method<Service = S>,
        F: Fn(Call<M, R, C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Reply<M::Output>, HandlerError>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        self.insert::<M, _, _>(move |args, cx| {
            let handler = handler.clone();
            async move {
                let (peer, given) = (cx.peer().clone(), cx.reply.clone());
                let reply = handler(Call { args, cx }).await?;
                let segments = match reply.segments.is_empty() {
                    true => given.take(),
                    false => reply.segments,
                };
                encode_reply(&peer, &reply.value, segments).await
            }
        })
    }

    /// Serves `method` with `handler`, which takes the call's [`Context`] and its
    /// arguments and gives the result: what a generated server trait's
    /// [`into_router`](crate::service!) uses. Segments go back with
    /// [`Context::reply_segments`]. Panics as [`route`](Self::route) does.
    pub fn handle<M, F, Fut>(self, _method: M, handler: F) -> Self
    where
        M: Method<Service = S>,
        F: Fn(Context<R, C>, M::Args) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<M::Output, HandlerError>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        self.insert::<M, _, _>(move |args, cx| {
            let handler = handler.clone();
            async move {
                let (peer, given) = (cx.peer().clone(), cx.reply.clone());
                let value = handler(cx, args).await?;
                encode_reply(&peer, &value, given.take()).await
            }
        })
    }

    /// Runs `check` on every call before its handler (and before its arguments are
    /// decoded), for a server that authorises per method, from a per-call token in the
    /// metadata or the connection's TLS identity: a call it refuses is answered
    /// [`CallError::Unauthorized`](crate::CallError::Unauthorized) and runs nothing. Set
    /// once; a second check is ignored.
    ///
    /// ```
    /// use volley_rpc::{Reply, Router};
    ///
    /// volley_rpc::service! {
    ///     /// A vault.
    ///     pub service Vault {
    ///         /// Reads; anyone.
    ///         1 => fn read() -> u64;
    ///         /// Wipes; needs the admin token.
    ///         2 => fn wipe();
    ///     }
    /// }
    ///
    /// let router = Router::<Vault>::new()
    ///     .route(vault::Read, |_| async { Ok(Reply::new(7)) })
    ///     .route(vault::Wipe, |_| async { Ok(Reply::new(())) })
    ///     .authorize(|call| call.method != "wipe" || call.metadata.get("token") == Some(&b"admin"[..]));
    /// # let _ = router;
    /// ```
    pub fn authorize<F>(self, check: F) -> Self
    where
        F: Fn(&CallCheck<'_>) -> bool + Send + Sync + 'static,
    {
        let _ = self.authorize.set(Box::new(check));
        self
    }

    /// Adds `run` as `M`'s handler, behind the step every handler shares: decoding the
    /// arguments (a failure answered `DECODE`), and the box that erases its type.
    fn insert<M, F, Fut>(mut self, run: F) -> Self
    where
        M: Method<Service = S>,
        F: Fn(M::Args, Context<R, C>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Encoded, HandlerError>> + Send + 'static,
    {
        let authorize = self.authorize.clone();
        let erased = move |mut message: Message, peer: Peer<R, C>| -> HandlerFuture {
            let mut metadata = Metadata::default();
            if message.head.metadata {
                match crate::metadata::split(core::mem::take(&mut message.args)) {
                    Ok((m, args)) => (metadata, message.args) = (m, args),
                    Err(e) => {
                        let why = format!("bad metadata: {e}");
                        return Box::pin(core::future::ready(Err(HandlerError::with_code(
                            ErrorCode::DECODE,
                            why,
                        ))));
                    }
                }
            }
            if let Some(check) = authorize.get() {
                let call = CallCheck {
                    method: M::NAME,
                    id: M::ID,
                    metadata: &metadata,
                    connection: peer.connection(),
                };
                if !check(&call) {
                    return Box::pin(core::future::ready(Err(HandlerError::with_code(
                        ErrorCode::UNAUTHENTICATED,
                        "the server's check refused this call",
                    ))));
                }
            }
            #[cfg(feature = "opentelemetry")]
            let span = crate::trace::handler_span(M::NAME, &metadata);
            let decoded = C::decode::<M::Args>(&message.args);
            let cx = || Context::new(message, metadata, peer, ReplySegments::default());
            match decoded {
                #[cfg(feature = "opentelemetry")]
                Ok(args) => match span {
                    Some(span) => {
                        use tracing::Instrument;
                        Box::pin(run(args, cx()).instrument(span))
                    }
                    None => Box::pin(run(args, cx())),
                },
                #[cfg(not(feature = "opentelemetry"))]
                Ok(args) => Box::pin(run(args, cx())),
                Err(e) => Box::pin(core::future::ready(Err(HandlerError::with_code(
                    ErrorCode::DECODE,
                    e,
                )))),
            }
        };
        let previous = self
            .routes
            .handlers
            .insert(M::ID, (M::NAME, Arc::new(erased)));
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
        self.routes.handlers.len()
    }

    /// Whether no method is served.
    pub fn is_empty(&self) -> bool {
        self.routes.handlers.is_empty()
    }

    pub(crate) fn into_routes(self) -> Routes<R, C> {
        self.routes
    }
}

/// Encodes a handler's result into a pool buffer of its connection.
async fn encode_reply<R: Service, C: Codec, T: serde::Serialize>(
    peer: &Peer<R, C>,
    value: &T,
    segments: Vec<Bytes>,
) -> Result<Encoded, HandlerError> {
    let args = peer
        .encode(value)
        .await
        .map_err(|e| HandlerError::msg(format!("cannot encode the result: {e}")))?;
    Ok(Encoded { args, segments })
}
