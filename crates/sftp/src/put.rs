//! A put: a local file copied to the server with many WRITEs in flight, on one session
//! or, cut into ranges, on several.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use volley_proto::sftp::{FSYNC_EXTENSION, OpenFlags};

use crate::FileAttrs;
use crate::client::{Handle, Sent, SftpClient, SftpError, join};
use crate::landing::PutTarget;
use crate::preserve::PERMISSION_BITS;
use crate::span::{Ranges, Source, WriteSpan, write_span};
use crate::transfer::{FRESH, PIECE, TransferOptions, lanes, run_workers};

/// What a put does when its `remote` is an existing directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnDirectory {
    /// Copies into it, under the source's file name (a put the user named).
    PutInside,
    /// Fails (a tree's file, whose name is the tree's).
    Refuse,
}

/// [`SftpClient::put`] over `clients` (at least one), each writing a range of the file
/// when it is a regular file large enough.
pub(crate) async fn put_on(
    clients: &[SftpClient],
    local: &Path,
    remote: &[u8],
    opts: &TransferOptions,
    on_directory: OnDirectory,
) -> Result<u64, SftpError> {
    let first = &clients[0];
    let (file, meta) = open_source(local).await?;
    let mut target = match open_target(clients, local, remote, opts, on_directory, &meta).await? {
        Opened::Target(target) => target,
        Opened::Done(done) => return Ok(done),
    };
    let mode_kept = target.mode_kept.take();
    // Stat's size is the truth only for a regular file that has one.
    let total = Some(meta.len()).filter(|&n| meta.is_file() && n > 0);
    // What the target holds already (a resume's), and from where a source of no known
    // size goes on.
    let held = crate::kept::total(&target.have);
    let start = target.have.last().map_or(0, |&(_, end)| end);
    let ranges = Arc::new(to_send(clients.len(), &target.have, start, total));
    // Several pieces at once leave holes if the put is dropped mid-way: say up front
    // what the part can be trusted to hold, and a resume takes no hole for data. Sent
    // beside the first WRITEs rather than before them (a server takes one session's
    // requests in order, so it lands with them), at no round trip of its own.
    let recorded = target.is_part && ranges.bounds().len() > 1;
    let record_first = async {
        if recorded {
            // Best effort: a failed put records its ranges again at its end.
            let _ = crate::landing::record_remote(first, &target.written, &target.have, true).await;
        }
    };
    let fsync = opts.fsync && first.has_extension(FSYNC_EXTENSION);
    let send = Sending {
        clients,
        local,
        opts,
        target: &target,
        rpath: crate::printable_bytes(remote),
        ranges: &ranges,
        file: Arc::new(file),
        held,
        total,
        moved: AtomicU64::new(0),
        next_piece: AtomicUsize::new(0),
        halted: AtomicBool::new(false),
        // The first handle's CLOSE goes out with the last WRITE (one piece only, and no
        // fsync to come first).
        closing: AtomicBool::new(false),
        close_with_last: ranges.bounds().len() == 1 && !fsync && !opts.inplace,
    };
    let ((), result) = futures::join!(record_first, send.run());
    // An existing target's mode, given to the part before the first WRITE went out.
    let result = match mode_kept {
        Some(sent) => {
            let status = first.status_of(sent).await;
            result.and_then(|done| status.map(|()| done))
        }
        None => result,
    };
    // What the target holds now: what it held and what was acknowledged since.
    let arrived = ranges.arrived();
    let holds = crate::kept::merge([target.have.clone(), arrived.clone()].concat());
    let closing = send.closing.load(Ordering::Relaxed);
    if let (Err(SftpError::Status { .. }), true) = (&result, held > 0 && arrived.is_empty()) {
        // The first WRITE past the old end was refused: a server that can write a file
        // only from its start (rclone's, without its write cache, which also empties it
        // when opened). Nothing is left to resume from; the whole file goes again.
        if !closing {
            let _ = first.close_named(&target.handle, &target.written).await;
        }
        let again = TransferOptions {
            resume: false,
            ..opts.clone()
        };
        return Box::pin(put_on(clients, local, remote, &again, on_directory)).await;
    }
    let result = settle(first, &target, opts, fsync, start, &holds, result).await;
    let closed = match closing {
        // Sent with the last WRITE, and its answer checked.
        true => Ok(()),
        false => first.close_named(&target.handle, &target.written).await,
    };
    let kept = crate::kept::total(&holds);
    let done = result.and_then(|done| closed.map(|()| done));
    let done = land_or_clear(first, &target, remote, recorded, kept, done).await?;
    put_done(first, remote, opts, &meta, done).await
}

