//! Each copy lands whole or not at all, and an interrupted one can be resumed.
//!
//! A get writes `LOCAL.volley-part` and renames it over `LOCAL` once complete. If it
//! fails or is dropped after bytes arrived, the part is cut to the bytes that arrived
//! without a gap before them and kept, for [`TransferOptions::resume`] to continue from;
//! a part of no bytes is removed.
//!
//! A put writes `REMOTE.volley-part`, then renames it over `REMOTE` once every byte is
//! acknowledged, by `posix-rename@openssh.com` (which replaces the target in one step)
//! where the server offers it, else by removing the target and a plain RENAME (SFTP v3's
//! RENAME fails on an existing target). A put that fails with the connection still up
//! cuts the part to its acknowledged prefix with FSETSTAT and keeps it.
//!
//! [`TransferOptions::resume`]: crate::TransferOptions::resume

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use volley_proto::sftp::{OpenFlags, Request};

use crate::client::{Sent, SftpClient, SftpError, printable_bytes};
use crate::span::Ranges;
use crate::{FileAttrs, Handle};

/// Appended to a file's name while its copy is being written, on either side.
pub const PART_SUFFIX: &[u8] = b".volley-part";

/// Where a get lands: `LOCAL.volley-part`, renamed over `LOCAL` once complete; or, for a
/// device, `LOCAL` itself. Dropped before [`LocalPart::commit`], it keeps what it held
/// and what arrived without a gap in each range being fetched ([`LocalPart::fetching`]),
/// recorded beside it when that is more than one run from the start (see `kept`), or,
/// if that is nothing, removes itself.
#[derive(Debug)]
pub(crate) struct LocalPart {
    pub(crate) file: File,
    /// The part file, or `None` when writing the destination itself (a device, or with
    /// `inplace`).
    part: Option<PathBuf>,
    /// Writing a regular file in place: cut to its length when complete, to what
    /// arrived without a gap when not.
    inplace: bool,
    path: PathBuf,
    /// What the part held when it was opened (resumed from): sorted, apart.
    had: Vec<(u64, u64)>,
    /// What this copy fetches, once it is known.
    ranges: OnceLock<Arc<Ranges>>,
    /// Keep nothing when dropped.
    discarded: bool,
    placed: bool,
}

/// What a resumed get finds at its destination.
pub(crate) enum Found {
    /// Write through this.
    Part(LocalPart),
    /// No part, and the destination is a regular file of the source's size: nothing to
    /// move.
    Complete,
}

