//! [`SftpClient`]: the handshake, and one method per SFTP request.

use core::time::Duration;
use std::io;

use bytes::Bytes;
use tokio::process::{Child, Command};
use tokio::sync::Mutex;
use volley_proto::wire::frame::{Frame, HEADER_LEN};
use volley_proto::wire::sftp::{
    self, Attrs, LIMITS_EXTENSION, Limits, OpenFlags, POSIX_RENAME_EXTENSION, PacketType, Request,
    Response, StatusCode, WriteHead,
};
use volley_transport_tcp::{Config, Connection, FileRegion, Pipeline, Reply};

/// Why an SFTP operation failed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SftpError {
    /// The server answered with a status other than OK. Printed with control characters
    /// escaped (the message is the server's, and may hold anything).
    #[error("{op} {}: {code}: {}", printable(path), printable(message))]
    Status {
        /// The operation.
        op: &'static str,
        /// The path or handle it was about.
        path: String,
        /// The status code.
        code: StatusCode,
        /// The server's message.
        message: String,
    },
    /// The server answered with a message this request does not expect.
    #[error("{op}: unexpected {found} reply")]
    Unexpected {
        /// The operation.
        op: &'static str,
        /// What came back.
        found: PacketType,
    },
    /// The server speaks another protocol version.
    #[error("the server speaks SFTP version {0}, not 3")]
    Version(u32),
    /// The connection failed: the server died, closed the stream, sent garbage, or did
    /// not answer in time.
    #[error("{op}: {source}")]
    Connection {
        /// The operation.
        op: &'static str,
        /// What happened.
        source: volley_transport_tcp::Error,
    },
    /// The server this client spawned exited: the connection closed under `op`, and
    /// the process had ended by then (or within a second).
    #[error("{op}: the server exited ({status})")]
    ServerExited {
        /// The operation.
        op: &'static str,
        /// How it exited.
        status: std::process::ExitStatus,
    },
    /// A reply that is not valid SFTP.
    #[error("{op}: malformed reply: {source}")]
    Wire {
        /// The operation.
        op: &'static str,
        /// What was wrong.
        source: volley_proto::wire::Error,
    },
    /// A local file or process error.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
    /// A local path that cannot take part in the transfer (a directory, a FIFO).
    #[error("{} {problem}", printable(path))]
    Local {
        /// The local path.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A download that ended before the size the server stated at its start (the
    /// remote file shrank, or the server lies); the partial copy was not kept (see
    /// [`TransferOptions::allow_shrink`](crate::TransferOptions::allow_shrink)).
    #[error(
        "{}: the server stated {stated} bytes but the file ended at {got}; the short copy was discarded (allow a shrinking file to keep it)",
        printable(path)
    )]
    Shrank {
        /// The remote path.
        path: String,
        /// The size FSTAT gave at the start.
        stated: u64,
        /// Where end of file came.
        got: u64,
    },
    /// A transfer ended with a different size than the server reported.
    #[error("{path}: transfer ended at {got} bytes, but {expected} were expected")]
    SizeMismatch {
        /// The remote path.
        path: String,
        /// Bytes moved.
        got: u64,
        /// Bytes expected.
        expected: u64,
    },
}

/// An open file or directory on the server.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Handle(pub Bytes);

impl core::fmt::Display for Handle {
    /// `handle 0x...`, the bytes in hex (for errors about a handle with no path).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("handle 0x")?;
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// File attributes, owned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FileAttrs {
    /// Size in bytes.
    pub size: Option<u64>,
    /// Owner and group.
    pub uid_gid: Option<(u32, u32)>,
    /// Mode bits, file type included.
    pub permissions: Option<u32>,
    /// Access and modification times, unix seconds.
    pub atime_mtime: Option<(u32, u32)>,
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The name (bytes: SFTP v3 names need not be UTF-8).
    pub name: Vec<u8>,
    /// The `ls -l` style line.
    pub longname: Vec<u8>,
    /// Attributes.
    pub attrs: FileAttrs,
}

/// An SFTP v3 session.
#[derive(Debug)]
pub struct SftpClient {
    pub(crate) conn: Connection,
    child: Mutex<Option<Child>>,
    extensions: Vec<(Vec<u8>, Vec<u8>)>,
    limits: Option<Limits>,
    pub(crate) timeout: Duration,
}

