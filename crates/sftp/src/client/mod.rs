//! [`SftpClient`]: the session (spawning or connecting, the handshake, the server's
//! limits, shutdown) and the plumbing every request goes through; the requests
//! themselves are in `ops`, their types in `types`, the errors in `error`.

use core::time::Duration;
use std::io;

use bytes::Bytes;
use tokio::process::{Child, Command};
use tokio::sync::Mutex;
use volley_proto::sftp::{
    self, LIMITS_EXTENSION, Limits, PacketType, Request, Response, StatusCode, WriteHead,
};
use volley_proto::wire::frame;
use volley_transport_tcp::{Config, Connection, FileRegion, Frame, Framed, Pipeline, Unsolicited};

mod error;
mod files;
mod ops;
mod over_ssh;
mod transfers;
mod types;

pub(crate) use error::shown_local;
pub use error::{SftpError, printable, printable_bytes};
pub(crate) use types::join;
pub use types::{DirEntry, FileAttrs, Handle};

/// An SFTP v3 session.
#[derive(Debug)]
pub struct SftpClient {
    pub(crate) conn: Connection,
    child: Mutex<Option<Child>>,
    /// The child is ssh, whose exit status at the end says nothing about the session.
    pub(crate) child_is_ssh: bool,
    extensions: Vec<(Vec<u8>, Vec<u8>)>,
    limits: Option<Limits>,
    pub(crate) timeout: Duration,
}

/// A request on the wire whose reply is still to be read.
#[derive(Debug)]
pub(crate) struct Sent {
    pipeline: Pipeline,
    op: &'static str,
    path: String,
}

/// How long a closed connection waits for the spawned server's exit status.
const EXIT_GRACE: Duration = Duration::from_secs(1);

/// The most data one READ asks for or one WRITE carries, whatever the server states
/// (a larger stated limit is clamped to it): bytes in flight are requests × this at
/// most, per file.
pub const MAX_CHUNK: usize = 1 << 20;

/// The largest SFTP packet volley sends or accepts, its length field included: a
/// [`MAX_CHUNK`] READ's DATA or WRITE with its head (an SFTP v3 handle is at most 256
/// bytes), and any other reply (a NAME listing, a STATUS message) up to the same size.
/// A longer packet from the server ends the session with an error that says so.
pub const MAX_PACKET: usize = MAX_CHUNK + 1024;

/// Every request and reply waits at most this long by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

impl SftpClient {
    /// Runs `command` (e.g. `/usr/lib/openssh/sftp-server -e -l ERROR`) with its stdin and
    /// stdout on a socketpair, then initialises the session. The server's stderr is left
    /// as the command has it.
    pub async fn spawn(command: &mut Command) -> Result<Self, SftpError> {
        Self::spawn_with_socket_buffer(command, config().socket_buffer).await
    }

    /// [`spawn`](Self::spawn), asking the kernel for socketpair buffers of `bytes` each
    /// (it doubles the figure for its bookkeeping and caps it at `net.core.wmem_max` and
    /// `rmem_max`), or leaving them at its default with `None` (208 KiB on Linux).
    /// `spawn` asks for [`volley_transport_tcp::SOCKET_BUFFER`].
    pub async fn spawn_with_socket_buffer(
        command: &mut Command,
        bytes: Option<usize>,
    ) -> Result<Self, SftpError> {
        Self::spawn_configured(command, bytes, |_| {}).await
    }

    /// [`spawn`](Self::spawn), letting `inspect` take what it needs of the child (its
    /// stderr pipe) before the session starts.
    pub(crate) async fn spawn_inspecting(
        command: &mut Command,
        inspect: impl FnOnce(&mut Child),
    ) -> Result<Self, SftpError> {
        Self::spawn_configured(command, config().socket_buffer, inspect).await
    }

    async fn spawn_configured(
        command: &mut Command,
        bytes: Option<usize>,
        inspect: impl FnOnce(&mut Child),
    ) -> Result<Self, SftpError> {
        command.kill_on_drop(true);
        let config = Config {
            socket_buffer: bytes,
            ..config()
        };
        let (conn, incoming, mut child) = Connection::spawn_with_incoming(command, config)
            .map_err(|source| SftpError::Io {
                what: format!("cannot start {:?}", command.as_std().get_program()),
                source,
            })?;
        inspect(&mut child);
        Self::init(conn, incoming, Some(child)).await
    }

