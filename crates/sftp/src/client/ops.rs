//! One method per SFTP request: files, directories, links and names.

use bytes::Bytes;
use volley_proto::sftp::{
    FSYNC_EXTENSION, OpenFlags, POSIX_RENAME_EXTENSION, Request, Response, StatusCode,
};

use super::{
    DirEntry, FileAttrs, Handle, SftpClient, SftpError, data_or_eof, expect_ok, parse,
    status_or_unexpected,
};

impl SftpClient {
    /// Opens a file.
    pub async fn open(
        &self,
        path: &[u8],
        flags: OpenFlags,
        attrs: FileAttrs,
    ) -> Result<Handle, SftpError> {
        let request = Request::Open {
            id: 0,
            filename: path,
            pflags: flags,
            attrs: attrs.to_wire(),
        };
        self.handle_reply(&request, "open", path).await
    }

    /// Closes a file or directory handle; an error names the handle.
    pub async fn close(&self, handle: &Handle) -> Result<(), SftpError> {
        self.close_named(handle, handle.to_string().as_bytes())
            .await
    }

    /// Closes a handle opened on `path`, naming the path in any error.
    pub(crate) async fn close_named(&self, handle: &Handle, path: &[u8]) -> Result<(), SftpError> {
        self.status_reply(
            &Request::Close {
                id: 0,
                handle: &handle.0,
            },
            "close",
            path,
        )
        .await
    }

    /// Reads up to `len` bytes at `offset`; `None` at end of file. Fewer bytes than asked
    /// for are not end of file.
    pub async fn read(
        &self,
        handle: &Handle,
        offset: u64,
        len: u32,
    ) -> Result<Option<Bytes>, SftpError> {
        let reply = self
            .round_trip(
                &Request::Read {
                    id: 0,
                    handle: &handle.0,
                    offset,
                    len,
                },
                "read",
                &handle.to_string(),
            )
            .await?;
        data_or_eof(&reply, "read", &handle.to_string())
    }

    /// Writes `data` at `offset`; the payload goes to the socket uncopied.
    pub async fn write(&self, handle: &Handle, offset: u64, data: Bytes) -> Result<(), SftpError> {
        let mut pipeline = self.conn.pipeline();
        self.send(
            &mut pipeline,
            &Request::Write {
                id: 0,
                handle: &handle.0,
                offset,
                data: &data,
            },
            data.clone(),
            "write",
        )
        .await?;
        let reply = self
            .recv(&mut pipeline, "write", &handle.to_string())
            .await?;
        expect_ok(&reply, "write", &handle.to_string())
    }

    /// Attributes of `path`, following symlinks.
    pub async fn stat(&self, path: &[u8]) -> Result<FileAttrs, SftpError> {
        self.attrs_reply(&Request::Stat { id: 0, path }, "stat", path)
            .await
    }

    /// Attributes of `path` itself.
    pub async fn lstat(&self, path: &[u8]) -> Result<FileAttrs, SftpError> {
        self.attrs_reply(&Request::Lstat { id: 0, path }, "lstat", path)
            .await
    }

    /// Attributes of an open handle.
    pub async fn fstat(&self, handle: &Handle) -> Result<FileAttrs, SftpError> {
        self.attrs_reply(
            &Request::Fstat {
                id: 0,
                handle: &handle.0,
            },
            "fstat",
            handle.to_string().as_bytes(),
        )
        .await
    }

    /// Sets attributes of `path`.
    pub async fn setstat(&self, path: &[u8], attrs: FileAttrs) -> Result<(), SftpError> {
        self.status_reply(
            &Request::Setstat {
                id: 0,
                path,
                attrs: attrs.to_wire(),
            },
            "setstat",
            path,
        )
        .await
    }

    /// Sets attributes of an open handle.
    pub async fn fsetstat(&self, handle: &Handle, attrs: FileAttrs) -> Result<(), SftpError> {
        self.status_reply(
            &Request::Fsetstat {
                id: 0,
                handle: &handle.0,
                attrs: attrs.to_wire(),
            },
            "fsetstat",
            handle.to_string().as_bytes(),
        )
        .await
    }

    /// Opens a directory.
    pub async fn opendir(&self, path: &[u8]) -> Result<Handle, SftpError> {
        self.handle_reply(&Request::Opendir { id: 0, path }, "opendir", path)
            .await
    }

    /// The next entries of a directory (OpenSSH sends at most 100 a reply); `None` at
    /// the end.
    pub async fn readdir(&self, handle: &Handle) -> Result<Option<Vec<DirEntry>>, SftpError> {
        let reply = self
            .round_trip(
                &Request::Readdir {
                    id: 0,
                    handle: &handle.0,
                },
                "readdir",
                &handle.to_string(),
            )
            .await?;
        match parse(&reply, "readdir")? {
            Response::Name { names, .. } => Ok(Some(
                names
                    .iter()
                    .map(|e| DirEntry {
                        name: e.filename.to_vec(),
                        longname: e.longname.to_vec(),
                        attrs: FileAttrs::from_wire(&e.attrs),
                    })
                    .collect(),
            )),
            Response::Status {
                code: StatusCode::EOF,
                ..
            } => Ok(None),
            other => Err(status_or_unexpected("readdir", &handle.to_string(), &other)),
        }
    }

