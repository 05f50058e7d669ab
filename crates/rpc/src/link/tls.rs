//! TLS on stream links (feature `tls`): rustls 0.23 through tokio-rustls, on the ring
//! provider passed explicitly, TLS 1.3, certificates and keys from PEM files, the
//! server's name checked, and mutual TLS with a client CA. The RPC messages then run
//! over the TLS stream as over plain TCP; bulk segments are copied only where encryption
//! must (into rustls's records, out of them into the read buffer).
//!
//! ```no_run
//! use std::path::Path;
//! use std::sync::Arc;
//! use volley_rpc::link::framed::DEFAULT_MAX_MESSAGE;
//! use volley_rpc::{Listener, listener_config};
//! use volley_rpc::link::tls::{self, Roots, TlsListener};
//! use volley_rpc::{Config, Context, Endpoint, HandlerError, serve};
//!
//! volley_rpc::service! {
//!     /// Nothing much.
//!     pub service Quiet {
//!         /// Pings.
//!         1 => fn ping();
//!     }
//! }
//!
//! struct Here;
//!
//! impl QuietServer for Here {
//!     async fn ping(&self, _cx: Context<Quiet>) -> Result<(), HandlerError> {
//!         Ok(())
//!     }
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // A server with its certificate chain and key, asking clients for a certificate
//! // signed by `clients.pem` (mutual TLS; pass `None` to ask for none).
//! let config = tls::server_config(
//!     Path::new("server.pem"),
//!     Path::new("server.key"),
//!     Some(Path::new("clients.pem")),
//! )?;
//! let listener = Listener::bind_tcp(
//!     "0.0.0.0:7000".parse()?,
//!     listener_config(1024),
//! )
//! .await?;
//! let endpoint = Endpoint::<Quiet>::new(Config::default())?.serve(Here.into_router());
//! let server = serve(endpoint, TlsListener::new(listener, config));
//!
//! // A client trusting only `ca.pem`, with its own certificate, checking the name
//! // "rpc.example" in the server's certificate.
//! let config = tls::client_config(
//!     Roots::File(Path::new("ca.pem")),
//!     Some((Path::new("client.pem"), Path::new("client.key"))),
//! )?;
//! let name = tls::server_name("rpc.example")?;
//! let link = tls::connect("192.0.2.7:7000".parse()?, name, config).await?;
//! let peer = Endpoint::<Quiet>::new(Config::default())?.connect(link).await?;
//! # let _ = (server, peer);
//! # Ok(())
//! # }
//! ```

use core::net::{IpAddr, SocketAddr};
use core::time::Duration;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use volley_transport_tcp::{AcceptedStream, Admission, Listener, Role, Seat, Unframed};

use crate::link::framed::{self, FramedLink};
use crate::link::{ConnectionInfo, TlsIdentity};
use crate::server::{Handshakes, Incoming, PeerHost};

pub use rustls;
pub use rustls::pki_types::ServerName;

/// The ALPN protocol both ends offer: `volley-rpc/1`.
pub const ALPN: &[u8] = b"volley-rpc/1";

/// How long a TLS handshake may take, by default, before the connection is dropped.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes of a TLS connection's read buffer, under rustls. rustls asks its transport for at
/// most 4 KiB at a time (and at most one record's worth in all), so read straight from
/// the socket a megabyte took over 250 receive calls; read from this buffer it takes a
/// sixteenth of that, for one copy of the ciphertext more, which costs far less. Its
/// memory is each connection's to hold (the listener bounds how many are open).
pub(crate) const READ_BUFFER: usize = 64 * 1024;

/// Why a TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A PEM file could not be read, or holds nothing of what was asked for.
    #[error("cannot read the {what} from {}: {source}", path.display())]
    Pem {
        /// What was looked for: "certificates", "private key".
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: rustls::pki_types::pem::Error,
    },
    /// The system's trust store gave no certificate.
    #[error("the system's trust store has no usable certificate: {0}")]
    SystemRoots(String),
    /// rustls refused a certificate, key or setting.
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
    /// The client CA cannot check client certificates.
    #[error("the client CA: {0}")]
    ClientCa(#[from] rustls::server::VerifierBuilderError),
    /// The name is neither a DNS name nor an IP address.
    #[error("{0:?} is not a DNS name or an IP address")]
    ServerName(String),
    /// A server's own certificate that no client would accept: a CA's, expired, not yet
    /// valid, unreadable, or one the key does not belong to.
    #[error("the certificate in {}: {problem}", path.display())]
    Certificate {
        /// The certificate file.
        path: PathBuf,
        /// What is wrong with it, and what to do.
        problem: String,
    },
}

