//! The systems the `sftp-ssh` suite runs, each as the exact command line a user would
//! type, all through the same relay to the same sshd (rclone through its own Go SSH
//! client, given the key and port as flags).

use std::path::{Path, PathBuf};
use std::process::Command;

/// What a command reads on its stdin.
pub(crate) enum Input {
    Nothing,
    Text(String),
    File(PathBuf),
}

/// What is moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Load {
    /// A directory tree of small files.
    Tree,
    /// One large file.
    File,
}

/// Where the commands connect.
pub(crate) struct Target<'a> {
    /// The ssh_config naming host `bench` (the relay's port, the key, no host-key check).
    pub config: &'a Path,
    /// The relay's port, for rclone.
    pub port: u16,
    /// The private key, for rclone.
    pub key: &'a Path,
    /// volley's binary.
    pub volley: &'a Path,
}

/// The systems for `load`, in table order. rclone at its best skips the `md5sum` over
/// ssh it runs by default after each file (`--sftp-disable-hashcheck`: no other system
/// pays for a hash); its defaults are a row of their own. `quick` leaves out the slow
/// defaults of rclone (about 27 s for 300 files at any RTT here) and lftp, whose best
/// settings stay.
pub(crate) fn names(load: Load, quick: bool) -> &'static [&'static str] {
    match load {
        Load::Tree if quick => &[
            "volley",
            "OpenSSH sftp",
            "OpenSSH scp",
            "rclone copy --transfers 16 --sftp-disable-hashcheck",
            "lftp mirror --parallel=16",
        ],
        Load::Tree => &[
            "volley",
            "OpenSSH sftp",
            "OpenSSH scp",
            "rclone copy (defaults)",
            "rclone copy --transfers 16 --sftp-disable-hashcheck",
            "lftp mirror",
            "lftp mirror --parallel=16",
        ],
        Load::File => &[
            "volley",
            "volley --sessions 4",
            "OpenSSH sftp",
            "OpenSSH scp",
            "rclone copyto --sftp-disable-hashcheck",
            "lftp get/put",
            "lftp pget -n 4 (get)",
            "ssh cat (ceiling)",
            "4 ssh cat at once (ceiling)",
        ],
    }
}

/// The command that moves `from` to `to` (`get`: `from` is remote; `put`: `to` is), or
/// `None` when `system` does not go that way, with what it reads on stdin.
pub(crate) fn command(
    system: &str,
    direction: &str,
    load: Load,
    from: &Path,
    to: &Path,
    at: &Target<'_>,
) -> Option<(Command, Input)> {
    let get = direction == "get";
    let remote = |p: &Path| format!("bench:{}", p.display());
    let (src, dst) = (from.display().to_string(), to.display().to_string());
    let (src_arg, dst_arg) = if get {
        (remote(from), dst.clone())
    } else {
        (src.clone(), remote(to))
    };
    let cfg = at.config.to_str()?;
    let recursive = if load == Load::Tree { "-r" } else { "" };
    let mut stdin = Input::Nothing;
    let command = match system {
        "volley" | "volley --sessions 4" => {
            let mut c = Command::new(at.volley);
            c.args(["sftp", direction, "-F", cfg]);
            if load == Load::Tree {
                c.arg("-r");
            }
            c.args(system.split_whitespace().skip(1));
            c.args([&src_arg, &dst_arg]);
            c
        }
        "OpenSSH sftp" => {
            let mut c = Command::new("sftp");
            c.args(["-q", "-F", cfg, "-b", "-", "bench"]);
            stdin = Input::Text(format!("{direction} {recursive} {src} {dst}\n"));
            c
        }
        "OpenSSH scp" => {
            let mut c = Command::new("scp");
            c.args(["-q", "-F", cfg]);
            if load == Load::Tree {
                c.arg("-r");
            }
            c.args([&src_arg, &dst_arg]);
            c
        }
        "rclone copy (defaults)"
        | "rclone copy --transfers 16 --sftp-disable-hashcheck"
        | "rclone copyto --sftp-disable-hashcheck" => {
            let sftp = |p: &str| format!(":sftp:{p}");
            let (a, b) = if get {
                (sftp(&src), dst)
            } else {
                (src, sftp(&dst))
            };
            let mut c = Command::new("rclone");
            c.args(system.split_whitespace().skip(1).take(1));
            c.args([
                &a,
                &b,
                "--config",
                "/dev/null",
                "-q",
                "--sftp-host",
                "127.0.0.1",
            ]);
            c.args(["--sftp-user", "root", "--sftp-port", &at.port.to_string()]);
            c.arg("--sftp-key-file").arg(at.key);
            // The name's flags, not its "(defaults)" label.
            c.args(
                system
                    .split_whitespace()
                    .skip(2)
                    .filter(|a| !a.starts_with('(')),
            );
            c
        }
        "lftp mirror" | "lftp mirror --parallel=16" | "lftp get/put" | "lftp pget -n 4 (get)" => {
            let job = match system {
                "lftp get/put" if get => format!("get {src} -o {dst}"),
                "lftp get/put" => format!("put {src} -o {dst}"),
                "lftp pget -n 4 (get)" if get => format!("pget -n 4 {src} -o {dst}"),
                "lftp pget -n 4 (get)" => return None,
                _ => {
                    let parallel = system.split_whitespace().nth(2).unwrap_or_default();
                    let reverse = if get { "" } else { "-R" };
                    format!("mirror {reverse} {parallel} {src} {dst}")
                }
            };
            let mut c = Command::new("lftp");
            c.arg("-c").arg(format!(
                "set sftp:connect-program 'ssh -a -x -F {cfg}'; open -u root, sftp://bench; {job}"
            ));
            c
        }
        "ssh cat (ceiling)" => {
            let mut c = Command::new("ssh");
            c.args(["-F", cfg, "bench"]);
            if get {
                c.arg(format!("cat {src}"));
            } else {
                c.arg("cat > /dev/null");
                stdin = Input::File(from.to_owned());
            }
            c
        }
        "4 ssh cat at once (ceiling)" => {
            // A quarter of the file each, through four logins at once: what four
            // sessions could carry at best.
            let quarter = "count=64 bs=1M status=none";
            let each = if get {
                format!("ssh -F {cfg} bench \"dd if={src} skip=$((i*64)) {quarter}\" > /dev/null")
            } else {
                format!(
                    "dd if={src} skip=$((i*64)) {quarter} | ssh -F {cfg} bench 'cat > /dev/null'"
                )
            };
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!("for i in 0 1 2 3; do {each} & done; wait"));
            c
        }
        _ => return None,
    };
    Some((command, stdin))
}
