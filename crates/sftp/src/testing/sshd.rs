//! A real OpenSSH `sshd` on 127.0.0.1 for tests: its own keys, config, known-hosts and
//! pid file in a temporary directory, run in the foreground and killed on drop. The
//! client side is an ssh_config file naming it as host [`Sshd::HOST`], so a test runs
//! `ssh -F CONFIG volley-test` (or volley's `-F CONFIG volley-test:path`).

use core::sync::atomic::{AtomicU32, Ordering};
use core::time::Duration;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Where Debian puts the server.
pub const SSHD: &str = "/usr/sbin/sshd";

/// Where Debian puts rclone.
pub const RCLONE: &str = "/usr/bin/rclone";

/// Which server.
#[derive(Clone, Copy)]
enum Kind<'a> {
    /// OpenSSH's sshd, running this command as its SFTP subsystem.
    OpenSsh(&'a str),
    Rclone,
    Asyncssh,
}

/// The asyncssh release the tests run (`cargo xtask test` installs it).
pub const ASYNCSSH_VERSION: &str = "2.24.1";

/// An SSH server on 127.0.0.1 that serves SFTP with asyncssh's own server over the
/// whole file system: host key and authorized keys as arguments, the port on stderr.
const ASYNCSSH_SERVER: &str = r#"
import asyncio, sys
import asyncssh

async def main():
    server = await asyncssh.listen(
        "127.0.0.1", 0, server_host_keys=[sys.argv[1]],
        authorized_client_keys=sys.argv[2], sftp_factory=True)
    port = server.sockets[0].getsockname()[1]
    print(f"asyncssh server listening on 127.0.0.1:{port}", file=sys.stderr, flush=True)
    await asyncio.Future()

asyncio.run(main())
"#;

/// The Python that has asyncssh: `VOLLEY_PYTHON`, else the venv `cargo xtask test`
/// makes under the workspace's `target/peers`.
fn python() -> PathBuf {
    std::env::var_os("VOLLEY_PYTHON").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/peers/venv/bin/python"),
        PathBuf::from,
    )
}

/// A running sshd (or rclone's SFTP server) and what a client needs to reach it.
#[derive(Debug)]
pub struct Sshd {
    child: Child,
    dir: PathBuf,
    port: u16,
    logins: tokio::sync::watch::Receiver<usize>,
}

impl Sshd {
    /// The host name the client config gives it.
    pub const HOST: &'static str = "volley-test";

    /// Starts OpenSSH's sshd, waiting (at most 10 s) until it says it is listening.
    /// Fails with a message saying how to install it when `sshd` is missing.
    pub async fn start() -> io::Result<Self> {
        Self::start_kind(Kind::OpenSsh("/usr/lib/openssh/sftp-server")).await
    }

    /// Starts OpenSSH's sshd with `command` as its `Subsystem sftp` (another SFTP
    /// server, volley's own say), as [`Sshd::start`] does otherwise.
    pub async fn with_subsystem(command: &str) -> io::Result<Self> {
        Self::start_kind(Kind::OpenSsh(command)).await
    }

    /// Starts `rclone serve sftp /` instead (Debian's rclone: Go's SFTP server behind
    /// its own SSH server, serving the whole file system so paths are the same as with
    /// [`Sshd::start`]), with the same keys and client config. It states no
    /// `limits@openssh.com`, has no `posix-rename@openssh.com`, and logs no logins.
    pub async fn rclone() -> io::Result<Self> {
        Self::start_kind(Kind::Rclone).await
    }

    /// Starts asyncssh's SSH and SFTP server (Python, [`ASYNCSSH_VERSION`]) over the
    /// whole file system, with the same keys and client config. It states 4 MiB READ
    /// and WRITE limits, and logs no logins.
    pub async fn asyncssh() -> io::Result<Self> {
        Self::start_kind(Kind::Asyncssh).await
    }

