//! [`Endpoint`]: the settings and router a connection starts with, and the hello each
//! end sends first.

use super::*;

/// Makes connections that call service `S` with codec `C`, and serve the service of its
/// router, if it has one (`S` again unless the router says otherwise).
pub struct Endpoint<S, C = Bincode> {
    config: Config,
    router: Option<Arc<Routes<S, C>>>,
}

impl<S, C> Clone for Endpoint<S, C> {
    fn clone(&self) -> Self {
        Self {
            config: self.config,
            router: self.router.clone(),
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
        })
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

    /// The settings.
    pub fn config(&self) -> Config {
        self.config
    }

    /// Starts a connection over `link`: sends this end's hello, checks the peer's, then
    /// serves. Both ends do the same; neither is special.
    pub async fn connect<L: MessageLink>(&self, link: L) -> Result<Peer<S, C>, ConnectError> {
        let connection = link.connection();
        let (sender, mut receiver) = link.split();
        let ours = Hello {
            version: WIRE_VERSION,
            codec: C::ID,
            max_message: u32::try_from(self.config.max_message.min(sender.max_message()))
                .unwrap_or(u32::MAX),
            credit: self.config.credit,
            fingerprint: self.serves().0,
            calls: S::FINGERPRINT,
            capabilities: CAP_ANSWERS_PINGS,
        };
        let theirs = match tokio::time::timeout(
            self.config.hello_timeout,
            hello(&sender, &mut receiver, ours),
        )
        .await
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
        let refused = if theirs.version != WIRE_VERSION {
            Some(ConnectError::Version {
                ours: WIRE_VERSION,
                theirs: theirs.version,
            })
        } else if theirs.codec != C::ID {
            Some(ConnectError::Codec {
                ours: C::ID,
                theirs: theirs.codec,
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
        };
        if let Some(e) = refused {
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
            heard: AtomicU64::new(0),
            activity: AtomicU64::new(0),
            config: self.config,
            ours,
            theirs,
            pool: BufferPool::new(self.config.pool),
            next_id: AtomicU32::new(1),
            waiters: Mutex::new(HashMap::new()),
            credit: Arc::new(Semaphore::new(theirs.credit as usize)),
            oneway_out: AtomicU32::new(0),
            failure: OnceLock::new(),
            ended: Notify::new(),
            router: self.router.clone(),
            parked: Mutex::new(HashMap::new()),
            parked_count: AtomicUsize::new(0),
            running: Mutex::new(HashMap::new()),
            in_flight: AtomicUsize::new(0),
            pending_answers: AtomicUsize::new(0),
            shutting_down: AtomicBool::new(false),
            idle: Notify::new(),
            counters: Counters::default(),
            _s: PhantomData,
        });
        tokio::spawn(dispatch::read_loop(inner.clone(), receiver, oneway_tx));
        tokio::spawn(serve::oneway_loop(inner.clone(), oneway_rx));
        if let Some(watch) = keepalive::Watch::new(&self.config, &theirs) {
            tokio::spawn(keepalive::run(inner.clone(), watch));
        }
        Ok(Peer {
            inner: inner.clone(),
            _owner: Some(Arc::new(Owner { inner })),
        })
    }
}

/// Sends our hello and takes the peer's.
async fn hello<T: LinkSender, R: LinkReceiver>(
    sender: &T,
    receiver: &mut R,
    ours: Hello,
) -> Result<Hello, ConnectError> {
    sender
        .send(Message::new(
            Kind::HELLO,
            0,
            0,
            Bytes::copy_from_slice(&ours.encode()),
        ))
        .await?;
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
        Kind::HELLO => Hello::parse(&message.args).map_err(ConnectError::Malformed),
        Kind::ERROR => Err(ConnectError::Refused(
            String::from_utf8_lossy(&message.args).into_owned(),
        )),
        kind => Err(ConnectError::NotHello(kind)),
    }
}
