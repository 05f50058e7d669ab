//! SftpClient's transfers: get, put, trees and wildcards, and the sizes their requests
//! take. Each is a front for the transfer engine (`get`, `put`, `tree`, `span`), which does
//! the work on one session or several.

use std::path::Path;

use super::{SftpClient, SftpError};
use crate::get::get_on;
use crate::put::{OnDirectory, put_on};
use crate::tree::{
    DEFAULT_FILES_AT_ONCE, MAX_FILES_AT_ONCE, TreeEvent, TreeReport, get_tree_on, put_tree_on,
};
use crate::{FileAttrs, TransferOptions};

/// Chunk size when the server states no limits (the draft's minimum packet is 32 KiB).
const FALLBACK_CHUNK: usize = 32 * 1024;

/// Room left for a READ's or WRITE's head within the server's stated packet length.
const PACKET_HEAD_ROOM: u64 = 1024;

impl SftpClient {
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
    ///
    /// A `remote` that is an existing directory gets the copy inside it, under the
    /// source's file name, as `sftp`'s `put` does.
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
            OnDirectory::PutInside,
        )
        .await
    }

    /// Copies the remote directory `remote` to `local` (created if missing, with every
    /// directory under it before its files), many listings and files at once. Each file
    /// lands whole or not at all (see [`SftpClient::get`]). Only regular files and
    /// directories are copied ([`Skip`](crate::Skip) says what else is passed over); a name that
    /// would lead elsewhere (empty, `/` or NUL in it, `.` or `..` as a file) is refused
    /// as that entry's failure, and so is a directory deeper than `opts.max_depth` or
    /// listing more than `opts.max_entries`. What happens to each entry is told through
    /// `event`; `opts.progress`, if set, is told the bytes moved so far across the tree
    /// as they arrive.
    pub async fn get_tree(
        &self,
        remote: impl AsRef<[u8]>,
        local: impl AsRef<Path>,
        opts: &TransferOptions,
        event: impl FnMut(TreeEvent<'_>),
    ) -> Result<TreeReport, SftpError> {
        let me = core::slice::from_ref(self);
        get_tree_on(me, remote.as_ref(), local.as_ref(), opts, event).await
    }

    /// Copies the local directory `local` to `remote` (created if missing; directories
    /// are made a level at a time, many at once, before any file), many files at once.
    /// Symbolic links, FIFOs, sockets and devices are skipped, and directories deeper
    /// than `opts.max_depth` refused. Events and progress as for
    /// [`get_tree`](Self::get_tree).
    pub async fn put_tree(
        &self,
        local: impl AsRef<Path>,
        remote: impl AsRef<[u8]>,
        opts: &TransferOptions,
        event: impl FnMut(TreeEvent<'_>),
    ) -> Result<TreeReport, SftpError> {
        let me = core::slice::from_ref(self);
        put_tree_on(me, local.as_ref(), remote.as_ref(), opts, event).await
    }

    /// How many files a tree moves at once: what the server's stated open-handle limit
    /// allows (keeping two for listings and the like), else [`DEFAULT_FILES_AT_ONCE`];
    /// at most [`MAX_FILES_AT_ONCE`].
    pub fn files_at_once(&self) -> usize {
        match self.limits().map(|l| l.max_open_handles) {
            Some(n) if n > 2 => usize::try_from(n - 2)
                .unwrap_or(MAX_FILES_AT_ONCE)
                .min(MAX_FILES_AT_ONCE),
            Some(1..=2) => 1,
            _ => DEFAULT_FILES_AT_ONCE,
        }
    }

    /// MKDIR with permission bits `mode` (under the server's umask), taking an existing
    /// directory as success.
    pub(crate) async fn mkdir_or_exists(&self, dir: &[u8], mode: u32) -> Result<(), SftpError> {
        match self.mkdir(dir, FileAttrs::with_permissions(mode)).await {
            Ok(()) => Ok(()),
            Err(e) => match self.stat(dir).await {
                Ok(a) if a.is_dir() => Ok(()),
                _ => Err(e),
            },
        }
    }

    /// The paths on the server that `pattern` matches, sorted; `pattern` itself when it
    /// holds no wildcard (whether or not it exists, as OpenSSH's `sftp` leaves it to the
    /// command to say). A pattern that matches nothing is an error naming it. Each
    /// directory listed is held to `max_entries` entries.
    pub async fn glob(
        &self,
        pattern: &[u8],
        max_entries: usize,
    ) -> Result<Vec<Vec<u8>>, SftpError> {
        crate::glob::glob(self, pattern, max_entries).await
    }

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
}
