//! Running one request against the file system: what each becomes as a reply.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use volley_proto::sftp::{NameEntry, OpenFlags, StatusCode};

use crate::handles::{Handles, Listing, Open};
use crate::op::Op;
use crate::paths::{self, path};
use crate::reply::Reply;

/// Names a READDIR reply gives at most, as OpenSSH's server.
const NAMES_PER_REPLY: usize = 100;

/// What every request of a session runs against.
pub(crate) struct Session {
    pub(crate) handles: Handles,
    pub(crate) max_io: u32,
    pub(crate) buffers: Buffers,
}

/// READ buffers, each `max_io` bytes, reused: a fresh one of a megabyte would cost its
/// pages' faults and zeroing on every READ.
pub(crate) struct Buffers {
    free: Mutex<Vec<Vec<u8>>>,
    size: usize,
    keep: usize,
}

impl Buffers {
    /// A pool of buffers of `size` bytes, keeping at most `keep` free.
    pub(crate) fn new(size: usize, keep: usize) -> Self {
        Self {
            free: Mutex::new(Vec::new()),
            size,
            keep,
        }
    }

    /// A buffer of `size` bytes (its contents left from its last use).
    pub(crate) fn take(&self) -> Vec<u8> {
        let free = self
            .free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        free.unwrap_or_else(|| vec![0; self.size])
    }

    /// Gives `buf` back for another READ.
    pub(crate) fn give(&self, buf: Vec<u8>) {
        if buf.len() != self.size {
            return;
        }
        let mut free = self
            .free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if free.len() < self.keep {
            free.push(buf);
        }
    }
}

impl Session {
    /// Runs `op` (request `id`).
    pub(crate) fn run(&self, id: u32, op: Op) -> Reply {
        let result = match op {
            Op::Open {
                path: p,
                flags,
                mode,
            } => self.open(id, &p, flags, mode),
            Op::Close { handle } => match self.handles.remove(&handle) {
                Some(_) => Ok(Reply::ok(id)),
                None => Ok(no_handle(id)),
            },
            Op::Read {
                handle,
                offset,
                len,
            } => self.read(id, &handle, offset, len),
            Op::Write {
                handle,
                offset,
                data,
            } => self.write(id, &handle, offset, &data),
            Op::Lstat { path: p } => {
                fs::symlink_metadata(path(&p)).map(|m| Reply::attrs(id, crate::attrs::of(&m)))
            }
            Op::Stat { path: p } => {
                fs::metadata(path(&p)).map(|m| Reply::attrs(id, crate::attrs::of(&m)))
            }
            Op::Fstat { handle } => match self.handles.file(&handle) {
                Some((file, _)) => file
                    .metadata()
                    .map(|m| Reply::attrs(id, crate::attrs::of(&m))),
                None => Ok(no_handle(id)),
            },
            Op::Setstat { path: p, attrs } => {
                paths::set_path(path(&p), attrs).map(|()| Reply::ok(id))
            }
            Op::Fsetstat { handle, attrs } => match self.handles.file(&handle) {
                Some((file, _)) => paths::set_file(&file, attrs).map(|()| Reply::ok(id)),
                None => Ok(no_handle(id)),
            },
            Op::Opendir { path: p } => self.opendir(id, &p),
            Op::Readdir { handle } => self.readdir(id, &handle),
            Op::Remove { path: p } => fs::remove_file(path(&p)).map(|()| Reply::ok(id)),
            Op::Mkdir { path: p, mode } => fs::DirBuilder::new()
                .mode(mode.unwrap_or(0o777) & 0o7777)
                .create(path(&p))
                .map(|()| Reply::ok(id)),
            Op::Rmdir { path: p } => fs::remove_dir(path(&p)).map(|()| Reply::ok(id)),
            Op::Realpath { path: p } => paths::realpath(&p).map(|real| Reply::one_name(id, &real)),
            Op::Rename { from, to } => {
                paths::rename(path(&from), path(&to)).map(|()| Reply::ok(id))
            }
            Op::Readlink { path: p } => fs::read_link(path(&p))
                .map(|target| Reply::one_name(id, target.as_os_str().as_bytes())),
            Op::Symlink { target, link } => {
                std::os::unix::fs::symlink(path(&target), path(&link)).map(|()| Reply::ok(id))
            }
            Op::Extended { name, data } => {
                crate::extended::run(&self.handles, self.max_io, id, &name, &data)
            }
        };
        result.unwrap_or_else(|e| Reply::error(id, &e))
    }