/// How long a closed connection waits for the spawned server's exit status.
const EXIT_GRACE: Duration = Duration::from_secs(1);

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
        command.kill_on_drop(true);
        let config = Config {
            socket_buffer: bytes,
            ..config()
        };
        let (conn, child) = Connection::spawn(command, config).map_err(|source| SftpError::Io {
            what: format!("cannot start {:?}", command.as_std().get_program()),
            source,
        })?;
        Self::init(conn, Some(child)).await
    }

    /// Initialises a session over an already connected stream.
    pub async fn connect<R, W>(reader: R, writer: W) -> Result<Self, SftpError>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        Self::init(Connection::new(reader, writer, config()), None).await
    }

    async fn init(conn: Connection, child: Option<Child>) -> Result<Self, SftpError> {
        let mut client = Self {
            conn,
            child: Mutex::new(child),
            extensions: Vec::new(),
            limits: None,
            timeout: DEFAULT_TIMEOUT,
        };
        // INIT and VERSION carry the version where other messages carry an id.
        let mut pipeline = client.conn.pipeline();
        let sent = pipeline
            .send_with_id(PacketType::INIT.0, sftp::VERSION, &[], Bytes::new())
            .await;
        client.connection_result("init", sent).await?;
        let reply = client.recv(&mut pipeline, "init").await?;
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

    /// Opens a file.
    pub async fn open(
        &self,
        path: &[u8],
        flags: OpenFlags,
        attrs: FileAttrs,
    ) -> Result<Handle, SftpError> {
        let request = Request::Open {
            id: 0,
            filename: path,
            pflags: flags,
            attrs: attrs.to_wire(),
        };
        self.handle_reply(&request, "open", path).await
    }

    /// Closes a file or directory handle; an error names the handle.
    pub async fn close(&self, handle: &Handle) -> Result<(), SftpError> {
        self.close_named(handle, handle.to_string().as_bytes())
            .await
    }

    /// Closes a handle opened on `path`, naming the path in any error.
    pub(crate) async fn close_named(&self, handle: &Handle, path: &[u8]) -> Result<(), SftpError> {
        self.status_reply(
            &Request::Close {
                id: 0,
                handle: &handle.0,
            },
            "close",
            path,
        )
        .await
    }

    /// Reads up to `len` bytes at `offset`; `None` at end of file. Fewer bytes than asked
    /// for are not end of file.
    pub async fn read(
        &self,
        handle: &Handle,
        offset: u64,
        len: u32,
    ) -> Result<Option<Bytes>, SftpError> {
        let reply = self
            .round_trip(
                &Request::Read {
                    id: 0,
                    handle: &handle.0,
                    offset,
                    len,
                },
                "read",
            )
            .await?;
        data_or_eof(&reply, "read", &handle.to_string())
    }

    /// Writes `data` at `offset`; the payload goes to the socket uncopied.
    pub async fn write(&self, handle: &Handle, offset: u64, data: Bytes) -> Result<(), SftpError> {
        let mut pipeline = self.conn.pipeline();
        self.send(
            &mut pipeline,
            &Request::Write {
                id: 0,
                handle: &handle.0,
                offset,
                data: &data,
            },
            data.clone(),
            "write",
        )
        .await?;
        let reply = self.recv(&mut pipeline, "write").await?;
        expect_ok(&reply, "write", &handle.to_string())
    }

    /// Attributes of `path`, following symlinks.
    pub async fn stat(&self, path: &[u8]) -> Result<FileAttrs, SftpError> {
        self.attrs_reply(&Request::Stat { id: 0, path }, "stat", path)
            .await
    }

    /// Attributes of `path` itself.
    pub async fn lstat(&self, path: &[u8]) -> Result<FileAttrs, SftpError> {
        self.attrs_reply(&Request::Lstat { id: 0, path }, "lstat", path)
            .await
    }

    /// Attributes of an open handle.
    pub async fn fstat(&self, handle: &Handle) -> Result<FileAttrs, SftpError> {
        self.attrs_reply(
            &Request::Fstat {
                id: 0,
                handle: &handle.0,
            },
            "fstat",
            handle.to_string().as_bytes(),
        )
        .await
    }

    /// Sets attributes of `path`.
    pub async fn setstat(&self, path: &[u8], attrs: FileAttrs) -> Result<(), SftpError> {
        self.status_reply(
            &Request::Setstat {
                id: 0,
                path,
                attrs: attrs.to_wire(),
            },
            "setstat",
            path,
        )
        .await
    }

    /// Sets attributes of an open handle.
    pub async fn fsetstat(&self, handle: &Handle, attrs: FileAttrs) -> Result<(), SftpError> {
        self.status_reply(
            &Request::Fsetstat {
                id: 0,
                handle: &handle.0,
                attrs: attrs.to_wire(),
            },
            "fsetstat",
            handle.to_string().as_bytes(),
        )
        .await
    }

    /// Opens a directory.
    pub async fn opendir(&self, path: &[u8]) -> Result<Handle, SftpError> {
        self.handle_reply(&Request::Opendir { id: 0, path }, "opendir", path)
            .await
    }

    /// The next entries of a directory (OpenSSH sends at most 100 a reply); `None` at
    /// the end.
    pub async fn readdir(&self, handle: &Handle) -> Result<Option<Vec<DirEntry>>, SftpError> {
        let reply = self
            .round_trip(
                &Request::Readdir {
                    id: 0,
                    handle: &handle.0,
                },
                "readdir",
            )
            .await?;
        match parse(&reply, "readdir")? {
            Response::Name { names, .. } => Ok(Some(
                names
                    .iter()
                    .map(|e| DirEntry {
                        name: e.filename.to_vec(),
                        longname: e.longname.to_vec(),
                        attrs: FileAttrs::from_wire(&e.attrs),
                    })
                    .collect(),
            )),
            Response::Status {
                code: StatusCode::EOF,
                ..
            } => Ok(None),
            other => Err(status_or_unexpected("readdir", &handle.to_string(), &other)),
        }
    }

    /// Every entry of the directory at `path`.
    pub async fn read_dir(&self, path: &[u8]) -> Result<Vec<DirEntry>, SftpError> {
        let handle = self.opendir(path).await?;
        let mut entries = Vec::new();
        let result = async {
            while let Some(batch) = self.readdir(&handle).await? {
                entries.extend(batch);
            }
            Ok(())
        }
        .await;
        self.close_named(&handle, path).await?;
        result.map(|()| entries)
    }

    /// Removes a file.
    pub async fn remove(&self, path: &[u8]) -> Result<(), SftpError> {
        self.status_reply(
            &Request::Remove {
                id: 0,
                filename: path,
            },
            "remove",
            path,
        )
        .await
    }

    /// Makes a directory.
    pub async fn mkdir(&self, path: &[u8], attrs: FileAttrs) -> Result<(), SftpError> {
        self.status_reply(
            &Request::Mkdir {
                id: 0,
                path,
                attrs: attrs.to_wire(),
            },
            "mkdir",
            path,
        )
        .await
    }

    /// Removes an empty directory.
    pub async fn rmdir(&self, path: &[u8]) -> Result<(), SftpError> {
        self.status_reply(&Request::Rmdir { id: 0, path }, "rmdir", path)
            .await
    }

    /// Renames `from` to `to`; fails if `to` exists (see [`SftpClient::posix_rename`]).
    pub async fn rename(&self, from: &[u8], to: &[u8]) -> Result<(), SftpError> {
        self.status_reply(
            &Request::Rename {
                id: 0,
                oldpath: from,
                newpath: to,
            },
            "rename",
            from,
        )
        .await
    }

    /// Renames `from` to `to`, replacing `to` (`posix-rename@openssh.com`).
    pub async fn posix_rename(&self, from: &[u8], to: &[u8]) -> Result<(), SftpError> {
        let mut data = Vec::with_capacity(8 + from.len() + to.len());
        for s in [from, to] {
            data.extend_from_slice(&(s.len() as u32).to_be_bytes());
            data.extend_from_slice(s);
        }
        let request = Request::Extended {
            id: 0,
            request: POSIX_RENAME_EXTENSION,
            data: &data,
        };
        self.status_reply(&request, "posix-rename", from).await
    }

    /// The canonical absolute form of `path`.
    pub async fn realpath(&self, path: &[u8]) -> Result<Vec<u8>, SftpError> {
        self.single_name(&Request::Realpath { id: 0, path }, "realpath", path)
            .await
    }

    /// The target of the symlink at `path`.
    pub async fn readlink(&self, path: &[u8]) -> Result<Vec<u8>, SftpError> {
        self.single_name(&Request::Readlink { id: 0, path }, "readlink", path)
            .await
    }

    /// Makes a symlink at `link` pointing to `target`. OpenSSH reads SYMLINK's two paths
    /// in the opposite order to the draft; this sends them the way OpenSSH reads them.
    pub async fn symlink(&self, target: &[u8], link: &[u8]) -> Result<(), SftpError> {
        let request = Request::Symlink {
            id: 0,
            linkpath: target,
            targetpath: link,
        };
        self.status_reply(&request, "symlink", link).await
    }

    /// Ends the session: closes the stream and, for a spawned server, waits for it to exit.
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
            if !status.success() {
                return Err(SftpError::Io {
                    what: format!("the server exited with {status}"),
                    source: io::Error::other("non-zero exit"),
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
        let mut head = [0u8; 1024];
        let n = request
            .encode_head(&mut head)
            .map_err(|source| SftpError::Wire { op, source })?;
        let sent = pipeline
            .send(request.packet_type().0, &head[HEADER_LEN..n], payload)
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
        let mut buf = [0u8; 1024];
        let n = head
            .encode(&mut buf)
            .map_err(|source| SftpError::Wire { op, source })?;
        let sent = pipeline
            .send_file(PacketType::WRITE.0, &buf[HEADER_LEN..n], region)
            .await;
        self.connection_result(op, sent).await
    }

    pub(crate) async fn recv(
        &self,
        pipeline: &mut Pipeline,
        op: &'static str,
    ) -> Result<Reply, SftpError> {
        let reply = pipeline.recv_timeout(self.timeout).await;
        self.connection_result(op, reply).await
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
    ) -> Result<Reply, SftpError> {
        let mut pipeline = self.conn.pipeline();
        self.send(&mut pipeline, request, Bytes::new(), op).await?;
        self.recv(&mut pipeline, op).await
    }

    async fn status_reply(
        &self,
        request: &Request<'_>,
        op: &'static str,
        path: &[u8],
    ) -> Result<(), SftpError> {
        let reply = self.round_trip(request, op).await?;
        expect_ok(&reply, op, &String::from_utf8_lossy(path))
    }

    async fn handle_reply(
        &self,
        request: &Request<'_>,
        op: &'static str,
        path: &[u8],
    ) -> Result<Handle, SftpError> {
        let reply = self.round_trip(request, op).await?;
        match parse(&reply, op)? {
            Response::Handle { handle, .. } => Ok(Handle(reply.body.slice_ref(handle))),
            other => Err(status_or_unexpected(
                op,
                &String::from_utf8_lossy(path),
                &other,
            )),
        }
    }

    async fn attrs_reply(
        &self,
        request: &Request<'_>,
        op: &'static str,
        path: &[u8],
    ) -> Result<FileAttrs, SftpError> {
        let reply = self.round_trip(request, op).await?;
        match parse(&reply, op)? {
            Response::Attrs { attrs, .. } => Ok(FileAttrs::from_wire(&attrs)),
            other => Err(status_or_unexpected(
                op,
                &String::from_utf8_lossy(path),
                &other,
            )),
        }
    }

    async fn single_name(
        &self,
        request: &Request<'_>,
        op: &'static str,
        path: &[u8],
    ) -> Result<Vec<u8>, SftpError> {
        let reply = self.round_trip(request, op).await?;
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
            other => Err(status_or_unexpected(
                op,
                &String::from_utf8_lossy(path),
                &other,
            )),
        }
    }
}

/// `text` with every control character escaped (`\u{1b}`, `\0`, `\n`), so a string a
/// server sent cannot drive the terminal it is printed on.
pub fn printable(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn config() -> Config {
    Config {
        // OpenSSH's sftp-server exits on a frame over 256 KiB; never send or accept more.
        max_frame_len: volley_proto::wire::frame::DEFAULT_MAX_FRAME_LEN,
        ..Config::default()
    }
}

pub(crate) fn parse<'a>(reply: &'a Reply, op: &'static str) -> Result<Response<'a>, SftpError> {
    Response::parse(Frame {
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

pub(crate) fn expect_ok(reply: &Reply, op: &'static str, path: &str) -> Result<(), SftpError> {
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
    reply: &Reply,
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

impl FileAttrs {
    fn to_wire(self) -> Attrs<'static> {
        Attrs {
            size: self.size,
            uid_gid: self.uid_gid,
            permissions: self.permissions,
            atime_mtime: self.atime_mtime,
            extended: None,
        }
    }

    fn from_wire(attrs: &Attrs<'_>) -> Self {
        Self {
            size: attrs.size,
            uid_gid: attrs.uid_gid,
            permissions: attrs.permissions,
            atime_mtime: attrs.atime_mtime,
        }
    }

    /// Only permissions set (e.g. for a new file or directory).
    pub fn with_permissions(mode: u32) -> Self {
        Self {
            permissions: Some(mode),
            ..Self::default()
        }
    }

    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.permissions.is_some_and(|p| p & 0o170000 == 0o040000)
    }

    /// Whether this is a symlink.
    pub fn is_symlink(&self) -> bool {
        self.permissions.is_some_and(|p| p & 0o170000 == 0o120000)
    }
}
