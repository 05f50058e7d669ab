//! What a server allows and how much it takes on at once.

use std::path::PathBuf;

/// Every request type a server knows, by the names OpenSSH's `sftp-server` gives them
/// for `-P`, `-p` and `-Q requests`.
pub const REQUESTS: &[&str] = &[
    "open",
    "close",
    "read",
    "write",
    "lstat",
    "fstat",
    "setstat",
    "fsetstat",
    "opendir",
    "readdir",
    "remove",
    "mkdir",
    "rmdir",
    "realpath",
    "stat",
    "rename",
    "readlink",
    "symlink",
    "posix-rename",
    "statvfs",
    "fstatvfs",
    "hardlink",
    "fsync",
    "lsetstat",
    "limits",
    "expand-path",
    "home-directory",
    "users-groups-by-id",
    "copy-data",
    "check-file-handle",
    "check-file-name",
];

/// Each extension: its name on the wire, its short name (for `-P`, `-p`, `-Q`), the
/// version its VERSION entry states, and whether it changes the file system.
const EXTENSIONS: &[(&[u8], &str, &[u8], bool)] = &[
    (b"posix-rename@openssh.com", "posix-rename", b"1", true),
    (b"statvfs@openssh.com", "statvfs", b"2", false),
    (b"fstatvfs@openssh.com", "fstatvfs", b"2", false),
    (b"hardlink@openssh.com", "hardlink", b"1", true),
    (b"fsync@openssh.com", "fsync", b"1", false),
    (b"lsetstat@openssh.com", "lsetstat", b"1", true),
    (b"limits@openssh.com", "limits", b"1", false),
    (b"expand-path@openssh.com", "expand-path", b"1", false),
    (b"home-directory", "home-directory", b"1", false),
    (
        b"users-groups-by-id@openssh.com",
        "users-groups-by-id",
        b"1",
        false,
    ),
    (b"copy-data", "copy-data", b"1", true),
    (b"check-file-handle", "check-file-handle", b"1", false),
    (b"check-file-name", "check-file-name", b"1", false),
];

/// The extensions the VERSION reply names, with their versions.
pub(crate) fn advertised() -> impl Iterator<Item = (&'static [u8], &'static [u8])> {
    EXTENSIONS
        .iter()
        .map(|&(name, _, version, _)| (name, version))
}

/// The short name of extension `name`, if the server has it.
pub(crate) fn short_name(name: &[u8]) -> Option<&'static str> {
    EXTENSIONS.iter().find(|e| e.0 == name).map(|e| e.1)
}

/// Whether extension `name` changes the file system.
pub(crate) fn writes(name: &[u8]) -> bool {
    EXTENSIONS.iter().find(|e| e.0 == name).is_some_and(|e| e.3)
}

/// The largest READ or WRITE the server takes by default: four times OpenSSH's, so a
/// client that asks for `limits@openssh.com` sends a quarter of the requests.
pub const DEFAULT_MAX_IO: u32 = 1 << 20;
/// The most a server's requests and replies may hold at once by default.
pub const DEFAULT_BUDGET: usize = 64 << 20;
/// The most handles open at once by default.
pub const DEFAULT_MAX_HANDLES: usize = 4096;
/// Requests run at once by default.
pub const DEFAULT_THREADS: usize = 8;

/// How a server serves one session.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where relative paths start (`-d`); the process's own directory if `None`.
    pub start_dir: Option<PathBuf>,
    /// Refuse every request that would change the file system (`-R`).
    pub read_only: bool,
    /// The umask files and directories are created under (`-u`); the inherited one if
    /// `None`.
    pub umask: Option<u32>,
    /// Request names refused (`-P`), from [`REQUESTS`].
    pub denied: Vec<String>,
    /// Request names allowed, all others refused (`-p`); every one if `None`.
    pub allowed: Option<Vec<String>>,
    /// The largest READ answered and WRITE taken, stated in `limits@openssh.com`.
    pub max_io: u32,
    /// Bytes the requests being served and the replies not yet written may hold at
    /// once; past it the server reads no more requests until replies are written.
    pub budget: usize,
    /// Handles open at once, stated in `limits@openssh.com`.
    pub max_handles: usize,
    /// Requests run at once, each on a thread of the server's pool.
    pub threads: usize,
    /// Reply in the order the requests came (the default, as OpenSSH's server does:
    /// OpenSSH's `scp` counts a WRITE's acknowledgement toward the file's length only
    /// when those before it have come, and cuts the file there); `false`: each reply as
    /// its request completes (`--reply-order completion`), for clients that match
    /// replies by id alone.
    pub in_order: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            start_dir: None,
            read_only: false,
            umask: None,
            denied: Vec::new(),
            allowed: None,
            max_io: DEFAULT_MAX_IO,
            budget: DEFAULT_BUDGET,
            max_handles: DEFAULT_MAX_HANDLES,
            threads: DEFAULT_THREADS,
            in_order: true,
        }
    }
}

/// A setting out of range.
#[derive(Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// `max_io` outside 1 KiB..=16 MiB.
    MaxIo(u32),
    /// `budget` below two of the largest messages, or above 4 GiB.
    Budget(usize),
    /// `max_handles` outside 1..=1,000,000.
    MaxHandles(usize),
    /// `threads` outside 1..=256.
    Threads(usize),
    /// `umask` above 0o777.
    Umask(u32),
    /// A request name `-P` or `-p` gave that no request has.
    UnknownRequest(String),
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::MaxIo(n) => write!(f, "largest read or write {n} is outside 1024..=16777216"),
            Self::Budget(n) => write!(
                f,
                "memory budget {n} is below two of the largest messages or above 4 GiB"
            ),
            Self::MaxHandles(n) => write!(f, "open handles {n} is outside 1..=1000000"),
            Self::Threads(n) => write!(f, "threads {n} is outside 1..=256"),
            Self::Umask(n) => write!(f, "umask {n:o} is above 777"),
            Self::UnknownRequest(name) => {
                write!(f, "no request is named {name:?} (`-Q requests` lists them)")
            }
        }
    }
}

impl core::error::Error for ConfigError {}

impl Config {
    /// Checks every setting against its range.
    pub fn check(&self) -> Result<(), ConfigError> {
        if !(1024..=16 << 20).contains(&self.max_io) {
            return Err(ConfigError::MaxIo(self.max_io));
        }
        if self.budget < 2 * self.max_packet() as usize || self.budget > 4 << 30 {
            return Err(ConfigError::Budget(self.budget));
        }
        if !(1..=1_000_000).contains(&self.max_handles) {
            return Err(ConfigError::MaxHandles(self.max_handles));
        }
        if !(1..=256).contains(&self.threads) {
            return Err(ConfigError::Threads(self.threads));
        }
        if let Some(umask) = self.umask.filter(|&u| u > 0o777) {
            return Err(ConfigError::Umask(umask));
        }
        let named = self.denied.iter().chain(self.allowed.iter().flatten());
        if let Some(name) = named.into_iter().find(|n| !REQUESTS.contains(&n.as_str())) {
            return Err(ConfigError::UnknownRequest(name.clone()));
        }
        Ok(())
    }

    /// The largest message taken: a WRITE of `max_io` bytes and its head.
    pub fn max_packet(&self) -> u32 {
        self.max_io + 1024
    }

    /// Whether request `name` is served.
    pub(crate) fn permits(&self, name: &str) -> bool {
        !self.denied.iter().any(|d| d == name)
            && self
                .allowed
                .as_ref()
                .is_none_or(|allowed| allowed.iter().any(|a| a == name))
    }
}