    /// Initialises a session over an already connected stream.
    pub async fn connect<R, W>(reader: R, writer: W) -> Result<Self, SftpError>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (framed, incoming) = Framed::new(reader, writer, config());
        Self::init(framed.into(), incoming, None).await
    }

    async fn init(
        conn: Connection,
        mut incoming: Unsolicited,
        child: Option<Child>,
    ) -> Result<Self, SftpError> {
        let mut client = Self {
            conn,
            child: Mutex::new(child),
            child_is_ssh: false,
            extensions: Vec::new(),
            limits: None,
            timeout: DEFAULT_TIMEOUT,
        };
        // INIT and VERSION carry the version where other messages carry an id, so
        // VERSION answers no request id: it is the first frame the server sends, taken
        // by its type (a server of another version is told apart at once, not left to
        // time out as a reply that never came).
        let sent = client
            .conn
            .framed()
            .send(PacketType::INIT.0, sftp::VERSION, &[], Bytes::new())
            .await;
        client.init_result(sent).await?;
        let reply = incoming.recv_timeout(client.timeout).await;
        let reply = client.init_result(reply).await?;
        // Nothing else the server sends answers no request: from here on such frames
        // are counted and dropped.
        drop(incoming);
        match parse(&reply, "init")? {
            Response::Version {
                version: 3,
                extensions,
            } => {
                client.extensions = extensions
                    .iter()
                    .map(|(n, v)| (n.to_vec(), v.to_vec()))
                    .collect();
            }
            Response::Version { version, .. } => return Err(SftpError::Version(version)),
            other => return Err(unexpected("init", &other)),
        }
        if client.has_extension(LIMITS_EXTENSION) {
            let reply = client
                .round_trip(
                    &Request::Extended {
                        id: 0,
                        request: LIMITS_EXTENSION,
                        data: &[],
                    },
                    "limits",
                    "",
                )
                .await?;
            client.limits = match parse(&reply, "limits")? {
                Response::ExtendedReply { data, .. } => {
                    Some(Limits::parse(data).map_err(|source| SftpError::Wire {
                        op: "limits",
                        source,
                    })?)
                }
                other => return Err(status_or_unexpected("limits", "", &other)),
            };
        }
        Ok(client)
    }

    /// `result` of a step of the handshake, a failure made an [`SftpError`]: text where
    /// the server's VERSION should be is [`SftpError::NotSftp`], whichever step saw the
    /// connection fail on it (the reader may fail it while INIT is still being sent).
    async fn init_result<T>(
        &self,
        result: Result<T, volley_transport_tcp::Error>,
    ) -> Result<T, SftpError> {
        if let Err(e) = &result {
            if let Some(first) = text_before_version(e) {
                return Err(SftpError::NotSftp { first });
            }
        }
        self.connection_result("init", result).await
    }

    /// Sets how long each reply may take before the operation fails.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The extensions the server announced, as name/data pairs.
    pub fn extensions(&self) -> &[(Vec<u8>, Vec<u8>)] {
        &self.extensions
    }

    /// Whether the server announced extension `name`.
    pub fn has_extension(&self, name: &[u8]) -> bool {
        self.extensions.iter().any(|(n, _)| n == name)
    }

    /// The server's `limits@openssh.com` answer, if it gave one.
    pub fn limits(&self) -> Option<Limits> {
        self.limits
    }

    /// The underlying connection (for its statistics).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Ends the session: closes the stream and, for a spawned server, waits for it to exit
    /// (an exit status other than 0 is an error). For ssh, whose status at the end tells
    /// only how the server closed the channel (`rclone serve sftp` closes it without
    /// one, and ssh then exits 255), the status is not looked at, as OpenSSH's `sftp`
    /// does not look at it: every request had its answer by then.
    pub async fn shutdown(self) -> Result<(), SftpError> {
        self.conn.close();
        if let Some(mut child) = self.child.lock().await.take() {
            let status = tokio::time::timeout(self.timeout, child.wait())
                .await
                .map_err(|_| SftpError::Io {
                    what: "waiting for the server to exit".into(),
                    source: io::ErrorKind::TimedOut.into(),
                })?
                .map_err(|source| SftpError::Io {
                    what: "waiting for the server to exit".into(),
                    source,
                })?;
            if !status.success() && !self.child_is_ssh {
                return Err(SftpError::ServerExited {
                    op: "shutdown",
                    status,
                });
            }
        }
        Ok(())
    }

    /// Sends a request on `pipeline`, its bulk part (WRITE's data) as `payload`.
    pub(crate) async fn send(
        &self,
        pipeline: &mut Pipeline,
        request: &Request<'_>,
        payload: Bytes,
        op: &'static str,
    ) -> Result<u32, SftpError> {
        // The connection writes the frame header; only the body's head is encoded here,
        // on the stack unless it is long (a path of a kilobyte or more).
        let mut stack = [0u8; HEAD_ON_STACK];
        let mut heap = Vec::new();
        let buf = head_buffer(&mut stack, &mut heap, request.body_head_len());
        let n = request
            .emit_body_head(buf)
            .map_err(|source| SftpError::Wire { op, source })?;
        let sent = pipeline
            .send(request.packet_type().0, &buf[..n], payload)
            .await;
        self.connection_result(op, sent).await
    }

    /// Queues a WRITE whose data is `region` of a local file, which the connection's
    /// writer sends as the region asks: by the kernel, or read in just before it goes.
    pub(crate) async fn send_write_from_file(
        &self,
        pipeline: &mut Pipeline,
        handle: &[u8],
        region: FileRegion,
    ) -> Result<u32, SftpError> {
        let op = "write";
        let head = WriteHead {
            id: 0,
            handle,
            offset: region.offset(),
            len: region.len(),
        };
        let mut stack = [0u8; HEAD_ON_STACK];
        let mut heap = Vec::new();
        let buf = head_buffer(&mut stack, &mut heap, head.body_len());
        let n = head
            .emit_body(buf)
            .map_err(|source| SftpError::Wire { op, source })?;
        let sent = pipeline
            .send_file(PacketType::WRITE.0, &buf[..n], region)
            .await;
        self.connection_result(op, sent).await
    }

    /// The next reply on `pipeline`, for `op` on `path`; one that does not come within
    /// the session's timeout is [`SftpError::TimedOut`], naming both.
    pub(crate) async fn recv(
        &self,
        pipeline: &mut Pipeline,
        op: &'static str,
        path: &str,
    ) -> Result<Frame, SftpError> {
        match pipeline.recv_timeout(self.timeout).await {
            Err(volley_transport_tcp::Error::Timeout { .. }) => Err(SftpError::TimedOut {
                op,
                path: path.to_owned(),
                after: self.timeout,
            }),
            reply => self.connection_result(op, reply).await,
        }
    }

    /// `result` with a connection failure made an [`SftpError`].
    async fn connection_result<T>(
        &self,
        op: &'static str,
        result: Result<T, volley_transport_tcp::Error>,
    ) -> Result<T, SftpError> {
        match result {
            Ok(value) => Ok(value),
            Err(source) => Err(self.connection_error(op, source).await),
        }
    }

    /// A connection failure under `op`. If the stream ended and the server is this
    /// client's child, says how it exited, waiting up to a second for it to be reaped
    /// (its end of the stream closes just before it is).
    async fn connection_error(
        &self,
        op: &'static str,
        source: volley_transport_tcp::Error,
    ) -> SftpError {
        use volley_transport_tcp::Error;
        let ended = match &source {
            Error::Closed => true,
            Error::Io { kind, .. } => matches!(
                kind,
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ),
            _ => false,
        };
        if ended {
            if let Some(child) = self.child.lock().await.as_mut() {
                if let Ok(Ok(status)) = tokio::time::timeout(EXIT_GRACE, child.wait()).await {
                    return SftpError::ServerExited { op, status };
                }
            }
        }
        SftpError::Connection { op, source }
    }

    async fn round_trip(
        &self,
        request: &Request<'_>,
        op: &'static str,
        path: &str,
    ) -> Result<Frame, SftpError> {
        let sent = self.send_alone(request, op, path).await?;
        self.reply_to(sent).await
    }

    /// Sends `request` on a pipeline of its own, its reply read later by
    /// [`Self::reply_to`]: requests sent after it go out behind it without waiting.
    pub(crate) async fn send_alone(
        &self,
        request: &Request<'_>,
        op: &'static str,
        path: &str,
    ) -> Result<Sent, SftpError> {
        let mut pipeline = self.conn.pipeline();
        self.send(&mut pipeline, request, Bytes::new(), op).await?;
        Ok(Sent {
            pipeline,
            op,
            path: path.to_owned(),
        })
    }

    /// The reply to a request [`Self::send_alone`] sent.
    pub(crate) async fn reply_to(&self, mut sent: Sent) -> Result<Frame, SftpError> {
        self.recv(&mut sent.pipeline, sent.op, &sent.path).await
    }

    /// The answer to a request `sent` that is answered by a status alone.
    pub(crate) async fn status_of(&self, sent: Sent) -> Result<(), SftpError> {
        let (op, path) = (sent.op, sent.path.clone());
        let reply = self.reply_to(sent).await?;
        expect_ok(&reply, op, &path)
    }

    async fn status_reply(
        &self,
        request: &Request<'_>,
        op: &'static str,
        path: &[u8],
    ) -> Result<(), SftpError> {
        let sent = self.send_alone(request, op, &printable_bytes(path)).await?;
        self.status_of(sent).await
    }

    async fn handle_reply(
        &self,
        request: &Request<'_>,
        op: &'static str,
        path: &[u8],
    ) -> Result<Handle, SftpError> {
        let reply = self.round_trip(request, op, &printable_bytes(path)).await?;
        match parse(&reply, op)? {
            Response::Handle { handle, .. } => Ok(Handle(reply.body.slice_ref(handle))),
            other => Err(status_or_unexpected(op, &printable_bytes(path), &other)),
        }
    }

    async fn attrs_reply(
        &self,
        request: &Request<'_>,
        op: &'static str,
        path: &[u8],
    ) -> Result<FileAttrs, SftpError> {
        let reply = self.round_trip(request, op, &printable_bytes(path)).await?;
        match parse(&reply, op)? {
            Response::Attrs { attrs, .. } => Ok(FileAttrs::from_wire(&attrs)),
            other => Err(status_or_unexpected(op, &printable_bytes(path), &other)),
        }
    }

    async fn single_name(
        &self,
        request: &Request<'_>,
        op: &'static str,
        path: &[u8],
    ) -> Result<Vec<u8>, SftpError> {
        let reply = self.round_trip(request, op, &printable_bytes(path)).await?;
        match parse(&reply, op)? {
            Response::Name { names, .. } => {
                names
                    .iter()
                    .next()
                    .map(|e| e.filename.to_vec())
                    .ok_or(SftpError::Unexpected {
                        op,
                        found: PacketType::NAME,
                    })
            }
            other => Err(status_or_unexpected(op, &printable_bytes(path), &other)),
        }
    }
}

