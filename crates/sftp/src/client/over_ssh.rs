//! SftpClient over the system's ssh, as OpenSSH's `sftp` runs it.

use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::AsyncReadExt;
use tokio::process::Command;

use super::{SftpClient, SftpError};
use crate::ssh::{Destination, STDERR_GRACE, SshOptions, last_lines};

/// The last bytes of ssh's stderr kept for an error message.
const STDERR_KEPT: usize = 4096;

impl SftpClient {
    /// Runs ssh to `destination`'s SFTP subsystem with `options` (see
    /// [`SshOptions::args`]) and initialises the session. ssh's stdin and stdout carry
    /// SFTP; its stderr is read by volley, and if the session cannot start, the error is
    /// [`SftpError::Ssh`] with ssh's last lines (a refused key, an unknown host key, a
    /// host that does not answer). ssh runs with SIGINT ignored, so a Ctrl-C stops the
    /// transfer and the session ends cleanly; its prompts still reach the terminal.
    pub async fn ssh(destination: &Destination, options: &SshOptions) -> Result<Self, SftpError> {
        let (program, args) = options.args(destination);
        let mut command = Command::new(&program);
        command.args(&args).stderr(Stdio::piped());
        crate::sys::ignore_sigint_in_child(&mut command);
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut reader = None;
        let started = Self::spawn_inspecting(&mut command, |child| {
            if let Some(mut pipe) = child.stderr.take() {
                let kept = stderr.clone();
                reader = Some(tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n @ 1..) = pipe.read(&mut buf).await {
                        let mut kept = kept.lock().unwrap_or_else(PoisonError::into_inner);
                        kept.extend_from_slice(&buf[..n]);
                        let excess = kept.len().saturating_sub(STDERR_KEPT);
                        kept.drain(..excess);
                    }
                }));
            }
        })
        .await;
        match started {
            Ok(mut client) => {
                client.child_is_ssh = true;
                Ok(client)
            }
            Err(SftpError::ServerExited { status, .. }) => {
                // ssh has exited: its last words are in the pipe until the reader takes
                // them (a second at most, in case ssh left a child holding it open).
                if let Some(reader) = reader {
                    let _ = tokio::time::timeout(STDERR_GRACE, reader).await;
                }
                let said = stderr
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                Err(SftpError::Ssh {
                    host: destination.host.clone(),
                    status,
                    message: last_lines(&said),
                })
            }
            Err(SftpError::Io { source, .. }) => Err(SftpError::Io {
                what: format!("cannot run {}", program.to_string_lossy()),
                source,
            }),
            Err(e) => Err(e),
        }
    }
}