/// What is left to send of a source of `total` bytes (unknown: from `start` to its
/// end) when the target holds `have`: cut into pieces when several sessions share it.
fn to_send(sessions: usize, have: &[(u64, u64)], start: u64, total: Option<u64>) -> Ranges {
    match total {
        Some(total) => {
            let piece = if sessions > 1 { PIECE } else { u64::MAX };
            Ranges::cut(&crate::kept::gaps(have, total), piece)
        }
        None => Ranges::whole(start, None),
    }
}

/// Once the data is sent: a part that failed holding nothing worth keeping is removed
/// (no half-written file under either name); one that arrived whole takes the target's
/// name.
async fn land_or_clear(
    first: &SftpClient,
    target: &Target,
    remote: &[u8],
    recorded: bool,
    kept: u64,
    done: Result<u64, SftpError>,
) -> Result<u64, SftpError> {
    let done = match done {
        Ok(done) => done,
        Err(e) => {
            if target.is_part && kept == 0 {
                let _ = first.remove(&target.written).await;
                let _ = crate::landing::record_remote(first, &target.written, &[], false).await;
            }
            return Err(e);
        }
    };
    if target.is_part {
        // The record goes beside the rename, in the same round trip.
        let unrecord = async {
            if recorded || !target.have.is_empty() {
                let _ = crate::landing::record_remote(first, &target.written, &[], false).await;
            }
        };
        let landing = crate::landing::land(first, &target.written, remote);
        let (landed, ()) = futures::join!(landing, unrecord);
        landed?;
    }
    Ok(done)
}

/// Opens `local` (off the runtime's thread: opening a FIFO waits for a writer, and the
/// caller must stay free to give up on it, on Ctrl-C or a deadline) and stats it; a
/// directory is refused.
async fn open_source(local: &Path) -> Result<(std::fs::File, std::fs::Metadata), SftpError> {
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
    Ok((file, meta))
}

/// Where a put writes, once opened.
struct Target {
    /// The name written: the part, or `remote` itself.
    written: Vec<u8>,
    /// Whether `written` is a part renamed over `remote` at the end.
    is_part: bool,
    /// What it holds already (a resume's).
    have: Vec<(u64, u64)>,
    handle: Handle,
    /// The SETSTAT that gave the part an existing target's mode, its answer not yet read.
    mode_kept: Option<Sent>,
}

/// What opening a put's target came to.
enum Opened {
    /// A target to write.
    Target(Target),
    /// No target to write: the put is done (the copy was complete, or it went into a
    /// directory), having moved these bytes.
    Done(u64),
}

