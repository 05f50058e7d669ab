//! What volley's tests share, so each helper is written once: a timeout on every await
//! ([`within`]), fresh scratch directories ([`scratch`]) and their [`listing`], FIFOs to
//! feed a reader on cue ([`mkfifo`]), reproducible test data ([`pattern`]) and OpenSSH's
//! `sftp-server` ([`sftp_server`]). It depends on no volley
//! crate, so any of them may take it as a dev-dependency without a cycle; helpers that need
//! a board or a relay live beside those (`volley_emulator::testing`,
//! `volley_netsim::testing`).
//!
//! # Example
//!
//! ```
//! use volley_testkit::{pattern, scratch, within};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let dir = scratch("doc-example");
//! let data = pattern(1000, 7);
//! assert_eq!(data, pattern(1000, 7), "the same seed gives the same bytes");
//! std::fs::write(dir.join("f"), &data).unwrap();
//! let back = within(5, async { std::fs::read(dir.join("f")).unwrap() }).await;
//! assert_eq!(back, data);
//! # }
//! ```

use core::future::Future;
use core::time::Duration;
use std::path::{Path, PathBuf};

/// Debian's OpenSSH `sftp-server`, which `cargo xtask test` installs.
pub const SFTP_SERVER: &str = "/usr/lib/openssh/sftp-server";

/// `f`'s output; the test fails, naming the limit, if it takes longer than `secs`.
pub async fn within<T>(secs: u64, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .unwrap_or_else(|_| panic!("did not finish within {secs} s"))
}

/// A fresh, empty directory for one test's files, named after the test and this process.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("volley-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// A [`scratch`] directory removed when dropped, with paths in it as a test needs them.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh, empty directory named after `name` and this process.
    pub fn new(name: &str) -> Self {
        Self(scratch(name))
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.0
    }

    /// `name` inside it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// `name` inside it, as the bytes an SFTP request carries.
    pub fn bytes(&self, name: &str) -> Vec<u8> {
        self.path(name).into_os_string().into_encoded_bytes()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `len` pseudo-random bytes (xorshift), the same for the same `seed`, different for
/// different seeds: test data whose every byte matters.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

/// Makes a FIFO at `path` (with `mkfifo(1)`), for tests that feed a reader through a pipe
/// they write on cue.
pub fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", path.display());
}

/// The names in `dir`, sorted: what a test compares a directory against.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// OpenSSH's `sftp-server`: `VOLLEY_SFTP_SERVER` if set, else [`SFTP_SERVER`]. The test
/// fails, saying how to install it, if it is not there.
pub fn sftp_server() -> PathBuf {
    let path = std::env::var_os("VOLLEY_SFTP_SERVER")
        .map_or_else(|| PathBuf::from(SFTP_SERVER), PathBuf::from);
    assert!(
        Path::new(&path).exists(),
        "no sftp-server at {}: run `cargo xtask test` (it installs openssh-sftp-server) or \
         `apt-get install openssh-sftp-server`, or set VOLLEY_SFTP_SERVER",
        path.display()
    );
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_by_seed_and_repeat_by_seed() {
        assert_eq!(pattern(64, 1), pattern(64, 1));
        assert_ne!(pattern(64, 1), pattern(64, 2));
        assert!(pattern(4096, 3).iter().any(|&b| b != pattern(4096, 3)[0]));
    }

    #[test]
    fn scratch_is_fresh_and_listed_in_order() {
        let dir = scratch("testkit-fresh");
        std::fs::write(dir.join("old"), b"x").unwrap();
        let again = scratch("testkit-fresh");
        assert_eq!(dir, again);
        assert!(listing(&again).is_empty());
        std::fs::write(again.join("b"), b"").unwrap();
        mkfifo(&again.join("a"));
        assert_eq!(listing(&again), ["a", "b"]);
    }

    #[tokio::test]
    #[should_panic(expected = "did not finish within 0 s")]
    async fn within_fails_a_slow_future() {
        within(0, core::future::pending::<()>()).await;
    }
}
