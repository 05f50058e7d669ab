//! Whole directory trees, both ways, pipelined across the tree: directory listings
//! (or, for `put`, directory creations a level at a time) and whole-file transfers run
//! many at once on the one session, instead of one file after another as OpenSSH's
//! `sftp -r` does. Each file is a [`SftpClient::get`] or [`SftpClient::put`] of its own
//! (many requests in flight within it too). Symbolic links are skipped and reported; a
//! file that fails is reported by path and the rest go on.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::sync::Arc;

use crate::client::{SftpClient, SftpError};
use crate::{Progress, TransferOptions};

mod get_tree;
mod put_tree;

pub(crate) use get_tree::get_tree_on;
pub(crate) use put_tree::put_tree_on;

/// Files moved at once when the server states no limit on open handles.
pub const DEFAULT_FILES_AT_ONCE: usize = 16;
/// Files moved at once at most, whatever the server allows (the connection's own cap on
/// requests in flight bounds the memory they take).
pub const MAX_FILES_AT_ONCE: usize = 128;
/// Directory listings (or creations) in flight at once.
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

/// A tree transfer's report as it grows, and the caller's `event` told of each entry.
struct Tally<E> {
    report: TreeReport,
    event: E,
}

impl<E: FnMut(TreeEvent<'_>)> Tally<E> {
    fn new(event: E) -> Self {
        Self {
            report: TreeReport::default(),
            event,
        }
    }

    /// An entry at `path` failed with `e`; the rest go on.
    fn failed(&mut self, path: &str, e: &SftpError) {
        self.report.failed += 1;
        (self.event)(TreeEvent::Failed(path, e));
    }

    /// An entry at `path` passed over, and why.
    fn skipped(&mut self, path: &str, why: Skip) {
        self.report.skipped += 1;
        (self.event)(TreeEvent::Skipped(path, why));
    }

    /// `bytes` more known to be coming.
    fn found(&mut self, bytes: u64) {
        (self.event)(TreeEvent::Found(bytes));
    }

    /// Counts one file's outcome.
    fn file(&mut self, path: &str, result: Result<u64, SftpError>) {
        match result {
            Ok(n) => {
                self.report.files += 1;
                self.report.bytes += n;
                (self.event)(TreeEvent::Done(path, n));
            }
            // Not begun, or stopped with nothing kept: the tree's own error says so.
            Err(SftpError::Stopped) => {}
            Err(e) => self.failed(path, &e),
        }
    }

    /// The report, or [`SftpError::Stopped`] when the caller stopped the tree.
    fn finish(self, opts: &TransferOptions) -> Result<TreeReport, SftpError> {
        match opts.stop.is_stopped() {
            true => Err(SftpError::Stopped),
            false => Ok(self.report),
        }
    }
}

/// What every file of a tree transfer shares: the sessions, the tree's options, each
/// file's quiet options, and the bytes moved so far for the tree's progress.
struct Shared<'a> {
    clients: &'a [SftpClient],
    opts: &'a TransferOptions,
    quiet: TransferOptions,
    moved: Arc<AtomicU64>,
}

impl<'a> Shared<'a> {
    fn new(clients: &'a [SftpClient], opts: &'a TransferOptions) -> Self {
        Self {
            clients,
            opts,
            quiet: opts.quiet(),
            moved: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The session listings and directory creations go to.
    fn first(&self) -> &'a SftpClient {
        &self.clients[0]
    }

    /// The session (as a one-element slice) the `turn`th file goes over: files are
    /// spread over every session in turn.
    fn client(&self, turn: usize) -> &'a [SftpClient] {
        core::slice::from_ref(&self.clients[turn % self.clients.len()])
    }

    /// Files moved at once over all the sessions.
    fn files_at_once(&self) -> usize {
        self.clients.iter().map(SftpClient::files_at_once).sum()
    }

    /// One file's options in the tree: quiet (no progress of its own), or, when the
    /// tree has a progress report, one that adds the bytes the file moves to `moved`
    /// as they arrive and tells the tree's total so far (`total` unknown: the tree's
    /// size grows as it is listed, which [`TreeEvent::Found`] tells).
    fn per_file(&self) -> TransferOptions {
        let Some(tree) = self.opts.progress.clone() else {
            return self.quiet.clone();
        };
        let moved = self.moved.clone();
        // The file's first report is where it starts (a resume's kept bytes): not moved.
        let (started, last) = (AtomicBool::new(false), AtomicU64::new(0));
        self.quiet.clone().with_progress(move |p: Progress| {
            let before = last.fetch_max(p.done, Ordering::Relaxed);
            if started.swap(true, Ordering::Relaxed) && p.done > before {
                let delta = p.done - before;
                let done = moved.fetch_add(delta, Ordering::Relaxed) + delta;
                tree(Progress { done, total: None });
            }
        })
    }
}

/// The real paths of the directories that symbolic links led a branch of the walk
/// into (and its root), with `-L`: a link to one of them, or above one, is a loop.
type Seen = Arc<Vec<Vec<u8>>>;

/// `seen` with `real` added: the branch has now followed a link into it.
fn seen_with(seen: &Seen, real: Vec<u8>) -> Seen {
    let mut chain = (**seen).clone();
    chain.push(real);
    Arc::new(chain)
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
