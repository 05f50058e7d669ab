//! Whole-file transfers with many requests in flight, on one session or, a file cut
//! into ranges, on several ([`Sessions`](crate::Sessions)).

use core::fmt;
use core::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use volley_proto::sftp::OpenFlags;

use crate::client::SftpError;
use crate::span::{Ranges, Stop};

/// How deep a tree's directories may nest below its root by default, as OpenSSH's
/// `sftp -r` allows ([`TransferOptions::max_depth`]).
pub const MAX_DEPTH: usize = 64;
/// How many entries one directory may list by default
/// ([`TransferOptions::max_entries`]): at about 100 bytes an entry, a listing holds at
/// most some 100 MB.
pub const MAX_ENTRIES: usize = 1_000_000;

/// Told where a transfer is, from whichever task moved the bytes.
pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// How a transfer runs.
#[derive(Clone)]
pub struct TransferOptions {
    /// Requests in flight at once.
    pub requests: usize,
    /// Bytes per READ or WRITE. `None`: the server's limits (OpenSSH: 255 KiB each;
    /// fewer, larger WRITEs cost OpenSSH's sftp-server less CPU per byte), or 32 KiB if
    /// the server states no limits. Always capped at the server's limit and at
    /// [`MAX_CHUNK`](crate::MAX_CHUNK) ([`SftpClient::read_len`](crate::SftpClient::read_len) and
    /// [`SftpClient::write_len`](crate::SftpClient::write_len) say what a session uses).
    pub chunk: Option<usize>,
    /// `put` only: have the kernel send each WRITE's data from the local file
    /// (`sendfile(2)`) instead of the connection's writer reading it in and writing it
    /// out. Less CPU (client and server together), but no faster against a local
    /// sftp-server, which then reads the data cold from the page cache rather than from
    /// a socket buffer the client just wrote: `cargo xtask bench --suite sftp` shows
    /// both. Off by default.
    pub send_from_file: bool,
    /// `get` only: keep a copy that came out shorter than the size the server stated
    /// at the start (a file that shrank while it was read). Off by default: such a copy
    /// fails with [`SftpError::Shrank`] and the destination is left as it was.
    pub allow_shrink: bool,
    /// Give the copy the source's modification and access times and permission bits
    /// (`get`: from the server's attributes; `put`: set with SETSTAT once written), as
    /// `sftp -p` does. Off by default.
    pub preserve: bool,
    /// Flush each copy to disk before it is put in place: `get` with `fsync(2)` on the
    /// local file, `put` with `fsync@openssh.com` where the server offers it (where it
    /// does not, the put goes on without, as OpenSSH's `sftp -f` does). Off by default.
    pub fsync: bool,
    /// Continue an earlier copy instead of starting over, as `sftp -a` does: `get` from
    /// `LOCAL.volley-part` (left by a get that failed or was interrupted), or, when there
    /// is none and `LOCAL` already has the source's size, not at all; `put` from
    /// `REMOTE.volley-part`, else from the end of `REMOTE` itself (as OpenSSH's `reput`).
    /// Only the missing bytes travel; a part longer than the source is refused. Off by
    /// default: a copy starts from nothing (an old part is overwritten).
    pub resume: bool,
    /// Write into the destination itself, as OpenSSH's `sftp` does, instead of into a
    /// part file renamed over it: an existing file keeps its inode, owner, mode and hard
    /// links, and is cut to the copy's length at the end. A copy that fails part way
    /// leaves the file holding new bytes up to where they arrived without a gap (cut
    /// there, as `sftp` cuts it, for [`resume`](Self::resume) to go on from) and the old
    /// ones nowhere past it. Off by default: a copy lands whole or not at all.
    pub inplace: bool,
    /// Trees: follow symbolic links (to files and directories) instead of skipping
    /// them, as `cp -L` does; a link back into a directory the walk is inside is
    /// reported as a loop. Off by default.
    pub follow_links: bool,
    /// Trees: how deep directories may nest below the root; a directory deeper is
    /// reported as failed and not entered. [`MAX_DEPTH`](crate::MAX_DEPTH) (64, as
    /// OpenSSH's `sftp -r`) by default.
    pub max_depth: usize,
    /// Trees: how many entries one directory may list; one that lists more is reported
    /// as failed and not copied. [`MAX_ENTRIES`](crate::MAX_ENTRIES) by default.
    pub max_entries: usize,
    /// Stops the transfer gracefully when asked (see [`Stop`]); never by default.
    pub stop: Stop,
    /// Told the position in the file as bytes arrive or are acknowledged (first with
    /// where the transfer starts). `None` by default.
    pub progress: Option<ProgressFn>,
}

