//! The session's open files and directories, by the handle each was given.

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// What a handle names.
#[derive(Clone)]
pub(crate) enum Open {
    /// A file, shared by the requests running on it (READs and WRITEs at their own
    /// offsets), and whether it was opened to append.
    File(Arc<File>, bool),
    /// A directory being listed: its path (for the entries' attributes) and the names
    /// still to give.
    Dir(Arc<Mutex<Listing>>),
}

/// A directory listing under way.
pub(crate) struct Listing {
    pub(crate) path: PathBuf,
    /// `None` until the first READDIR reads it (then `.` and `..` first, as OpenSSH's).
    pub(crate) entries: Option<std::vec::IntoIter<Vec<u8>>>,
}

/// The handles of one session.
pub(crate) struct Handles {
    open: Mutex<HashMap<u32, Open>>,
    next: Mutex<u32>,
    max: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Handles {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            open: Mutex::new(HashMap::new()),
            next: Mutex::new(0),
            max,
        }
    }

    /// The most open at once.
    pub(crate) fn max(&self) -> usize {
        self.max
    }

    /// Keeps `open` under a new handle; `None` when `max` are open already.
    pub(crate) fn add(&self, open: Open) -> Option<[u8; 4]> {
        let mut handles = lock(&self.open);
        if handles.len() >= self.max {
            return None;
        }
        let mut next = lock(&self.next);
        // Handles are not reused while open: the next free number from where the last
        // one was given.
        while handles.contains_key(&*next) {
            *next = next.wrapping_add(1);
        }
        let id = *next;
        *next = next.wrapping_add(1);
        handles.insert(id, open);
        Some(id.to_be_bytes())
    }

    /// What `handle` names, if it is open.
    pub(crate) fn get(&self, handle: &[u8]) -> Option<Open> {
        lock(&self.open).get(&id(handle)?).cloned()
    }

    /// The file `handle` names, and whether it appends.
    pub(crate) fn file(&self, handle: &[u8]) -> Option<(Arc<File>, bool)> {
        match self.get(handle)? {
            Open::File(file, append) => Some((file, append)),
            Open::Dir(_) => None,
        }
    }

    /// Closes `handle` (its file closes once the last request using it ends); what it
    /// named, if it was open.
    pub(crate) fn remove(&self, handle: &[u8]) -> Option<Open> {
        lock(&self.open).remove(&id(handle)?)
    }
}

fn id(handle: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(handle.try_into().ok()?))
}
