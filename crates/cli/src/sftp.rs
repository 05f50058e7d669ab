//! `volley sftp get|put`: whole-file transfers with many requests in flight, reported as
//! `N bytes in T ms, X MB/s` (MB = 10^6 bytes), to a host over ssh (`[user@]host:path`,
//! `sftp://`), a local sftp-server, or a raw SFTP server on TCP.

use core::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use tokio::process::Command;
use volley_sftp::{Remote, Sessions, SftpClient, SshOptions};

use crate::args::at_least_one;

/// Which way a copy goes: `get` (from the server) or `put` (to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// From the server.
    Get,
    /// To the server.
    Put,
}

impl Direction {
    /// The command's name, as messages give it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::Put => "put",
        }
    }
}

impl core::fmt::Display for Direction {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// `volley sftp` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum SftpCommand {
    /// Copy remote files to a local one, or into a local directory. Each copy goes to
    /// DST.volley-part and replaces DST only once complete; if it fails after bytes
    /// arrived, the part keeps them and `get -a` resumes.
    ///
    /// SRC is `[user@]host:path` or `sftp://[user@]host[:port]/path` (over the system's
    /// ssh, as OpenSSH's sftp runs it), or, with --server-cmd or --connect, or with no
    /// host at all, a path on that server (the local sftp-server by default). Wildcards
    /// (`*`, `?`, `[...]`; quote them from the local shell) are expanded on the server.
    /// Several sources, or a wildcard, need DST to be a directory.
    Get {
        #[command(flatten)]
        server: Server,
        /// Keep a copy that came out shorter than the size the server stated at the
        /// start (a file that shrank while it was read), with a warning; without this,
        /// such a copy is discarded and the command fails.
        #[arg(long)]
        allow_shrink: bool,
        #[command(flatten)]
        copy: Copy,
        /// Remote files: `[user@]host:path`, `sftp://...`, or paths on the server, all on
        /// one server.
        #[arg(required = true, num_args = 1..)]
        src: Vec<String>,
        /// Local path, or a directory to copy into.
        dst: PathBuf,
    },
    /// Copy local files to a remote one, or into a remote directory. A pipe, FIFO or
    /// device named as a source is read to its end.
    ///
    /// DST is `[user@]host:path` or `sftp://[user@]host[:port]/path` (over ssh), or a
    /// path on the server given by --server-cmd or --connect (the local sftp-server by
    /// default). Several sources need DST to be a directory.
    Put {
        #[command(flatten)]
        server: Server,
        /// Have the kernel send each WRITE's data from the file (sendfile) instead of
        /// reading it in: about a third less CPU, but no faster, often a few percent
        /// slower, against a local sftp-server.
        #[arg(long)]
        sendfile: bool,
        #[command(flatten)]
        copy: Copy,
        /// Local files.
        #[arg(required = true, num_args = 1..)]
        src: Vec<PathBuf>,
        /// Remote file or directory: `[user@]host:path`, `sftp://...`, or a path on the
        /// server.
        dst: String,
    },
    /// List a remote directory, one name a line (control and non-UTF-8 bytes escaped),
    /// or name a file.
    Ls {
        #[command(flatten)]
        server: Server,
        /// The server's `ls -l` line for each entry.
        #[arg(short = 'l')]
        long: bool,
        /// `[user@]host:path`, `sftp://...`, or a path on the server.
        path: String,
    },
    /// Make a remote directory.
    Mkdir {
        #[command(flatten)]
        server: Server,
        /// And the directories above it that are missing; one that exists is fine.
        #[arg(short = 'p')]
        parents: bool,
        /// `[user@]host:path`, `sftp://...`, or a path on the server.
        path: String,
    },
    /// Remove a remote file.
    Rm {
        #[command(flatten)]
        server: Server,
        /// A directory and everything under it (links removed, not followed).
        #[arg(short = 'r')]
        recursive: bool,
        /// `[user@]host:path`, `sftp://...`, or a path on the server.
        path: String,
    },
    /// Rename a remote file (posix-rename@openssh.com where the server has it, so an
    /// existing target is replaced).
    Mv {
        #[command(flatten)]
        server: Server,
        /// `[user@]host:path`, `sftp://...`, or a path on the server.
        from: String,
        /// A path on the same server (`host:path` with the same host, or a plain path).
        to: String,
    },
}

