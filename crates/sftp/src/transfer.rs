//! Whole-file transfers with many requests in flight, on one session or, a file cut
//! into ranges, on several ([`Sessions`](crate::Sessions)).

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use volley_proto::wire::sftp::{FSYNC_EXTENSION, OpenFlags};

use crate::FileAttrs;
use crate::client::{SftpClient, SftpError};
use crate::landing::{Found, LocalPart, PutTarget};
use crate::preserve::PERMISSION_BITS;
use crate::span::{Ranges, ReadSpan, Source, WriteSpan};

/// Asks transfers to stop, as OpenSSH's `sftp` stops on Ctrl-C: no new READ or WRITE
/// goes out, those already out are answered, and the transfer ends with
/// [`SftpError::Stopped`] (inside [`SftpError::Kept`] when bytes were kept), its part
/// cut or recorded to hold exactly what arrived, for a resume. Clones stop together; a
/// tree starts no new file or listing.
#[derive(Clone, Debug, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    /// A handle not yet stopped.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks every transfer holding a clone to stop.
    pub fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

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
    /// [`MAX_CHUNK`](crate::MAX_CHUNK) ([`SftpClient::read_len`] and
    /// [`SftpClient::write_len`] say what a session uses).
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

    fn report(&self, done: u64, total: Option<u64>) {
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

/// Chunk size when the server states no limits (the draft's minimum packet is 32 KiB).
const FALLBACK_CHUNK: usize = 32 * 1024;

/// Room left for a READ's or WRITE's head within the server's stated packet length.
const PACKET_HEAD_ROOM: u64 = 1024;

/// How a put opens a file it writes from the start.
const FRESH: OpenFlags = OpenFlags(OpenFlags::WRITE.0 | OpenFlags::CREAT.0 | OpenFlags::TRUNC.0);

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
            max_depth: crate::MAX_DEPTH,
            max_entries: crate::MAX_ENTRIES,
            stop: Stop::new(),
            progress: None,
        }
    }
}

impl SftpClient {
    /// The bytes each READ asks for: `wanted`, else the server's limit; never more than
    /// the server takes (its `max-read-length`, and its `max-packet-length` less room for
    /// the head), nor [`MAX_CHUNK`](crate::MAX_CHUNK), nor 32 KiB from a server that
    /// states no limits.
    pub fn read_len(&self, wanted: Option<usize>) -> usize {
        self.chunk(wanted, self.limits().map(|l| l.max_read_len))
    }

    /// The bytes each WRITE carries, as [`read_len`](Self::read_len) with the server's
    /// `max-write-length`.
    pub fn write_len(&self, wanted: Option<usize>) -> usize {
        self.chunk(wanted, self.limits().map(|l| l.max_write_len))
    }

    fn chunk(&self, wanted: Option<usize>, stated: Option<u64>) -> usize {
        let server = match self.limits() {
            None => FALLBACK_CHUNK as u64,
            Some(limits) => {
                // 0 states no limit. A packet limit leaves room for the head, as
                // OpenSSH's client leaves it.
                let packet = Some(limits.max_packet_len)
                    .filter(|&p| p > 0)
                    .map(|p| p.saturating_sub(PACKET_HEAD_ROOM));
                [stated.filter(|&s| s > 0), packet]
                    .into_iter()
                    .flatten()
                    .fold(crate::MAX_CHUNK as u64, u64::min)
            }
        };
        let server = usize::try_from(server.max(1)).unwrap_or(crate::MAX_CHUNK);
        wanted.unwrap_or(server).clamp(1, server)
    }

    /// Copies the remote file at `remote` to the local file `local`, `opts.requests`
    /// READs in flight; returns the bytes moved (with [`TransferOptions::resume`], only
    /// the missing ones). A short read is re-requested for its tail; the transfer ends at
    /// the first offset the server calls end of file.
    ///
    /// The copy goes into `local` + [`PART_SUFFIX`](crate::PART_SUFFIX), renamed into
    /// place only once complete, so a failure leaves an existing `local` untouched. If
    /// bytes arrived before the failure (or before the future was dropped), the part
    /// keeps those that arrived without a gap, and the error is [`SftpError::Kept`];
    /// otherwise nothing is left behind. A `local` that is a symbolic link is followed;
    /// a device (`/dev/null`) is written in place; a directory or a FIFO is refused.
    pub async fn get(
        &self,
        remote: impl AsRef<[u8]>,
        local: impl AsRef<Path>,
        opts: &TransferOptions,
    ) -> Result<u64, SftpError> {
        let me = core::slice::from_ref(self);
        get_on(me, remote.as_ref(), local.as_ref(), opts, None).await
    }