/// Request heads up to this long are encoded on the stack.
const HEAD_ON_STACK: usize = 1024;

/// `len` bytes to encode a head into: the stack's if it fits, else `heap`, grown to it.
fn head_buffer<'a>(stack: &'a mut [u8], heap: &'a mut Vec<u8>, len: usize) -> &'a mut [u8] {
    if len <= stack.len() {
        &mut stack[..len]
    } else {
        heap.resize(len, 0);
        heap
    }
}

/// The first four bytes of the stream, when the frame they announce was refused as too
/// long and they read as text: something (a shell's startup file, a login banner) wrote
/// to the stream before the server.
fn text_before_version(e: &volley_transport_tcp::Error) -> Option<String> {
    use volley_proto::wire::Error as Wire;
    let volley_transport_tcp::Error::Protocol(Wire::TooLarge { len, .. }) = e else {
        return None;
    };
    let field = u32::try_from(len.checked_sub(4)?).ok()?.to_be_bytes();
    let text = field
        .iter()
        .all(|b| b.is_ascii_graphic() || b" \t\r\n".contains(b));
    text.then(|| field.escape_ascii().to_string())
}

fn config() -> Config {
    Config {
        // Never more is sent: each READ and WRITE is held to the server's stated limits.
        max_frame_len: MAX_PACKET,
        ..Config::default()
    }
}

