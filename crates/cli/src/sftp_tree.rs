//! `get -r` / `put -r`: where a tree lands, the tree's progress, and its summary line.
//!
//! An existing directory DST receives `DST/basename(SRC)`, as `cp -r` and `scp -r` do.
//! A DST the copy makes itself is marked, while the copy is unfinished, by a file
//! `DST.volley-part` beside it naming the source: a rerun of the same command (with
//! `-a`, to resume) then lands in DST again, not in `DST/basename(SRC)`. The mark goes
//! once every file has arrived.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use bytes::Bytes;
use indicatif::{ProgressBar, ProgressStyle};
use volley_sftp::{PART_SUFFIX, Progress, Sessions, SftpClient, Skip, TransferOptions, TreeEvent};

use crate::sftp::Direction;

/// What a tree's mark holds: this, then the source as given.
const MARK: &str = "volley tree copy of ";

/// A mark is never longer than this (a source path of a few kilobytes at most).
const MARK_MAX: u32 = 64 * 1024;

/// The tree `remote` (get) or `local` (put) copied, with per-entry problems printed as
/// they happen and the summary line `F files, N bytes in T ms, X MB/s (S skipped, E
/// failed)`.
pub(crate) async fn run(
    sftp: &Sessions,
    what: Direction,
    remote: &[u8],
    local: &Path,
    opts: &TransferOptions,
) -> anyhow::Result<()> {
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(0);
        if let Ok(style) = ProgressStyle::with_template(
            "{bar:40} {bytes}/{total_bytes} {msg} {bytes_per_sec} eta {eta}",
        ) {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let shown = bar.clone();
    let opts = opts
        .clone()
        .with_progress(move |p: Progress| shown.set_position(p.done));
    let mut files = 0u64;
    let on_event = |e: TreeEvent<'_>| match e {
        TreeEvent::Found(n) => bar.inc_length(n),
        TreeEvent::Done(_, _) => {
            files += 1;
            bar.set_message(format!("{files} files"));
        }
        TreeEvent::Skipped(path, Skip::Link) => {
            bar.suspend(|| eprintln!("volley: skipped symbolic link {path}"));
        }
        TreeEvent::Skipped(path, why) => {
            bar.suspend(|| eprintln!("volley: skipped {path}: {why}"));
        }
        TreeEvent::Failed(path, e) => bar.suspend(|| eprintln!("volley: {path}: {e}")),
    };
    let start = Instant::now();
    let report = if what == Direction::Get {
        let (target, mark) = local_target(local, remote)?;
        let report = sftp.get_tree(remote, &target, &opts, on_event).await;
        if let Some(mark) = mark {
            // Done, or nothing was made to come back to.
            let done = report.as_ref().map_or(!target.exists(), |r| r.failed == 0);
            if done {
                let _ = std::fs::remove_file(mark);
            }
        }
        report
    } else {
        let source = std::fs::canonicalize(local).unwrap_or_else(|_| local.to_owned());
        let (target, mark, new) = remote_target(sftp.first(), remote, local, &source).await;
        // A new mark is written beside the tree's first requests, not before them.
        let marked = async {
            if let (Some(mark), Some(text)) = (&mark, new) {
                let _ = write_small(sftp.first(), mark, text).await;
            }
        };
        let (report, ()) = futures::join!(sftp.put_tree(local, &target, &opts, on_event), marked);
        if let Some(mark) = mark {
            let done = match &report {
                Ok(r) => r.failed == 0,
                // Nothing was made to come back to.
                Err(_) => sftp.first().stat(&target).await.is_err(),
            };
            if done {
                let _ = sftp.first().remove(&mark).await;
            }
        }
        report
    }
    .with_context(|| format!("{what} -r failed"))?;
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    eprintln!(
        "{} files, {} bytes in {:.1} ms, {:.1} MB/s ({} skipped, {} failed)",
        report.files,
        report.bytes,
        elapsed.as_secs_f64() * 1e3,
        report.bytes as f64 / 1e6 / elapsed.as_secs_f64().max(1e-9),
        report.skipped,
        report.failed
    );
    if report.failed > 0 {
        anyhow::bail!(
            "{} of {} files failed",
            report.failed,
            report.files + report.failed
        );
    }
    Ok(())
}

