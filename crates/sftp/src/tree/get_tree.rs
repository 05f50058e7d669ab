//! A remote tree copied here: directories listed, and files fetched, many at once.

use core::future::Future;
use core::pin::Pin;
use std::collections::VecDeque;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use super::{LISTINGS_AT_ONCE, Seen, Shared, Skip, Tally, TreeEvent, TreeReport};
use super::{a_loop, seen_with, shown, too_deep};
use crate::client::{SftpClient, SftpError, join};
use crate::get::get_on;
use crate::preserve::PERMISSION_BITS;
use crate::{DirEntry, FileAttrs, TransferOptions};

/// [`SftpClient::get_tree`] over `clients` (at least one): listings on the first, the
/// files spread over all.
pub(crate) async fn get_tree_on(
    clients: &[SftpClient],
    remote: &[u8],
    local: &Path,
    opts: &TransferOptions,
    event: impl FnMut(TreeEvent<'_>),
) -> Result<TreeReport, SftpError> {
    let shared = Shared::new(clients, opts);
    let sftp = shared.first();
    let attrs = sftp.stat(remote).await?;
    if !attrs.is_dir() {
        return Err(SftpError::Local {
            path: shown(remote),
            problem: "is not a directory (get -r copies directories)".into(),
        });
    }
    let seen: Seen = Arc::new(match opts.follow_links {
        true => vec![sftp.realpath(remote).await?],
        false => Vec::new(),
    });
    let root = Place {
        remote: remote.to_vec(),
        local: local.to_path_buf(),
        seen,
        depth: 0,
    };
    let mut tree = GetTree::new(&shared, event, root, attrs);
    let mut tasks = FuturesUnordered::new();
    loop {
        tree.start(&mut tasks);
        let Some(outcome) = tasks.next().await else {
            break;
        };
        match outcome {
            Outcome::Listed(place, entries) => tree.listed(place, entries, &mut tasks),
            Outcome::Followed(place, target) => tree.followed(place, target),
            Outcome::Copied { path, result } => {
                tree.copying -= 1;
                tree.tally.file(&path, result);
            }
        }
    }
    tree.preserve();
    tree.tally.finish(opts)
}

type Task<'a> = Pin<Box<dyn Future<Output = Outcome> + Send + 'a>>;

/// A directory of the tree (or a link to one) and where it lands.
struct Place {
    remote: Vec<u8>,
    local: PathBuf,
    seen: Seen,
    /// Directories below the tree's root.
    depth: usize,
}

/// What one task of the walk did.
enum Outcome {
    /// A directory made here and listed there.
    Listed(Place, Result<Vec<DirEntry>, SftpError>),
    /// A symbolic link followed (`-L`): what it leads to, and where that really is.
    Followed(Place, Result<(FileAttrs, Vec<u8>), SftpError>),
    /// A file fetched.
    Copied {
        path: String,
        result: Result<u64, SftpError>,
    },
}

/// A remote file waiting to be fetched: where it is, where it lands, its attributes.
type Waiting = (Vec<u8>, PathBuf, Option<FileAttrs>);

/// A tree's get as it goes: what waits to be listed and fetched, what is under way.
struct GetTree<'a, E> {
    shared: &'a Shared<'a>,
    tally: Tally<E>,
    dirs: VecDeque<(Place, FileAttrs)>,
    /// Every directory made, with its attributes, for -p once its files are in.
    made: Vec<(PathBuf, FileAttrs)>,
    files: VecDeque<Waiting>,
    listing: usize,
    copying: usize,
    /// Files begun, to spread them over the sessions in turn.
    turn: usize,
}