impl LocalPart {
    /// Opens the part for `local`: created empty, or with `resume`, opened as it is (a
    /// part longer than `size`, the source's, is refused and left alone). A `local` that
    /// is a symbolic link is followed, so it stays a link to the new copy. A new part is
    /// created with `mode` (under the umask), or, when `local` exists, given its mode.
    /// With `inplace`, a regular file (or a new one) is written itself, without a part.
    pub(crate) fn open(
        local: &Path,
        resume: bool,
        inplace: bool,
        size: Option<u64>,
        mode: u32,
    ) -> Result<Found, SftpError> {
        let path = match std::fs::symlink_metadata(local) {
            Ok(meta) if meta.file_type().is_symlink() => {
                std::fs::canonicalize(local).unwrap_or_else(|_| local.to_owned())
            }
            _ => local.to_owned(),
        };
        let refuse = |path: &Path, problem: &str| SftpError::Local {
            path: crate::client::shown_local(path),
            problem: problem.to_owned(),
        };
        let existing = std::fs::metadata(&path).ok();
        if let Some(meta) = &existing {
            let kind = meta.file_type();
            if kind.is_dir() {
                return Err(refuse(&path, "is a directory"));
            }
            if kind.is_fifo() || kind.is_socket() {
                return Err(refuse(
                    &path,
                    "is a FIFO or a socket: a download writes at offsets, so it needs a regular file or a device",
                ));
            }
            if !kind.is_file() {
                let file = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|source| SftpError::Io {
                        what: format!("cannot open {}", crate::client::shown_local(&path)),
                        source,
                    })?;
                return Ok(Found::Part(Self::new(file, None, false, path, Vec::new())));
            }
        }
        if inplace {
            return Self::in_place(path, resume, existing.map(|m| m.len()), size, mode);
        }
        let mut name: OsString = path
            .file_name()
            .ok_or_else(|| refuse(&path, "names no file"))?
            .to_owned();
        name.push(std::ffi::OsStr::from_bytes(PART_SUFFIX));
        let part = path.with_file_name(name);
        let have = std::fs::metadata(&part).ok().filter(|m| m.is_file());
        let had = match (&have, resume) {
            (Some(meta), true) => match crate::kept::read(&part, meta.len()) {
                Some(Some(ranges)) => ranges,
                // A record that cannot be trusted: nothing in the part can be.
                Some(None) => Vec::new(),
                None => vec![(0, meta.len())],
            },
            (None, true) => {
                let same = existing
                    .as_ref()
                    .is_some_and(|m| m.is_file() && Some(m.len()) == size);
                if same {
                    return Ok(Found::Complete);
                }
                Vec::new()
            }
            (_, false) => Vec::new(),
        };
        let had = crate::kept::merge(had);
        let start = had.last().map_or(0, |&(_, end)| end);
        if let Some(size) = size.filter(|&s| start > s) {
            return Err(refuse(
                &part,
                &format!(
                    "is longer than the source ({start} > {size} bytes): not resumed; remove it to start over"
                ),
            ));
        }
        if start == 0 {
            // A part left by an earlier copy would keep its mode: start afresh, so the
            // new one is created with `mode`.
            let _ = std::fs::remove_file(&part);
            let _ = crate::kept::remove(&part);
        }
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(start == 0)
            .mode(mode)
            .open(&part)
            .map_err(|source| SftpError::Io {
                what: format!("cannot create {}", crate::client::shown_local(&part)),
                source,
            })?;
        if let (Some(meta), 0) = (&existing, start) {
            // The copy keeps the mode of the file it replaces.
            let _ = file.set_permissions(meta.permissions());
        }
        Ok(Found::Part(Self::new(file, Some(part), false, path, had)))
    }

    fn new(
        file: File,
        part: Option<PathBuf>,
        inplace: bool,
        path: PathBuf,
        had: Vec<(u64, u64)>,
    ) -> Self {
        Self {
            file,
            part,
            inplace,
            path,
            had,
            ranges: OnceLock::new(),
            discarded: false,
            placed: false,
        }
    }

    /// `path` (a regular file, or none yet) opened to be written itself; with `resume`,
    /// its `existing` bytes are taken as the copy's start, as `sftp -a` takes them.
    fn in_place(
        path: PathBuf,
        resume: bool,
        existing: Option<u64>,
        size: Option<u64>,
        mode: u32,
    ) -> Result<Found, SftpError> {
        let have = existing.filter(|_| resume).unwrap_or(0);
        if resume && existing.is_some() && existing == size {
            return Ok(Found::Complete);
        }
        if let Some(size) = size.filter(|&s| have > s) {
            return Err(SftpError::Local {
                path: crate::client::shown_local(&path),
                problem: format!(
                    "is longer than the source ({have} > {size} bytes): not resumed in place"
                ),
            });
        }
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(mode)
            .open(&path)
            .map_err(|source| SftpError::Io {
                what: format!("cannot open {}", crate::client::shown_local(&path)),
                source,
            })?;
        let had = if have > 0 {
            vec![(0, have)]
        } else {
            Vec::new()
        };
        Ok(Found::Part(Self::new(file, None, true, path, had)))
    }

    /// The bytes the part held when it was opened.
    pub(crate) fn held(&self) -> u64 {
        crate::kept::total(&self.had)
    }

    /// What a source of `size` bytes still needs: the ranges the part does not hold.
    pub(crate) fn missing(&self, size: u64) -> Vec<(u64, u64)> {
        crate::kept::gaps(&self.had, size)
    }

    /// Where the part holds nothing from on, for a source of no known size.
    pub(crate) fn end(&self) -> u64 {
        self.had.last().map_or(0, |&(_, end)| end)
    }

    /// Tells the part what this copy fetches (their marks say how far each arrived).
    pub(crate) fn fetching(&self, ranges: Arc<Ranges>) {
        let _ = self.ranges.set(ranges);
    }

    /// What the part holds now: what it held and what has arrived, sorted and apart.
    fn holds(&self) -> Vec<(u64, u64)> {
        let mut all = self.had.clone();
        if let Some(ranges) = self.ranges.get() {
            all.extend(ranges.arrived());
        }
        crate::kept::merge(all)
    }

    /// The part file (or the file written in place) and the bytes it keeps if dropped
    /// now, when it would keep any.
    pub(crate) fn kept(&self) -> Option<(&Path, u64)> {
        if self.inplace {
            let prefix = self.prefix();
            return (prefix > 0).then_some((&self.path, prefix));
        }
        let kept = crate::kept::total(&self.holds());
        self.part.as_deref().filter(|_| kept > 0).map(|p| (p, kept))
    }

    /// The bytes from the start held with no gap.
    fn prefix(&self) -> u64 {
        match self.holds().first() {
            Some(&(0, end)) => end,
            _ => 0,
        }
    }

    /// Drops the part whatever it holds (the source changed under it).
    pub(crate) fn discard(mut self) {
        self.discarded = true;
    }

    /// Sizes the copy to `len` and renames it into place.
    pub(crate) fn commit(mut self, len: u64) -> Result<(), SftpError> {
        let Some(part) = &self.part else {
            self.placed = true;
            if self.inplace {
                // An old file longer than the copy keeps no tail.
                self.file.set_len(len).map_err(|source| SftpError::Io {
                    what: format!("cannot cut {}", crate::client::shown_local(&self.path)),
                    source,
                })?;
            }
            return Ok(());
        };
        let placed = self
            .file
            .set_len(len)
            .and_then(|()| crate::kept::remove(part))
            .and_then(|()| std::fs::rename(part, &self.path));
        placed.map_err(|source| SftpError::Io {
            what: format!(
                "cannot put the copy in place at {}",
                crate::client::shown_local(&self.path)
            ),
            source,
        })?;
        self.placed = true;
        Ok(())
    }
}