/// Which server and how hard to drive it.
#[derive(Debug, clap::Args)]
pub(crate) struct Server {
    /// Command that runs an SFTP server on its stdin and stdout (then no argument is a
    /// host); without it, and with no host named, the local
    /// `/usr/lib/openssh/sftp-server -e -l ERROR`.
    #[arg(long, conflicts_with = "connect")]
    server_cmd: Option<String>,
    /// Address of a TCP server speaking raw SFTP, instead of spawning one.
    #[arg(long)]
    connect: Option<SocketAddr>,
    #[command(flatten)]
    ssh: SshArgs,
    /// Requests in flight.
    #[arg(long, default_value_t = 64, value_parser = at_least_one)]
    pub(crate) requests: usize,
    /// Bytes per READ or WRITE (default, and at most: the server's limit, 32 KiB from a
    /// server that states none, and at most 1 MiB).
    #[arg(long, value_parser = at_least_one)]
    pub(crate) chunk: Option<usize>,
    /// Seconds each request may wait for its answer; a server that stops answering
    /// (a hung disk, a stalled process behind a live ssh) then fails the command with
    /// the request and path named, rather than hanging it.
    #[arg(long, default_value_t = volley_sftp::DEFAULT_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..=86_400))]
    timeout: u64,
    /// Socket buffer asked of the kernel for the spawned server's socketpair, in bytes
    /// (Linux doubles it and caps it at net.core.wmem_max); 0 leaves the kernel's default.
    #[arg(long, default_value_t = volley_transport_tcp::SOCKET_BUFFER, conflicts_with = "connect")]
    socket_buffer: usize,
}

/// How `get` and `put` copy, beyond one file's bytes.
#[derive(Debug, clap::Args)]
pub(crate) struct Copy {
    /// Copy a directory and everything under it, many files at once (symbolic links
    /// skipped and listed). An existing directory DST (local for get, remote for put)
    /// receives `DST/basename(SRC)`.
    #[arg(short = 'r')]
    pub(crate) recursive: bool,
    /// With -r: follow symbolic links, to files and directories, instead of skipping
    /// them (a link back into a directory being walked is reported as a loop).
    #[arg(short = 'L', requires = "recursive")]
    pub(crate) follow_links: bool,
    /// Give each copy its source's modification and access times and permission bits.
    #[arg(short = 'p')]
    pub(crate) preserve: bool,
    /// Flush each copy to disk before it is put in place (on the server with
    /// fsync@openssh.com where it offers it).
    #[arg(long)]
    pub(crate) fsync: bool,
    /// Sessions to open, 1 to 32: over ssh, separate logins, each authenticating on its
    /// own (ControlMaster stays off). A tree's files are spread over them, and a file of
    /// 16 MiB or more is read or written in ranges, one a session, so a long round trip
    /// is not held to one ssh channel window. Logins start at most 8 at once; the server
    /// must allow them: OpenSSH's MaxStartups refuses some unauthenticated connections
    /// past 10 by default.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=32))]
    pub(crate) sessions: u16,
    /// With -r: how deep directories may nest below the tree's root (64, as OpenSSH's
    /// sftp); a deeper one is reported as failed and not entered.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096), requires = "recursive")]
    pub(crate) max_depth: u32,
    /// With -r: how many entries one directory may list; one that lists more is
    /// reported as failed and not copied (it bounds what a listing holds in memory).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000), requires = "recursive")]
    pub(crate) max_entries: u64,
    /// Write into the destination itself, as OpenSSH's sftp does, instead of into
    /// DST.volley-part renamed over it: an existing file keeps its inode, owner, mode
    /// and hard links; a copy that fails part way leaves it holding the new bytes up to
    /// where they arrived without a gap.
    #[arg(long)]
    pub(crate) inplace: bool,
    /// Resume: continue from DST.volley-part, left by a copy that failed or was
    /// interrupted (for put, else from the end of the remote file, as `reput`); a
    /// destination that already has the source's size is left as it is. Only the
    /// missing bytes travel; a part longer than the source is refused.
    #[arg(short = 'a')]
    pub(crate) resume: bool,
}

/// OpenSSH's pass-through options, given to ssh after sftp's own defaults (so they
/// cannot override those), as `sftp` does.
#[derive(Debug, clap::Args)]
struct SshArgs {
    /// ssh: an ssh_config file.
    #[arg(short = 'F', value_name = "SSH_CONFIG")]
    config: Option<PathBuf>,
    /// ssh: the port to connect to.
    #[arg(short = 'P', value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    port: Option<u16>,
    /// ssh: an identity (private key) file; repeatable.
    #[arg(short = 'i', value_name = "IDENTITY")]
    identity: Vec<PathBuf>,
    /// ssh: an option as ssh_config takes it (`-o LogLevel=DEBUG`); repeatable.
    #[arg(short = 'o', value_name = "SSH_OPTION")]
    option: Vec<String>,
    /// ssh: a jump host.
    #[arg(short = 'J', value_name = "DESTINATION")]
    jump: Option<String>,
    /// ssh: the program to run instead of `ssh` (for example `hpnssh`).
    #[arg(short = 'S', value_name = "PROGRAM")]
    program: Option<PathBuf>,
}

