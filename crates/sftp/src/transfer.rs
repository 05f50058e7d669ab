//! Whole-file transfers with many requests in flight.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use volley_proto::wire::sftp::{FSYNC_EXTENSION, OpenFlags, Request};
use volley_transport_tcp::FileRegion;

use crate::client::{SftpClient, SftpError, data_or_eof, expect_ok};
use crate::landing::{Found, LocalPart, PutTarget};
use crate::{FileAttrs, Handle};

/// How a transfer runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferOptions {
    /// Requests in flight at once.
    pub requests: usize,
    /// Bytes per READ or WRITE. `None`: the server's limits (OpenSSH: 255 KiB each;
    /// fewer, larger WRITEs cost OpenSSH's sftp-server less CPU per byte), or 32 KiB if
    /// the server states no limits. Always capped at the server's limit.
    pub chunk: Option<usize>,
    /// `put` only: have the kernel send each WRITE's data from the local file
    /// (`sendfile(2)`) instead of the connection's writer reading it in and writing it
    /// out. About a third less CPU (client and server together), but no faster, and
    /// often a few percent slower, against a local sftp-server, which then reads the
    /// data cold from the page cache rather than from a socket buffer the client just
    /// wrote: `cargo xtask bench --suite sftp` shows both. Off by default.
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
        }
    }
}

impl SftpClient {
    fn chunk(&self, wanted: Option<usize>, server_max: Option<u64>) -> usize {
        let server = server_max
            .filter(|&m| m > 0)
            .map_or(FALLBACK_CHUNK, |m| m.min(1 << 30) as usize);
        wanted.unwrap_or(server).clamp(1, server)
    }

