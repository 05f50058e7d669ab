//! The external things volley's tests and benchmarks need, checked for and installed when
//! missing, so both README commands work on a fresh machine with nothing installed by hand.
//! rig 2.4.1, SpiNNMan 7.4.1 and asyncssh 2.24.1 in a venv, OpenSSH's sftp-server, client and server from Debian, rclone and
//! lftp from Debian, a Rust target, nftables (the matrix's lossy TCP rows).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::{exec, root};

/// Something outside the workspace a command needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Peer {
    /// The `thumbv7em-none-eabihf` standard library, for the no_std build.
    ThumbTarget,
    /// rig 2.4.1 (SpiNNaker's Python host library) in a venv under `target/peers/venv`.
    Rig,
    /// SpiNNMan 7.4.1 (SpiNNaker's Python transceiver, with SpiNNMachine and numpy) in
    /// the same venv.
    SpiNNMan,
    /// OpenSSH's sftp-server (Debian's openssh-sftp-server) and `sftp` client.
    OpenSsh,
    /// A nightly toolchain and cargo-fuzz (libFuzzer), for the fuzz targets.
    CargoFuzz,
    /// A Rust toolchain of this version (the minimum the workspace declares).
    Toolchain(String),
    /// Debian's nftables (`nft`), with which the matrix suite drops TCP's packets in a
    /// network namespace of its own.
    Nftables,
    /// Debian's rclone: its `serve sftp` is the SFTP tests' second server, and its
    /// `copy` a peer in the sftp-ssh bench.
    Rclone,
    /// Debian's lftp, whose `mirror` is a peer in the sftp-ssh bench.
    Lftp,
    /// asyncssh, in the peers' venv: its SSH and SFTP server is the SFTP tests' third
    /// server (one that states 4 MiB limits).
    Asyncssh,
}

/// Where Debian puts OpenSSH's sftp-server.
pub(crate) const SFTP_SERVER: &str = "/usr/lib/openssh/sftp-server";

/// The rig release the interop tests and benchmarks run.
const RIG_VERSION: &str = "2.4.1";
/// The SpiNNMan release the machine tests and benchmarks run (its versions carry an
/// epoch).
pub(crate) const SPINNMAN_REQUIREMENT: &str = "SpiNNMan==1!7.4.1";

/// The asyncssh release the SFTP tests serve with (the tests' own copy of this figure
/// is `volley_sftp::testing::sshd::ASYNCSSH_VERSION`).
const ASYNCSSH_VERSION: &str = "2.24.1";

/// The bare-metal target the no_std build proves itself on.
pub(crate) const NO_STD_TARGET: &str = "thumbv7em-none-eabihf";

/// Makes every peer available. A peer that cannot be installed is an error saying how
/// to install it by hand, except `ThumbTarget` and `Nftables`, which are best effort:
/// they are returned as missing and the caller falls back.
pub(crate) fn ensure(peers: &[Peer]) -> Result<Vec<Peer>, String> {
    let mut missing = Vec::new();
    for peer in peers {
        match peer {
            Peer::ThumbTarget => {
                if !ensure_rust_target(NO_STD_TARGET) {
                    missing.push(peer.clone());
                }
            }
            Peer::Rig => ensure_rig()?,
            Peer::SpiNNMan => ensure_spinnman()?,
            Peer::OpenSsh => ensure_openssh()?,
            Peer::CargoFuzz => ensure_cargo_fuzz()?,
            Peer::Toolchain(version) => ensure_toolchain(version)?,
            Peer::Nftables => {
                if !ensure_nftables() {
                    missing.push(peer.clone());
                }
            }
            Peer::Rclone => ensure_debian("/usr/bin/rclone", "rclone")?,
            Peer::Lftp => ensure_debian("/usr/bin/lftp", "lftp")?,
            Peer::Asyncssh => ensure_in_venv(
                "asyncssh",
                &format!("asyncssh=={ASYNCSSH_VERSION}"),
                &format!("import asyncssh; assert asyncssh.__version__ == '{ASYNCSSH_VERSION}'"),
            )?,
        }
    }
    Ok(missing)
}

