//! [`Endpoint`]: the settings and router a connection starts with, and the hello each
//! end sends first.

use core::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;
use volley_proto::rpc::{
    CAP_ANSWERS_PINGS, CAP_HEARS_CLOSING, CAP_METADATA, CAP_METHOD_TABLE, ErrorCode, HELLO_LEN,
    Hello, Kind, MAX_HELLO_FRAME, MAX_TOKEN, WIRE_VERSION,
};
use volley_proto::wire::frame;

use super::any::AnySender;
use super::routes::Routes;
use super::{Calls, ConnectionName, Counters, Inner, Liveness, Owner, Peer, Served};
use super::{deadlines, dispatch, keepalive, serve};
use crate::auth::{AuthRequest, Check, Throttle};
use crate::codec::{Bincode, Codec};
use crate::config::Config;
use crate::error::ConnectError;
use crate::link::{ConnectionInfo, LinkReceiver, LinkSender, Message, MessageLink};
use crate::pool::BufferPool;
use crate::router::Router;
use crate::service::MethodEntry;
use crate::service::Service;
use volley_proto::rpc::methods::MethodTable;

/// Makes connections that call service `S` with codec `C`, and serve the service of its
/// router, if it has one (`S` again unless the router says otherwise).
pub struct Endpoint<S, C = Bincode> {
    config: Config,
    router: Option<Arc<Routes<S, C>>>,
    /// The token this end's hello carries.
    token: Option<Bytes>,
    /// The check a peer's hello must pass before this end sends its own.
    check: Option<Check>,
    /// Failed checks by address, shared by the endpoint's clones.
    throttle: Arc<Throttle>,
}

impl<S, C> Clone for Endpoint<S, C> {
    fn clone(&self) -> Self {
        Self {
            config: self.config,
            router: self.router.clone(),
            token: self.token.clone(),
            check: self.check.clone(),
            throttle: self.throttle.clone(),
        }
    }
}

impl<S: Service, C: Codec> Endpoint<S, C> {
    /// An endpoint that calls but serves nothing; fails if a setting is out of range.
    pub fn new(config: Config) -> Result<Self, ConnectError> {
        config.check().map_err(ConnectError::Config)?;
        Ok(Self {
            config,
            router: None,
            token: None,
            check: None,
            throttle: Arc::default(),
        })
    }

    /// Sends `token` (1 to 512 bytes) in every hello, for a server that checks it.
    pub fn token(mut self, token: impl Into<Bytes>) -> Result<Self, ConnectError> {
        self.token = Some(crate::auth::checked_token(token.into())?);
        Ok(self)
    }

    /// Admits a connection only if `check` says so, given what is known of it and the
    /// token its hello carries. This end then reads the peer's hello before it sends its
    /// own, and answers a refused one with [`ConnectError::Unauthenticated`] (the peer
    /// learns it at once) and closes the connection: no call of it runs. Only one end of a
    /// connection (the server) may check, or each waits for the other's hello.
    ///
    /// An address whose checks failed more than
    /// [`FREE_FAILURES`](crate::auth::FREE_FAILURES) times in a row is refused at once,
    /// unchecked, for a second, then twice as long after each further failure (up to
    /// [`MAX_PENALTY`](crate::auth::MAX_PENALTY)), and logged once per second at most; a
    /// check it passes forgets its failures.
    pub fn authenticate<F, Fut>(mut self, check: F) -> Self
    where
        F: Fn(AuthRequest) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = bool> + Send + 'static,
    {
        self.check = Some(Arc::new(move |request| Box::pin(check(request))));
        self
    }

    /// [`authenticate`](Self::authenticate) with the built-in check: the hello must carry
    /// `token` (1 to 512 bytes). Tokens are compared by their SHA-256 digests, in a time
    /// that tells nothing of either token's length or contents.
    pub fn require_token(self, token: impl Into<Bytes>) -> Result<Self, ConnectError> {
        let want = crate::auth::digest(&crate::auth::checked_token(token.into())?);
        Ok(self.authenticate(move |request: AuthRequest| {
            let admitted = request
                .token
                .is_some_and(|got| crate::auth::same(&got, &want));
            core::future::ready(admitted)
        }))
    }

    /// Serves the router's methods on every connection made from now on: service `T`'s,
    /// whose handlers call `S` back. The hello says so, and a peer that calls another
    /// service than `T` is refused.
    pub fn serve<T: Service>(mut self, router: Router<T, S, C>) -> Self {
        self.router = Some(Arc::new(router.into_routes()));
        self
    }

    /// The fingerprint and name of the service this end serves (the one it calls when it
    /// has no router).
    fn serves(&self) -> (u64, &'static str) {
        self.router
            .as_ref()
            .map_or((S::FINGERPRINT, S::NAME), |r| (r.fingerprint, r.service))
    }

    /// Sends the method table of the service this end serves (no name and no methods
    /// when it serves nothing).
    async fn send_table<T: LinkSender>(&self, sender: &T) -> Result<(), ConnectError> {
        let (name, table) = self
            .router
            .as_ref()
            .map_or(("", &[][..]), |r| (r.service, r.table));
        let mut buf = vec![0u8; MethodTable::buffer_len(name, table.len())];
        MethodTable::emit(name, table, &mut buf).map_err(ConnectError::Malformed)?;
        sender
            .send(Message::new(Kind::METHODS, 0, 0, Bytes::from(buf)))
            .await
            .map_err(ConnectError::from)
    }