/// Opens what a put writes: `remote` itself (`inplace`), the part a resume continues,
/// or a fresh part; a `remote` that is a directory takes the copy inside it (or refuses
/// it, as `on_directory` says).
async fn open_target(
    clients: &[SftpClient],
    local: &Path,
    remote: &[u8],
    opts: &TransferOptions,
    on_directory: OnDirectory,
    meta: &std::fs::Metadata,
) -> Result<Opened, SftpError> {
    let first = &clients[0];
    let sized = meta.is_file().then_some(meta.len());
    // A new copy is created with the source's permission bits, under the server's umask.
    let new_remote = FileAttrs::with_permissions(meta.mode() & PERMISSION_BITS);
    let target = if opts.inplace {
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
        let start = start.min(sized.unwrap_or(u64::MAX));
        let have = if start > 0 {
            vec![(0, start)]
        } else {
            Vec::new()
        };
        Target {
            written: remote.to_vec(),
            is_part: false,
            have,
            handle,
            mode_kept: None,
        }
    } else if opts.resume {
        let (name, part, have) = match crate::landing::put_target(first, remote, sized).await? {
            PutTarget::Complete => {
                return put_done(first, remote, opts, meta, 0)
                    .await
                    .map(Opened::Done);
            }
            PutTarget::Directory => {
                let done = put_inside(clients, local, remote, opts, on_directory).await?;
                return Ok(Opened::Done(done));
            }
            PutTarget::Write { name, part, have } => (name, part, have),
        };
        let flags = if have.is_empty() {
            FRESH
        } else {
            OpenFlags::WRITE
        };
        let handle = first.open(&name, flags, new_remote).await?;
        Target {
            written: name,
            is_part: part,
            have,
            handle,
            mode_kept: None,
        }
    } else {
        let mode = meta.mode() & PERMISSION_BITS;
        let Some(opened) = crate::landing::open_part(first, remote, FRESH, mode).await? else {
            let done = put_inside(clients, local, remote, opts, on_directory).await?;
            return Ok(Opened::Done(done));
        };
        Target {
            written: opened.name,
            is_part: opened.is_part,
            have: Vec::new(),
            handle: opened.handle,
            mode_kept: opened.mode_kept,
        }
    };
    Ok(Opened::Target(target))
}

/// What a put's workers share while they send the file's pieces.
struct Sending<'a> {
    clients: &'a [SftpClient],
    local: &'a Path,
    opts: &'a TransferOptions,
    target: &'a Target,
    /// `remote` as errors show it.
    rpath: String,
    ranges: &'a Ranges,
    file: Arc<std::fs::File>,
    /// Bytes the target held before this put.
    held: u64,
    /// The source's size, if it has one.
    total: Option<u64>,
    /// Bytes acknowledged so far.
    moved: AtomicU64,
    /// The next piece a worker takes.
    next_piece: AtomicUsize,
    /// Set when a worker failed: the others take no new piece.
    halted: AtomicBool,
    /// Set once the first handle's CLOSE went out with the last WRITE.
    closing: AtomicBool,
    /// Whether the first handle is closed with the last WRITE.
    close_with_last: bool,
}

impl Sending<'_> {
    /// Sends every piece, workers taking the next until none is left, as for a get;
    /// returns the bytes acknowledged.
    async fn run(&self) -> Result<u64, SftpError> {
        self.opts.report(self.held, self.total);
        // Only a sized source is cut into pieces: a stream is the one piece there is.
        let stream = match self.total {
            Some(_) => None,
            None => Some(Source::Stream(
                tokio::fs::File::from_std(self.file.try_clone().map_err(|source| {
                    SftpError::Io {
                        what: format!("cannot read {}", crate::client::shown_local(self.local)),
                        source,
                    }
                })?),
                false,
            )),
        };
        let stream = std::sync::Mutex::new(stream);
        let lanes = lanes(self.ranges);
        let workers = (0..self.clients.len() * lanes)
            .map(|w| self.worker(w, &self.clients[w / lanes], &stream));
        Ok(run_workers(workers, &self.halted).await?.iter().sum())
    }

    /// Worker `w` on `client`: takes pieces until none is left, on a handle of its own
    /// (closed at the end) unless it is the first worker.
    async fn worker(
        &self,
        w: usize,
        client: &SftpClient,
        stream: &std::sync::Mutex<Option<Source>>,
    ) -> Result<u64, SftpError> {
        let mut own = None;
        let result = self.take_pieces(w, client, stream, &mut own).await;
        match own {
            Some(own) => {
                let closed = client.close_named(&own, &self.target.written).await;
                result.and_then(|done| closed.map(|()| done))
            }
            None => result,
        }
    }

    async fn take_pieces(
        &self,
        w: usize,
        client: &SftpClient,
        stream: &std::sync::Mutex<Option<Source>>,
        own: &mut Option<Handle>,
    ) -> Result<u64, SftpError> {
        let opts = self.opts;
        let mut done = 0;
        loop {
            let i = self.next_piece.fetch_add(1, Ordering::Relaxed);
            let Some(&(from, to)) = self.ranges.bounds().get(i) else {
                return Ok(done);
            };
            if opts.stop.is_stopped() {
                return Err(SftpError::Stopped);
            }
            if self.halted.load(Ordering::Relaxed) {
                return Ok(done);
            }
            if w > 0 && own.is_none() {
                let flags = OpenFlags::WRITE;
                let written = &self.target.written;
                *own = Some(client.open(written, flags, FileAttrs::default()).await?);
            }
            let taken = stream.lock().ok().and_then(|mut s| s.take());
            let mut source =
                taken.unwrap_or_else(|| Source::Regions(self.file.clone(), to.unwrap_or(from)));
            let span = WriteSpan {
                handle: own.as_ref().unwrap_or(&self.target.handle),
                local: self.local,
                rpath: &self.rpath,
                from,
                requests: opts.requests,
                chunk: client.write_len(opts.chunk),
                send_from_file: opts.send_from_file,
                stop: &opts.stop,
                close_when_sent: Some(&self.closing).filter(|_| w == 0 && self.close_with_last),
            };
            done += write_span(client, span, &mut source, |n, gapless| {
                self.ranges.mark(i, gapless);
                let now = self.moved.fetch_add(n, Ordering::Relaxed) + n;
                opts.report(self.held + now, self.total);
            })
            .await?;
        }
    }
}