/// The Python interpreter of the venv that holds rig.
pub(crate) fn venv_python() -> PathBuf {
    root().join("target/peers/venv/bin/python")
}

fn ensure_rig() -> Result<(), String> {
    // rig 2.4.1 needs inspect.getargspec, which CPython 3.11 removed.
    let check = format!(
        "import inspect; inspect.getargspec = lambda f: tuple(inspect.getfullargspec(f))[:4]; \
         import rig, rig.machine_control; assert rig.__version__ == '{RIG_VERSION}', rig.__version__"
    );
    ensure_in_venv("rig", &format!("rig=={RIG_VERSION}"), &check)
}

fn ensure_spinnman() -> Result<(), String> {
    let check = "import importlib.metadata as m, spinnman.transceiver; \
                 v = m.version('SpiNNMan'); assert v == '1!7.4.1', v";
    ensure_in_venv("SpiNNMan", SPINNMAN_REQUIREMENT, check)
}

/// Installs `requirement` into the peers' venv unless `check` already runs there.
pub(crate) fn ensure_in_venv(name: &str, requirement: &str, check: &str) -> Result<(), String> {
    let python = venv_python();
    let works = |python: &PathBuf| {
        Command::new(python)
            .args(["-c", check])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if works(&python) {
        return Ok(());
    }
    eprintln!("xtask: installing {requirement} into {}", python.display());
    let venv = root().join("target/peers/venv");
    let how = format!(
        "install it by hand with `python3 -m venv {0} && {0}/bin/pip install '{requirement}'`",
        venv.display()
    );
    if !python.exists() {
        exec(Command::new("python3").arg("-m").arg("venv").arg(&venv))
            .map_err(|e| format!("cannot create the peers' venv ({e}); {how}"))?;
    }
    exec(Command::new(&python).args(["-m", "pip", "install", "--quiet", requirement]))
        .map_err(|e| format!("cannot install {name} ({e}); {how}"))?;
    if works(&python) {
        Ok(())
    } else {
        Err(format!("{name} was installed but does not import; {how}"))
    }
}

/// Where the tests find OpenSSH's server.
pub(crate) const SSHD: &str = "/usr/sbin/sshd";

/// Installs OpenSSH's sftp-server, client and server if any is missing. The server is
/// installed with a `policy-rc.d` that exits 101, so no system sshd starts on port 22:
/// the tests start their own, on 127.0.0.1.
fn ensure_openssh() -> Result<(), String> {
    let have = |path: &str| std::path::Path::new(path).exists();
    if have(SFTP_SERVER) && have("/usr/bin/sftp") && have(SSHD) {
        return Ok(());
    }
    let how = "install it by hand with `apt-get update && apt-get install -y \
               --no-install-recommends openssh-sftp-server openssh-client openssh-server` \
               (with a /usr/sbin/policy-rc.d that exits 101, so no sshd starts on port 22)";
    eprintln!("xtask: installing OpenSSH's sftp-server, client and server with apt-get");
    exec(apt_get().arg("update").arg("-qq"))
        .map_err(|e| format!("cannot update the package lists ({e}); {how}"))?;
    let policy = "/usr/sbin/policy-rc.d";
    let placed = !have(policy)
        && exec(as_root("sh").args([
            "-c",
            "printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d",
        ]))
        .is_ok();
    let installed = exec(apt_get().env("DEBIAN_FRONTEND", "noninteractive").args([
        "install",
        "-y",
        "-qq",
        "--no-install-recommends",
        "openssh-sftp-server",
        "openssh-client",
        "openssh-server",
    ]));
    if placed {
        let _ = exec(as_root("rm").args(["-f", policy]));
    }
    installed.map_err(|e| format!("cannot install OpenSSH ({e}); {how}"))?;
    match [SFTP_SERVER, "/usr/bin/sftp", SSHD]
        .into_iter()
        .find(|p| !have(p))
    {
        None => Ok(()),
        Some(missing) => Err(format!("{missing} is still missing; {how}")),
    }
}

/// Installs nftables with apt-get if `nft` is missing; whether it is there now.
fn ensure_nftables() -> bool {
    let at = ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"];
    at.iter().any(|p| std::path::Path::new(p).exists())
        || ensure_debian("/usr/sbin/nft", "nftables").is_ok()
}

/// Installs Debian's `package` with apt-get if `binary` is missing; an error says how to
/// install it by hand.
fn ensure_debian(binary: &str, package: &str) -> Result<(), String> {
    let have = || std::path::Path::new(binary).exists();
    if have() {
        return Ok(());
    }
    let how = format!("install it by hand with `apt-get update && apt-get install -y {package}`");
    eprintln!("xtask: installing {package} with apt-get");
    exec(apt_get().arg("update").arg("-qq"))
        .map_err(|e| format!("cannot update the package lists ({e}); {how}"))?;
    exec(apt_get().env("DEBIAN_FRONTEND", "noninteractive").args([
        "install",
        "-y",
        "-qq",
        "--no-install-recommends",
        package,
    ]))
    .map_err(|e| format!("cannot install {package} ({e}); {how}"))?;
    match have() {
        true => Ok(()),
        false => Err(format!("{binary} is still missing; {how}")),
    }
}

fn ensure_rust_target(target: &str) -> bool {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .stderr(Stdio::null())
        .output()
        .map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l.trim() == target)
        })
        .unwrap_or(false);
    if installed {
        return true;
    }
    eprintln!("xtask: installing the {target} standard library with rustup");
    exec(Command::new("rustup").args(["target", "add", target])).is_ok()
}