impl Server {
    /// Whether the server is given directly (then no argument names a host).
    pub(crate) fn direct(&self) -> bool {
        self.server_cmd.is_some() || self.connect.is_some()
    }
}

impl SshArgs {
    fn given(&self) -> bool {
        self.config.is_some()
            || self.port.is_some()
            || !self.identity.is_empty()
            || !self.option.is_empty()
            || self.jump.is_some()
            || self.program.is_some()
    }

    fn options(&self) -> SshOptions {
        SshOptions {
            program: self.program.clone(),
            config: self.config.clone(),
            port: self.port,
            identities: self.identity.clone(),
            jump: self.jump.clone(),
            options: self.option.clone(),
        }
    }
}

/// The local sftp-server spawned when no server and no host is named.
const LOCAL_SERVER: &str = "/usr/lib/openssh/sftp-server -e -l ERROR";

/// Opens the session a command names: over ssh when `remote_arg` names a host (and
/// neither --server-cmd nor --connect is given), else that server or the local one.
/// Returns it with the path on the server that `remote_arg` names.
pub(crate) async fn open(
    server: &Server,
    what: &str,
    remote_arg: &str,
) -> anyhow::Result<(SftpClient, String)> {
    let (remote, path) = target(server, what, remote_arg)?;
    Ok((session(server, remote.as_ref()).await?, path))
}

/// [`open`], `n` sessions logging in at once (at most `volley_sftp::LOGINS_AT_ONCE` starting
/// together), as one [`Sessions`].
pub(crate) async fn open_sessions(
    server: &Server,
    what: &str,
    remote_arg: &str,
    n: usize,
) -> anyhow::Result<(Sessions, String)> {
    let (remote, path) = target(server, what, remote_arg)?;
    let remote = remote.as_ref();
    let sessions = Sessions::open(n, |i| async move {
        let opened = session(server, remote).await;
        match n {
            1 => opened,
            _ => opened.with_context(|| format!("session {} of {n}", i + 1)),
        }
    })
    .await?;
    Ok((sessions, path))
}

/// What `remote_arg` names: a host to reach over ssh (unless --server-cmd or --connect
/// gives the server), and the path on the server.
fn target(
    server: &Server,
    what: &str,
    remote_arg: &str,
) -> anyhow::Result<(Option<Remote>, String)> {
    let remote = if server.direct() {
        None
    } else {
        Remote::parse(remote_arg)?
    };
    if remote.is_none() && server.ssh.given() {
        anyhow::bail!(
            "{what}: ssh options (-F, -P, -i, -o, -J, -S) need a remote `[user@]host:path`"
        );
    }
    let path = remote
        .as_ref()
        .map_or(remote_arg, |r| r.path.as_str())
        .to_owned();
    Ok((remote, path))
}

/// The path on the server that `remote_arg` names.
pub(crate) fn remote_path(server: &Server, remote_arg: &str) -> anyhow::Result<String> {
    Ok(target(server, Direction::Get.name(), remote_arg)?.1)
}

/// One session: over ssh to `remote`, else the server given (or the local one).
async fn session(server: &Server, remote: Option<&Remote>) -> anyhow::Result<SftpClient> {
    let mut sftp = match remote {
        Some(remote) => SftpClient::ssh(&remote.destination, &server.ssh.options()).await?,
        None => connect(server).await?,
    };
    sftp.set_timeout(core::time::Duration::from_secs(server.timeout));
    Ok(sftp)
}

async fn connect(server: &Server) -> anyhow::Result<SftpClient> {
    if let Some(addr) = server.connect {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("cannot connect to {addr}"))?;
        let _ = stream.set_nodelay(true);
        let (read, write) = stream.into_split();
        return Ok(SftpClient::connect(read, write).await?);
    }
    let server_cmd = server.server_cmd.as_deref().unwrap_or(LOCAL_SERVER);
    let mut words = server_cmd.split_whitespace();
    let program = words.next().context("--server-cmd is empty")?;
    let mut command = Command::new(program);
    command.args(words);
    let buffer = Some(server.socket_buffer).filter(|&n| n > 0);
    SftpClient::spawn_with_socket_buffer(&mut command, buffer)
        .await
        .with_context(|| format!("cannot start `{server_cmd}`"))
}
