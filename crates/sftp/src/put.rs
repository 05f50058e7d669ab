//! A put: a local file copied to the server with many WRITEs in flight, on one session
//! or, cut into ranges, on several.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use volley_proto::sftp::{FSYNC_EXTENSION, OpenFlags};

use crate::FileAttrs;
use crate::client::{SftpClient, SftpError, join};
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
    let mut mode_kept = None;
    let (written, is_part, have, handle) = if opts.inplace {
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
        (remote.to_vec(), false, have, handle)
    } else if opts.resume {
        let (name, part, have) = match crate::landing::put_target(first, remote, sized).await? {
            PutTarget::Complete => return put_done(first, remote, opts, &meta, 0).await,
            PutTarget::Directory => {
                return put_inside(clients, local, remote, opts, on_directory).await;
            }
            PutTarget::Write { name, part, have } => (name, part, have),
        };
        let flags = if have.is_empty() {
            FRESH
        } else {
            OpenFlags::WRITE
        };
        let handle = first.open(&name, flags, new_remote).await?;
        (name, part, have, handle)
    } else {
        let mode = meta.mode() & PERMISSION_BITS;
        let Some(opened) = crate::landing::open_part(first, remote, FRESH, mode).await? else {
            return put_inside(clients, local, remote, opts, on_directory).await;
        };
        mode_kept = opened.mode_kept;
        (opened.name, opened.is_part, Vec::new(), opened.handle)
    };
    // What the target holds already (a resume's), and from where a source of no known
    // size goes on.
    let held = crate::kept::total(&have);
    let start = have.last().map_or(0, |&(_, end)| end);
    let ranges = Arc::new(match total {
        Some(total) => {
            let piece = if clients.len() > 1 { PIECE } else { u64::MAX };
            Ranges::cut(&crate::kept::gaps(&have, total), piece)
        }
        None => Ranges::whole(start, None),
    });
    let ranges = &*ranges;
    // Several pieces at once leave holes if the put is dropped mid-way: say up front
    // what the part can be trusted to hold, and a resume takes no hole for data. Sent
    // beside the first WRITEs rather than before them (a server takes one session's
    // requests in order, so it lands with them), at no round trip of its own.
    let recorded = is_part && ranges.bounds().len() > 1;
    let record_first = async {
        if recorded {
            // Best effort: a failed put records its ranges again at its end.
            let _ = crate::landing::record_remote(first, &written, &have, true).await;
        }
    };
    let file = Arc::new(file);
    let fsync = opts.fsync && first.has_extension(FSYNC_EXTENSION);
    // The first handle's CLOSE has gone out with the last WRITE (one piece only, and no
    // fsync to come first).
    let closing = AtomicBool::new(false);
    let close_when_sent =
        (ranges.bounds().len() == 1 && !fsync && !opts.inplace).then_some(&closing);
    let result = async {
        opts.report(held, total);
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
        let lanes = lanes(ranges);
        let workers = (0..clients.len() * lanes).map(|w| (w, &clients[w / lanes]));
        let workers = workers.map(|(w, client)| {
            let (handle, ranges, moved, rpath, written, file, next_piece, stream) = (
                &handle,
                ranges,
                &moved,
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
                        done += write_span(client, span, &mut source, |n, gapless| {
                            ranges.mark(i, gapless);
                            let now = moved.fetch_add(n, Ordering::Relaxed) + n;
                            opts.report(held + now, total);
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
    let ((), result) = futures::join!(record_first, result);
    // An existing target's mode, given to the part before the first WRITE went out.
    let result = match mode_kept {
        Some(sent) => match first.status_of(sent).await {
            Ok(()) => result,
            Err(e) => result.and(Err(e)),
        },
        None => result,
    };
    // What the target holds now: what it held and what was acknowledged since.
    let arrived = ranges.arrived();
    let holds = crate::kept::merge([have.clone(), arrived.clone()].concat());
    let kept = crate::kept::total(&holds);
    if let (Err(SftpError::Status { .. }), true) = (&result, held > 0 && arrived.is_empty()) {
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
        return Box::pin(put_on(clients, local, remote, &again, on_directory)).await;
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
        Err(e) if (is_part || opts.inplace) && kept > 0 => {
            // Keep what was acknowledged: cut past its last range (by name: the handle
            // may be closed), and on a part, record its ranges when they are not one run
            // from the start. In place only the run from the start can be kept.
            let keep = match opts.inplace {
                true => holds.first().filter(|r| r.0 == 0).map_or(0, |r| r.1),
                false => holds.last().map_or(0, |r| r.1),
            };
            let cut = FileAttrs {
                size: Some(keep),
                ..FileAttrs::default()
            };
            let recorded = match is_part {
                true => crate::landing::record_remote(first, &written, &holds, false).await,
                false => Ok(()),
            };
            match (first.setstat(&written, cut).await, recorded) {
                (Ok(()), Ok(())) => Err(SftpError::Kept {
                    part: crate::printable_bytes(&written),
                    kept: if opts.inplace { keep } else { kept },
                    source: Box::new(e),
                }),
                _ => Err(e),
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
            if is_part && kept == 0 {
                // Nothing worth keeping: no half-written file under either name.
                let _ = first.remove(&written).await;
                let _ = crate::landing::record_remote(first, &written, &[], false).await;
            }
            return Err(e);
        }
    };
    if is_part {
        // The record goes beside the rename, in the same round trip.
        let unrecord = async {
            if recorded || !have.is_empty() {
                let _ = crate::landing::record_remote(first, &written, &[], false).await;
            }
        };
        let (landed, ()) = futures::join!(crate::landing::land(first, &written, remote), unrecord);
        landed?;
    }
    put_done(first, remote, opts, &meta, done).await
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
