//! `sftp-peer`: other Rust SFTP clients doing what `volley sftp get|put` does, for the
//! `sftp` suite's side-by-side table: russh-sftp 3.0.1 and openssh-sftp-client 0.15.11,
//! each over a socketpair to OpenSSH's sftp-server, copying through their own file types
//! with 1 MiB buffers (tokio's default 8 KiB copy buffer starves both: a few MB/s).
//!
//! Usage: `sftp-peer russh|openssh-rust get|put SRC DST`; `VOLLEY_SFTP_SERVER` replaces the
//! server's command line (split on whitespace).

use core::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::process::{ExitCode, Stdio};

use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::process::{Child, Command};

const SERVER: &str = "/usr/lib/openssh/sftp-server";
/// Copy buffer size.
const BUF: usize = 1 << 20;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [client, direction, src, dst] = args.as_slice() else {
        eprintln!("usage: sftp-peer russh|openssh-rust get|put SRC DST");
        return ExitCode::FAILURE;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let result = runtime.block_on(async {
        let (stream, mut child) = spawn_server()?;
        match client.as_str() {
            "russh" => russh(stream, direction, src, dst).await?,
            "openssh-rust" => openssh_rust(stream, direction, src, dst).await?,
            other => return Err(format!("unknown client `{other}`")),
        }
        // The session is closed: the server sees end of input and exits (waited for, so
        // that a wrapper around it can report its CPU time).
        match tokio::time::timeout(core::time::Duration::from_secs(10), child.wait()).await {
            Ok(status) => {
                status.map_err(|e| e.to_string())?;
            }
            Err(_) => {
                child.kill().await.map_err(|e| e.to_string())?;
                return Err("the server did not exit within 10 s of the session's close".into());
            }
        }
        Ok::<(), String>(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sftp-peer: {e}");
            ExitCode::FAILURE
        }
    }
}

fn spawn_server() -> Result<(UnixStream, Child), String> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(|e| e.to_string())?;
    let out = theirs.try_clone().map_err(|e| e.to_string())?;
    // VOLLEY_SFTP_SERVER: another command line for the server (split on whitespace).
    let command =
        std::env::var("VOLLEY_SFTP_SERVER").unwrap_or_else(|_| format!("{SERVER} -e -l ERROR"));
    let mut words = command.split_whitespace();
    let program = words.next().ok_or("VOLLEY_SFTP_SERVER is empty")?;
    let child = Command::new(program)
        .args(words)
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::from(OwnedFd::from(out)))
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {command}: {e}"))?;
    ours.set_nonblocking(true).map_err(|e| e.to_string())?;
    Ok((
        UnixStream::from_std(ours).map_err(|e| e.to_string())?,
        child,
    ))
}

/// Copies a remote file (read through `remote`) into the local file `dst`.
async fn download(remote: impl AsyncBufRead + Unpin, dst: &str) -> Result<(), String> {
    let mut remote = remote;
    let mut local = tokio::fs::File::create(dst)
        .await
        .map_err(|e| e.to_string())?;
    tokio::io::copy_buf(&mut remote, &mut local)
        .await
        .map_err(|e| format!("get: {e}"))?;
    local.flush().await.map_err(|e| e.to_string())
}

/// Copies the local file `src` into a remote file (written through `remote`), then
/// closes the remote file.
async fn upload(src: &str, remote: impl AsyncWrite + Unpin) -> Result<(), String> {
    let mut remote = remote;
    let local = tokio::fs::File::open(src)
        .await
        .map_err(|e| e.to_string())?;
    let mut local = tokio::io::BufReader::with_capacity(BUF, local);
    tokio::io::copy_buf(&mut local, &mut remote)
        .await
        .map_err(|e| format!("put: {e}"))?;
    remote.shutdown().await.map_err(|e| format!("close: {e}"))
}

async fn russh(stream: UnixStream, direction: &str, src: &str, dst: &str) -> Result<(), String> {
    let session = russh_sftp::client::SftpSession::new(stream)
        .await
        .map_err(|e| format!("russh-sftp init: {e}"))?;
    match direction {
        "get" => {
            let remote = session.open(src).await.map_err(|e| format!("open: {e}"))?;
            download(tokio::io::BufReader::with_capacity(BUF, remote), dst).await?;
        }
        _ => {
            let remote = session
                .create(dst)
                .await
                .map_err(|e| format!("create: {e}"))?;
            upload(src, remote).await?;
        }
    }
    session.close().await.map_err(|e| e.to_string())
}

async fn openssh_rust(
    stream: UnixStream,
    direction: &str,
    src: &str,
    dst: &str,
) -> Result<(), String> {
    use openssh_sftp_client::file::TokioCompatFile;
    use openssh_sftp_client::{Sftp, SftpOptions};

    let (read, write) = stream.into_split();
    let sftp = Sftp::new(write, read, SftpOptions::default())
        .await
        .map_err(|e| format!("openssh-sftp-client init: {e}"))?;
    let capacity = NonZeroUsize::new(BUF).expect("BUF is not zero");
    match direction {
        "get" => {
            let remote = sftp.open(src).await.map_err(|e| format!("open: {e}"))?;
            download(
                Box::pin(TokioCompatFile::with_capacity(remote, capacity)),
                dst,
            )
            .await?;
        }
        _ => {
            let remote = sftp.create(dst).await.map_err(|e| format!("create: {e}"))?;
            upload(
                src,
                Box::pin(TokioCompatFile::with_capacity(remote, capacity)),
            )
            .await?;
        }
    }
    sftp.close().await.map_err(|e| e.to_string())
}
