//! The Python side of the suites that time Python peers (rig, SpiNNMan, the `volley`
//! package): `benches/python_suite.py` runs one system's round in its own process and
//! prints its figures as one JSON line.

use std::process::Command;

use serde_json::Value;

/// Runs `python_suite.py` with `args` under `python` (the peers' venv, named by
/// `VOLLEY_PYTHON` or `--python`); `what` names the peer in errors. Gives back the
/// script's JSON line.
pub(crate) fn python_round(
    python: Option<&str>,
    what: &str,
    args: &[String],
) -> Result<Value, String> {
    let python = python.ok_or_else(|| {
        format!("no Python with {what} (run it through `cargo xtask bench`, or give --python)")
    })?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python_suite.py");
    let output = Command::new(python)
        .arg(script)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {python}: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(format!("{what} failed: {}", last.join(" / ")));
    }
    serde_json::from_slice(&output.stdout).map_err(|e| format!("{what} printed no JSON: {e}"))
}

/// Field `key` of a round's JSON line, in seconds.
pub(crate) fn secs(line: &Value, what: &str, key: &str) -> Result<f64, String> {
    line[key]
        .as_f64()
        .ok_or_else(|| format!("{what} printed no {key}"))
}
