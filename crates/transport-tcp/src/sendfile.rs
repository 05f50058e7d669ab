//! File regions as payloads: on Linux the kernel sends them from the page cache to the
//! socket (`sendfile(2)`), so their bytes never pass through this process; on streams
//! where it cannot, and for regions marked [`FileRegion::read_in`], the writer reads
//! them in itself.

use core::pin::Pin;
use core::task::{Context, Poll};
use std::fs::File;
use std::io::{self, IoSlice};
use std::sync::Arc;

use tokio::io::AsyncWrite;

/// A byte range of a file, sent as a frame's payload by [`Pipeline::send_file`].
///
/// The bytes are read when the writer reaches the frame, not when it is queued; a file
/// that shrinks below the region by then fails the connection (the header already
/// promised the length), with [`Error::Io`] of kind `UnexpectedEof`.
///
/// How the bytes go: by the kernel (`sendfile(2)`) where the stream allows, unless
/// [`read_in`](Self::read_in) asks the writer to read them itself, a piece at a time,
/// just before it writes them.
///
/// [`Pipeline::send_file`]: crate::Pipeline::send_file
/// [`Error::Io`]: crate::Error::Io
#[derive(Clone, Debug)]
pub struct FileRegion {
    pub(crate) file: Arc<File>,
    pub(crate) offset: u64,
    pub(crate) len: usize,
    /// Whether the kernel may send the bytes itself.
    pub(crate) kernel: bool,
}

impl FileRegion {
    /// `len` bytes of `file` from `offset`.
    pub fn new(file: Arc<File>, offset: u64, len: usize) -> Self {
        Self {
            file,
            offset,
            len,
            kernel: true,
        }
    }

    /// Has the writer read the bytes in and write them, even where the kernel could
    /// send them from the page cache. It costs a copy through user space, but the peer
    /// then reads bytes this side has just written, still in the CPU's cache, rather
    /// than cold ones from the page cache: against a local OpenSSH sftp-server, whose
    /// CPU sets the pace, that was the faster way. The writer reads a piece only when it
    /// is about to write it, so, unlike reading the data before queueing it, the read
    /// never holds up a socket that wants refilling.
    #[must_use]
    pub fn read_in(mut self) -> Self {
        self.kernel = false;
        self
    }

    /// Whether the kernel may send the bytes itself (see [`read_in`](Self::read_in)).
    pub fn by_kernel(&self) -> bool {
        self.kernel
    }

    /// Where the region starts in the file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes in the region (still to send, once the writer has started on it).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the region holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Drops the first `n` bytes (sent).
    pub(crate) fn advance(&mut self, n: usize) {
        self.offset += n as u64;
        self.len -= n;
    }
}

/// A stream the writer can ask to send file bytes itself.
pub(crate) trait SendFile {
    /// Sends up to `len` bytes of `file` from `offset`, returning how many went; `None`
    /// (the default) if this stream cannot: the writer then reads the bytes and writes
    /// them.
    fn poll_send_file(
        &mut self,
        _cx: &mut Context<'_>,
        _file: &File,
        _offset: u64,
        _len: usize,
    ) -> Poll<Option<io::Result<usize>>> {
        Poll::Ready(None)
    }
}

/// Any stream, without kernel file sending.
pub(crate) struct Plain<W>(pub(crate) W);

impl<W> SendFile for Plain<W> {}

impl<W: AsyncWrite + Unpin> AsyncWrite for Plain<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// `sendfile(2)` on a tokio socket, waiting for writability as its own writes do.
#[cfg(target_os = "linux")]
macro_rules! kernel_send_file {
    ($half:ty, $stream:ty) => {
        impl SendFile for $half {
            fn poll_send_file(
                &mut self,
                cx: &mut Context<'_>,
                file: &File,
                offset: u64,
                len: usize,
            ) -> Poll<Option<io::Result<usize>>> {
                let stream: &$stream = self.as_ref();
                let Ok(mut off) = i64::try_from(offset) else {
                    return Poll::Ready(Some(Err(io::ErrorKind::InvalidInput.into())));
                };
                loop {
                    if let Err(e) = core::task::ready!(stream.poll_write_ready(cx)) {
                        return Poll::Ready(Some(Err(e)));
                    }
                    let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
                        nix::sys::sendfile::sendfile(stream, file, Some(&mut off), len)
                            .map_err(io::Error::from)
                    });
                    match sent {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        other => return Poll::Ready(Some(other)),
                    }
                }
            }
        }
    };
}

#[cfg(target_os = "linux")]
kernel_send_file!(tokio::net::unix::OwnedWriteHalf, tokio::net::UnixStream);
#[cfg(target_os = "linux")]
kernel_send_file!(tokio::net::tcp::OwnedWriteHalf, tokio::net::TcpStream);

/// Elsewhere the writer reads file regions in itself.
#[cfg(not(target_os = "linux"))]
impl SendFile for tokio::net::unix::OwnedWriteHalf {}
#[cfg(not(target_os = "linux"))]
impl SendFile for tokio::net::tcp::OwnedWriteHalf {}