    /// Copies the local file `local` to `remote`, `opts.requests` WRITEs in flight;
    /// returns the bytes moved (with [`TransferOptions::resume`], only the missing ones).
    /// The copy is written as `remote` + [`PART_SUFFIX`](crate::PART_SUFFIX) and renamed
    /// over `remote` once complete (see the crate's landing rules); a put that fails
    /// after bytes were acknowledged keeps them in the part ([`SftpError::Kept`]). Each
    /// WRITE's data is a region of the file that the connection's writer reads in
    /// itself, a piece at a time as the socket takes it, or, with
    /// [`TransferOptions::send_from_file`], that the kernel sends from the page cache.
    /// The file's size is taken at the start; a file that shrinks during the transfer
    /// fails it, and the connection with it (the WRITE's length is already on the wire
    /// when its data turns out missing).
    ///
    /// A source whose size is not known up front (a pipe, a FIFO, a device, or a
    /// `/proc` file that stats as empty) is read to its end instead, one chunk per WRITE,
    /// with at most `opts.requests` chunks in memory. A directory is refused.
    ///
    /// A resume whose first WRITE is refused (by a server that can write a file only
    /// from its start, as rclone's without its write cache) sends the whole file again.
    pub async fn put(
        &self,
        local: impl AsRef<Path>,
        remote: impl AsRef<[u8]>,
        opts: &TransferOptions,
    ) -> Result<u64, SftpError> {
        put_on(
            core::slice::from_ref(self),
            local.as_ref(),
            remote.as_ref(),
            opts,
        )
        .await
    }
}

