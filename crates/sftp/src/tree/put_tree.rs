//! A local tree copied there: walked here, its directories made a level at a time,
//! then its files sent many at once.

use std::collections::VecDeque;
use std::fs::FileType;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;

use super::{LISTINGS_AT_ONCE, Seen, Shared, Skip, Tally, TreeEvent, TreeReport};
use super::{a_loop, real_local, seen_with, shown, too_deep};
use crate::TransferOptions;
use crate::client::{SftpClient, SftpError, join, shown_local};
use crate::preserve::PERMISSION_BITS;
use crate::put::{OnDirectory, put_on};

/// [`SftpClient::put_tree`] over `clients` (at least one): directories made on the
/// first, the files spread over all.
pub(crate) async fn put_tree_on(
    clients: &[SftpClient],
    local: &Path,
    remote: &[u8],
    opts: &TransferOptions,
    event: impl FnMut(TreeEvent<'_>),
) -> Result<TreeReport, SftpError> {
    let shared = Shared::new(clients, opts);
    let mut tree = PutTree {
        shared: &shared,
        tally: Tally::new(event),
        levels: vec![vec![(remote.to_vec(), local.to_path_buf())]],
        files: Vec::new(),
    };
    tree.walk(local, remote)?;
    tree.make_dirs(remote).await?;
    tree.send_files().await;
    tree.preserve().await;
    tree.tally.finish(opts)
}

/// A local directory waiting to be read, and where it lands.
struct Dir {
    local: PathBuf,
    remote: Vec<u8>,
    /// Directories below the tree's root.
    depth: usize,
    seen: Seen,
}

/// A tree's put as it goes.
struct PutTree<'a, E> {
    shared: &'a Shared<'a>,
    tally: Tally<E>,
    /// The directories to make there, by depth below the root: where, and their source.
    levels: Vec<Vec<(Vec<u8>, PathBuf)>>,
    /// The files to send: their source, and where they land.
    files: Vec<(PathBuf, Vec<u8>)>,
}