    /// The settings.
    pub fn config(&self) -> Config {
        self.config
    }

    /// Starts a connection over `link`: sends this end's hello, checks the peer's, then
    /// serves. Both ends do the same; neither is special.
    pub async fn connect<L: MessageLink>(&self, mut link: L) -> Result<Peer<S, C>, ConnectError> {
        link.limit_message(self.config.max_message);
        let connection = link.connection();
        let (sender, mut receiver) = link.split();
        let ours = self.hello(sender.max_message());
        let exchange = self.exchange(&sender, &mut receiver, &connection, &ours);
        let (theirs, table) = match tokio::time::timeout(self.config.hello_timeout, exchange).await
        {
            Ok(Ok(theirs)) => theirs,
            Ok(Err(e)) => {
                sender.close();
                return Err(e);
            }
            Err(_) => {
                sender.close();
                return Err(ConnectError::Timeout(self.config.hello_timeout));
            }
        };
        if let Some(e) = self.refusal(&ours, &theirs, table.as_ref()) {
            // Tell the peer why (as an error reply to no call), then close both ways.
            let text = Bytes::from(format!("the peer refused the hello: {e}"));
            let why = Message::new(Kind::ERROR, 0, ErrorCode::PROTOCOL.0, text);
            let _ = tokio::time::timeout(self.config.hello_timeout, sender.send(why)).await;
            sender.close();
            return Err(e);
        }
        let (oneway_tx, oneway_rx) = mpsc::unbounded_channel();
        let link_max = sender.max_message();
        let inner = Arc::new(Inner {
            sender: AnySender::new(sender),
            connection,
            who: ConnectionName::next(),
            link_max,
            config: self.config,
            ours,
            theirs,
            their_methods: table.map(|t| t.methods),
            pool: BufferPool::new(self.config.pool),
            calls: Calls::new(theirs.credit),
            served: Served::new(self.router.clone()),
            life: Liveness::default(),
            counters: Counters::default(),
            _s: PhantomData,
        });
        tokio::spawn(dispatch::read_loop(inner.clone(), receiver, oneway_tx));
        tokio::spawn(serve::oneway_loop(inner.clone(), oneway_rx));
        tokio::spawn(deadlines::run(inner.clone()));
        if let Some(watch) = keepalive::Watch::new(&self.config, &theirs) {
            tokio::spawn(keepalive::run(inner.clone(), watch));
        }
        Ok(Peer {
            inner: inner.clone(),
            _owner: Some(Arc::new(Owner { inner })),
        })
    }

    /// This end's hello, on a link that carries messages of up to `link_max` bytes.
    fn hello(&self, link_max: usize) -> Hello {
        let max_message = self.config.max_message.min(link_max);
        Hello {
            version: WIRE_VERSION,
            codec: C::ID,
            max_message: u32::try_from(max_message).unwrap_or(u32::MAX),
            credit: self.config.credit,
            fingerprint: self.serves().0,
            calls: S::FINGERPRINT,
            capabilities: CAP_ANSWERS_PINGS | CAP_HEARS_CLOSING | CAP_METHOD_TABLE | CAP_METADATA,
        }
    }

    /// The hellos, each way (the peer's first, when this end checks it), then the
    /// method tables when both ends send one: the peer's hello and table.
    async fn exchange<T: LinkSender, R: LinkReceiver>(
        &self,
        sender: &T,
        receiver: &mut R,
        connection: &ConnectionInfo,
        ours: &Hello,
    ) -> Result<(Hello, Option<TheirTable>), ConnectError> {
        let theirs = match &self.check {
            Some(check) => {
                let (theirs, token) = recv_hello(receiver).await?;
                if !self.admit(check, connection, token).await {
                    let why = Message::new(
                        Kind::ERROR,
                        0,
                        ErrorCode::UNAUTHENTICATED.0,
                        Bytes::from_static(b"unauthenticated"),
                    );
                    let _ = sender.send(why).await;
                    return Err(ConnectError::Unauthenticated);
                }
                send_hello(sender, ours, self.token.as_deref()).await?;
                theirs
            }
            None => {
                send_hello(sender, ours, self.token.as_deref()).await?;
                recv_hello(receiver).await?.0
            }
        };
        if ours.capabilities & theirs.capabilities & CAP_METHOD_TABLE == 0 {
            return Ok((theirs, None));
        }
        self.send_table(sender).await?;
        Ok((theirs, Some(recv_table(receiver).await?)))
    }