/// [`SftpClient::get`] over `clients` (at least one), each reading a range of the file
/// when it is large enough. `listed`: the file's attributes as a listing gave them (a
/// tree's), which spare the FSTAT when they hold a size.
pub(crate) async fn get_on(
    clients: &[SftpClient],
    remote: &[u8],
    local: &Path,
    opts: &TransferOptions,
    listed: Option<FileAttrs>,
) -> Result<u64, SftpError> {
    let first = &clients[0];
    let rpath = crate::printable_bytes(remote);
    let handle = first
        .open(remote, OpenFlags::READ, FileAttrs::default())
        .await?;
    let mut target = None;
    let mut stated = FileAttrs::default();
    let result = async {
        stated = match listed.filter(|a| a.size.is_some()) {
            Some(attrs) => attrs,
            None => first.fstat(&handle).await?,
        };
        if stated.is_dir() {
            return Err(SftpError::Local {
                path: rpath.clone(),
                problem: "is a directory (a tree is copied whole with -r)".into(),
            });
        }
        let size = stated.size;
        let mode = crate::preserve::new_local_mode(stated);
        let part = match LocalPart::open(local, opts.resume, opts.inplace, size, mode)? {
            Found::Part(part) => &*target.insert(part),
            Found::Complete => return Ok(None),
        };
        let held = part.held();
        opts.report(held, size);
        let piece = if clients.len() > 1 { PIECE } else { u64::MAX };
        let ranges = Arc::new(match size {
            Some(size) => Ranges::missing(&part.missing(size), piece, size),
            None => Ranges::whole(part.end(), None),
        });
        part.fetching(ranges.clone());
        let ranges = &*ranges;
        let moved = AtomicU64::new(0);
        let (next_piece, end_at) = (AtomicUsize::new(0), AtomicU64::new(part.end()));
        let halted = AtomicBool::new(false);
        // Workers taking the next piece until none is left, so a slow session takes fewer:
        // two a session when there are pieces, so one keeps the session busy while the
        // other waits out the last replies of its piece.
        let lanes = lanes(ranges);
        let workers = (0..clients.len() * lanes).map(|w| (w, &clients[w / lanes]));
        let workers = workers.map(|(w, client)| {
            let (handle, ranges, moved, rpath, next_piece, end_at, halted) = (
                &handle,
                &ranges,
                &moved,
                &rpath,
                &next_piece,
                &end_at,
                &halted,
            );
            async move {
                let mut own = None;
                let result = async {
                    loop {
                        let i = next_piece.fetch_add(1, Ordering::Relaxed);
                        let Some(&(from, to)) = ranges.bounds().get(i) else {
                            return Ok(());
                        };
                        if opts.stop.is_stopped() {
                            return Err(SftpError::Stopped);
                        }
                        if halted.load(Ordering::Relaxed) {
                            return Ok(());
                        }
                        if w > 0 && own.is_none() {
                            let flags = OpenFlags::READ;
                            own = Some(client.open(remote, flags, FileAttrs::default()).await?);
                        }
                        let span = ReadSpan {
                            handle: own.as_ref().unwrap_or(handle),
                            file: &part.file,
                            local,
                            rpath,
                            from,
                            to,
                            stated: size,
                            requests: opts.requests,
                            chunk: client.read_len(opts.chunk) as u64,
                            stop: &opts.stop,
                        };
                        let end = client
                            .read_span(span, |n, gapless| {
                                ranges.mark(i, gapless);
                                let now = moved.fetch_add(n, Ordering::Relaxed) + n;
                                opts.report(held + now, size);
                            })
                            .await?;
                        if to.is_none() {
                            end_at.store(end, Ordering::Relaxed);
                        }
                    }
                }
                .await;
                match own {
                    Some(own) => {
                        let closed = client.close_named(&own, remote).await;
                        result.and(closed)
                    }
                    None => result,
                }
            }
        });
        run_workers(workers, &halted).await?;
        let end = end_at.load(Ordering::Relaxed);
        if let Some(stated) = size.filter(|&s| end < s && !opts.allow_shrink) {
            return Err(SftpError::Shrank {
                path: rpath.clone(),
                stated,
                got: end,
            });
        }
        Ok(Some((moved.load(Ordering::Relaxed), end)))
    }
    .await;
    let closed = first.close_named(&handle, remote).await;
    let result = result.and_then(|moved| closed.map(|()| moved));
    let done = match (result, target) {
        (Ok(None), _) => 0,
        (Ok(Some((done, end))), Some(target)) => {
            if opts.fsync {
                target.file.sync_all().map_err(|source| SftpError::Io {
                    what: format!("cannot flush {} to disk", crate::client::shown_local(local)),
                    source,
                })?;
            }
            target.commit(end)?;
            done
        }
        (Err(e @ SftpError::Shrank { .. }), Some(target)) => {
            target.discard();
            return Err(e);
        }
        (Err(e), Some(target)) => {
            return Err(match target.kept() {
                Some((part, kept)) => SftpError::Kept {
                    part: crate::client::shown_local(part),
                    kept,
                    source: Box::new(e),
                },
                None => e,
            });
        }
        (result, None) => return result.map(|_| 0),
    };
    if opts.preserve {
        crate::preserve::to_local(local, stated)?;
    }
    Ok(done)
}

