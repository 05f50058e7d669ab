//! The extensions the server offers (OpenSSH's), named in its VERSION reply.

use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStringExt;

use bytes::Bytes;
use nix::sys::statvfs::{FsFlags, Statvfs};
use volley_proto::sftp::{Limits, StatusCode};

use crate::handles::Handles;
use crate::paths::{path, realpath, set_path, timeval};
use crate::reply::Reply;

/// Runs extension `name` with its request data.
pub(crate) fn run(
    handles: &Handles,
    max_io: u32,
    id: u32,
    name: &[u8],
    data: &Bytes,
) -> io::Result<Reply> {
    let mut args = Args { data };
    let bad = |what: &str| Ok(Reply::bad_message(id, what));
    Ok(match crate::config::short_name(name) {
        Some("limits") => {
            let limits = Limits {
                max_packet_len: u64::from(max_io) + 1024,
                max_read_len: u64::from(max_io),
                max_write_len: u64::from(max_io),
                max_open_handles: handles.max() as u64,
            };
            Reply::extended(id, &limits.emit())
        }
        Some("posix-rename") => {
            let (Some(from), Some(to)) = (args.string(), args.string()) else {
                return bad("posix-rename@openssh.com takes two paths");
            };
            fs::rename(path(&from), path(&to))?;
            Reply::ok(id)
        }
        Some("hardlink") => {
            let (Some(target), Some(link)) = (args.string(), args.string()) else {
                return bad("hardlink@openssh.com takes two paths");
            };
            fs::hard_link(path(&target), path(&link))?;
            Reply::ok(id)
        }
        Some("statvfs") => {
            let Some(p) = args.string() else {
                return bad("statvfs@openssh.com takes a path");
            };
            Reply::extended(id, &statvfs_reply(&nix::sys::statvfs::statvfs(path(&p))?))
        }
        Some("fstatvfs") => {
            let Some(handle) = args.string() else {
                return bad("fstatvfs@openssh.com takes a handle");
            };
            let Some((file, _)) = handles.file(&handle) else {
                return Ok(Reply::status(id, StatusCode::FAILURE, "no such handle"));
            };
            Reply::extended(
                id,
                &statvfs_reply(&nix::sys::statvfs::fstatvfs(file.as_fd())?),
            )
        }
        Some("fsync") => {
            let Some(handle) = args.string() else {
                return bad("fsync@openssh.com takes a handle");
            };
            let Some((file, _)) = handles.file(&handle) else {
                return Ok(Reply::status(id, StatusCode::FAILURE, "no such handle"));
            };
            file.sync_all()?;
            Reply::ok(id)
        }
        Some("lsetstat") => {
            let Some(p) = args.string() else {
                return bad("lsetstat@openssh.com takes a path and attributes");
            };
            let attrs = match volley_proto::sftp::Attrs::parse(args.data) {
                Ok(attrs) => crate::op::SetAttrs::from(attrs),
                Err(e) => return bad(&e.to_string()),
            };
            lsetstat(path(&p), attrs)?;
            Reply::ok(id)
        }
        Some("expand-path") => {
            let Some(p) = args.string() else {
                return bad("expand-path@openssh.com takes a path");
            };
            Reply::one_name(id, &realpath(&expand(&p))?)
        }
        Some("home-directory") => {
            let Some(user) = args.string() else {
                return bad("home-directory takes a user name");
            };
            if !user.is_empty() {
                return Ok(Reply::status(
                    id,
                    StatusCode::FAILURE,
                    "only the logged-in user's home is known",
                ));
            }
            Reply::one_name(
                id,
                &realpath(&crate::paths::home().into_os_string().into_vec())?,
            )
        }
        Some("users-groups-by-id") => {
            let (Some(uids), Some(gids)) = (args.string(), args.string()) else {
                return bad("users-groups-by-id@openssh.com takes two lists of ids");
            };
            Reply::extended(id, &names_by_id(&uids, &gids))
        }
        Some("copy-data") => {
            let from = args.string();
            let (from_offset, len) = (args.u64(), args.u64());
            let (to, to_offset) = (args.string(), args.u64());
            let (Some(from), Some(from_offset), Some(len), Some(to), Some(to_offset)) =
                (from, from_offset, len, to, to_offset)
            else {
                return bad(
                    "copy-data takes a handle, an offset, a length, a handle and an offset",
                );
            };
            let (Some((source, _)), Some((target, _))) = (handles.file(&from), handles.file(&to))
            else {
                return Ok(Reply::status(id, StatusCode::FAILURE, "no such handle"));
            };
            crate::copy::copy_data(&source, from_offset, len, &target, to_offset)?;
            Reply::ok(id)
        }
        Some(which @ ("check-file-handle" | "check-file-name")) => {
            let what = args.string();
            let (algorithms, from, len, block) =
                (args.string(), args.u64(), args.u64(), args.u32());
            let (Some(what), Some(algorithms), Some(from), Some(len), Some(block)) =
                (what, algorithms, from, len, block)
            else {
                return bad(
                    "check-file takes a file, algorithms, an offset, a length and a block size",
                );
            };
            let file = match which {
                "check-file-handle" => match handles.file(&what) {
                    Some((file, _)) => file,
                    None => return Ok(Reply::status(id, StatusCode::FAILURE, "no such handle")),
                },
                _ => std::sync::Arc::new(fs::File::open(path(&what))?),
            };
            match crate::check::check_file(&file, &algorithms, from, len, block)? {
                Ok(data) => Reply::extended(id, &data),
                Err(why) => Reply::status(id, StatusCode::OP_UNSUPPORTED, why),
            }
        }
        _ => Reply::status(id, StatusCode::OP_UNSUPPORTED, "no such extension"),
    })
}