impl Drop for LocalPart {
    fn drop(&mut self) {
        if self.placed {
            return;
        }
        let Some(part) = &self.part else {
            // In place: cut to what arrived without a gap, as `sftp` cuts it, when
            // anything did; a file nothing was written to is left as it was.
            let arrived = self.ranges.get().is_some_and(|r| !r.arrived().is_empty());
            if self.inplace && arrived && !self.discarded {
                let _ = self.file.set_len(self.prefix());
            }
            return;
        };
        let holds = match self.discarded {
            true => Vec::new(),
            false => self.holds(),
        };
        // Bytes past the last range kept may be on disk too: cut them, so a resume never
        // reads a hole as data. Ranges after a gap are recorded beside the part.
        let end = holds.last().map_or(0, |&(_, end)| end);
        let kept =
            end > 0 && self.file.set_len(end).is_ok() && crate::kept::write(part, &holds).is_ok();
        if !kept {
            let _ = std::fs::remove_file(part);
            let _ = crate::kept::remove(part);
        }
    }
}

/// The part file a get of `local` keeps while unfinished, and how many bytes it holds
/// (those its ranges record names, else its length); `None` when there is none. For
/// telling a user what an interrupted get left.
pub fn kept_part(local: &Path) -> Option<(PathBuf, u64)> {
    let mut name = local.as_os_str().to_owned();
    name.push(std::ffi::OsStr::from_bytes(PART_SUFFIX));
    let part = PathBuf::from(name);
    let len = std::fs::metadata(&part).ok().filter(|m| m.is_file())?.len();
    let held = match crate::kept::read(&part, len) {
        Some(Some(ranges)) => crate::kept::total(&ranges),
        Some(None) => 0,
        None => len,
    };
    Some((part, held))
}