    /// Whether `check` admits a peer that sent `token`; an address that keeps failing
    /// is refused without a look at its token, for a time that doubles with each
    /// failure.
    async fn admit(
        &self,
        check: &Check,
        connection: &ConnectionInfo,
        token: Option<Bytes>,
    ) -> bool {
        let host = connection.peer_addr.map(|a| a.ip());
        let now = std::time::Instant::now();
        let admitted = match host {
            Some(host) if self.throttle.refused(host, now) => false,
            _ => {
                let connection = connection.clone();
                check(AuthRequest { connection, token }).await
            }
        };
        match (host, admitted) {
            (Some(host), true) => self.throttle.passed(host),
            (Some(host), false) => {
                if self.throttle.failed(host, now).is_some() {
                    crate::log::warn_limited(
                        "rpc authentication keeps failing from this address: \
                         refused at once for a time that doubles with each failure",
                        &host,
                    );
                }
            }
            (None, _) => {}
        }
        admitted
    }

    /// Why this end refuses a peer whose hello is `theirs` (and its method table, if it
    /// sent one): another wire version or codec, or another service.
    fn refusal(
        &self,
        ours: &Hello,
        theirs: &Hello,
        table: Option<&TheirTable>,
    ) -> Option<ConnectError> {
        if theirs.version != WIRE_VERSION {
            Some(ConnectError::Version {
                ours: WIRE_VERSION,
                theirs: theirs.version,
            })
        } else if theirs.codec != C::ID {
            Some(ConnectError::Codec {
                ours: C::ID,
                theirs: theirs.codec,
            })
        } else if let Some(table) = table {
            // With tables, each call is checked against the peer's; the service must
            // still be the one this end calls.
            // A peer that serves nothing names no service.
            (!table.service.is_empty() && table.service != S::NAME).then(|| {
                ConnectError::OtherService {
                    calls: S::NAME,
                    serves: table.service.clone(),
                }
            })
        } else if theirs.fingerprint != S::FINGERPRINT {
            Some(ConnectError::Service {
                service: S::NAME,
                ours: S::FINGERPRINT,
                theirs: theirs.fingerprint,
            })
        } else if theirs.calls != ours.fingerprint {
            Some(ConnectError::CallsBack {
                service: self.serves().1,
                ours: ours.fingerprint,
                theirs: theirs.calls,
            })
        } else {
            None
        }
    }
}

/// Sends this end's hello, with its token if it has one.
async fn send_hello<T: LinkSender>(
    sender: &T,
    ours: &Hello,
    token: Option<&[u8]>,
) -> Result<(), ConnectError> {
    let args = match token {
        Some(token) => {
            let mut buf = [0u8; HELLO_LEN + 2 + MAX_TOKEN];
            let n = ours
                .emit_with_token(token, &mut buf)
                .map_err(ConnectError::Malformed)?;
            Bytes::copy_from_slice(&buf[..n])
        }
        None => Bytes::copy_from_slice(&ours.emit()),
    };
    sender
        .send(Message::new(Kind::HELLO, 0, 0, args))
        .await
        .map_err(ConnectError::from)
}

/// Takes the peer's hello, and the token it carries.
async fn recv_hello<R: LinkReceiver>(
    receiver: &mut R,
) -> Result<(Hello, Option<Bytes>), ConnectError> {
    let message = receiver.recv().await?;
    // A stream link holds the first frame to this already; a datagram link is checked
    // here.
    let len = message.wire_len() + frame::HEADER_LEN;
    if len > MAX_HELLO_FRAME {
        return Err(ConnectError::Malformed(
            volley_proto::wire::Error::TooLarge {
                what: "rpc hello",
                len: len as u64,
                max: MAX_HELLO_FRAME as u64,
            },
        ));
    }
    match message.head.kind {
        Kind::HELLO => {
            let hello = Hello::parse(&message.args).map_err(ConnectError::Malformed)?;
            let token = Hello::token(&message.args)
                .map_err(ConnectError::Malformed)?
                .map(Bytes::copy_from_slice);
            Ok((hello, token))
        }
        Kind::ERROR if message.head.method == ErrorCode::UNAUTHENTICATED.0 => {
            Err(ConnectError::Unauthenticated)
        }
        Kind::ERROR => Err(ConnectError::Refused(
            String::from_utf8_lossy(&message.args).into_owned(),
        )),
        kind => Err(ConnectError::NotHello(kind)),
    }
}

/// The peer's method table: the service it serves, and its methods by id.
struct TheirTable {
    service: String,
    methods: Box<[MethodEntry]>,
}

/// Takes the peer's method table, which comes right after its hello.
async fn recv_table<R: LinkReceiver>(receiver: &mut R) -> Result<TheirTable, ConnectError> {
    let message = receiver.recv().await?;
    match message.head.kind {
        Kind::METHODS => {
            let table = MethodTable::parse(&message.args).map_err(ConnectError::Malformed)?;
            let mut methods: Vec<MethodEntry> = table.iter().collect();
            methods.sort_unstable_by_key(|m| m.id);
            Ok(TheirTable {
                service: table.service().to_owned(),
                methods: methods.into_boxed_slice(),
            })
        }
        Kind::ERROR => Err(ConnectError::Refused(
            String::from_utf8_lossy(&message.args).into_owned(),
        )),
        kind => Err(ConnectError::Malformed(
            volley_proto::wire::Error::UnexpectedType {
                expected: "the rpc method table after the hello",
                found: kind.0,
            },
        )),
    }
}
