//! `cargo xtask test`: every check CI runs, in the order that fails fastest.

use crate::peers::{self, NO_STD_TARGET, Peer};
use crate::{cargo, exec};

const STEPS: &[&str] = &["fmt", "clippy", "doc", "nostd", "tests"];

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let steps: Vec<&str> = if args.is_empty() {
        STEPS.to_vec()
    } else {
        for arg in args {
            if !STEPS.contains(&arg.as_str()) {
                return Err(format!(
                    "unknown test step `{arg}`; steps are: {}",
                    STEPS.join(", ")
                ));
            }
        }
        args.iter().map(String::as_str).collect()
    };
    for step in steps {
        eprintln!("\n=== xtask test: {step} ===");
        match step {
            "fmt" => exec(cargo().args(["fmt", "--all", "--", "--check"]))?,
            "clippy" => exec(cargo().args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]))?,
            "doc" => exec(
                cargo()
                    .args(["doc", "--workspace", "--no-deps"])
                    .env("RUSTDOCFLAGS", "-D warnings"),
            )?,
            "nostd" => nostd()?,
            "tests" => {
                peers::ensure(&[Peer::Rig, Peer::OpenSsh])?;
                exec(cargo().args(["test", "--workspace"]))?;
            }
            _ => unreachable!("steps were checked above"),
        }
    }
    eprintln!("\nxtask test: all steps passed");
    Ok(())
}

/// Builds volley-proto with no default features for a bare-metal target, proving it needs
/// neither std nor alloc. Falls back to the host (saying so) if the target is unavailable.
fn nostd() -> Result<(), String> {
    let missing = peers::ensure(&[Peer::ThumbTarget])?;
    let mut cmd = cargo();
    cmd.args(["build", "-p", "volley-proto", "--no-default-features"]);
    if missing.is_empty() {
        cmd.args(["--target", NO_STD_TARGET]);
    } else {
        eprintln!(
            "xtask: WARNING: the {NO_STD_TARGET} target could not be installed; \
             building volley-proto without default features for the host instead, \
             which does not prove it is no_std"
        );
    }
    exec(&mut cmd)
}