/// Where a put writes.
pub(crate) enum PutTarget {
    /// Write `name` where it does not hold `have` yet (truncating it first when it holds
    /// nothing); `part` says it is the part file, renamed over the target once complete.
    Write {
        name: Vec<u8>,
        part: bool,
        have: Vec<(u64, u64)>,
    },
    /// With resume: the remote file already has every byte.
    Complete,
    /// `remote` is a directory.
    Directory,
}

/// Where a resumed put of a source of `len` bytes (`None`: not known up front) to
/// `remote` continues: from what its part holds (the ranges its record names, else all
/// of it; a record that cannot be trusted starts it over), else from the end of `remote`
/// itself, as OpenSSH's `reput` does; either one longer than the source is refused. A
/// `remote` that is not a regular file is written in place, from the start.
pub(crate) async fn put_target(
    sftp: &SftpClient,
    remote: &[u8],
    len: Option<u64>,
) -> Result<PutTarget, SftpError> {
    let shown = |p: &[u8]| printable_bytes(p);
    let target = sftp.stat(remote).await.ok();
    if target.is_some_and(|attrs| attrs.is_dir()) {
        return Ok(PutTarget::Directory);
    }
    if target.is_some_and(|attrs| attrs.is_special()) {
        return Ok(PutTarget::Write {
            name: remote.to_vec(),
            part: false,
            have: Vec::new(),
        });
    }
    let part = part_name(remote);
    let Some(len) = len else {
        return Err(SftpError::Local {
            path: shown(remote),
            problem: "cannot be resumed from a source of no known size (a pipe, a device)".into(),
        });
    };
    let longer = |path: &[u8], have: u64| SftpError::Local {
        path: shown(path),
        problem: format!(
            "is longer than the source ({have} > {len} bytes): not resumed; remove it to start over"
        ),
    };
    if let Some(have) = sftp.stat(&part).await.ok().and_then(|a| a.size) {
        if have > len {
            return Err(longer(&part, have));
        }
        let have = remote_holds(sftp, &part, have).await;
        return Ok(PutTarget::Write {
            name: part,
            part: true,
            have,
        });
    }
    match target.and_then(|a| a.size) {
        Some(have) if have > len => Err(longer(remote, have)),
        Some(have) if have == len => Ok(PutTarget::Complete),
        Some(have) => Ok(PutTarget::Write {
            name: remote.to_vec(),
            part: false,
            have: vec![(0, have)],
        }),
        None => Ok(PutTarget::Write {
            name: part,
            part: true,
            have: Vec::new(),
        }),
    }
}

