//! The one place this crate asks the OS for something its safe wrappers cannot express:
//! the signal disposition of a child between `fork` and `exec`.
#![allow(unsafe_code)]

use nix::sys::signal::{SigHandler, Signal, signal};
use tokio::process::Command;

/// Makes the child start with SIGINT ignored (inherited across `exec`), as OpenSSH's
/// `sftp` starts ssh: a Ctrl-C on the terminal then stops volley's transfer, which ends
/// the session itself, instead of killing ssh under it. The child stays in our process
/// group, so ssh can still prompt on the terminal.
pub(crate) fn ignore_sigint_in_child(command: &mut Command) {
    // SAFETY: the closure runs in the forked child before `exec`, where only
    // async-signal-safe calls are allowed; it makes one `signal(2)` system call
    // (async-signal-safe) and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            // SAFETY: SIG_IGN installs no handler of ours, so nothing of this process
            // can run in signal context in the child.
            signal(Signal::SIGINT, SigHandler::SigIgn)
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
}
