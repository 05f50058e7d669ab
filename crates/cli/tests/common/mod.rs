//! What the CLI tests share: running `volley` as a user would, with a timeout on each
//! wait.

#![allow(dead_code, unreachable_pub)]

use core::time::Duration;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::timeout;

pub const VOLLEY: &str = env!("CARGO_BIN_EXE_volley");

/// Starts a long-running `volley` command and returns it with the first line it prints.
pub async fn spawn(args: &[&str]) -> (Child, String) {
    spawn_with(Command::new(VOLLEY).args(args)).await
}

/// Starts `command` (which runs `volley` somehow), stdout piped and stderr kept, and
/// returns it with the first line it prints.
pub async fn spawn_with(command: &mut Command) -> (Child, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("volley starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    timeout(
        Duration::from_secs(10),
        BufReader::new(stdout).read_line(&mut line),
    )
    .await
    .expect("volley printed its listening line within 10 s")
    .expect("stdout readable");
    (child, line.trim().to_owned())
}

/// Runs a `volley` command to completion (60 s at most) and returns (success, stderr).
pub async fn run(args: &[&str]) -> (bool, String) {
    let (ok, _, stderr) = run_out(args).await;
    (ok, stderr)
}

/// Runs a `volley` command to completion (60 s at most) and returns (success, stdout,
/// stderr).
pub async fn run_out(args: &[&str]) -> (bool, String, String) {
    let output = timeout(
        Duration::from_secs(60),
        Command::new(VOLLEY).args(args).kill_on_drop(true).output(),
    )
    .await
    .unwrap_or_else(|_| panic!("volley {args:?} did not finish within 60 s"))
    .expect("volley runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `len` bytes of test data, the same every time.
pub fn pattern(len: usize) -> Vec<u8> {
    volley_testkit::pattern(len, 1)
}

/// Starts an emulator on a free UDP port and returns it with its address.
pub async fn emulator(extra: &[&str]) -> (Child, String) {
    let mut args = vec!["emulate", "--udp", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let (child, line) = spawn(&args).await;
    let udp = line
        .strip_prefix("listening udp=")
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("unexpected line `{line}`"))
        .to_owned();
    (child, udp)
}

/// Runs `volley ARGS` with a pseudo-terminal for its stdin, stdout and stderr (through
/// util-linux's `script`), as a user at a terminal would; returns (success, output).
pub async fn run_on_terminal(args: &[&str]) -> (bool, String) {
    let mut line = String::from(VOLLEY);
    for arg in args {
        line.push_str(" '");
        line.push_str(&arg.replace('\'', "'\\''"));
        line.push('\'');
    }
    let output = timeout(
        Duration::from_secs(60),
        Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("volley {args:?} on a terminal did not finish within 60 s"))
    .expect("script (util-linux) runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[allow(unused_imports)]
pub use volley_testkit::scratch;

#[allow(unused_imports)]
pub use volley_testkit::{listing, mkfifo};

/// CPU ticks (user + system) the process has used so far.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// A real OpenSSH sshd on 127.0.0.1 for the test (see `volley_sftp::testing::sshd`),
/// started within 20 s or the test fails saying why.
pub async fn sshd() -> volley_sftp::testing::sshd::Sshd {
    timeout(
        Duration::from_secs(20),
        volley_sftp::testing::sshd::Sshd::start(),
    )
    .await
    .expect("sshd started within 20 s")
    .expect("sshd starts")
}

/// asyncssh's SSH and SFTP server in place of sshd, the same way.
pub async fn asyncssh() -> volley_sftp::testing::sshd::Sshd {
    timeout(
        Duration::from_secs(30),
        volley_sftp::testing::sshd::Sshd::asyncssh(),
    )
    .await
    .expect("asyncssh started within 30 s")
    .expect("asyncssh's server starts (`cargo xtask test` installs it into target/peers/venv)")
}

/// `rclone serve sftp` in place of sshd, the same way.
pub async fn rclone() -> volley_sftp::testing::sshd::Sshd {
    timeout(
        Duration::from_secs(20),
        volley_sftp::testing::sshd::Sshd::rclone(),
    )
    .await
    .expect("rclone started within 20 s")
    .expect("rclone serve sftp starts")
}

/// A tree of `n` files under `root`, spread over `root`, `a` and `a/b`, file `i` named
/// `f i` and holding `pattern(len(i))`; returns their paths in order.
pub fn tree_of(
    root: &std::path::Path,
    n: usize,
    len: impl Fn(usize) -> usize,
) -> Vec<std::path::PathBuf> {
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    (0..n)
        .map(|i| {
            let at = ["", "a", "a/b"][i % 3];
            let path = root.join(at).join(format!("f {i}"));
            std::fs::write(&path, pattern(len(i))).unwrap();
            path
        })
        .collect()
}

/// `volley sftp WHAT -F CFG [EXTRA..] FROM TO` (a server reached through the ssh_config
/// `cfg`), as [`run`] gives it.
pub async fn sftp_via(
    cfg: &str,
    what: &str,
    extra: &[&str],
    from: &str,
    to: &str,
) -> (bool, String) {
    let mut args = vec!["sftp", what, "-F", cfg];
    args.extend_from_slice(extra);
    args.extend([from, to]);
    run(&args).await
}
