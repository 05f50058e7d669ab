//! `copy-data`: bytes copied from one open file to another on the server, by the kernel
//! where it can (`copy_file_range`), so they never cross the link.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};

/// Bytes copied a call at most, so a copy of a huge range still answers in pieces the
/// kernel can interrupt.
const PIECE: usize = 8 << 20;

/// Copies `len` bytes (0: to the end of `source`) from `source` at `from` to `target` at
/// `to`. Refused when both are the same file, as OpenSSH refuses it.
pub(crate) fn copy_data(
    source: &File,
    from: u64,
    len: u64,
    target: &File,
    to: u64,
) -> io::Result<()> {
    let (a, b) = (source.metadata()?, target.metadata()?);
    if (a.dev(), a.ino()) == (b.dev(), b.ino()) {
        return Err(io::Error::other("copy-data within one file is refused"));
    }
    let end = match len {
        0 => u64::MAX,
        len => from
            .checked_add(len)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?,
    };
    let (mut at, mut out) = (from, to);
    while at < end {
        let want = usize::try_from(end - at).unwrap_or(usize::MAX).min(PIECE);
        let (mut off_in, mut off_out) = (at as i64, out as i64);
        let n = match nix::fcntl::copy_file_range(
            source,
            Some(&mut off_in),
            target,
            Some(&mut off_out),
            want,
        ) {
            Ok(n) => n,
            // Across file systems on old kernels, or where the call is missing: by hand.
            Err(
                nix::errno::Errno::EXDEV | nix::errno::Errno::ENOSYS | nix::errno::Errno::EINVAL,
            ) => by_hand(source, at, target, out, want)?,
            Err(e) => return Err(e.into()),
        };
        if n == 0 {
            break;
        }
        at += n as u64;
        out += n as u64;
    }
    Ok(())
}

/// One piece through a buffer: the bytes copied (0 at the end of `source`).
fn by_hand(source: &File, at: u64, target: &File, out: u64, want: usize) -> io::Result<usize> {
    let mut buf = vec![0; want.min(1 << 20)];
    let n = source.read_at(&mut buf, at)?;
    target.write_all_at(&buf[..n], out)?;
    Ok(n)
}