pub(crate) fn parse<'a>(reply: &'a Frame, op: &'static str) -> Result<Response<'a>, SftpError> {
    Response::parse(frame::Frame {
        ty: reply.ty,
        id: reply.id,
        body: &reply.body,
    })
    .map_err(|source| SftpError::Wire { op, source })
}

fn unexpected(op: &'static str, response: &Response<'_>) -> SftpError {
    SftpError::Unexpected {
        op,
        found: response.packet_type(),
    }
}

/// The error a non-OK STATUS (or any unexpected reply) stands for.
pub(crate) fn status_or_unexpected(
    op: &'static str,
    path: &str,
    response: &Response<'_>,
) -> SftpError {
    match *response {
        Response::Status { code, message, .. } => SftpError::Status {
            op,
            path: path.to_owned(),
            code,
            message: String::from_utf8_lossy(message).into_owned(),
        },
        _ => unexpected(op, response),
    }
}

pub(crate) fn expect_ok(reply: &Frame, op: &'static str, path: &str) -> Result<(), SftpError> {
    match parse(reply, op)? {
        Response::Status {
            code: StatusCode::OK,
            ..
        } => Ok(()),
        other => Err(status_or_unexpected(op, path, &other)),
    }
}

/// DATA as a slice of the reply buffer, `None` for EOF.
pub(crate) fn data_or_eof(
    reply: &Frame,
    op: &'static str,
    path: &str,
) -> Result<Option<Bytes>, SftpError> {
    match parse(reply, op)? {
        Response::Data { data, .. } => Ok(Some(reply.body.slice_ref(data))),
        Response::Status {
            code: StatusCode::EOF,
            ..
        } => Ok(None),
        other => Err(status_or_unexpected(op, path, &other)),
    }
}