/// What the remote part `part` of `len` bytes holds: the ranges its record names, else
/// all of it; nothing when its record cannot be trusted.
async fn remote_holds(sftp: &SftpClient, part: &[u8], len: u64) -> Vec<(u64, u64)> {
    let record = crate::kept::remote_record_of(part);
    let Ok(handle) = sftp
        .open(&record, OpenFlags::READ, FileAttrs::default())
        .await
    else {
        return crate::kept::merge(vec![(0, len)]);
    };
    let mut text = Vec::new();
    let read = async {
        while let Some(chunk) = sftp.read(&handle, text.len() as u64, 64 * 1024).await? {
            text.extend_from_slice(&chunk);
            if text.len() > 1 << 20 {
                break;
            }
        }
        Ok::<_, SftpError>(())
    }
    .await;
    let _ = sftp.close_named(&handle, &record).await;
    match read {
        Ok(()) => crate::kept::parse(&text, len).unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

/// Records on the server which ranges the part `part` holds; with `always` unset and
/// `ranges` one run from the start (or nothing), removes any record instead, as the
/// part's length then says it.
pub(crate) async fn record_remote(
    sftp: &SftpClient,
    part: &[u8],
    ranges: &[(u64, u64)],
    always: bool,
) -> Result<(), SftpError> {
    let record = crate::kept::remote_record_of(part);
    if !always && !crate::kept::needs_record(ranges) {
        // None there is as good.
        let _ = sftp.remove(&record).await;
        return Ok(());
    }
    let flags = OpenFlags(OpenFlags::WRITE.0 | OpenFlags::CREAT.0 | OpenFlags::TRUNC.0);
    let handle = sftp.open(&record, flags, FileAttrs::default()).await?;
    let text = bytes::Bytes::from(crate::kept::render(ranges));
    // The WRITE and the CLOSE go out together: the server takes them in order.
    let (written, closed) = futures::join!(
        sftp.write(&handle, 0, text),
        sftp.close_named(&handle, &record)
    );
    written.and(closed)
}

/// `remote` + [`PART_SUFFIX`].
fn part_name(remote: &[u8]) -> Vec<u8> {
    let mut part = remote.to_vec();
    part.extend_from_slice(PART_SUFFIX);
    part
}

/// Opens where a put from the start writes `remote`, with `flags`: its part file, or
/// `remote` itself when it exists and is not a regular file (a device such as
/// `/dev/null`, a FIFO, which a rename would replace). The STAT that tells them apart
/// and the part's OPEN go out together, so the check costs no round trip. A new part
/// is created with permission bits `mode` (under the server's umask); over an existing
/// `remote`, it is given that file's permission bits before anything is written, so the
/// copy keeps them, its FSETSTAT sent ahead of the data rather than waited for.
/// `None`: `remote` is a directory (the part opened beside it is removed again).
pub(crate) async fn open_part(
    sftp: &SftpClient,
    remote: &[u8],
    flags: OpenFlags,
    mode: u32,
) -> Result<Option<OpenedPart>, SftpError> {
    let part = part_name(remote);
    let (target, opened) = futures::join!(
        sftp.stat(remote),
        sftp.open(&part, flags, FileAttrs::with_permissions(mode))
    );
    let unopen = async |opened: Result<Handle, SftpError>| {
        if let Ok(handle) = opened {
            let _ = sftp.close_named(&handle, &part).await;
            let _ = sftp.remove(&part).await;
        }
    };
    match target {
        Ok(attrs) if attrs.is_dir() => {
            unopen(opened).await;
            Ok(None)
        }
        Ok(attrs) if attrs.is_special() => {
            unopen(opened).await;
            let handle = sftp.open(remote, flags, FileAttrs::default()).await?;
            Ok(Some(OpenedPart {
                name: remote.to_vec(),
                is_part: false,
                handle,
                mode_kept: None,
            }))
        }
        Ok(FileAttrs {
            permissions: Some(existing),
            ..
        }) => {
            let handle = opened?;
            // Sent now, answered while the data goes: a server takes one session's
            // requests in order, so the mode is set before the first WRITE lands.
            let kept = Request::Fsetstat {
                id: 0,
                handle: &handle.0,
                attrs: FileAttrs::with_permissions(existing & crate::preserve::PERMISSION_BITS)
                    .to_wire(),
            };
            match sftp
                .send_alone(&kept, "fsetstat", &printable_bytes(&part))
                .await
            {
                Ok(sent) => Ok(Some(OpenedPart {
                    name: part,
                    is_part: true,
                    handle,
                    mode_kept: Some(sent),
                })),
                Err(e) => {
                    unopen(Ok(handle)).await;
                    Err(e)
                }
            }
        }
        _ => Ok(Some(OpenedPart {
            name: part,
            is_part: true,
            handle: opened?,
            mode_kept: None,
        })),
    }
}

/// A file [`open_part`] opened for a put.
pub(crate) struct OpenedPart {
    /// The name written: the part, or the target itself when it is not a regular file.
    pub name: Vec<u8>,
    /// Whether `name` is a part renamed over the target at the end.
    pub is_part: bool,
    /// The open handle.
    pub handle: Handle,
    /// The FSETSTAT that gives the part an existing target's mode, its answer unread:
    /// [`SftpClient::status_of`] says whether it took.
    pub mode_kept: Option<Sent>,
}

/// Renames the finished `part` over `remote`.
pub(crate) async fn land(sftp: &SftpClient, part: &[u8], remote: &[u8]) -> Result<(), SftpError> {
    if sftp.has_extension(b"posix-rename@openssh.com") {
        return sftp.posix_rename(part, remote).await;
    }
    // Gone already is fine; a target that cannot be removed fails the RENAME, which says so.
    let _ = sftp.remove(remote).await;
    sftp.rename(part, remote).await
}
