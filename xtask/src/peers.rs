//! The external things volley's tests and benchmarks need, checked for and installed when
//! missing, so both README commands work on a fresh machine with nothing installed by hand.
//! Later suites add their peers here (OpenSSH's sftp-server, a Python venv with rig).

use std::process::{Command, Stdio};

use crate::exec;

/// Something outside the workspace a command needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Peer {
    /// The `thumbv7em-none-eabihf` standard library, for the no_std build.
    ThumbTarget,
}

/// The bare-metal target the no_std build proves itself on.
pub(crate) const NO_STD_TARGET: &str = "thumbv7em-none-eabihf";

/// Makes every peer available; returns an error saying how to install one by hand if an
/// automatic install fails. `ThumbTarget` is best effort: the caller falls back.
pub(crate) fn ensure(peers: &[Peer]) -> Result<Vec<Peer>, String> {
    let mut missing = Vec::new();
    for &peer in peers {
        let ok = match peer {
            Peer::ThumbTarget => ensure_rust_target(NO_STD_TARGET),
        };
        if !ok {
            missing.push(peer);
        }
    }
    Ok(missing)
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
