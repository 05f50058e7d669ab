//! Running the Python peers (rig 2.4.1, SpiNNMan 7.4.1) that `cargo xtask test`
//! installs into a venv under `target/peers/venv`; `VOLLEY_PYTHON` may name another
//! interpreter that has them.

use core::time::Duration;
use std::path::PathBuf;
use std::process::Stdio;

use tokio::process::Command;

fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("VOLLEY_PYTHON") {
        return python.into();
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/peers/venv/bin/python");
    assert!(
        venv.exists(),
        "the Python peers are not installed: run `cargo xtask test` (it creates {} with \
         rig==2.4.1 and SpiNNMan==1!7.4.1), or set VOLLEY_PYTHON to a Python that has them",
        venv.display()
    );
    venv
}

/// Runs `tests/<script>` with `args`, at most `limit`; panics with its output unless it
/// succeeds. Returns its standard output.
pub(crate) async fn run(script: &str, args: &[String], limit: Duration) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(script);
    let output = tokio::time::timeout(
        limit,
        Command::new(python())
            .arg(&script)
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{} did not finish within {limit:?}", script.display()))
    .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{} failed ({}):\n{stdout}\n{stderr}",
        script.display(),
        output.status
    );
    stdout
}