/// The last component of a path, unless it is empty, `.` or `..`.
pub(crate) fn basename(path: &[u8]) -> Option<&[u8]> {
    let trimmed = path.strip_suffix(b"/").unwrap_or(path);
    let name = trimmed.rsplit(|&b| b == b'/').next()?;
    (!name.is_empty() && name != b"." && name != b"..").then_some(name)
}

/// `path` + [`PART_SUFFIX`], the mark of a tree copied into `path`.
fn mark_of(path: &[u8]) -> Vec<u8> {
    let trimmed = path.strip_suffix(b"/").unwrap_or(path);
    [trimmed, PART_SUFFIX].concat()
}

/// What a mark for a copy of `source` holds.
fn mark_text(source: &[u8]) -> Vec<u8> {
    [MARK.as_bytes(), source, b"\n"].concat()
}

/// Where a get of the tree `remote` into `local` lands, and the mark to remove once it
/// is complete (when this copy made `local`, or an earlier run of it did).
fn local_target(local: &Path, remote: &[u8]) -> anyhow::Result<(PathBuf, Option<PathBuf>)> {
    let bytes = local.as_os_str().as_encoded_bytes();
    let mark = PathBuf::from(OsString::from_vec(mark_of(bytes)));
    let ours = || std::fs::read(&mark).is_ok_and(|held| held == mark_text(remote));
    if local.is_dir() && !ours() {
        let target = match basename(remote) {
            Some(name) => local.join(OsString::from_vec(name.to_vec())),
            None => local.to_owned(),
        };
        return Ok((target, None));
    }
    if !local.exists() {
        std::fs::write(&mark, mark_text(remote)).with_context(|| {
            let shown = volley_sftp::printable_bytes(mark.as_os_str().as_encoded_bytes());
            format!("cannot write {shown}")
        })?;
    }
    Ok((local.to_owned(), Some(mark)))
}

/// Where a put of the local tree `local` (really `source`) to `remote` lands, and the
/// mark to remove once it is complete, as [`local_target`] decides it; with the mark's
/// text when it is still to be written. The STAT and the mark's read go out together.
async fn remote_target(
    sftp: &SftpClient,
    remote: &[u8],
    local: &Path,
    source: &Path,
) -> (Vec<u8>, Option<Vec<u8>>, Option<Vec<u8>>) {
    let text = mark_text(source.as_os_str().as_encoded_bytes());
    let mark = mark_of(remote);
    let (attrs, held) = futures::join!(sftp.stat(remote), read_small(sftp, &mark));
    let is_dir = attrs.is_ok_and(|a| a.is_dir());
    if is_dir && held.as_deref() != Some(&text[..]) {
        let name = local.file_name().map(|n| n.as_encoded_bytes());
        let target = match name {
            Some(name) => [remote.strip_suffix(b"/").unwrap_or(remote), b"/", name].concat(),
            None => remote.to_vec(),
        };
        return (target, None, None);
    }
    let new = (!is_dir).then_some(text);
    (remote.to_vec(), Some(mark), new)
}

/// Writes the small remote file `path`: its OPEN, then its WRITE and CLOSE together.
async fn write_small(sftp: &SftpClient, path: &[u8], text: Vec<u8>) -> anyhow::Result<()> {
    let flags = volley_sftp::OpenFlags(
        volley_sftp::OpenFlags::WRITE.0
            | volley_sftp::OpenFlags::CREAT.0
            | volley_sftp::OpenFlags::TRUNC.0,
    );
    let handle = sftp
        .open(path, flags, volley_sftp::FileAttrs::default())
        .await?;
    let (written, closed) = futures::join!(
        sftp.write(&handle, 0, Bytes::from(text)),
        sftp.close(&handle)
    );
    written?;
    Ok(closed?)
}

/// The remote file at `path` if it is a small one: its OPEN, then its READ and CLOSE
/// together.
async fn read_small(sftp: &SftpClient, path: &[u8]) -> Option<Vec<u8>> {
    let flags = volley_sftp::OpenFlags::READ;
    let handle = sftp
        .open(path, flags, volley_sftp::FileAttrs::default())
        .await
        .ok()?;
    let (read, _) = futures::join!(sftp.read(&handle, 0, MARK_MAX), sftp.close(&handle));
    read.ok().flatten().map(|b| b.to_vec())
}