    fn open(&self, id: u32, p: &[u8], flags: OpenFlags, mode: Option<u32>) -> io::Result<Reply> {
        let has = |f: OpenFlags| flags.contains(f);
        let mut options = OpenOptions::new();
        options
            .read(has(OpenFlags::READ))
            .write(has(OpenFlags::WRITE) || has(OpenFlags::APPEND))
            .append(has(OpenFlags::APPEND))
            .truncate(has(OpenFlags::TRUNC))
            .mode(mode.unwrap_or(0o666) & 0o7777);
        match (has(OpenFlags::CREAT), has(OpenFlags::EXCL)) {
            (true, true) => options.create_new(true),
            (true, false) => options.create(true),
            _ => &mut options,
        };
        let file = options.open(path(p))?;
        match self
            .handles
            .add(Open::File(Arc::new(file), has(OpenFlags::APPEND)))
        {
            Some(handle) => Ok(Reply::handle(id, &handle)),
            None => Ok(too_many(id)),
        }
    }

    fn read(&self, id: u32, handle: &[u8], offset: u64, len: u32) -> io::Result<Reply> {
        let Some((file, _)) = self.handles.file(handle) else {
            return Ok(no_handle(id));
        };
        // A READ past the limit stated is clamped, as OpenSSH's server clamps it.
        let len = len.min(self.max_io) as usize;
        let mut buf = self.buffers.take();
        let mut got = 0;
        // Filled to the length asked, or to the end of the file: a client then needs no
        // second READ for a tail that was there all along.
        while got < len {
            match file.read_at(&mut buf[got..len], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if got == 0 => return Err(e),
                Err(_) => break,
            }
        }
        if got == 0 && len > 0 {
            self.buffers.give(buf);
            return Ok(Reply::status(id, StatusCode::EOF, "End of file"));
        }
        Ok(Reply::data(id, buf, got))
    }

    fn write(&self, id: u32, handle: &[u8], offset: u64, data: &Bytes) -> io::Result<Reply> {
        let Some((file, append)) = self.handles.file(handle) else {
            return Ok(no_handle(id));
        };
        if append {
            // O_APPEND: every write goes to the end, whatever its offset.
            (&*file).write_all_at_end(data)?;
        } else {
            file.write_all_at(data, offset)?;
        }
        Ok(Reply::ok(id))
    }

    fn opendir(&self, id: u32, p: &[u8]) -> io::Result<Reply> {
        let dir = path(p);
        if !fs::metadata(dir)?.is_dir() {
            return Err(io::Error::from(io::ErrorKind::NotADirectory));
        }
        // Refused now, as opendir(3) would, if it cannot be read.
        drop(fs::read_dir(dir)?);
        let listing = Listing {
            path: dir.to_path_buf(),
            entries: None,
        };
        match self.handles.add(Open::Dir(Arc::new(Mutex::new(listing)))) {
            Some(handle) => Ok(Reply::handle(id, &handle)),
            None => Ok(too_many(id)),
        }
    }

    fn readdir(&self, id: u32, handle: &[u8]) -> io::Result<Reply> {
        let Some(Open::Dir(listing)) = self.handles.get(handle) else {
            return Ok(no_handle(id));
        };
        let mut listing = listing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if listing.entries.is_none() {
            let mut names = vec![b".".to_vec(), b"..".to_vec()];
            for entry in fs::read_dir(&listing.path)? {
                names.push(entry?.file_name().into_vec());
            }
            listing.entries = Some(names.into_iter());
        }
        let dir = listing.path.clone();
        let names: Vec<Vec<u8>> = listing
            .entries
            .as_mut()
            .into_iter()
            .flatten()
            .take(NAMES_PER_REPLY)
            .collect();
        drop(listing);
        if names.is_empty() {
            return Ok(Reply::status(id, StatusCode::EOF, "End of file"));
        }
        let mut found = Vec::with_capacity(names.len());
        for name in names {
            // An entry gone since the listing is left out, as `ls` leaves it out.
            if let Ok(meta) = fs::symlink_metadata(dir.join(OsStr::from_bytes(&name))) {
                let long = crate::attrs::long_name(&name, &meta);
                found.push((name, long, crate::attrs::of(&meta)));
            }
        }
        let entries: Vec<NameEntry<'_>> = found
            .iter()
            .map(|(name, long, attrs)| NameEntry {
                filename: name,
                longname: long,
                attrs: *attrs,
            })
            .collect();
        Ok(Reply::names(id, &entries))
    }
}

/// Writes at the end of an append-mode file.
trait WriteAtEnd {
    fn write_all_at_end(self, data: &[u8]) -> io::Result<()>;
}

impl WriteAtEnd for &File {
    fn write_all_at_end(mut self, data: &[u8]) -> io::Result<()> {
        io::Write::write_all(&mut self, data)
    }
}

fn no_handle(id: u32) -> Reply {
    Reply::status(
        id,
        StatusCode::FAILURE,
        "no such handle: not open, or closed",
    )
}

fn too_many(id: u32) -> Reply {
    Reply::status(
        id,
        StatusCode::FAILURE,
        "too many handles open: close some first",
    )
}