impl<'a, E: FnMut(TreeEvent<'_>)> GetTree<'a, E> {
    fn new(shared: &'a Shared<'a>, event: E, root: Place, attrs: FileAttrs) -> Self {
        Self {
            shared,
            tally: Tally::new(event),
            made: vec![(root.local.clone(), attrs)],
            dirs: VecDeque::from([(root, attrs)]),
            files: VecDeque::new(),
            listing: 0,
            copying: 0,
            turn: 0,
        }
    }

    /// Begins listings and files up to their limits, unless the caller stopped.
    fn start(&mut self, tasks: &mut FuturesUnordered<Task<'a>>) {
        let (shared, stop) = (self.shared, &self.shared.opts.stop);
        while self.listing < LISTINGS_AT_ONCE && !stop.is_stopped() {
            let Some((place, attrs)) = self.dirs.pop_front() else {
                break;
            };
            self.listing += 1;
            tasks.push(Box::pin(make_and_list(shared, place, attrs)));
        }
        while self.copying < shared.files_at_once() && !stop.is_stopped() {
            let Some((remote, local, listed)) = self.files.pop_front() else {
                break;
            };
            self.copying += 1;
            let client = shared.client(self.turn);
            self.turn += 1;
            tasks.push(Box::pin(async move {
                let opts = shared.per_file();
                let result = get_on(client, &remote, &local, &opts, listed).await;
                let path = shown(&remote);
                Outcome::Copied { path, result }
            }));
        }
    }

    /// A directory's listing came back: its entries join the walk.
    fn listed(
        &mut self,
        place: Place,
        entries: Result<Vec<DirEntry>, SftpError>,
        tasks: &mut FuturesUnordered<Task<'a>>,
    ) {
        self.listing -= 1;
        let entries = match entries {
            Ok(entries) => entries,
            Err(e) => return self.tally.failed(&shown(&place.remote), &e),
        };
        let mut found = 0u64;
        for entry in entries {
            let own = entry.name == b"." || entry.name == b"..";
            if own && (entry.attrs.is_dir() || entry.attrs.permissions.is_none()) {
                // The directory's own entries, which every listing holds.
                continue;
            }
            found = found.saturating_add(self.entry(&place, entry, tasks));
        }
        self.tally.found(found);
    }

    /// One entry of a listing of `dir`: the bytes it adds, when it is a file.
    fn entry(
        &mut self,
        dir: &Place,
        entry: DirEntry,
        tasks: &mut FuturesUnordered<Task<'a>>,
    ) -> u64 {
        let remote = join(&dir.remote, &entry.name);
        if let Some(problem) = bad_name(&entry.name) {
            let problem = problem.into();
            let e = SftpError::Local {
                path: shown(&remote),
                problem,
            };
            self.tally.failed(&shown(&remote), &e);
            return 0;
        }
        let place = Place {
            local: dir.local.join(OsStr::from_bytes(&entry.name)),
            remote,
            seen: dir.seen.clone(),
            depth: dir.depth + 1,
        };
        let attrs = entry.attrs;
        let opts = self.shared.opts;
        if attrs.is_symlink() && opts.follow_links {
            self.listing += 1;
            tasks.push(Box::pin(follow(self.shared.first(), place)));
        } else if attrs.is_symlink() {
            self.tally.skipped(&shown(&place.remote), Skip::Link);
        } else if attrs.is_dir() {
            match too_deep(place.depth, opts, &place.remote) {
                Some(e) => self.tally.failed(&shown(&place.remote), &e),
                None => self.directory(place, attrs),
            }
        } else if attrs.is_special() {
            self.tally.skipped(&shown(&place.remote), Skip::Special);
        } else {
            self.files
                .push_back((place.remote, place.local, Some(attrs)));
            return attrs.size.unwrap_or(0);
        }
        0
    }

    /// A directory to make and list.
    fn directory(&mut self, place: Place, attrs: FileAttrs) {
        self.made.push((place.local.clone(), attrs));
        self.dirs.push_back((place, attrs));
    }

    /// A symbolic link was followed (`-L`): what it leads to joins the walk.
    fn followed(&mut self, place: Place, target: Result<(FileAttrs, Vec<u8>), SftpError>) {
        self.listing -= 1;
        let path = shown(&place.remote);
        match target {
            Err(e) => self.tally.failed(&path, &e),
            Ok((attrs, real)) if attrs.is_dir() => {
                let opts = self.shared.opts;
                let problem = too_deep(place.depth, opts, &place.remote)
                    .or_else(|| a_loop(&place.seen, &real, &place.remote));
                match problem {
                    Some(e) => self.tally.failed(&path, &e),
                    None => {
                        let seen = seen_with(&place.seen, real);
                        self.directory(Place { seen, ..place }, attrs);
                    }
                }
            }
            Ok((attrs, _)) if attrs.is_special() => self.tally.skipped(&path, Skip::Special),
            Ok((attrs, _)) => {
                self.tally.found(attrs.size.unwrap_or(0));
                self.files
                    .push_back((place.remote, place.local, Some(attrs)));
            }
        }
    }

    /// With -p, gives each directory made its source's times and mode, deepest first:
    /// setting a directory's times before its last entry was written would be undone
    /// by the write.
    fn preserve(&mut self) {
        if !self.shared.opts.preserve || self.shared.opts.stop.is_stopped() {
            return;
        }
        for (dir, attrs) in self.made.iter().rev().filter(|(d, _)| d.is_dir()) {
            if let Err(e) = crate::preserve::to_local(dir, *attrs) {
                self.tally.failed(&crate::client::shown_local(dir), &e);
            }
        }
    }
}

/// Makes a directory here and lists its source there.
async fn make_and_list(shared: &Shared<'_>, place: Place, attrs: FileAttrs) -> Outcome {
    // The source's permission bits, always usable by the owner (the files go in next),
    // under the umask, as OpenSSH's `sftp -r` makes them.
    let mode = attrs
        .permissions
        .map_or(0o777, |p| (p & PERMISSION_BITS) | 0o700);
    let made = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(&place.local);
    let max = shared.opts.max_entries;
    let entries = match made {
        Ok(()) => shared.first().read_dir_at_most(&place.remote, max).await,
        Err(source) => Err(SftpError::Io {
            what: format!("cannot create {}", crate::client::shown_local(&place.local)),
            source,
        }),
    };
    Outcome::Listed(place, entries)
}

/// Follows a symbolic link there (`-L`): what it leads to, and, for a directory, its
/// real path (to tell a loop).
async fn follow(sftp: &SftpClient, place: Place) -> Outcome {
    let target = match sftp.stat(&place.remote).await {
        Ok(attrs) if attrs.is_dir() => sftp.realpath(&place.remote).await.map(|r| (attrs, r)),
        other => other.map(|attrs| (attrs, Vec::new())),
    };
    Outcome::Followed(place, target)
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
