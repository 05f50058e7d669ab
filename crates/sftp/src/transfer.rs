//! Whole-file transfers with many requests in flight.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use volley_proto::wire::sftp::{OpenFlags, Request};
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
        let result = async {
            let size = self.fstat(&handle).await?.size;
            let file = File::create(local).map_err(|source| SftpError::Io {
                what: format!("cannot create {}", local.display()),
                source,
            })?;
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
            file.set_len(end).map_err(|source| SftpError::Io {
                what: format!("cannot size {}", local.display()),
                source,
            })?;
            Ok(done)
        }
        .await;
        let closed = self.close(&handle).await;
        let done = result?;
        closed?;
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

    /// Copies the local file `local` to `remote` (created or truncated), `opts.requests`
    /// WRITEs in flight; returns the bytes copied. Each WRITE's data is a region of the
    /// file that the connection's writer reads in itself, a piece at a time as the socket
    /// takes it, or, with [`TransferOptions::send_from_file`], that the kernel sends from
    /// the page cache (see [`FileRegion::read_in`]). The file's size is taken at the
    /// start; a file that shrinks during the transfer fails it, and the connection with
    /// it (the WRITE's length is already on the wire when its data turns out missing).
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
        let total = file
            .metadata()
            .map_err(|source| SftpError::Io {
                what: format!("cannot stat {}", local.display()),
                source,
            })?
            .len();
        let file = Arc::new(file);
        let flags = OpenFlags::WRITE | OpenFlags::CREAT | OpenFlags::TRUNC;
        let handle = self.open(remote, flags, FileAttrs::default()).await?;
        let result = async {
            let chunk = self.chunk(opts.chunk, self.limits().map(|l| l.max_write_len));
            let mut pipeline = self.conn.pipeline();
            let mut offset = 0u64;
            // Request id -> its data's length.
            let mut in_flight: HashMap<u32, usize> = HashMap::new();
            let mut done = 0u64;
            loop {
                while in_flight.len() < opts.requests.max(1) && offset < total {
                    let len = chunk.min((total - offset) as usize);
                    let region = FileRegion::new(file.clone(), offset, len);
                    // Read in by the writer unless asked otherwise. A read here, on the
                    // runtime's thread, could land just when the socket wants refilling:
                    // with the 416 KiB socket buffers a stock kernel allows
                    // (net.core.wmem_max), that let sftp-server run dry (put at 0.85x
                    // OpenSSH's sftp, against 0.99-1.11x read in by the writer).
                    let region = if opts.send_from_file {
                        region
                    } else {
                        region.read_in()
                    };
                    let id = self
                        .send_write_from_file(&mut pipeline, &handle.0, region)
                        .await?;
                    in_flight.insert(id, len);
                    offset += len as u64;
                }
                if in_flight.is_empty() {
                    break;
                }
                let reply = self.recv(&mut pipeline, "write").await?;
                expect_ok(&reply, "write", &rpath)?;
                if let Some(len) = in_flight.remove(&reply.id) {
                    done += len as u64;
                }
                progress(Progress {
                    done,
                    total: Some(total),
                });
            }
            Ok(total)
        }
        .await;
        let closed = self.close(&handle).await;
        let done = result?;
        closed?;
        Ok(done)
    }
}
