//! A get: a remote file copied here with many READs in flight, on one session or, cut
//! into ranges, on several.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::path::Path;
use std::sync::Arc;

use volley_proto::sftp::OpenFlags;

use crate::FileAttrs;
use crate::client::{SftpClient, SftpError};
use crate::landing::{Found, LocalPart};
use crate::span::{Ranges, ReadSpan, read_span};
use crate::transfer::{PIECE, TransferOptions, lanes, run_workers};

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
                        let end = read_span(client, span, |n, gapless| {
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
