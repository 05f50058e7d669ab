//! Whole directory trees, both ways, pipelined across the tree: directory listings
//! (or, for `put`, directory creations a level at a time) and whole-file transfers run
//! many at once on the one session, instead of one file after another as OpenSSH's
//! `sftp -r` does. Each file is a [`SftpClient::get`] or [`SftpClient::put`] of its own
//! (many requests in flight within it too). Symbolic links are skipped and reported; a
//! file that fails is reported by path and the rest go on.

use core::future::Future;
use core::pin::Pin;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use crate::client::{SftpClient, SftpError, join};
use crate::get::get_on;
use crate::preserve::PERMISSION_BITS;
use crate::put::{OnDirectory, put_on};
use crate::{FileAttrs, Progress, TransferOptions};

/// Files moved at once when the server states no limit on open handles.
pub const DEFAULT_FILES_AT_ONCE: usize = 16;
/// Files moved at once at most, whatever the server allows (the connection's own cap on
/// requests in flight bounds the memory they take).
pub const MAX_FILES_AT_ONCE: usize = 128;
/// Directory listings in flight at once.
const LISTINGS_AT_ONCE: usize = 16;

/// Why an entry of a tree was passed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// A symbolic link, not followed.
    Link,
    /// A FIFO, a socket or a device: never opened (opening a FIFO waits for a writer).
    Special,
}

impl core::fmt::Display for Skip {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::Link => "a symbolic link (not followed)",
            Self::Special => "not a regular file or directory (a FIFO, socket or device)",
        })
    }
}

