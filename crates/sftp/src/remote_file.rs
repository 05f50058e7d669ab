//! [`RemoteFile`]: one open file on the server, owning its handle, with positioned reads
//! and writes and tokio's `AsyncRead`, `AsyncWrite` and `AsyncSeek` on top.

use core::future::Future;
use core::pin::Pin;
use core::task::{Context, Poll, ready};
use std::io::{self, SeekFrom};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

use crate::client::{SftpClient, SftpError};
use crate::{FileAttrs, Handle};

type Step<'a, T> = Pin<Box<dyn Future<Output = Result<T, SftpError>> + Send + 'a>>;

/// A request the stream adapters have in flight.
enum Pending<'a> {
    Idle,
    Read(Step<'a, Option<Bytes>>),
    Write(Step<'a, usize>),
    Seek(Step<'a, u64>),
}

/// An open file on the server. Dropping it queues its CLOSE without waiting;
/// [`RemoteFile::close`] waits for the server's answer.
///
/// The `AsyncRead`, `AsyncWrite` and `AsyncSeek` adapters keep one request in flight at a
/// time, at a position of their own: handy for code written against tokio's traits, but
/// a round trip per chunk. For speed, use [`SftpClient::get`] and [`SftpClient::put`]
/// (many requests in flight) or issue many [`RemoteFile::read_at`] at once.
///
/// ```
/// use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
/// use volley_sftp::{OpenFlags, SftpClient};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut command = tokio::process::Command::new("/usr/lib/openssh/sftp-server");
/// let sftp = SftpClient::spawn(&mut command).await?;
/// let path = std::env::temp_dir().join(format!("volley-remote-file-{}", std::process::id()));
/// let path = path.to_str().ok_or("a UTF-8 temp dir")?;
/// let mut file = sftp.create_file(path).await?;
/// file.write_all(b"hello, remote world").await?;
/// file.seek(std::io::SeekFrom::Start(7)).await?;
/// let mut text = String::new();
/// file.read_to_string(&mut text).await?;
/// assert_eq!(text, "remote world");
/// file.close().await?;
/// # sftp.remove(path.as_bytes()).await?;
/// # Ok(())
/// # }
/// ```
pub struct RemoteFile<'a> {
    sftp: &'a SftpClient,
    /// `None` once closed.
    handle: Option<Handle>,
    path: Vec<u8>,
    pos: u64,
    /// Bytes read ahead of a caller's smaller buffer.
    leftover: Bytes,
    pending: Pending<'a>,
}

impl<'a> RemoteFile<'a> {
    /// The file open under `handle` on `sftp`, at offset 0.
    pub(crate) fn new(sftp: &'a SftpClient, handle: Handle, path: Vec<u8>) -> Self {
        Self {
            sftp,
            handle: Some(handle),
            path,
            pos: 0,
            leftover: Bytes::new(),
            pending: Pending::Idle,
        }
    }
}

impl core::fmt::Debug for RemoteFile<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RemoteFile")
            .field("path", &String::from_utf8_lossy(&self.path))
            .field("pos", &self.pos)
            .finish_non_exhaustive()
    }
}

impl<'a> RemoteFile<'a> {
    fn handle(&self) -> Result<&Handle, SftpError> {
        self.handle.as_ref().ok_or_else(|| SftpError::Local {
            path: crate::printable_bytes(&self.path),
            problem: "is closed".into(),
        })
    }

    /// The largest READ the server takes (32 KiB when it states no limits).
    fn read_chunk(&self) -> u32 {
        u32::try_from(self.sftp.read_len(None)).unwrap_or(u32::MAX)
    }

    /// Up to `len` bytes at `offset` (fewer is not end of file); `None` at end of file.
    pub async fn read_at(&self, offset: u64, len: u32) -> Result<Option<Bytes>, SftpError> {
        self.sftp.read(self.handle()?, offset, len).await
    }

    /// Writes `data` at `offset` (sent uncopied).
    pub async fn write_at(&self, offset: u64, data: Bytes) -> Result<(), SftpError> {
        self.sftp.write(self.handle()?, offset, data).await
    }

    /// The file's attributes (FSTAT).
    pub async fn stat(&self) -> Result<FileAttrs, SftpError> {
        self.sftp.fstat(self.handle()?).await
    }