/// The users-groups-by-id@openssh.com reply: the name of each user in `uids` and each
/// group in `gids` (lists of 32-bit ids), an empty name for one the system does not know.
fn names_by_id(uids: &[u8], gids: &[u8]) -> Vec<u8> {
    use nix::unistd::{Gid, Group, Uid, User};
    let ids = |list: &[u8]| -> Vec<u32> {
        list.chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let user = |id: u32| {
        User::from_uid(Uid::from_raw(id))
            .ok()
            .flatten()
            .map(|u| u.name)
    };
    let group = |id: u32| {
        Group::from_gid(Gid::from_raw(id))
            .ok()
            .flatten()
            .map(|g| g.name)
    };
    let packed = |names: Vec<Option<String>>| {
        let mut list = Vec::new();
        for name in names {
            let name = name.unwrap_or_default();
            list.extend_from_slice(&(name.len() as u32).to_be_bytes());
            list.extend_from_slice(name.as_bytes());
        }
        list
    };
    let mut reply = Vec::new();
    for list in [
        packed(ids(uids).into_iter().map(user).collect()),
        packed(ids(gids).into_iter().map(group).collect()),
    ] {
        reply.extend_from_slice(&(list.len() as u32).to_be_bytes());
        reply.extend_from_slice(&list);
    }
    reply
}

/// `~` and `~/...` as the user's home, as OpenSSH's server expands them.
fn expand(p: &[u8]) -> Vec<u8> {
    match p {
        b"~" => crate::paths::home().into_os_string().into_vec(),
        _ => match p.strip_prefix(b"~/") {
            Some(rest) => {
                let mut home = crate::paths::home().into_os_string().into_vec();
                home.push(b'/');
                home.extend_from_slice(rest);
                home
            }
            None => p.to_vec(),
        },
    }
}

/// LSETSTAT: as SETSTAT, but a symbolic link's own times (its mode cannot change on
/// Linux, nor its size).
fn lsetstat(p: &std::path::Path, attrs: crate::op::SetAttrs) -> io::Result<()> {
    let meta = fs::symlink_metadata(p)?;
    if !meta.file_type().is_symlink() {
        return set_path(p, attrs);
    }
    if let Some((uid, gid)) = attrs.uid_gid {
        std::os::unix::fs::lchown(p, Some(uid), Some(gid))?;
    }
    if let Some((atime, mtime)) = attrs.atime_mtime {
        nix::sys::stat::lutimes(p, &timeval(atime), &timeval(mtime))?;
    }
    Ok(())
}

/// The statvfs@openssh.com reply: eleven 64-bit fields.
fn statvfs_reply(s: &Statvfs) -> Vec<u8> {
    let mut flags = 0u64;
    if s.flags().contains(FsFlags::ST_RDONLY) {
        flags |= 1;
    }
    if s.flags().contains(FsFlags::ST_NOSUID) {
        flags |= 2;
    }
    let fields = [
        s.block_size(),
        s.fragment_size(),
        s.blocks(),
        s.blocks_free(),
        s.blocks_available(),
        s.files(),
        s.files_free(),
        s.files_available(),
        s.filesystem_id(),
        flags,
        s.name_max(),
    ];
    fields.iter().flat_map(|f| f.to_be_bytes()).collect()
}

/// An extension's request data, read string by string.
struct Args<'a> {
    data: &'a [u8],
}

impl Args<'_> {
    /// The next 32-bit number.
    fn u32(&mut self) -> Option<u32> {
        let n = u32::from_be_bytes(self.data.get(..4)?.try_into().ok()?);
        self.data = &self.data[4..];
        Some(n)
    }

    /// The next 64-bit number.
    fn u64(&mut self) -> Option<u64> {
        let n = u64::from_be_bytes(self.data.get(..8)?.try_into().ok()?);
        self.data = &self.data[8..];
        Some(n)
    }

    /// The next SSH string, if the data holds one whole.
    fn string(&mut self) -> Option<Vec<u8>> {
        let len = u32::from_be_bytes(self.data.get(..4)?.try_into().ok()?) as usize;
        let s = self.data.get(4..4 + len)?.to_vec();
        self.data = &self.data[4 + len..];
        Some(s)
    }
}