/// The ring provider, the only one volley uses (given explicitly, so that another
/// provider compiled into the program changes nothing).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    // rustls 0.23.48 deprecates ring's provider for lacking post-quantum key exchange;
    // ring is what volley settles on (no C toolchain, one provider everywhere), so the
    // warning is silenced here, once.
    #[allow(deprecated)]
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in a PEM file, in order (a chain: the leaf first).
pub fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |source| TlsError::Pem {
        what: "certificates",
        path: path.to_owned(),
        source,
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(pem)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem)?;
    if certificates.is_empty() {
        return Err(pem(rustls::pki_types::pem::Error::NoItemsFound));
    }
    Ok(certificates)
}

/// The first private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|source| TlsError::Pem {
        what: "private key",
        path: path.to_owned(),
        source,
    })
}

/// A root store holding every certificate of a PEM file.
fn roots_from(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates(path)? {
        roots.add(certificate)?;
    }
    Ok(roots)
}

/// A server's TLS settings: TLS 1.3, the certificate chain and key from PEM files, ALPN
/// [`ALPN`], and with `client_ca` mutual TLS: a client must present a certificate that
/// CA signed, or the handshake fails.
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    let builder = match client_ca {
        Some(path) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots_from(path)?), provider)
                    .build()?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let chain = read_certificates(cert)?;
    if let Some(leaf) = chain.first() {
        check_leaf(leaf, std::time::SystemTime::now()).map_err(|problem| {
            TlsError::Certificate {
                path: cert.to_owned(),
                problem,
            }
        })?;
    }
    let mut config = builder
        .with_single_cert(chain, read_private_key(key)?)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => TlsError::Certificate {
                path: cert.to_owned(),
                problem: format!("the private key in {} does not belong to it", key.display()),
            },
            e => e.into(),
        })?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(config))
}

/// Why clients would refuse `leaf` as a server's certificate at `now`, if they would:
/// found at start rather than at every client's handshake.
fn check_leaf(leaf: &CertificateDer<'_>, now: std::time::SystemTime) -> Result<(), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|e| format!("cannot be parsed as X.509: {e}"))?;
    if cert.is_ca() {
        return Err(
            "it is a CA certificate (basicConstraints CA:TRUE), which clients refuse as \
             a server's own (CaUsedAsEndEntity): give the server an end-entity certificate \
             (with OpenSSL, -addext basicConstraints=critical,CA:FALSE)"
                .to_owned(),
        );
    }
    let now = now
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let validity = cert.validity();
    if validity.not_after.timestamp() < now {
        return Err(format!("it expired on {}", validity.not_after));
    }
    if validity.not_before.timestamp() > now {
        return Err(format!("it is not valid until {}", validity.not_before));
    }
    Ok(())
}

/// Which certificates a client trusts.
#[derive(Clone, Copy, Debug)]
pub enum Roots<'a> {
    /// Only those in this PEM file (a private CA, or the server's own self-signed one).
    File(&'a Path),
    /// The system's trust store (`/etc/ssl/certs` and the like).
    System,
}

/// A client's TLS settings: TLS 1.3, the roots it trusts, ALPN [`ALPN`], and with
/// `identity` (a certificate chain and key, PEM files) a certificate for mutual TLS.
pub fn client_config(
    roots: Roots<'_>,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let roots = match roots {
        Roots::File(path) => roots_from(path)?,
        Roots::System => system_roots()?,
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => {
            builder.with_client_auth_cert(read_certificates(cert)?, read_private_key(key)?)?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(config))
}

/// The system's trusted roots; an error only if none is usable.
fn system_roots() -> Result<RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        return Err(TlsError::SystemRoots(if why.is_empty() {
            "none found".into()
        } else {
            why
        }));
    }
    Ok(roots)
}