    /// Closes the file and returns the server's answer.
    pub async fn close(mut self) -> Result<(), SftpError> {
        match self.handle.take() {
            Some(handle) => self.sftp.close_named(&handle, &self.path).await,
            None => Ok(()),
        }
    }

    fn start(
        &mut self,
        make: impl FnOnce(&'a SftpClient, Handle, u64) -> Pending<'a>,
    ) -> io::Result<()> {
        let handle = self.handle().map_err(io::Error::other)?.clone();
        self.pending = make(self.sftp, handle, self.pos);
        Ok(())
    }
}

impl Drop for RemoteFile<'_> {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            self.sftp.close_in_background(handle);
        }
    }
}

impl AsyncRead for RemoteFile<'_> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.leftover.is_empty() {
                let n = this.leftover.len().min(buf.remaining());
                buf.put_slice(&this.leftover.split_to(n));
                return Poll::Ready(Ok(()));
            }
            match &mut this.pending {
                Pending::Read(step) => {
                    let got = ready!(step.as_mut().poll(cx));
                    this.pending = Pending::Idle;
                    match got.map_err(io::Error::other)? {
                        Some(data) => {
                            this.pos += data.len() as u64;
                            this.leftover = data;
                        }
                        None => return Poll::Ready(Ok(())),
                    }
                }
                Pending::Idle => {
                    let len = this.read_chunk();
                    this.start(|sftp, handle, pos| {
                        Pending::Read(Box::pin(async move { sftp.read(&handle, pos, len).await }))
                    })?;
                }
                Pending::Write(_) | Pending::Seek(_) => {
                    return Poll::Ready(Err(io::Error::other(
                        "a write or seek is still in flight on this file",
                    )));
                }
            }
        }
    }
}

impl AsyncWrite for RemoteFile<'_> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            match &mut this.pending {
                Pending::Write(step) => {
                    let wrote = ready!(step.as_mut().poll(cx));
                    this.pending = Pending::Idle;
                    let n = wrote.map_err(io::Error::other)?;
                    this.pos += n as u64;
                    return Poll::Ready(Ok(n));
                }
                Pending::Idle => {
                    // Write where the caller is, not past what was read ahead.
                    this.pos -= this.leftover.len() as u64;
                    this.leftover = Bytes::new();
                    let n = buf.len().min(this.sftp.write_len(None));
                    let data = Bytes::copy_from_slice(&buf[..n]);
                    this.start(|sftp, handle, pos| {
                        Pending::Write(Box::pin(async move {
                            sftp.write(&handle, pos, data).await.map(|()| n)
                        }))
                    })?;
                }
                Pending::Read(_) | Pending::Seek(_) => {
                    return Poll::Ready(Err(io::Error::other(
                        "a read or seek is still in flight on this file",
                    )));
                }
            }
        }
    }

    /// Every write is acknowledged before `poll_write` returns, so there is nothing to
    /// flush.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Nothing to do: [`RemoteFile::close`] (or dropping the file) closes it.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncSeek for RemoteFile<'_> {
    fn start_seek(self: Pin<&mut Self>, to: SeekFrom) -> io::Result<()> {
        let this = self.get_mut();
        if !matches!(this.pending, Pending::Idle) {
            return Err(io::Error::other(
                "a request is still in flight on this file",
            ));
        }
        // The position counts what the caller has taken, not what was read ahead.
        let at = this.pos - this.leftover.len() as u64;
        this.leftover = Bytes::new();
        let past = |base: u64, by: i64| {
            base.checked_add_signed(by).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "seek before the start of the file",
                )
            })
        };
        match to {
            SeekFrom::Start(n) => this.pos = n,
            SeekFrom::Current(by) => this.pos = past(at, by)?,
            SeekFrom::End(by) => this.start(|sftp, handle, _| {
                Pending::Seek(Box::pin(async move {
                    let size = sftp.fstat(&handle).await?.size.unwrap_or(0);
                    size.checked_add_signed(by).ok_or_else(|| SftpError::Local {
                        path: handle.to_string(),
                        problem: "cannot seek before the start of the file".into(),
                    })
                }))
            })?,
        }
        Ok(())
    }

    fn poll_complete(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        let this = self.get_mut();
        if let Pending::Seek(step) = &mut this.pending {
            let to = ready!(step.as_mut().poll(cx));
            this.pending = Pending::Idle;
            this.pos = to.map_err(io::Error::other)?;
        }
        Poll::Ready(Ok(this.pos - this.leftover.len() as u64))
    }
}