/// Finishes the WRITEs' outcome: in place, an old file longer than the copy loses its
/// tail; with `fsync`, the copy is flushed. A failure keeps what was acknowledged
/// (`holds`): cut past its last range, and on a part its ranges recorded when they are
/// not one run from the start; in place only the run from the start can be kept.
async fn settle(
    first: &SftpClient,
    target: &Target,
    opts: &TransferOptions,
    fsync: bool,
    start: u64,
    holds: &[(u64, u64)],
    result: Result<u64, SftpError>,
) -> Result<u64, SftpError> {
    let kept = crate::kept::total(holds);
    match result {
        Ok(done) if opts.inplace => {
            let end = FileAttrs {
                size: Some(start + done),
                ..FileAttrs::default()
            };
            match (first.fsetstat(&target.handle, end).await, fsync) {
                (Ok(()), true) => first.fsync(&target.handle).await.map(|()| done),
                (cut, _) => cut.map(|()| done),
            }
        }
        Ok(done) if fsync => first.fsync(&target.handle).await.map(|()| done),
        Err(e) if (target.is_part || opts.inplace) && kept > 0 => {
            // Cut by name: the handle may be closed.
            let keep = match opts.inplace {
                true => holds.first().filter(|r| r.0 == 0).map_or(0, |r| r.1),
                false => holds.last().map_or(0, |r| r.1),
            };
            let cut = FileAttrs {
                size: Some(keep),
                ..FileAttrs::default()
            };
            let recorded = match target.is_part {
                true => crate::landing::record_remote(first, &target.written, holds, false).await,
                false => Ok(()),
            };
            match (first.setstat(&target.written, cut).await, recorded) {
                (Ok(()), Ok(())) => Err(SftpError::Kept {
                    part: crate::printable_bytes(&target.written),
                    kept: if opts.inplace { keep } else { kept },
                    source: Box::new(e),
                }),
                _ => Err(e),
            }
        }
        other => other,
    }
}

/// A put whose `remote` turned out to be a directory: into it under `local`'s name when
/// `on_directory` says so, else refused.
async fn put_inside(
    clients: &[SftpClient],
    local: &Path,
    remote: &[u8],
    opts: &TransferOptions,
    on_directory: OnDirectory,
) -> Result<u64, SftpError> {
    let name = local.file_name().map(|n| n.as_encoded_bytes());
    match (on_directory, name) {
        (OnDirectory::PutInside, Some(name)) => {
            let inside = join(remote, name);
            Box::pin(put_on(clients, local, &inside, opts, OnDirectory::Refuse)).await
        }
        _ => Err(SftpError::Local {
            path: crate::printable_bytes(remote),
            problem: "is a directory on the server".to_owned(),
        }),
    }
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