impl fmt::Debug for TransferOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransferOptions")
            .field("requests", &self.requests)
            .field("chunk", &self.chunk)
            .field("send_from_file", &self.send_from_file)
            .field("allow_shrink", &self.allow_shrink)
            .field("preserve", &self.preserve)
            .field("fsync", &self.fsync)
            .field("resume", &self.resume)
            .field("inplace", &self.inplace)
            .field("follow_links", &self.follow_links)
            .field("max_depth", &self.max_depth)
            .field("max_entries", &self.max_entries)
            .field("stop", &self.stop.is_stopped())
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl TransferOptions {
    /// These options with `progress` told where the transfer is.
    #[must_use]
    pub fn with_progress(self, progress: impl Fn(Progress) + Send + Sync + 'static) -> Self {
        Self {
            progress: Some(Arc::new(progress)),
            ..self
        }
    }

    /// These options without a progress report (for each file of a tree).
    pub(crate) fn quiet(&self) -> Self {
        Self {
            progress: None,
            ..self.clone()
        }
    }

    pub(crate) fn report(&self, done: u64, total: Option<u64>) {
        if let Some(progress) = &self.progress {
            progress(Progress { done, total });
        }
    }
}

/// Where a transfer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Bytes moved so far.
    pub done: u64,
    /// Bytes in all, when known.
    pub total: Option<u64>,
}

/// How a put opens a file it writes from the start.
pub(crate) const FRESH: OpenFlags =
    OpenFlags(OpenFlags::WRITE.0 | OpenFlags::CREAT.0 | OpenFlags::TRUNC.0);

/// With several sessions, a file of at least twice this many bytes is cut into pieces of
/// this size, which the sessions take one at a time until none is left (a smaller file
/// goes on one session).
pub const PIECE: u64 = 8 << 20;

impl Default for TransferOptions {
    /// 64 requests in flight, chunks of the server's maximum size.
    fn default() -> Self {
        Self {
            requests: 64,
            chunk: None,
            send_from_file: false,
            allow_shrink: false,
            preserve: false,
            fsync: false,
            resume: false,
            inplace: false,
            follow_links: false,
            max_depth: MAX_DEPTH,
            max_entries: MAX_ENTRIES,
            stop: Stop::new(),
            progress: None,
        }
    }
}

/// Runs a transfer's workers to the end, each finishing the piece it has, so every
/// request out is answered and what arrived is known (dropping the others at the first
/// failure, as `try_join_all` would, leaves requests out and their bytes unaccounted
/// for). A worker that fails sets `halted`, which the others look at between pieces.
/// The error is the first failure other than a stop, else the stop.
pub(crate) async fn run_workers<T>(
    workers: impl Iterator<Item = impl Future<Output = Result<T, SftpError>>>,
    halted: &AtomicBool,
) -> Result<Vec<T>, SftpError> {
    let workers = workers.map(|worker| async move {
        let result = worker.await;
        if result.is_err() {
            halted.store(true, Ordering::Relaxed);
        }
        result
    });
    let mut done = Vec::new();
    let mut stopped = None;
    for result in futures::future::join_all(workers).await {
        match result {
            Ok(value) => done.push(value),
            Err(SftpError::Stopped) => stopped = Some(SftpError::Stopped),
            Err(e) => return Err(e),
        }
    }
    match stopped {
        Some(stop) => Err(stop),
        None => Ok(done),
    }
}

/// Workers a session: two when the file is cut into pieces, else one.
pub(crate) fn lanes(ranges: &Ranges) -> usize {
    if ranges.bounds().len() > 1 { 2 } else { 1 }
}
