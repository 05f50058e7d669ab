//! volley's project automation, run as `cargo xtask <command>`:
//!
//! - `cargo xtask test [STEP..]`: installs the peers tests need when missing, then runs
//!   every check (all of them if no step is named; `cargo xtask --help` lists the steps):
//!   `tidy` (the house rules), formatting, clippy, docs, `no_std`, feature sets, the
//!   minimum Rust version, the tests, the Python package and the examples.
//! - `cargo xtask bench [--suite NAME].. [--quick | --full]`: builds the benchmark suites in
//!   release mode, runs them against embedded servers on loopback, prints their tables and
//!   writes `target/bench/results.json`, `target/bench/report.md` and SVG charts beside
//!   them; `--baseline FILE` prints every figure beside the same one in a saved run;
//!   `--save-charts` also writes each suite's tables and chart under `docs/bench/`, stamped
//!   with the date, commit, host and command.
//! - `cargo xtask soak [--minutes N]`: minutes (2 by default) of mixed, verified traffic
//!   against an emulator and a link simulator, with garbage and FILL storms; fails on any
//!   error or on memory growth.
//! - `cargo xtask fuzz [--runs N] [TARGET..]`: every fuzz target for N executions, from and
//!   into its corpus in the repo.
//! - `cargo xtask wheel`: the `volley` Python package as an abi3 manylinux wheel in
//!   `target/wheels/`.
//!
//! Plain code with no dependencies, in the rust-analyzer style.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod bench;
mod fuzz;
mod peers;
mod soak;
mod test;
mod tidy;
mod wheel;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test::run(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("soak") => soak::run(&args[1..]),
        Some("fuzz") => fuzz::run(&args[1..]),
        Some("wheel") => wheel::run(&args[1..]),
        Some("-h" | "--help") | None => {
            println!("{}", usage());
            Ok(())
        }
        Some(other) => Err(format!("unknown command `{other}`\n\n{}", usage())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The usage text, naming every test step and bench suite from the lists the commands
/// check their arguments against.
fn usage() -> String {
    format!(
        "usage:
  cargo xtask test [STEP]..                         every step, or the named ones; steps:
                                                    {steps}
  cargo xtask bench [--suite NAME].. [--quick|--full] [--baseline RESULTS.json] [--save-charts] [--transport udp|tcp]
                                                    suites (default: all):
                                                    {suites};
                                                    --transport udp|tcp limits the matrix;
                                                    --save-charts writes docs/bench/SUITE.md and .svg
  cargo xtask soak [--minutes N]                    mixed verified traffic, garbage, FILL storms
  cargo xtask fuzz [--runs N] [TARGET]..            every fuzz target (needs nightly + cargo-fuzz,
                                                    installed if missing), corpora kept minimised
  cargo xtask wheel                                 the Python package as an abi3 manylinux wheel
                                                    in target/wheels/",
        steps = test::STEPS.join(", "),
        suites = bench::SUITES.join(", "),
    )
}

/// The workspace root (the parent of this crate's directory).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The cargo that runs us, so `cargo +toolchain xtask` stays on that toolchain.
fn cargo() -> Command {
    let mut cmd = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

/// Runs a command, echoing it first; fails with its exit status.
fn exec(cmd: &mut Command) -> Result<(), String> {
    eprintln!("$ {}", describe(cmd));
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start `{}`: {e}", describe(cmd)))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed: {status}", describe(cmd)))
    }
}

fn describe(cmd: &Command) -> String {
    let mut text = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}