/// [`SftpClient::put`] over `clients` (at least one), each writing a range of the file
/// when it is a regular file large enough.
pub(crate) async fn put_on(
    clients: &[SftpClient],
    local: &Path,
    remote: &[u8],
    opts: &TransferOptions,
) -> Result<u64, SftpError> {
    let first = &clients[0];
    let rpath = crate::printable_bytes(remote);
    // Off the runtime's thread: opening a FIFO waits for a writer, and the caller must
    // stay free to give up on it (Ctrl-C, a deadline).
    let file = tokio::fs::File::open(local)
        .await
        .map_err(|source| SftpError::Io {
            what: format!("cannot open {}", crate::client::shown_local(local)),
            source,
        })?;
    let file = file.into_std().await;
    let meta = file.metadata().map_err(|source| SftpError::Io {
        what: format!("cannot stat {}", crate::client::shown_local(local)),
        source,
    })?;
    if meta.is_dir() {
        return Err(SftpError::Local {
            path: crate::client::shown_local(local),
            problem: "is a directory".to_owned(),
        });
    }
    // Stat's size is the truth only for a regular file that has one.
    let total = Some(meta.len()).filter(|&n| meta.is_file() && n > 0);
    let sized = meta.is_file().then_some(meta.len());
    // A new copy is created with the source's permission bits, under the server's umask.
    let new_remote = FileAttrs::with_permissions(meta.mode() & PERMISSION_BITS);
    let (written, is_part, start, handle) = if opts.inplace {
        // Into `remote` itself: created if missing, never emptied up front.
        let start = match opts.resume {
            true => first
                .stat(remote)
                .await
                .ok()
                .and_then(|a| a.size)
                .unwrap_or(0),
            false => 0,
        };
        let flags = OpenFlags(OpenFlags::WRITE.0 | OpenFlags::CREAT.0);
        let handle = first.open(remote, flags, new_remote).await?;
        (
            remote.to_vec(),
            false,
            start.min(sized.unwrap_or(u64::MAX)),
            handle,
        )
    } else if opts.resume {
        let (name, part, start) = match crate::landing::put_target(first, remote, sized).await? {
            PutTarget::Complete => return put_done(first, remote, opts, &meta, 0).await,
            PutTarget::Write { name, part, start } => (name, part, start),
        };
        let flags = if start == 0 { FRESH } else { OpenFlags::WRITE };
        let handle = first.open(&name, flags, new_remote).await?;
        (name, part, start, handle)
    } else {
        let (name, part, handle) =
            crate::landing::open_part(first, remote, FRESH, meta.mode() & PERMISSION_BITS).await?;
        (name, part, 0, handle)
    };
    let ranges = match total {
        Some(total) if clients.len() > 1 => Ranges::pieces(start, total, PIECE),
        _ => Ranges::whole(start, total),
    };
    let file = Arc::new(file);
    let fsync = opts.fsync && first.has_extension(FSYNC_EXTENSION);
    // The first handle's CLOSE has gone out with the last WRITE (one piece only, and no
    // fsync to come first).
    let closing = AtomicBool::new(false);
    let close_when_sent =
        (ranges.bounds().len() == 1 && !fsync && !opts.inplace).then_some(&closing);
    // Bytes from the start acknowledged with no gap before them.
    let acked = AtomicU64::new(start);
    let result = async {
        opts.report(start, total);
        let moved = AtomicU64::new(0);
        // Only a sized source is cut into pieces: a stream is the one piece there is.
        let stream = match total {
            Some(_) => None,
            None => Some(Source::Stream(
                tokio::fs::File::from_std(file.try_clone().map_err(|source| SftpError::Io {
                    what: format!("cannot read {}", crate::client::shown_local(local)),
                    source,
                })?),
                false,
            )),
        };
        let stream = std::sync::Mutex::new(stream);
        let next_piece = AtomicUsize::new(0);
        let halted = AtomicBool::new(false);
        // Workers taking the next piece until none is left, as for a get.
        let lanes = lanes(&ranges);
        let workers = (0..clients.len() * lanes).map(|w| (w, &clients[w / lanes]));
        let workers = workers.map(|(w, client)| {
            let (handle, ranges, moved, acked, rpath, written, file, next_piece, stream) = (
                &handle,
                &ranges,
                &moved,
                &acked,
                &rpath,
                &written,
                &file,
                &next_piece,
                &stream,
            );
            let halted = &halted;
            async move {
                let mut own = None;
                let result = async {
                    let mut done = 0;
                    loop {
                        let i = next_piece.fetch_add(1, Ordering::Relaxed);
                        let Some(&(from, to)) = ranges.bounds().get(i) else {
                            return Ok(done);
                        };
                        if opts.stop.is_stopped() {
                            return Err(SftpError::Stopped);
                        }
                        if halted.load(Ordering::Relaxed) {
                            return Ok(done);
                        }
                        if w > 0 && own.is_none() {
                            let flags = OpenFlags::WRITE;
                            own = Some(client.open(written, flags, FileAttrs::default()).await?);
                        }
                        let taken = stream.lock().ok().and_then(|mut s| s.take());
                        let mut source = taken
                            .unwrap_or_else(|| Source::Regions(file.clone(), to.unwrap_or(from)));
                        let span = WriteSpan {
                            handle: own.as_ref().unwrap_or(handle),
                            local,
                            rpath,
                            from,
                            requests: opts.requests,
                            chunk: client.write_len(opts.chunk),
                            send_from_file: opts.send_from_file,
                            stop: &opts.stop,
                            close_when_sent: close_when_sent.filter(|_| w == 0),
                        };
                        done += client
                            .write_span(span, &mut source, |n, gapless| {
                                acked.store(ranges.mark(i, gapless), Ordering::Relaxed);
                                let now = moved.fetch_add(n, Ordering::Relaxed) + n;
                                opts.report(start + now, total);
                            })
                            .await?;
                    }
                }
                .await;
                match own {
                    Some(own) => {
                        let closed = client.close_named(&own, written).await;
                        result.and_then(|done| closed.map(|()| done))
                    }
                    None => result,
                }
            }
        });
        let done: u64 = run_workers(workers, &halted).await?.iter().sum();
        Ok(done)
    };
    let result = result.await;
    let acked = acked.load(Ordering::Relaxed);
    if let (Err(SftpError::Status { .. }), true) = (&result, start > 0 && acked == start) {
        // The first WRITE past the old end was refused: a server that can write a file
        // only from its start (rclone's, without its write cache, which also empties it
        // when opened). Nothing is left to resume from; the whole file goes again.
        if !closing.load(Ordering::Relaxed) {
            let _ = first.close_named(&handle, &written).await;
        }
        let again = TransferOptions {
            resume: false,
            ..opts.clone()
        };
        return Box::pin(put_on(clients, local, remote, &again)).await;
    }
    let result = match result {
        Ok(done) if opts.inplace => {
            // An old file longer than the copy keeps no tail.
            let end = FileAttrs {
                size: Some(start + done),
                ..FileAttrs::default()
            };
            match (first.fsetstat(&handle, end).await, fsync) {
                (Ok(()), true) => first.fsync(&handle).await.map(|()| done),
                (cut, _) => cut.map(|()| done),
            }
        }
        Ok(done) if fsync => first.fsync(&handle).await.map(|()| done),
        Err(e) if (is_part || opts.inplace) && acked > 0 => {
            // Keep what was acknowledged without a gap, cut to that, for a resume (by
            // name: the handle may be closed).
            let cut = FileAttrs {
                size: Some(acked),
                ..FileAttrs::default()
            };
            match first.setstat(&written, cut).await {
                Ok(()) => Err(SftpError::Kept {
                    part: crate::printable_bytes(&written),
                    kept: acked,
                    source: Box::new(e),
                }),
                Err(_) => Err(e),
            }
        }
        other => other,
    };
    let closed = match closing.load(Ordering::Relaxed) {
        // Sent with the last WRITE, and its answer checked.
        true => Ok(()),
        false => first.close_named(&handle, &written).await,
    };
    let done = match result.and_then(|done| closed.map(|()| done)) {
        Ok(done) => done,
        Err(e) => {
            if is_part && acked == 0 {
                // Nothing worth keeping: no half-written file under either name.
                let _ = first.remove(&written).await;
            }
            return Err(e);
        }
    };
    if is_part {
        crate::landing::land(first, &written, remote).await?;
    }
    put_done(first, remote, opts, &meta, done).await
}

/// Runs a transfer's workers to the end, each finishing the piece it has, so every
/// request out is answered and what arrived is known (dropping the others at the first
/// failure, as `try_join_all` would, leaves requests out and their bytes unaccounted
/// for). A worker that fails sets `halted`, which the others look at between pieces.
/// The error is the first failure other than a stop, else the stop.
async fn run_workers<T>(
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
fn lanes(ranges: &Ranges) -> usize {
    if ranges.bounds().len() > 1 { 2 } else { 1 }
}

/// What follows a put's last byte: with `opts.preserve`, the source's times and
/// permission bits set on `remote`.
async fn put_done(
    sftp: &SftpClient,
    remote: &[u8],
    opts: &TransferOptions,
    meta: &std::fs::Metadata,
    done: u64,
) -> Result<u64, SftpError> {
    if opts.preserve {
        sftp.setstat(remote, crate::preserve::of_local(meta))
            .await?;
    }
    Ok(done)
}