/// The name a client checks in the server's certificate: a DNS name, or an IP address
/// (which the certificate must list as an IP subject alternative name).
pub fn server_name(name: &str) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(name.to_owned()).map_err(|_| TlsError::ServerName(name.to_owned()))
}

/// Connects over TCP to `addr` and runs the TLS handshake, checking `name` in the
/// server's certificate, all within [`DEFAULT_HANDSHAKE_TIMEOUT`]; then frames RPC
/// messages over the TLS stream with [`framed::config`]'s settings. The link's
/// [`ConnectionInfo`] carries the server's [`TlsIdentity`].
///
/// A server that wants a client certificate and does not like this one says so only
/// after the handshake (as TLS 1.3 has it): the hello then fails, its error carrying
/// the server's alert ("received fatal alert: CertificateRequired").
pub async fn connect(
    addr: SocketAddr,
    name: ServerName<'static>,
    config: Arc<ClientConfig>,
) -> io::Result<FramedLink> {
    let handshake = async {
        let stream = TcpStream::connect(addr).await?;
        volley_transport_tcp::tune(&stream)?;
        TlsConnector::from(config)
            .connect(name, BufReader::with_capacity(READ_BUFFER, stream))
            .await
    };
    let stream = within(
        DEFAULT_HANDSHAKE_TIMEOUT,
        format!("the TLS handshake with {addr}"),
        handshake,
    )
    .await?;
    let identity = identity(stream.get_ref().1);
    let (reader, writer) = tokio::io::split(stream);
    let (framed, incoming) =
        volley_transport_tcp::Framed::new(reader, writer, framed::config(Role::Initiator));
    Ok(FramedLink::new(framed, incoming).with_connection(
        ConnectionInfo::new()
            .with_peer_addr(addr)
            .with_tls(identity),
    ))
}

/// `handshake`'s outcome, or, past `timeout`, an error saying that `what` did not finish
/// within it. (`what` is a `String`, not `fmt::Arguments`: a caller's future must stay
/// `Send`, and arguments held across the await are not.)
pub(crate) async fn within<T>(
    timeout: Duration,
    what: String,
    handshake: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    tokio::time::timeout(timeout, handshake)
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{what} did not finish within {timeout:?}"),
            )
        })?
}

/// What the handshake established about the peer.
fn identity(connection: &rustls::CommonState) -> TlsIdentity {
    identity_of(
        connection.peer_certificates().and_then(<[_]>::first),
        connection
            .protocol_version()
            .map(|v| format!("{v:?}"))
            .unwrap_or_default(),
    )
}

/// The identity a peer's leaf certificate (checked by the handshake) gives.
pub(crate) fn identity_of(leaf: Option<&CertificateDer<'_>>, version: String) -> TlsIdentity {
    let mut identity = TlsIdentity {
        certificate: leaf.map(|der| Bytes::copy_from_slice(der)),
        version,
        ..TlsIdentity::default()
    };
    if let Some(cert) = leaf.and_then(|der| webpki::EndEntityCert::try_from(der).ok()) {
        identity.dns_names = cert.valid_dns_names().map(str::to_owned).collect();
        identity.uri_names = cert.valid_uri_names().map(str::to_owned).collect();
    }
    if let Some(der) = leaf {
        identity.ip_addresses = ip_addresses(der);
    }
    identity
}

