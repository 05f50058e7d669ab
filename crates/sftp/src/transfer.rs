//! Whole-file transfers with many requests in flight.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use volley_proto::wire::sftp::{FSYNC_EXTENSION, OpenFlags, Request};
use volley_transport_tcp::FileRegion;

use crate::client::{SftpClient, SftpError, data_or_eof, expect_ok};
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
    /// READs in flight; returns the bytes copied. A short read is re-requested for its
    /// tail; the transfer ends at the first offset the server calls end of file.
    ///
    /// The copy goes into a temporary file beside `local` that is renamed into place
    /// only once complete, so a failure leaves an existing `local` untouched and nothing
    /// behind. A `local` that is a symbolic link is followed; a device (`/dev/null`) is
    /// written in place; a directory or a FIFO is refused.
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
            let file = &target.insert(Destination::prepare(local)?).file;
            let chunk = self.chunk(opts.chunk, self.limits().map(|l| l.max_read_len)) as u64;
            let mut pipeline = self.conn.pipeline();
            let mut in_flight: HashMap<u32, (u64, u32)> = HashMap::new();
            let mut next = 0u64;
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
                        file.write_all_at(&data, offset)
                            .map_err(|source| SftpError::Io {
                                what: format!("cannot write {}", local.display()),
                                source,
                            })?;
                        done += data.len() as u64;
                        progress(Progress { done, total: size });
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
            }
            let end = eof.unwrap_or(done);
            if done != end {
                return Err(SftpError::SizeMismatch {
                    path: rpath.clone(),
                    got: done,
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
            Ok(done)
        }
        .await;
        let closed = self.close_named(&handle, remote).await;
        let result = result.and_then(|done| closed.map(|()| done));
        match (result, target) {
            (Ok(done), Some(target)) => {
                if opts.fsync {
                    target.file.sync_all().map_err(|source| SftpError::Io {
                        what: format!("cannot flush {} to disk", local.display()),
                        source,
                    })?;
                }
                target.commit(done)?;
                if opts.preserve {
                    crate::preserve::to_local(local, stated)?;
                }
                Ok(done)
            }
            (result, target) => {
                if let Some(target) = target {
                    target.discard();
                }
                result
            }
        }
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

    /// Copies the local file `local` to `remote` (created or truncated), `opts.requests`
    /// WRITEs in flight; returns the bytes copied. Each WRITE's data is a region of the
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
        let flags = OpenFlags::WRITE | OpenFlags::CREAT | OpenFlags::TRUNC;
        let part = crate::landing::part_for(self, remote).await;
        let written = part.as_deref().unwrap_or(remote);
        let handle = self.open(written, flags, FileAttrs::default()).await?;
        let result = async {
            let chunk = self.chunk(opts.chunk, self.limits().map(|l| l.max_write_len));
            let mut pipeline = self.conn.pipeline();
            let mut offset = 0u64;
            // Request id -> its data's length.
            let mut in_flight: HashMap<u32, usize> = HashMap::new();
            let mut done = 0u64;
            loop {
                while in_flight.len() < opts.requests.max(1) {
                    let sent = match &mut source {
                        Source::Regions(file) => {
                            let left = total.unwrap_or(0) - offset;
                            if left == 0 {
                                break;
                            }
                            let len = chunk.min(left as usize);
                            let region = FileRegion::new(file.clone(), offset, len);
                            // Read in by the writer unless asked otherwise. A read here,
                            // on the runtime's thread, could land just when the socket
                            // wants refilling: with the 416 KiB socket buffers a stock
                            // kernel allows (net.core.wmem_max), that let sftp-server run
                            // dry (put at 0.85x OpenSSH's sftp, against 0.99-1.11x read
                            // in by the writer).
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
                    in_flight.insert(sent.0, sent.1);
                    offset += sent.1 as u64;
                }
                if in_flight.is_empty() {
                    break;
                }
                let reply = self.recv(&mut pipeline, "write").await?;
                expect_ok(&reply, "write", &rpath)?;
                if let Some(len) = in_flight.remove(&reply.id) {
                    done += len as u64;
                }
                progress(Progress { done, total });
            }
            Ok(done)
        }
        .await;
        let result = match result {
            Ok(done) if opts.fsync && self.has_extension(FSYNC_EXTENSION) => {
                self.fsync(&handle).await.map(|()| done)
            }
            other => other,
        };
        let closed = self.close_named(&handle, written).await;
        let done = match result.and_then(|done| closed.map(|()| done)) {
            Ok(done) => done,
            Err(e) => {
                if let Some(part) = &part {
                    // Nothing half-written is left under either name.
                    let _ = self.remove(part).await;
                }
                return Err(e);
            }
        };
        if let Some(part) = &part {
            crate::landing::land(self, part, remote).await?;
        }
        if opts.preserve {
            self.setstat(remote, crate::preserve::of_local(&meta))
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

/// Where a download lands: a temporary file beside the destination, renamed over it once
/// the copy is complete; or, for a device, the destination itself.
#[derive(Debug)]
struct Destination {
    file: File,
    /// The temporary file, or `None` when writing a device in place.
    temp: Option<PathBuf>,
    path: PathBuf,
}

impl Destination {
    fn prepare(local: &Path) -> Result<Self, SftpError> {
        // A link is followed, so it stays a link to the new copy.
        let path = match std::fs::symlink_metadata(local) {
            Ok(meta) if meta.file_type().is_symlink() => {
                std::fs::canonicalize(local).unwrap_or_else(|_| local.to_owned())
            }
            _ => local.to_owned(),
        };
        let refuse = |problem: &str| SftpError::Local {
            path: path.display().to_string(),
            problem: problem.to_owned(),
        };
        let existing = std::fs::metadata(&path).ok();
        if let Some(meta) = &existing {
            let kind = meta.file_type();
            if kind.is_dir() {
                return Err(refuse("is a directory"));
            }
            if kind.is_fifo() || kind.is_socket() {
                return Err(refuse(
                    "is a FIFO or a socket: a download writes at offsets, so it needs a regular file or a device",
                ));
            }
            if !kind.is_file() {
                let file = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|source| SftpError::Io {
                        what: format!("cannot open {}", path.display()),
                        source,
                    })?;
                return Ok(Self {
                    file,
                    temp: None,
                    path,
                });
            }
        }
        let name = path
            .file_name()
            .ok_or_else(|| refuse("names no file"))?
            .to_string_lossy()
            .into_owned();
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        for attempt in 0..100 {
            let temp = dir.join(format!(
                ".{name}.volley-{}-{attempt}.part",
                std::process::id()
            ));
            match OpenOptions::new().write(true).create_new(true).open(&temp) {
                Ok(file) => {
                    if let Some(meta) = &existing {
                        // The copy keeps the mode of the file it replaces.
                        let _ = file.set_permissions(meta.permissions());
                    }
                    return Ok(Self {
                        file,
                        temp: Some(temp),
                        path,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    return Err(SftpError::Io {
                        what: format!("cannot create {}", temp.display()),
                        source,
                    });
                }
            }
        }
        Err(refuse("no free name for a temporary file beside it"))
    }

    /// Sizes the copy to `len` and renames it into place.
    fn commit(self, len: u64) -> Result<(), SftpError> {
        let Some(temp) = &self.temp else {
            return Ok(());
        };
        let placed = self
            .file
            .set_len(len)
            .and_then(|()| std::fs::rename(temp, &self.path));
        placed.map_err(|source| {
            let _ = std::fs::remove_file(temp);
            SftpError::Io {
                what: format!("cannot put the copy in place at {}", self.path.display()),
                source,
            }
        })
    }

    /// Removes the temporary file; the destination is as it was.
    fn discard(self) {
        if let Some(temp) = &self.temp {
            let _ = std::fs::remove_file(temp);
        }
    }
}