    /// Copies the remote file at `remote` to the local file `local`, `opts.requests`
    /// READs in flight; returns the bytes moved (with [`TransferOptions::resume`], only
    /// the missing ones). A short read is re-requested for its tail; the transfer ends at
    /// the first offset the server calls end of file. Progress is reported as the
    /// position in the file.
    ///
    /// The copy goes into `local` + [`PART_SUFFIX`](crate::PART_SUFFIX), renamed into
    /// place only once complete, so a failure leaves an existing `local` untouched. If
    /// bytes arrived before the failure (or before the future was dropped), the part
    /// keeps those that arrived without a gap, and the error is [`SftpError::Kept`];
    /// otherwise nothing is left behind. A `local` that is a symbolic link is followed;
    /// a device (`/dev/null`) is written in place; a directory or a FIFO is refused.
    pub async fn get(
        &self,
        remote: &[u8],
        local: &Path,
        opts: &TransferOptions,
        mut progress: impl FnMut(Progress),
    ) -> Result<u64, SftpError> {
        let rpath = String::from_utf8_lossy(remote).into_owned();
        let handle = self
            .open(remote, OpenFlags::READ, FileAttrs::default())
            .await?;
        let mut target = None;
        let mut stated = FileAttrs::default();
        let result = async {
            stated = self.fstat(&handle).await?;
            let size = stated.size;
            let part = match LocalPart::open(local, opts.resume, size)? {
                Found::Part(part) => target.insert(part),
                Found::Complete => return Ok(None),
            };
            let start = part.start;
            progress(Progress {
                done: start,
                total: size,
            });
            let chunk = self.chunk(opts.chunk, self.limits().map(|l| l.max_read_len)) as u64;
            let mut pipeline = self.conn.pipeline();
            let mut in_flight: HashMap<u32, (u64, u32)> = HashMap::new();
            let mut next = start;
            let mut eof: Option<u64> = None;
            // Ask up to the stated size, then once past it to see the end (or growth).
            let mut horizon = size.unwrap_or(u64::MAX);
            let mut done = 0u64;
            loop {
                while in_flight.len() < opts.requests.max(1)
                    && next < eof.unwrap_or(u64::MAX)
                    && next < horizon
                {
                    let len = chunk.min(horizon - next).max(1) as u32;
                    self.issue_read(&mut pipeline, &mut in_flight, &handle, next, len)
                        .await?;
                    next += u64::from(len);
                }
                if in_flight.is_empty() {
                    if eof.is_some() {
                        break;
                    }
                    // Everything up to the stated size arrived: probe for the end.
                    horizon = u64::MAX;
                    let len = chunk as u32;
                    self.issue_read(&mut pipeline, &mut in_flight, &handle, next, len)
                        .await?;
                    next += u64::from(len);
                }
                let reply = self.recv(&mut pipeline, "read").await?;
                let Some((offset, len)) = in_flight.remove(&reply.id) else {
                    continue;
                };
                match data_or_eof(&reply, "read", &rpath)? {
                    Some(data) if !data.is_empty() => {
                        if data.len() > len as usize {
                            return Err(SftpError::SizeMismatch {
                                path: rpath.clone(),
                                got: data.len() as u64,
                                expected: u64::from(len),
                            });
                        }
                        part.file
                            .write_all_at(&data, offset)
                            .map_err(|source| SftpError::Io {
                                what: format!("cannot write {}", local.display()),
                                source,
                            })?;
                        done += data.len() as u64;
                        progress(Progress {
                            done: start + done,
                            total: size,
                        });
                        let got = data.len() as u32;
                        if got < len {
                            // A short read is not the end: ask again for the rest.
                            self.issue_read(
                                &mut pipeline,
                                &mut in_flight,
                                &handle,
                                offset + u64::from(got),
                                len - got,
                            )
                            .await?;
                        }
                    }
                    // End of file (or an empty DATA, which OpenSSH never sends mid-file).
                    _ => eof = Some(eof.map_or(offset, |e| e.min(offset))),
                }
                // Every byte below the lowest read still out has been written.
                let gapless = in_flight.values().map(|&(o, _)| o).min().unwrap_or(next);
                part.set_kept(gapless.min(eof.unwrap_or(u64::MAX)));
            }
            let end = eof.unwrap_or(start + done);
            if start + done != end {
                return Err(SftpError::SizeMismatch {
                    path: rpath.clone(),
                    got: start + done,
                    expected: end,
                });
            }
            if let Some(stated) = size.filter(|&s| end < s && !opts.allow_shrink) {
                return Err(SftpError::Shrank {
                    path: rpath.clone(),
                    stated,
                    got: end,
                });
            }
            Ok(Some((done, end)))
        }
        .await;
        let closed = self.close_named(&handle, remote).await;
        let result = result.and_then(|moved| closed.map(|()| moved));
        let done = match (result, target) {
            (Ok(None), _) => 0,
            (Ok(Some((done, end))), Some(target)) => {
                if opts.fsync {
                    target.file.sync_all().map_err(|source| SftpError::Io {
                        what: format!("cannot flush {} to disk", local.display()),
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
                        part: part.display().to_string(),
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

    async fn issue_read(
        &self,
        pipeline: &mut volley_transport_tcp::Pipeline,
        in_flight: &mut HashMap<u32, (u64, u32)>,
        handle: &Handle,
        offset: u64,
        len: u32,
    ) -> Result<(), SftpError> {
        let request = Request::Read {
            id: 0,
            handle: &handle.0,
            offset,
            len,
        };
        let id = self.send(pipeline, &request, Bytes::new(), "read").await?;
        in_flight.insert(id, (offset, len));
        Ok(())
    }

    /// Copies the local file `local` to `remote`, `opts.requests` WRITEs in flight;
    /// returns the bytes moved (with [`TransferOptions::resume`], only the missing ones).
    /// The copy is written as `remote` + [`PART_SUFFIX`](crate::PART_SUFFIX) and renamed
    /// over `remote` once complete (see the crate's landing rules); a put that fails
    /// after bytes were acknowledged keeps them in the part ([`SftpError::Kept`]). Each WRITE's data is a region of the
    /// file that the connection's writer reads in itself, a piece at a time as the socket
    /// takes it, or, with [`TransferOptions::send_from_file`], that the kernel sends from
    /// the page cache (see [`FileRegion::read_in`]). The file's size is taken at the
    /// start; a file that shrinks during the transfer fails it, and the connection with
    /// it (the WRITE's length is already on the wire when its data turns out missing).
    ///
    /// A source whose size is not known up front (a pipe, a FIFO, a device, or a
    /// `/proc` file that stats as empty) is read to its end instead, one chunk per WRITE,
    /// with at most `opts.requests` chunks in memory. A directory is refused.
    pub async fn put(
        &self,
        local: &Path,
        remote: &[u8],
        opts: &TransferOptions,
        mut progress: impl FnMut(Progress),
    ) -> Result<u64, SftpError> {
        let rpath = String::from_utf8_lossy(remote).into_owned();
        let file = File::open(local).map_err(|source| SftpError::Io {
            what: format!("cannot open {}", local.display()),
            source,
        })?;
        let meta = file.metadata().map_err(|source| SftpError::Io {
            what: format!("cannot stat {}", local.display()),
            source,
        })?;
        if meta.is_dir() {
            return Err(SftpError::Local {
                path: local.display().to_string(),
                problem: "is a directory".to_owned(),
            });
        }
        // Stat's size is the truth only for a regular file that has one.
        let total = Some(meta.len()).filter(|&n| meta.is_file() && n > 0);
        let mut source = match total {
            Some(_) => Source::Regions(Arc::new(file)),
            None => Source::Stream(tokio::fs::File::from_std(file), false),
        };
        let sized = meta.is_file().then_some(meta.len());
        let (written, is_part, start) =
            match crate::landing::put_target(self, remote, opts.resume, sized).await? {
                PutTarget::Complete => return self.put_done(remote, opts, &meta, 0).await,
                PutTarget::Write { name, part, start } => (name, part, start),
            };
        let flags = if start == 0 {
            OpenFlags::WRITE | OpenFlags::CREAT | OpenFlags::TRUNC
        } else {
            OpenFlags::WRITE
        };
        let handle = self.open(&written, flags, FileAttrs::default()).await?;
        // Bytes from the start acknowledged with no gap before them.
        let mut acked = start;
        let result = async {
            let chunk = self.chunk(opts.chunk, self.limits().map(|l| l.max_write_len));
            let mut pipeline = self.conn.pipeline();
            let mut offset = start;
            // Request id -> its data's offset and length.
            let mut in_flight: HashMap<u32, (u64, usize)> = HashMap::new();
            let mut done = 0u64;
            progress(Progress { done: start, total });
            loop {
                while in_flight.len() < opts.requests.max(1) {
                    let sent = match &mut source {
                        Source::Regions(file) => {
                            let left = total.unwrap_or(0).saturating_sub(offset);
                            if left == 0 {
                                break;
                            }
                            let len = chunk.min(left as usize);
                            let region = FileRegion::new(file.clone(), offset, len);
                            // Read in by the writer unless asked otherwise: a read here,
                            // on the runtime's thread, could land just when the socket
                            // wants refilling and let the server run dry.
                            let region = if opts.send_from_file {
                                region
                            } else {
                                region.read_in()
                            };
                            let id = self
                                .send_write_from_file(&mut pipeline, &handle.0, region)
                                .await?;
                            (id, len)
                        }
                        Source::Stream(_, true) => break,
                        Source::Stream(reader, ended) => {
                            let data = read_chunk(reader, chunk).await.map_err(|source| {
                                SftpError::Io {
                                    what: format!("cannot read {}", local.display()),
                                    source,
                                }
                            })?;
                            if data.len() < chunk {
                                *ended = true;
                            }
                            if data.is_empty() {
                                break;
                            }
                            let request = Request::Write {
                                id: 0,
                                handle: &handle.0,
                                offset,
                                data: &data,
                            };
                            let len = data.len();
                            (
                                self.send(&mut pipeline, &request, data.clone(), "write")
                                    .await?,
                                len,
                            )
                        }
                    };
                    in_flight.insert(sent.0, (offset, sent.1));
                    offset += sent.1 as u64;
                }
                if in_flight.is_empty() {
                    break;
                }
                let reply = self.recv(&mut pipeline, "write").await?;
                expect_ok(&reply, "write", &rpath)?;
                if let Some((_, len)) = in_flight.remove(&reply.id) {
                    done += len as u64;
                }
                acked = in_flight.values().map(|&(o, _)| o).min().unwrap_or(offset);
                progress(Progress {
                    done: start + done,
                    total,
                });
            }
            Ok(done)
        }
        .await;
        let result = match result {
            Ok(done) if opts.fsync && self.has_extension(FSYNC_EXTENSION) => {
                self.fsync(&handle).await.map(|()| done)
            }
            Err(e) if is_part && acked > 0 => {
                // Keep what was acknowledged without a gap, cut to that, for a resume.
                let cut = FileAttrs {
                    size: Some(acked),
                    ..FileAttrs::default()
                };
                match self.fsetstat(&handle, cut).await {
                    Ok(()) => Err(SftpError::Kept {
                        part: crate::printable(&String::from_utf8_lossy(&written)),
                        kept: acked,
                        source: Box::new(e),
                    }),
                    Err(_) => Err(e),
                }
            }
            other => other,
        };
        let closed = self.close_named(&handle, &written).await;
        let done = match result.and_then(|done| closed.map(|()| done)) {
            Ok(done) => done,
            Err(e) => {
                if is_part && acked == 0 {
                    // Nothing worth keeping: no half-written file under either name.
                    let _ = self.remove(&written).await;
                }
                return Err(e);
            }
        };
        if is_part {
            crate::landing::land(self, &written, remote).await?;
        }
        self.put_done(remote, opts, &meta, done).await
    }

    /// What follows a put's last byte: with `opts.preserve`, the source's times and
    /// permission bits set on `remote`.
    async fn put_done(
        &self,
        remote: &[u8],
        opts: &TransferOptions,
        meta: &std::fs::Metadata,
        done: u64,
    ) -> Result<u64, SftpError> {
        if opts.preserve {
            self.setstat(remote, crate::preserve::of_local(meta))
                .await?;
        }
        Ok(done)
    }
}

/// Where a put's data comes from.
enum Source {
    /// A regular file of known size, sent as regions the writer (or the kernel) reads.
    Regions(Arc<File>),
    /// Anything else, read to its end chunk by chunk; `true` once it has ended.
    Stream(tokio::fs::File, bool),
}

/// Reads up to `len` bytes, as many as come before end of input (a pipe gives them in
/// pieces; a WRITE should not be smaller than it must).
async fn read_chunk(reader: &mut tokio::fs::File, len: usize) -> std::io::Result<Bytes> {
    use tokio::io::AsyncReadExt;
    let mut buf = bytes::BytesMut::with_capacity(len);
    while buf.len() < len {
        let mut limited = (&mut *reader).take((len - buf.len()) as u64);
        if limited.read_buf(&mut buf).await? == 0 {
            break;
        }
    }
    Ok(buf.freeze())
}