/// The IP addresses among a certificate's subject alternative names (webpki checks them
/// but does not list them), read with x509-parser; none if the certificate does not parse.
fn ip_addresses(der: &[u8]) -> Vec<IpAddr> {
    use x509_parser::extensions::GeneralName;
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let Ok(Some(names)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    names
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => <[u8; 4]>::try_from(*bytes).ok().map(IpAddr::from),
                16 => <[u8; 16]>::try_from(*bytes).ok().map(IpAddr::from),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// A TCP or Unix [`Listener`] whose connections run TLS: each accepted stream's
/// handshake runs in a task of its own (so a slow one holds up no other), within the
/// handshake timeout, holding its connection slot; a connection past the listener's
/// `max_connections` is told "no free connection slot" over TLS and closed. Serve it
/// with [`serve`](crate::serve).
pub struct TlsListener {
    listener: Arc<Listener>,
    acceptor: TlsAcceptor,
    handshake_timeout: Duration,
    handshakes: Handshakes<FramedLink>,
}

impl TlsListener {
    /// TLS with `config` (see [`server_config`]) on `listener`'s connections.
    pub fn new(listener: impl Into<Arc<Listener>>, config: Arc<ServerConfig>) -> Self {
        Self {
            listener: listener.into(),
            acceptor: TlsAcceptor::from(config),
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            handshakes: Handshakes::new(),
        }
    }

    /// How long a handshake may take before its connection is dropped
    /// ([`DEFAULT_HANDSHAKE_TIMEOUT`] unless set).
    #[must_use]
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// The listener underneath (for its statistics).
    pub fn listener(&self) -> &Arc<Listener> {
        &self.listener
    }
}

/// Starts the handshake of a connection just accepted.
fn start(
    handshakes: &mut Handshakes<FramedLink>,
    acceptor: &TlsAcceptor,
    timeout: Duration,
    admission: Admission<Unframed>,
) {
    let acceptor = acceptor.clone();
    match admission {
        Admission::Accepted(unframed) => {
            handshakes.spawn(async move { handshake(acceptor, unframed, timeout).await });
        }
        Admission::Full(unframed) => {
            crate::log::warn_limited(
                "rpc connection refused: no free connection slot",
                &PeerHost(unframed.peer.clone()),
            );
            handshakes.spawn(async move {
                if let Some((link, _)) = handshake(acceptor, unframed, timeout).await {
                    crate::server::refuse(link).await;
                }
                None
            });
        }
    }
}

impl core::fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TlsListener")
            .field("listener", &self.listener)
            .field("handshake_timeout", &self.handshake_timeout)
            .field("handshakes", &self.handshakes.len())
            .finish_non_exhaustive()
    }
}

impl Incoming for TlsListener {
    type Link = FramedLink;

    async fn next(&mut self) -> Option<io::Result<(FramedLink, String)>> {
        let (listener, acceptor, timeout) =
            (&self.listener, &self.acceptor, self.handshake_timeout);
        self.handshakes
            .next(
                || async { Some(listener.accept_unframed_or_refuse().await) },
                |handshakes, admission| start(handshakes, acceptor, timeout, admission),
            )
            .await
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        Listener::local_addr(&self.listener).ok()
    }
}

/// Runs the server's side of one handshake, then frames the connection; `None` (logged)
/// if it fails or times out.
async fn handshake(
    acceptor: TlsAcceptor,
    unframed: Unframed,
    timeout: Duration,
) -> Option<(FramedLink, String)> {
    let Unframed { stream, peer, seat } = unframed;
    let who = PeerHost(peer.clone());
    let link = match stream {
        AcceptedStream::Tcp(stream) => over(acceptor, stream, seat, timeout).await,
        AcceptedStream::Unix(stream) => over(acceptor, stream, seat, timeout).await,
    };
    match link {
        Ok(link) => {
            let link = match peer {
                volley_transport_tcp::PeerAddr::Tcp(addr) => link.with_peer_addr(addr),
                volley_transport_tcp::PeerAddr::Unix => link,
            };
            Some((link, who.to_string()))
        }
        Err(e) => {
            tracing::debug!(peer = %who, "TLS handshake failed: {e}");
            crate::log::warn_limited(
                "TLS handshake failed (run with RUST_LOG=debug for each reason)",
                &who,
            );
            None
        }
    }
}

/// The server's handshake over one stream, within `timeout`, then the framed link.
async fn over<S>(
    acceptor: TlsAcceptor,
    stream: S,
    seat: Seat,
    timeout: Duration,
) -> io::Result<FramedLink>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let stream = within(
        timeout,
        "the TLS handshake".to_owned(),
        acceptor.accept(BufReader::with_capacity(READ_BUFFER, stream)),
    )
    .await?;
    let identity = identity(stream.get_ref().1);
    let (reader, writer) = tokio::io::split(stream);
    let (framed, incoming) = seat.frame(reader, writer);
    Ok(FramedLink::new(framed, incoming).with_connection(ConnectionInfo::new().with_tls(identity)))
}