    async fn start_kind(kind: Kind<'_>) -> io::Result<Self> {
        let python = python();
        let (program, package) = match kind {
            Kind::OpenSsh(_) => (SSHD, "openssh-server"),
            Kind::Rclone => (RCLONE, "rclone"),
            Kind::Asyncssh => (python.to_str().unwrap_or("python"), "asyncssh into a venv"),
        };
        if !Path::new(program).exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{program} is missing: run `cargo xtask test` (it installs {package}) \
                     or `apt-get install {package}`"
                ),
            ));
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "volley-sshd-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        for key in ["host_key", "id"] {
            keygen(&dir.join(key)).await?;
        }
        std::fs::copy(dir.join("id.pub"), dir.join("authorized_keys"))?;
        let d = dir.display();
        let mut command = match kind {
            Kind::OpenSsh(subsystem) => {
                // Privilege separation needs it, as root.
                let _ = std::fs::create_dir_all("/run/sshd");
                // A free port: bound and let go (another process could take it
                // meanwhile; sshd then fails to start, and says so).
                let port = std::net::TcpListener::bind("127.0.0.1:0")?
                    .local_addr()?
                    .port();
                std::fs::write(
                    dir.join("sshd_config"),
                    format!(
                        "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n\
                         PidFile {d}/sshd.pid\nAuthorizedKeysFile {d}/authorized_keys\n\
                         StrictModes no\nUsePAM no\nPermitRootLogin yes\n\
                         PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                         MaxStartups 100\nMaxSessions 100\nLogLevel INFO\n\
                         Subsystem sftp {subsystem}\n"
                    ),
                )?;
                let mut command = Command::new(SSHD);
                command
                    .args(["-D", "-e", "-f"])
                    .arg(dir.join("sshd_config"));
                command
            }
            Kind::Asyncssh => {
                let mut command = Command::new(&python);
                command
                    .args(["-W", "ignore", "-c", ASYNCSSH_SERVER])
                    .arg(dir.join("host_key"))
                    .arg(dir.join("authorized_keys"));
                command
            }
            Kind::Rclone => {
                let mut command = Command::new(RCLONE);
                command
                    .args([
                        "serve",
                        "sftp",
                        "/",
                        "--addr",
                        "127.0.0.1:0",
                        "--config",
                        "/dev/null",
                    ])
                    // Files the tests make behind its back are seen at once.
                    .args(["--dir-cache-time", "0s"])
                    .arg("--authorized-keys")
                    .arg(dir.join("authorized_keys"))
                    .arg("--key")
                    .arg(dir.join("host_key"));
                command
            }
        };
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stderr = child.stderr.take().expect("piped");
        let mut lines = BufReader::new(stderr).lines();
        // sshd: "Server listening on 127.0.0.1 port P."; rclone: "SFTP server listening
        // on 127.0.0.1:P"; asyncssh's script: "asyncssh server listening on 127.0.0.1:P".
        let listening = tokio::time::timeout(Duration::from_secs(10), async {
            let mut said = String::new();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(at) = line.find("erver listening on ") {
                    let digits: String = line[at..]
                        .rsplit([' ', ':'])
                        .next()
                        .unwrap_or_default()
                        .chars()
                        .filter(char::is_ascii_digit)
                        .collect();
                    return digits.parse::<u16>().map_err(|_| line.clone());
                }
                said.push_str(&line);
                said.push('\n');
            }
            Err(said)
        })
        .await;
        let port = match listening {
            Ok(Ok(port)) => port,
            Ok(Err(said)) => {
                return Err(io::Error::other(format!("{program} did not start: {said}")));
            }
            Err(_) => {
                return Err(io::Error::other(format!(
                    "{program} did not listen within 10 s"
                )));
            }
        };
        let host_key = std::fs::read_to_string(dir.join("host_key.pub"))?;
        std::fs::write(
            dir.join("known_hosts"),
            format!("[127.0.0.1]:{port} {host_key}"),
        )?;
        std::fs::write(
            dir.join("ssh_config"),
            format!(
                "Host {}\n  HostName 127.0.0.1\n  Port {port}\n  IdentityFile {d}/id\n  \
                 IdentitiesOnly yes\n  UserKnownHostsFile {d}/known_hosts\n  \
                 StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n",
                Self::HOST
            ),
        )?;
        // Its log goes on being read, so that it never blocks on a full pipe, and the
        // logins it accepts are counted.
        let (count, logins) = tokio::sync::watch::channel(0);
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("Accepted publickey") {
                    count.send_modify(|n| *n += 1);
                }
            }
        });
        Ok(Self {
            child,
            dir,
            port,
            logins,
        })
    }

    /// The client's ssh_config (host [`Sshd::HOST`], its key, its known host).
    pub fn config(&self) -> PathBuf {
        self.dir.join("ssh_config")
    }

    /// The client's private key.
    pub fn identity(&self) -> PathBuf {
        self.dir.join("id")
    }

    /// The known-hosts file that holds the server's key.
    pub fn known_hosts(&self) -> PathBuf {
        self.dir.join("known_hosts")
    }

    /// The port it listens on, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `path` on this server as a remote argument: `volley-test:PATH`.
    pub fn remote(path: &Path) -> String {
        format!("{}:{}", Self::HOST, path.display())
    }

    /// Logins it has accepted so far (as its log has told).
    pub fn logins(&self) -> usize {
        *self.logins.borrow()
    }

    /// Waits up to `within` until it has accepted `n` logins in all; returns how many it
    /// has then.
    pub async fn wait_for_logins(&self, n: usize, within: Duration) -> usize {
        let mut logins = self.logins.clone();
        let _ = tokio::time::timeout(within, logins.wait_for(|&seen| seen >= n)).await;
        self.logins()
    }

    /// The temporary directory it lives in (removed on drop).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An ed25519 key pair without a passphrase at `path` and `path.pub`.
async fn keygen(path: &Path) -> io::Result<()> {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "volley-test", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .await?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("ssh-keygen failed ({status})")))
    }
}