    /// Every entry of the directory at `path`, at most [`MAX_ENTRIES`](crate::MAX_ENTRIES).
    pub async fn read_dir(&self, path: &[u8]) -> Result<Vec<DirEntry>, SftpError> {
        self.read_dir_at_most(path, crate::MAX_ENTRIES).await
    }

    /// Every entry of the directory at `path`; more than `max` (a server that lists
    /// without end) is an error naming the directory.
    pub async fn read_dir_at_most(
        &self,
        path: &[u8],
        max: usize,
    ) -> Result<Vec<DirEntry>, SftpError> {
        let handle = self.opendir(path).await?;
        let mut entries = Vec::new();
        let result = async {
            while let Some(batch) = self.readdir(&handle).await? {
                entries.extend(batch);
                if entries.len() > max {
                    return Err(SftpError::Local {
                        path: crate::printable_bytes(path),
                        problem: format!(
                            "lists more than {max} entries; refused (raise the limit on entries in one listing to go on)"
                        ),
                    });
                }
            }
            Ok(())
        }
        .await;
        self.close_named(&handle, path).await?;
        result.map(|()| entries)
    }

    /// Removes a file.
    pub async fn remove(&self, path: &[u8]) -> Result<(), SftpError> {
        self.status_reply(
            &Request::Remove {
                id: 0,
                filename: path,
            },
            "remove",
            path,
        )
        .await
    }

    /// Makes a directory.
    pub async fn mkdir(&self, path: &[u8], attrs: FileAttrs) -> Result<(), SftpError> {
        self.status_reply(
            &Request::Mkdir {
                id: 0,
                path,
                attrs: attrs.to_wire(),
            },
            "mkdir",
            path,
        )
        .await
    }

    /// Removes an empty directory.
    pub async fn rmdir(&self, path: &[u8]) -> Result<(), SftpError> {
        self.status_reply(&Request::Rmdir { id: 0, path }, "rmdir", path)
            .await
    }

    /// Renames `from` to `to`; fails if `to` exists (see [`SftpClient::posix_rename`]).
    pub async fn rename(&self, from: &[u8], to: &[u8]) -> Result<(), SftpError> {
        self.status_reply(
            &Request::Rename {
                id: 0,
                oldpath: from,
                newpath: to,
            },
            "rename",
            from,
        )
        .await
    }

    /// Renames `from` to `to`, replacing `to` (`posix-rename@openssh.com`).
    pub async fn posix_rename(&self, from: &[u8], to: &[u8]) -> Result<(), SftpError> {
        let mut data = Vec::with_capacity(8 + from.len() + to.len());
        for s in [from, to] {
            data.extend_from_slice(&(s.len() as u32).to_be_bytes());
            data.extend_from_slice(s);
        }
        let request = Request::Extended {
            id: 0,
            request: POSIX_RENAME_EXTENSION,
            data: &data,
        };
        self.status_reply(&request, "posix-rename", from).await
    }

    /// Asks the server to flush an open file to its disk (`fsync@openssh.com`; check
    /// [`SftpClient::has_extension`] first: a server without it answers an error).
    pub async fn fsync(&self, handle: &Handle) -> Result<(), SftpError> {
        let mut data = Vec::with_capacity(4 + handle.0.len());
        data.extend_from_slice(&(handle.0.len() as u32).to_be_bytes());
        data.extend_from_slice(&handle.0);
        let request = Request::Extended {
            id: 0,
            request: FSYNC_EXTENSION,
            data: &data,
        };
        self.status_reply(&request, "fsync", &handle.to_string().into_bytes())
            .await
    }

    /// The canonical absolute form of `path`.
    pub async fn realpath(&self, path: &[u8]) -> Result<Vec<u8>, SftpError> {
        self.single_name(&Request::Realpath { id: 0, path }, "realpath", path)
            .await
    }

    /// The target of the symlink at `path`.
    pub async fn readlink(&self, path: &[u8]) -> Result<Vec<u8>, SftpError> {
        self.single_name(&Request::Readlink { id: 0, path }, "readlink", path)
            .await
    }

    /// Makes a symlink at `link` pointing to `target`. OpenSSH reads SYMLINK's two paths
    /// in the opposite order to the draft; this sends them the way OpenSSH reads them.
    pub async fn symlink(&self, target: &[u8], link: &[u8]) -> Result<(), SftpError> {
        let request = Request::Symlink {
            id: 0,
            linkpath: target,
            targetpath: link,
        };
        self.status_reply(&request, "symlink", link).await
    }
}