fn ensure_cargo_fuzz() -> Result<(), String> {
    let works = |args: &[&str]| {
        Command::new("cargo")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !works(&["+nightly", "--version"]) {
        eprintln!("xtask: installing a nightly toolchain with rustup (cargo-fuzz needs one)");
        exec(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))
        .map_err(|e| format!("{e}; install it by hand with `rustup toolchain install nightly`"))?;
    }
    if !works(&["fuzz", "--version"]) {
        eprintln!("xtask: installing cargo-fuzz from crates.io");
        exec(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))
            .map_err(|e| format!("{e}; install it by hand with `cargo install cargo-fuzz`"))?;
    }
    Ok(())
}

/// `apt-get`, through `sudo` when not running as root and sudo is there (a CI runner).
fn apt_get() -> Command {
    as_root("apt-get")
}

/// `program`, through `sudo` when not running as root and sudo is there.
fn as_root(program: &str) -> Command {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
    let sudo = std::path::Path::new("/usr/bin/sudo").exists();
    if !root && sudo {
        let mut cmd = Command::new("sudo");
        cmd.arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

fn ensure_toolchain(version: &str) -> Result<(), String> {
    let have = Command::new("cargo")
        .arg(format!("+{version}"))
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if have {
        return Ok(());
    }
    eprintln!("xtask: installing Rust {version} with rustup (the workspace's rust-version)");
    exec(Command::new("rustup").args(["toolchain", "install", version, "--profile", "minimal"]))
        .map_err(|e| format!("{e}; install it by hand with `rustup toolchain install {version}`"))
}

/// Builds the `volley` Python package (`crates/python`, by maturin through pip, a release
/// build) into the peers' venv, replacing any older build.
pub(crate) fn install_package() -> Result<(), String> {
    let python = venv_python();
    eprintln!(
        "xtask: building the volley Python package into {}",
        python.display()
    );
    let package = root().join("crates/python");
    exec(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--force-reinstall",
                "--no-deps",
            ])
            .arg(&package),
    )
    .map_err(|e| {
        format!(
            "cannot build the Python package ({e}); try `{} -m pip install {}`",
            python.display(),
            package.display()
        )
    })
}
