//! A get: a remote file copied here with many READs in flight, on one session or, cut
//! into ranges, on several.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::path::Path;
use std::sync::Arc;

use volley_proto::sftp::OpenFlags;

use crate::FileAttrs;
use crate::client::{Handle, SftpClient, SftpError};
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
    let get = Get {
        clients,
        remote,
        local,
        opts,
        rpath: crate::printable_bytes(remote),
    };
    let first = &clients[0];
    let handle = first
        .open(remote, OpenFlags::READ, FileAttrs::default())
        .await?;
    let mut target = None;
    let mut stated = FileAttrs::default();
    let result = get.fetch(&handle, listed, &mut stated, &mut target).await;
    let closed = first.close_named(&handle, remote).await;
    let done = get.land(result.and_then(|moved| closed.map(|()| moved)), target)?;
    if opts.preserve {
        crate::preserve::to_local(local, stated)?;
    }
    Ok(done)
}

/// One get: what it copies, where to, and how.
struct Get<'a> {
    clients: &'a [SftpClient],
    remote: &'a [u8],
    local: &'a Path,
    opts: &'a TransferOptions,
    /// `remote` as errors show it.
    rpath: String,
}

/// What a get's workers share while they fetch the file's pieces.
struct Fetch<'a> {
    get: &'a Get<'a>,
    /// The handle the first session opened.
    handle: &'a Handle,
    part: &'a LocalPart,
    ranges: &'a Ranges,
    /// The size the server stated, if it did.
    size: Option<u64>,
    /// Bytes the part held before this get.
    held: u64,
    /// Bytes this get has brought.
    moved: AtomicU64,
    /// The next piece a worker takes.
    next_piece: AtomicUsize,
    /// Where the file ended (an open-ended last piece sets it).
    end_at: AtomicU64,
    /// Set when a worker failed: the others take no new piece.
    halted: AtomicBool,
}

impl Get<'_> {
    /// Stats the file (unless `listed` says its size), opens the local part and fetches
    /// every missing piece on every session. `Ok(None)`: the local copy was complete
    /// already; else the bytes moved and where the file ended.
    async fn fetch(
        &self,
        handle: &Handle,
        listed: Option<FileAttrs>,
        stated: &mut FileAttrs,
        target: &mut Option<LocalPart>,
    ) -> Result<Option<(u64, u64)>, SftpError> {
        let (opts, first) = (self.opts, &self.clients[0]);
        *stated = match listed.filter(|a| a.size.is_some()) {
            Some(attrs) => attrs,
            None => first.fstat(handle).await?,
        };
        if stated.is_dir() {
            return Err(SftpError::Local {
                path: self.rpath.clone(),
                problem: "is a directory (a tree is copied whole with -r)".into(),
            });
        }
        let size = stated.size;
        let mode = crate::preserve::new_local_mode(*stated);
        let part = match LocalPart::open(self.local, opts.resume, opts.inplace, size, mode)? {
            Found::Part(part) => &*target.insert(part),
            Found::Complete => return Ok(None),
        };
        let held = part.held();
        opts.report(held, size);
        let piece = if self.clients.len() > 1 {
            PIECE
        } else {
            u64::MAX
        };
        let ranges = Arc::new(match size {
            Some(size) => Ranges::missing(&part.missing(size), piece, size),
            None => Ranges::whole(part.end(), None),
        });
        part.fetching(ranges.clone());
        let fetch = Fetch {
            get: self,
            handle,
            part,
            ranges: &ranges,
            size,
            held,
            moved: AtomicU64::new(0),
            next_piece: AtomicUsize::new(0),
            end_at: AtomicU64::new(part.end()),
            halted: AtomicBool::new(false),
        };
        // Workers taking the next piece until none is left, so a slow session takes fewer:
        // two a session when there are pieces, so one keeps the session busy while the
        // other waits out the last replies of its piece.
        let lanes = lanes(&ranges);
        let workers =
            (0..self.clients.len() * lanes).map(|w| fetch.worker(w, &self.clients[w / lanes]));
        run_workers(workers, &fetch.halted).await?;
        let end = fetch.end_at.load(Ordering::Relaxed);
        if let Some(stated) = size.filter(|&s| end < s && !opts.allow_shrink) {
            return Err(SftpError::Shrank {
                path: self.rpath.clone(),
                stated,
                got: end,
            });
        }
        Ok(Some((fetch.moved.load(Ordering::Relaxed), end)))
    }

    /// Puts the part in place after a fetch that succeeded (flushed first with
    /// `fsync`), or keeps what it holds after one that failed, saying so in the error.
    fn land(
        &self,
        result: Result<Option<(u64, u64)>, SftpError>,
        target: Option<LocalPart>,
    ) -> Result<u64, SftpError> {
        match (result, target) {
            (Ok(None), _) => Ok(0),
            (Ok(Some((done, end))), Some(target)) => {
                if self.opts.fsync {
                    target.file.sync_all().map_err(|source| SftpError::Io {
                        what: format!(
                            "cannot flush {} to disk",
                            crate::client::shown_local(self.local)
                        ),
                        source,
                    })?;
                }
                target.commit(end)?;
                Ok(done)
            }
            (Err(e @ SftpError::Shrank { .. }), Some(target)) => {
                target.discard();
                Err(e)
            }
            (Err(e), Some(target)) => Err(match target.kept() {
                Some((part, kept)) => SftpError::Kept {
                    part: crate::client::shown_local(part),
                    kept,
                    source: Box::new(e),
                },
                None => e,
            }),
            (result, None) => result.map(|_| 0),
        }
    }
}

impl Fetch<'_> {
    /// Worker `w` on `client`: takes pieces until none is left, on a handle of its own
    /// (closed at the end) unless it is the first worker.
    async fn worker(&self, w: usize, client: &SftpClient) -> Result<(), SftpError> {
        let mut own = None;
        let result = self.take_pieces(w, client, &mut own).await;
        match own {
            Some(own) => {
                let closed = client.close_named(&own, self.get.remote).await;
                result.and(closed)
            }
            None => result,
        }
    }

    async fn take_pieces(
        &self,
        w: usize,
        client: &SftpClient,
        own: &mut Option<Handle>,
    ) -> Result<(), SftpError> {
        let opts = self.get.opts;
        loop {
            let i = self.next_piece.fetch_add(1, Ordering::Relaxed);
            let Some(&(from, to)) = self.ranges.bounds().get(i) else {
                return Ok(());
            };
            if opts.stop.is_stopped() {
                return Err(SftpError::Stopped);
            }
            if self.halted.load(Ordering::Relaxed) {
                return Ok(());
            }
            if w > 0 && own.is_none() {
                let flags = OpenFlags::READ;
                *own = Some(
                    client
                        .open(self.get.remote, flags, FileAttrs::default())
                        .await?,
                );
            }
            let span = ReadSpan {
                handle: own.as_ref().unwrap_or(self.handle),
                file: &self.part.file,
                local: self.get.local,
                rpath: &self.get.rpath,
                from,
                to,
                stated: self.size,
                requests: opts.requests,
                chunk: client.read_len(opts.chunk) as u64,
                stop: &opts.stop,
            };
            let end = read_span(client, span, |n, gapless| {
                self.ranges.mark(i, gapless);
                let now = self.moved.fetch_add(n, Ordering::Relaxed) + n;
                opts.report(self.held + now, self.size);
            })
            .await?;
            if to.is_none() {
                self.end_at.store(end, Ordering::Relaxed);
            }
        }
    }
}
