//! `cargo xtask soak [--minutes N]`: builds `volley` and `volley-soak` in release mode and
//! runs the soak (minutes of mixed, verified traffic against one emulator and one link
//! simulator, with garbage and FILL storms); its last line gives requests, errors and the
//! memory of each process, and it fails on any error or on memory growth.

use crate::peers::{self, Peer};
use crate::{exec, root};

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut minutes = "2".to_owned();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--minutes" => minutes = args.next().ok_or("--minutes needs a number")?.clone(),
            other => {
                return Err(format!(
                    "unknown soak option `{other}`\n\n{}",
                    crate::usage()
                ));
            }
        }
    }
    peers::ensure(&[Peer::OpenSsh])?;
    crate::bench::build_release()?;
    let release = root().join("target").join("release");
    exec(
        std::process::Command::new(release.join("volley-soak"))
            .args(["--minutes", &minutes])
            .arg("--volley")
            .arg(release.join("volley")),
    )
}