impl<E: FnMut(TreeEvent<'_>)> PutTree<'_, E> {
    /// Reads the local tree, directories by depth, then the files; an error only when
    /// the root cannot be read.
    fn walk(&mut self, local: &Path, remote: &[u8]) -> Result<(), SftpError> {
        let seen = Arc::new(match self.shared.opts.follow_links {
            true => vec![real_local(local)?],
            false => Vec::new(),
        });
        let root = Dir {
            local: local.to_path_buf(),
            remote: remote.to_vec(),
            depth: 0,
            seen,
        };
        let mut walk = VecDeque::from([root]);
        while let Some(dir) = walk.pop_front() {
            let listing = std::fs::read_dir(&dir.local).map_err(|source| SftpError::Io {
                what: format!("cannot read {}", shown_local(&dir.local)),
                source,
            });
            let listing = match listing {
                Ok(l) => l,
                Err(e) if dir.depth > 0 => {
                    self.tally.failed(&shown_local(&dir.local), &e);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let mut found = 0u64;
            for entry in listing.flatten() {
                found = found.saturating_add(self.entry(&dir, &entry, &mut walk));
            }
            self.tally.found(found);
        }
        Ok(())
    }

    /// One entry of local directory `dir`: the bytes it adds, when it is a file.
    fn entry(&mut self, dir: &Dir, entry: &std::fs::DirEntry, walk: &mut VecDeque<Dir>) -> u64 {
        let path = entry.path();
        let remote = join(&dir.remote, entry.file_name().as_bytes());
        let (kind, seen) = match entry.file_type() {
            Ok(t) if t.is_symlink() && self.shared.opts.follow_links => {
                match follow(&path, &dir.seen) {
                    Ok((t, seen)) => (Ok(t), seen),
                    Err(e) => {
                        self.tally.failed(&shown_local(&path), &e);
                        return 0;
                    }
                }
            }
            other => (other, dir.seen.clone()),
        };
        match kind {
            Ok(t) if t.is_symlink() => self.tally.skipped(&shown_local(&path), Skip::Link),
            Ok(t) if t.is_dir() => {
                let depth = dir.depth + 1;
                match too_deep(depth, self.shared.opts, path.as_os_str().as_bytes()) {
                    Some(e) => self.tally.failed(&shown_local(&path), &e),
                    None => {
                        if self.levels.len() <= depth {
                            self.levels.push(Vec::new());
                        }
                        self.levels[depth].push((remote.clone(), path.clone()));
                        let (local, seen) = (path, seen);
                        walk.push_back(Dir {
                            local,
                            remote,
                            depth,
                            seen,
                        });
                    }
                }
            }
            // Opening a FIFO would wait for a writer, for ever.
            Ok(t) if !t.is_file() => self.tally.skipped(&shown_local(&path), Skip::Special),
            _ => {
                let size = std::fs::metadata(&path).map_or(0, |m| m.len());
                self.files.push((path, remote));
                return size;
            }
        }
        0
    }

    /// Makes the directories there a level at a time, many at once within a level; an
    /// error only when the root cannot be made.
    async fn make_dirs(&mut self, root: &[u8]) -> Result<(), SftpError> {
        let sftp = self.shared.first();
        for level in &self.levels {
            let made: Vec<_> = futures::stream::iter(level)
                .map(|(dir, path)| async move {
                    // The source's permission bits, as OpenSSH's `sftp -r` makes them.
                    let mode =
                        std::fs::metadata(path).map_or(0o777, |m| m.mode() & PERMISSION_BITS);
                    (dir, sftp.mkdir_or_exists(dir, mode).await)
                })
                .buffer_unordered(LISTINGS_AT_ONCE)
                .collect()
                .await;
            for (dir, result) in made {
                match result {
                    Err(e) if dir.as_slice() == root => return Err(e),
                    Err(e) => self.tally.failed(&shown(dir), &e),
                    Ok(()) => {}
                }
            }
        }
        Ok(())
    }

    /// Sends every file, many at once, spread over the sessions.
    async fn send_files(&mut self) {
        let shared = self.shared;
        let files = core::mem::take(&mut self.files);
        let mut sends = futures::stream::iter(files.into_iter().enumerate())
            .map(|(turn, (local, remote))| async move {
                if shared.opts.stop.is_stopped() {
                    return (local, Err(SftpError::Stopped));
                }
                let opts = shared.per_file();
                let client = shared.client(turn);
                let result = put_on(client, &local, &remote, &opts, OnDirectory::Refuse).await;
                (local, result)
            })
            .buffer_unordered(shared.files_at_once());
        while let Some((local, result)) = sends.next().await {
            self.tally.file(&shown_local(&local), result);
        }
    }

    /// With -p, gives each directory made its source's times and mode, deepest first,
    /// once every file is written (a write would change them).
    async fn preserve(&mut self) {
        let opts = self.shared.opts;
        if !opts.preserve || opts.stop.is_stopped() {
            return;
        }
        let sftp: &SftpClient = self.shared.first();
        for (dir, path) in self.levels.iter().rev().flatten() {
            let Ok(meta) = std::fs::metadata(path) else {
                continue;
            };
            if let Err(e) = sftp.setstat(dir, crate::preserve::of_local(&meta)).await {
                self.tally.failed(&shown(dir), &e);
            }
        }
    }
}

/// Follows a local symbolic link (`-L`): what it leads to and, for a directory, the
/// branch's `seen` with its real path added; an error for a loop.
fn follow(path: &Path, seen: &Seen) -> Result<(FileType, Seen), SftpError> {
    let meta = std::fs::metadata(path).map_err(|source| SftpError::Io {
        what: format!("cannot follow {}", shown_local(path)),
        source,
    })?;
    if !meta.is_dir() {
        return Ok((meta.file_type(), seen.clone()));
    }
    let real = real_local(path)?;
    if let Some(e) = a_loop(seen, &real, path.as_os_str().as_bytes()) {
        return Err(e);
    }
    Ok((meta.file_type(), seen_with(seen, real)))
}
