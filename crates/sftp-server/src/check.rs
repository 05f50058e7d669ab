//! `check-file-handle` and `check-file-name` (draft-ietf-secsh-filexfer-extensions-00):
//! hashes of a file's range, whole or block by block, computed where the file is, so a
//! client can verify a copy without reading it back.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use md5::Md5;
use sha1::Sha1;
use sha2::digest::DynDigest;
use sha2::{Sha256, Sha384, Sha512};

/// The algorithms offered, in the server's order of preference when a client names
/// several.
const ALGORITHMS: &[&str] = &["sha256", "sha512", "sha384", "sha1", "md5"];

/// The smallest block a client may ask for (the draft's floor).
const MIN_BLOCK: u32 = 256;

fn hasher(name: &str) -> Option<Box<dyn DynDigest>> {
    Some(match name {
        "md5" => Box::new(Md5::default()),
        "sha1" => Box::new(Sha1::default()),
        "sha256" => Box::new(Sha256::default()),
        "sha384" => Box::new(Sha384::default()),
        "sha512" => Box::new(Sha512::default()),
        _ => return None,
    })
}

/// The reply data for hashes of `file` from `from`, `len` bytes (0: to its end), one
/// hash a `block` bytes (0: one for the whole range), with the first algorithm of
/// `wanted` (a comma-separated list) the server has; `Ok(Err(why))` when it has none of
/// them or the block is too small.
pub(crate) fn check_file(
    file: &File,
    wanted: &[u8],
    from: u64,
    len: u64,
    block: u32,
) -> io::Result<Result<Vec<u8>, &'static str>> {
    let wanted = String::from_utf8_lossy(wanted);
    let Some(name) = wanted
        .split(',')
        .map(str::trim)
        .find(|w| ALGORITHMS.contains(w))
    else {
        return Ok(Err(
            "none of the hash algorithms asked for is offered (md5, sha1, sha256, sha384, sha512)",
        ));
    };
    if block != 0 && block < MIN_BLOCK {
        return Ok(Err(
            "a check-file block must be 0 (the whole range) or at least 256 bytes",
        ));
    }
    let size = file.metadata()?.len();
    let end = match len {
        0 => size,
        len => from.saturating_add(len).min(size),
    };
    let block = match block {
        0 => u64::MAX,
        block => u64::from(block),
    };
    let mut reply = Vec::new();
    for part in [&b"check-file"[..], name.as_bytes()] {
        reply.extend_from_slice(&(part.len() as u32).to_be_bytes());
        reply.extend_from_slice(part);
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut at = from;
    loop {
        let stop = at.saturating_add(block).min(end);
        let mut digest = hasher(name).expect("an offered algorithm");
        while at < stop {
            let want = usize::try_from(stop - at)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let n = file.read_at(&mut buf[..want], at)?;
            if n == 0 {
                break;
            }
            digest.update(&buf[..n]);
            at += n as u64;
        }
        reply.extend_from_slice(&digest.finalize());
        if at >= end {
            break;
        }
    }
    Ok(Ok(reply))
}
