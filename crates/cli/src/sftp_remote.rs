//! `volley sftp ls|mkdir|rm|mv`: file operations on the server for scripts, with
//! OpenSSH's `sftp -b` exit convention (0 when everything worked, 1 otherwise).

use anyhow::Context;
use volley_sftp::{FileAttrs, Remote, SftpClient, printable_bytes};

use crate::sftp::{Server, open};

/// What to do on the server.
#[derive(Debug)]
pub(crate) enum Op {
    /// List a directory (or name a file): one name a line; `long`: the server's
    /// `ls -l` line.
    Ls { path: String, long: bool },
    /// Make a directory; `parents`: and any missing above it, an existing one is fine.
    Mkdir { path: String, parents: bool },
    /// Remove a file; `recursive`: or a directory and everything under it.
    Rm { path: String, recursive: bool },
    /// Rename.
    Mv { from: String, to: String },
}

/// Deepest directory tree `rm -r` goes into, so a loop of links on a broken server
/// cannot recurse without end.
const MAX_DEPTH: usize = 256;

pub(crate) async fn run(server: &Server, op: Op) -> anyhow::Result<()> {
    let (what, arg) = match &op {
        Op::Ls { path, .. } => ("ls", path),
        Op::Mkdir { path, .. } => ("mkdir", path),
        Op::Rm { path, .. } => ("rm", path),
        Op::Mv { from, .. } => ("mv", from),
    };
    let (sftp, path) = open(server, what, arg).await?;
    let done = match op {
        Op::Ls { long, .. } => ls(&sftp, &path, long).await,
        Op::Mkdir { parents, .. } => mkdir(&sftp, &path, parents).await,
        Op::Rm { recursive, .. } => rm(&sftp, path.as_bytes(), recursive, 0).await,
        Op::Mv { from, to } => {
            let to = same_host(server, &from, &to)?;
            match sftp.has_extension(b"posix-rename@openssh.com") {
                true => sftp.posix_rename(path.as_bytes(), to.as_bytes()).await,
                false => sftp.rename(path.as_bytes(), to.as_bytes()).await,
            }
            .map_err(Into::into)
        }
    };
    sftp.shutdown().await?;
    done.with_context(|| format!("{what} failed"))
}

async fn ls(sftp: &SftpClient, path: &str, long: bool) -> anyhow::Result<()> {
    let path = if path.is_empty() { "." } else { path };
    let attrs = sftp.stat(path.as_bytes()).await?;
    if !attrs.is_dir() {
        let line = match long {
            true => long_line(sftp, path.as_bytes()).await,
            false => None,
        };
        println!(
            "{}",
            printable_bytes(line.as_deref().unwrap_or(path.as_bytes()))
        );
        return Ok(());
    }
    let mut entries = sftp.read_dir(path.as_bytes()).await?;
    entries.retain(|e| e.name != b"." && e.name != b"..");
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = String::new();
    for e in entries {
        let line = if long { &e.longname } else { &e.name };
        out.push_str(&printable_bytes(line));
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}

/// The server's `ls -l` line for the file at `path`, as its directory's listing gives
/// it (SFTP v3 gives that line only in a listing); `None` if it cannot be had.
async fn long_line(sftp: &SftpClient, path: &[u8]) -> Option<Vec<u8>> {
    let at = path.iter().rposition(|&b| b == b'/');
    let (dir, name): (&[u8], &[u8]) = match at {
        Some(0) => (b"/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (b".", path),
    };
    let entries = sftp.read_dir(dir).await.ok()?;
    let entry = entries.into_iter().find(|e| e.name == name)?;
    Some(entry.longname)
}

async fn mkdir(sftp: &SftpClient, path: &str, parents: bool) -> anyhow::Result<()> {
    let mode = FileAttrs::with_permissions(0o777);
    if !parents {
        return Ok(sftp.mkdir(path.as_bytes(), mode).await?);
    }
    let mut at = String::from(if path.starts_with('/') { "/" } else { "" });
    for part in path.split('/') {
        if part.is_empty() || part == "." {
            continue;
        }
        if !at.is_empty() && !at.ends_with('/') {
            at.push('/');
        }
        at.push_str(part);
        if let Err(e) = sftp.mkdir(at.as_bytes(), mode).await {
            // Already there as a directory is what -p wants.
            if !sftp.stat(at.as_bytes()).await.is_ok_and(|a| a.is_dir()) {
                return Err(e.into());
            }
        }
    }
    Ok(())
}

/// Removes `path`; with `recursive`, a directory's entries first (symbolic links are
/// removed, never followed).
async fn rm(sftp: &SftpClient, path: &[u8], recursive: bool, depth: usize) -> anyhow::Result<()> {
    let attrs = sftp.lstat(path).await?;
    if !attrs.is_dir() {
        return Ok(sftp.remove(path).await?);
    }
    if !recursive {
        anyhow::bail!("{}: is a directory (use -r)", printable_bytes(path));
    }
    if depth >= MAX_DEPTH {
        anyhow::bail!(
            "{}: more than {MAX_DEPTH} levels deep",
            printable_bytes(path)
        );
    }
    for e in sftp.read_dir(path).await? {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        if e.name.contains(&b'/') {
            anyhow::bail!("the server listed a name with a `/` in it");
        }
        let mut child = path.to_vec();
        child.push(b'/');
        child.extend_from_slice(&e.name);
        Box::pin(rm(sftp, &child, true, depth + 1)).await?;
    }
    Ok(sftp.rmdir(path).await?)
}

/// `mv`'s destination as a path on the source's server: a plain path, or `host:path` on
/// the same host.
fn same_host(server: &Server, from: &str, to: &str) -> anyhow::Result<String> {
    if server.direct() {
        return Ok(to.to_owned());
    }
    let from = Remote::parse(from)?;
    match (from, Remote::parse(to)?) {
        (Some(a), Some(b)) if a.destination != b.destination => {
            anyhow::bail!("mv: `{to}` is on another host than the source")
        }
        (_, Some(b)) => Ok(b.path),
        (_, None) => Ok(to.to_owned()),
    }
}