/// What happened to one entry of a tree, as it happens.
#[derive(Debug)]
pub enum TreeEvent<'a> {
    /// A file arrived whole: its path (as given in the tree) and size.
    Done(&'a str, u64),
    /// An entry passed over, and why.
    Skipped(&'a str, Skip),
    /// An entry that failed, and why; the rest go on.
    Failed(&'a str, &'a SftpError),
    /// More bytes known to be coming (a directory was listed).
    Found(u64),
}

/// What a tree transfer did.
#[derive(Debug, Default)]
pub struct TreeReport {
    /// Files copied whole.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Symbolic links, FIFOs, sockets and devices skipped.
    pub skipped: u64,
    /// Entries that failed.
    pub failed: u64,
}

impl TreeReport {
    /// Counts one file's outcome and tells `event`.
    fn file(
        &mut self,
        path: &str,
        result: Result<u64, SftpError>,
        event: &mut impl FnMut(TreeEvent<'_>),
    ) {
        match result {
            Ok(n) => {
                self.files += 1;
                self.bytes += n;
                event(TreeEvent::Done(path, n));
            }
            // Not begun, or stopped with nothing kept: the tree's own error says so.
            Err(SftpError::Stopped) => {}
            Err(e) => {
                self.failed += 1;
                event(TreeEvent::Failed(path, &e));
            }
        }
    }
}

type Task<'a> = Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>;

/// The real paths of the directories that symbolic links led a branch of the walk
/// into (and its root), with `-L`: a link to one of them, or above one, is a loop.
type Seen = Arc<Vec<Vec<u8>>>;

enum Outcome {
    Listed {
        remote: Vec<u8>,
        local: PathBuf,
        seen: Seen,
        /// Directories below the tree's root.
        depth: usize,
        entries: Result<Vec<crate::DirEntry>, SftpError>,
    },
    /// A symbolic link followed (`-L`): what it leads to, and where that really is.
    Followed {
        remote: Vec<u8>,
        local: PathBuf,
        seen: Seen,
        /// Directories below the tree's root, of the link.
        depth: usize,
        target: Result<(FileAttrs, Vec<u8>), SftpError>,
    },
    Copied {
        path: String,
        result: Result<u64, SftpError>,
    },
}

fn shown(path: &[u8]) -> String {
    crate::printable_bytes(path)
}

/// The real path of a local directory, as bytes.
fn real_local(path: &Path) -> Result<Vec<u8>, SftpError> {
    let real = std::fs::canonicalize(path).map_err(|source| SftpError::Io {
        what: format!("cannot resolve {}", crate::client::shown_local(path)),
        source,
    })?;
    Ok(real.into_os_string().into_vec())
}

/// With `-L`: the error for a link to `real` (a directory) met at `path`, when `real` is
/// a directory the walk came through (or one above it), so entering it would not end.
fn a_loop(seen: &[Vec<u8>], real: &[u8], path: &[u8]) -> Option<SftpError> {
    let above = |inside: &[u8]| {
        inside == real
            || (inside.starts_with(real)
                && (real.ends_with(b"/") || inside.get(real.len()) == Some(&b'/')))
    };
    seen.iter().any(|s| above(s)).then(|| SftpError::Local {
        path: shown(path),
        problem: format!(
            "is a symbolic link to {}, which the walk is already inside: a loop, not followed",
            shown(real)
        ),
    })
}

/// One file's options in a tree: `quiet` (no progress of its own), or, when the tree
/// has a progress report, one that adds the bytes the file moves to `moved` as they
/// arrive and tells the tree's total so far (`total` unknown: the tree's size grows as
/// it is listed, which [`TreeEvent::Found`] tells).
fn per_file(
    opts: &TransferOptions,
    quiet: &TransferOptions,
    moved: &Arc<AtomicU64>,
) -> TransferOptions {
    let Some(tree) = opts.progress.clone() else {
        return quiet.clone();
    };
    let moved = moved.clone();
    // The file's first report is where it starts (a resume's kept bytes): not moved.
    let (started, last) = (AtomicBool::new(false), AtomicU64::new(0));
    quiet.clone().with_progress(move |p: Progress| {
        let before = last.fetch_max(p.done, Ordering::Relaxed);
        if started.swap(true, Ordering::Relaxed) && p.done > before {
            let delta = p.done - before;
            let done = moved.fetch_add(delta, Ordering::Relaxed) + delta;
            tree(Progress { done, total: None });
        }
    })
}

/// The mode a local copy of a remote directory is made with, before the umask.
fn made_mode(attrs: FileAttrs) -> u32 {
    attrs
        .permissions
        .map_or(0o777, |p| (p & PERMISSION_BITS) | 0o700)
}

/// Why a name a server listed cannot be an entry of a local directory: it would name
/// the directory itself, its parent, or a path elsewhere.
fn bad_name(name: &[u8]) -> Option<&'static str> {
    Some(match name {
        b"" => "is listed with an empty name; refused",
        b"." | b".." => "is listed as `.` or `..` but not as a directory; refused",
        _ if name.contains(&b'/') => "is listed with a `/` in its name; refused",
        _ if name.contains(&0) => "is listed with a NUL byte in its name; refused",
        _ => return None,
    })
}

/// The error for a directory `depth` levels below a tree's root, past `opts.max_depth`.
fn too_deep(depth: usize, opts: &TransferOptions, path: &[u8]) -> Option<SftpError> {
    (depth > opts.max_depth).then(|| SftpError::Local {
        path: shown(path),
        problem: format!(
            "is more than {} directories deep below the tree's root; not entered (raise the depth limit to go on)",
            opts.max_depth
        ),
    })
}

/// [`SftpClient::get_tree`] over `clients` (at least one): listings on the first, the
/// files spread over all.
pub(crate) async fn get_tree_on(
    clients: &[SftpClient],
    remote: &[u8],
    local: &Path,
    opts: &TransferOptions,
    mut event: impl FnMut(TreeEvent<'_>),
) -> Result<TreeReport, SftpError> {
    let sftp = &clients[0];
    let attrs = sftp.stat(remote).await?;
    if !attrs.is_dir() {
        return Err(SftpError::Local {
            path: crate::printable_bytes(remote),
            problem: "is not a directory (get -r copies directories)".into(),
        });
    }
    let mut report = TreeReport::default();
    let root_seen: Seen = Arc::new(match opts.follow_links {
        true => vec![sftp.realpath(remote).await?],
        false => Vec::new(),
    });
    let mut dirs = VecDeque::from([(remote.to_vec(), local.to_path_buf(), root_seen, attrs, 0)]);
    // Every directory made, with its attributes, for -p once its files are in.
    let mut made = vec![(local.to_path_buf(), attrs)];
    let mut files: VecDeque<(Vec<u8>, PathBuf, Option<FileAttrs>)> = VecDeque::new();
    let quiet = opts.quiet();
    let moved = Arc::new(AtomicU64::new(0));
    let moved = &moved;
    let mut tasks: FuturesUnordered<Task<'_>> = FuturesUnordered::new();
    let (mut listing, mut copying) = (0, 0);
    let files_at_once: usize = clients.iter().map(SftpClient::files_at_once).sum();
    let quiet = &quiet;

    let mut turn = 0usize;
    loop {
        while listing < LISTINGS_AT_ONCE && !opts.stop.is_stopped() {
            let Some((remote, local, seen, attrs, depth)) = dirs.pop_front() else {
                break;
            };
            listing += 1;
            tasks.push(Box::pin(async move {
                // The source's permission bits, always usable by the owner (the files
                // go in next), under the umask, as OpenSSH's `sftp -r` makes them.
                let mode = made_mode(attrs);
                let made = std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(mode)
                    .create(&local);
                let entries = match made {
                    Ok(()) => sftp.read_dir_at_most(&remote, opts.max_entries).await,
                    Err(source) => Err(SftpError::Io {
                        what: format!("cannot create {}", crate::client::shown_local(&local)),
                        source,
                    }),
                };
                Outcome::Listed {
                    remote,
                    local,
                    seen,
                    depth,
                    entries,
                }
            }));
        }
        while copying < files_at_once && !opts.stop.is_stopped() {
            let Some((remote, local, listed)) = files.pop_front() else {
                break;
            };
            copying += 1;
            let client = core::slice::from_ref(&clients[turn % clients.len()]);
            turn += 1;
            tasks.push(Box::pin(async move {
                let opts = per_file(opts, quiet, moved);
                let result = get_on(client, &remote, &local, &opts, listed).await;
                Outcome::Copied {
                    path: shown(&remote),
                    result,
                }
            }));
        }
        let Some(outcome) = tasks.next().await else {
            break;
        };
        match outcome {
            Outcome::Listed {
                remote,
                local,
                seen,
                depth,
                entries,
            } => {
                listing -= 1;
                let entries = match entries {
                    Ok(entries) => entries,
                    Err(e) => {
                        report.failed += 1;
                        event(TreeEvent::Failed(&shown(&remote), &e));
                        continue;
                    }
                };
                let mut found = 0u64;
                for entry in entries {
                    let own = entry.name == b"." || entry.name == b"..";
                    if own && (entry.attrs.is_dir() || entry.attrs.permissions.is_none()) {
                        // The directory's own entries, which every listing holds.
                        continue;
                    }
                    let child = join(&remote, &entry.name);
                    if let Some(problem) = bad_name(&entry.name) {
                        report.failed += 1;
                        let e = SftpError::Local {
                            path: shown(&child),
                            problem: problem.into(),
                        };
                        event(TreeEvent::Failed(&shown(&child), &e));
                        continue;
                    }
                    let local = local.join(OsStr::from_bytes(&entry.name));
                    if entry.attrs.is_symlink() && opts.follow_links {
                        listing += 1;
                        let seen = seen.clone();
                        tasks.push(Box::pin(async move {
                            let target = match sftp.stat(&child).await {
                                Ok(attrs) if attrs.is_dir() => {
                                    sftp.realpath(&child).await.map(|real| (attrs, real))
                                }
                                other => other.map(|attrs| (attrs, Vec::new())),
                            };
                            Outcome::Followed {
                                remote: child,
                                local,
                                seen,
                                depth: depth + 1,
                                target,
                            }
                        }));
                    } else if entry.attrs.is_symlink() {
                        report.skipped += 1;
                        event(TreeEvent::Skipped(&shown(&child), Skip::Link));
                    } else if entry.attrs.is_dir() {
                        if let Some(e) = too_deep(depth + 1, opts, &child) {
                            report.failed += 1;
                            event(TreeEvent::Failed(&shown(&child), &e));
                            continue;
                        }
                        made.push((local.clone(), entry.attrs));
                        dirs.push_back((child, local, seen.clone(), entry.attrs, depth + 1));
                    } else if entry.attrs.is_special() {
                        report.skipped += 1;
                        event(TreeEvent::Skipped(&shown(&child), Skip::Special));
                    } else {
                        found = found.saturating_add(entry.attrs.size.unwrap_or(0));
                        files.push_back((child, local, Some(entry.attrs)));
                    }
                }
                event(TreeEvent::Found(found));
            }
            Outcome::Followed {
                remote,
                local,
                seen,
                depth,
                target,
            } => {
                listing -= 1;
                match target {
                    Err(e) => {
                        report.failed += 1;
                        event(TreeEvent::Failed(&shown(&remote), &e));
                    }
                    Ok((attrs, real)) if attrs.is_dir() => {
                        let problem = too_deep(depth, opts, &remote)
                            .or_else(|| a_loop(&seen, &real, &remote));
                        if let Some(e) = problem {
                            report.failed += 1;
                            event(TreeEvent::Failed(&shown(&remote), &e));
                            continue;
                        }
                        let mut chain = (*seen).clone();
                        chain.push(real);
                        made.push((local.clone(), attrs));
                        dirs.push_back((remote, local, Arc::new(chain), attrs, depth));
                    }
                    Ok((attrs, _)) if attrs.is_special() => {
                        report.skipped += 1;
                        event(TreeEvent::Skipped(&shown(&remote), Skip::Special));
                    }
                    Ok((attrs, _)) => {
                        event(TreeEvent::Found(attrs.size.unwrap_or(0)));
                        files.push_back((remote, local, Some(attrs)));
                    }
                }
            }
            Outcome::Copied { path, result } => {
                copying -= 1;
                report.file(&path, result, &mut event);
            }
        }
    }
    if opts.stop.is_stopped() {
        return Err(SftpError::Stopped);
    }
    if opts.preserve {
        // Deepest first: setting a directory's times before its last entry was
        // written would be undone by the write.
        for (dir, attrs) in made.iter().rev().filter(|(d, _)| d.is_dir()) {
            if let Err(e) = crate::preserve::to_local(dir, *attrs) {
                report.failed += 1;
                event(TreeEvent::Failed(&crate::client::shown_local(dir), &e));
            }
        }
    }
    Ok(report)
}

/// [`SftpClient::put_tree`] over `clients` (at least one): directories made on the
/// first, the files spread over all.
pub(crate) async fn put_tree_on(
    clients: &[SftpClient],
    local: &Path,
    remote: &[u8],
    opts: &TransferOptions,
    mut event: impl FnMut(TreeEvent<'_>),
) -> Result<TreeReport, SftpError> {
    let sftp = &clients[0];
    let mut report = TreeReport::default();
    // The local walk: directories by depth, then the files.
    let mut levels: Vec<Vec<(Vec<u8>, PathBuf)>> =
        vec![vec![(remote.to_vec(), local.to_path_buf())]];
    let mut files = VecDeque::new();
    let root_seen: Seen = Arc::new(match opts.follow_links {
        true => vec![real_local(local)?],
        false => Vec::new(),
    });
    let mut walk = VecDeque::from([(local.to_path_buf(), remote.to_vec(), 0usize, root_seen)]);
    while let Some((dir, rdir, depth, seen)) = walk.pop_front() {
        let listing = std::fs::read_dir(&dir).map_err(|source| SftpError::Io {
            what: format!("cannot read {}", crate::client::shown_local(&dir)),
            source,
        });
        let listing = match listing {
            Ok(l) => l,
            Err(e) if depth > 0 => {
                report.failed += 1;
                event(TreeEvent::Failed(&crate::client::shown_local(&dir), &e));
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut found = 0u64;
        for entry in listing.flatten() {
            let path = entry.path();
            let rpath = join(&rdir, entry.file_name().as_bytes());
            let mut seen = seen.clone();
            let kind = match entry.file_type() {
                Ok(t) if t.is_symlink() && opts.follow_links => {
                    let followed = std::fs::metadata(&path).map_err(|source| SftpError::Io {
                        what: format!("cannot follow {}", crate::client::shown_local(&path)),
                        source,
                    });
                    let followed = followed.and_then(|meta| {
                        if !meta.is_dir() {
                            return Ok(meta.file_type());
                        }
                        let real = real_local(&path)?;
                        if let Some(e) = a_loop(&seen, &real, path.as_os_str().as_bytes()) {
                            return Err(e);
                        }
                        let mut chain = (*seen).clone();
                        chain.push(real);
                        seen = Arc::new(chain);
                        Ok(meta.file_type())
                    });
                    match followed {
                        Ok(t) => Ok(t),
                        Err(e) => {
                            report.failed += 1;
                            event(TreeEvent::Failed(&crate::client::shown_local(&path), &e));
                            continue;
                        }
                    }
                }
                other => other,
            };
            match kind {
                Ok(t) if t.is_symlink() => {
                    report.skipped += 1;
                    event(TreeEvent::Skipped(
                        &crate::client::shown_local(&path),
                        Skip::Link,
                    ));
                }
                Ok(t) if t.is_dir() => {
                    let problem = too_deep(depth + 1, opts, path.as_os_str().as_bytes());
                    if let Some(e) = problem {
                        report.failed += 1;
                        event(TreeEvent::Failed(&crate::client::shown_local(&path), &e));
                        continue;
                    }
                    if levels.len() <= depth + 1 {
                        levels.push(Vec::new());
                    }
                    levels[depth + 1].push((rpath.clone(), path.clone()));
                    walk.push_back((path, rpath, depth + 1, seen));
                }
                Ok(t) if !t.is_file() => {
                    // Opening a FIFO would wait for a writer, for ever.
                    report.skipped += 1;
                    event(TreeEvent::Skipped(
                        &crate::client::shown_local(&path),
                        Skip::Special,
                    ));
                }
                _ => {
                    found = found.saturating_add(std::fs::metadata(&path).map_or(0, |m| m.len()));
                    files.push_back((path, rpath));
                }
            }
        }
        event(TreeEvent::Found(found));
    }
    for level in &levels {
        let made: Vec<_> = futures::stream::iter(level)
            .map(|(dir, path)| async move {
                // The source's permission bits, as OpenSSH's `sftp -r` makes them.
                let mode = std::fs::metadata(path).map_or(0o777, |m| m.mode() & PERMISSION_BITS);
                (dir, sftp.mkdir_or_exists(dir, mode).await)
            })
            .buffer_unordered(LISTINGS_AT_ONCE)
            .collect()
            .await;
        for (dir, result) in made {
            if let Err(e) = result {
                if dir.as_slice() == remote {
                    return Err(e);
                }
                report.failed += 1;
                event(TreeEvent::Failed(&shown(dir), &e));
            }
        }
    }
    let quiet = opts.quiet();
    let quiet = &quiet;
    let moved = Arc::new(AtomicU64::new(0));
    let moved = &moved;
    let mut copies = futures::stream::iter(files.into_iter().enumerate())
        .map(|(i, (local, remote))| async move {
            if opts.stop.is_stopped() {
                return (local, Err(SftpError::Stopped));
            }
            let client = core::slice::from_ref(&clients[i % clients.len()]);
            let opts = per_file(opts, quiet, moved);
            let result = put_on(client, &local, &remote, &opts, OnDirectory::Refuse).await;
            (local, result)
        })
        .buffer_unordered(clients.iter().map(SftpClient::files_at_once).sum());
    while let Some((local, result)) = copies.next().await {
        report.file(&crate::client::shown_local(&local), result, &mut event);
    }
    if opts.stop.is_stopped() {
        return Err(SftpError::Stopped);
    }
    if opts.preserve {
        // Deepest first, once every file is written (a write would change them).
        for (dir, path) in levels.iter().rev().flatten() {
            let Ok(meta) = std::fs::metadata(path) else {
                continue;
            };
            if let Err(e) = sftp.setstat(dir, crate::preserve::of_local(&meta)).await {
                report.failed += 1;
                event(TreeEvent::Failed(&shown(dir), &e));
            }
        }
    }
    Ok(report)
}
