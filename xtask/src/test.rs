//! `cargo xtask test`: every check CI runs, in the order that fails fastest.

use crate::peers::{self, NO_STD_TARGET, Peer};
use crate::{cargo, exec};

/// Every step, in the order `cargo xtask test` runs them (the fastest to fail first).
pub(crate) const STEPS: &[&str] = &[
    "tidy", "fmt", "clippy", "doc", "nostd", "features", "msrv", "tests", "python", "examples",
];

/// The packages that promise the workspace's `rust-version` (the benches do not: their
/// criterion needs a newer compiler).
const MSRV_PACKAGES: &[&str] = &[
    "volley-proto",
    "volley-python",
    "volley-transport-udp",
    "volley-emulator",
    "volley-netsim",
    "volley-transport-tcp",
    "volley-sftp",
    "volley-sftp-server",
    "volley-rpc-macros",
    "volley-rpc",
    "volley-cli",
];

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
            "tidy" => crate::tidy::run(STEPS)?,
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
            "features" => features()?,
            "examples" => examples()?,
            "msrv" => msrv()?,
            "python" => python()?,
            "tests" => {
                peers::ensure(&[
                    Peer::Rig,
                    Peer::SpiNNMan,
                    Peer::OpenSsh,
                    Peer::Rclone,
                    Peer::Asyncssh,
                ])?;
                exec(cargo().args(["test", "--workspace"]))?;
            }
            _ => unreachable!("steps were checked above"),
        }
    }
    eprintln!("\nxtask test: all steps passed");
    Ok(())
}

/// Builds the `volley` Python package as a wheel (`cargo xtask wheel`), installs it into a
/// fresh venv with no Rust on its PATH, and runs the pytest suite there against the CLI's
/// debug build (pytest's exit status 5, no tests ran, is a failure), then `mypy --strict`
/// over a file that uses the stubs, for Python 3.10, 3.11 and 3.12; then installs from
/// source out of a read-only checkout (`wheel::read_only_install`).
fn python() -> Result<(), String> {
    exec(cargo().args(["build", "-p", "volley-cli"]))?;
    let wheel = crate::wheel::build()?;
    let python = crate::wheel::fresh_venv(&wheel)?;
    let root = crate::root();
    let bin = python
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let status = std::process::Command::new(&python)
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "crates/python/tests",
        ])
        .env("VOLLEY_BIN", root.join("target/debug/volley"))
        // The package as a user without Rust has it: nothing but the venv and the system.
        .env("PATH", format!("{bin}:/usr/bin:/bin"))
        .current_dir(&root)
        .status()
        .map_err(|e| format!("cannot run pytest: {e}"))?;
    match status.code() {
        Some(0) => {}
        Some(5) => return Err("pytest found no tests in crates/python/tests".into()),
        _ => return Err(format!("the Python tests failed ({status})")),
    }
    // The stubs, as a user's `mypy --strict` reads them, on each Python the package
    // supports: every buffer the docs promise is taken.
    for version in ["3.10", "3.11", "3.12"] {
        exec(
            std::process::Command::new(&python)
                .args([
                    "-m",
                    "mypy",
                    "--strict",
                    "--no-incremental",
                    "--python-version",
                ])
                .arg(version)
                .arg("crates/python/tests/typing_check.py")
                .current_dir(&root),
        )?;
    }
    // A user's install from source, from a checkout they cannot write to.
    crate::wheel::read_only_install()
}

/// Runs every example of volley-rpc; each must end by printing `ok`.
fn examples() -> Result<(), String> {
    let dir = crate::root().join("crates/rpc/examples");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".rs")
                .map(str::to_owned)
        })
        .collect();
    names.sort();
    for name in names {
        eprintln!("xtask: example {name}");
        let output = cargo()
            .args(["run", "-q", "-p", "volley-rpc", "--example", &name])
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run example {name}: {e}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let last = stdout.lines().last().unwrap_or_default();
        if !output.status.success() || last != "ok" {
            return Err(format!(
                "example {name} did not end with `ok` ({}); it printed:\n{stdout}",
                output.status
            ));
        }
    }
    Ok(())
}

/// volley-rpc with each link feature (and `tls`, `quic`) alone builds, without warnings;
/// with `tcp` alone its normal dependencies hold no UDP crate, and with `udp` alone the UDP
/// crate builds its channel but not its SCP client.
fn features() -> Result<(), String> {
    for features in ["tcp", "udp", "local", "tls", "quic"] {
        exec(
            cargo()
                .args([
                    "check",
                    "-p",
                    "volley-rpc",
                    "--no-default-features",
                    "--features",
                ])
                .arg(features)
                .env("RUSTFLAGS", "-D warnings"),
        )?;
    }
    if rpc_tree("tcp", &["-e", "normal"])?.contains("volley-transport-udp") {
        return Err("volley-rpc with only `tcp` still depends on volley-transport-udp".into());
    }
    let udp = rpc_tree(
        "udp",
        &["-e", "normal,features", "-i", "volley-transport-udp"],
    )?;
    if udp.contains("volley-transport-udp feature \"scp\"") {
        return Err("volley-rpc with only `udp` builds volley-transport-udp's SCP client".into());
    }
    if !udp.contains("volley-transport-udp feature \"channel\"") {
        return Err(format!(
            "cargo tree shows no channel feature for volley-rpc's udp link:\n{udp}"
        ));
    }
    tls_peers_locked()
}

/// `cargo tree` of volley-rpc with only `feature`, with `args` (edges, inversion).
fn rpc_tree(feature: &str, args: &[&str]) -> Result<String, String> {
    let tree = cargo()
        .args([
            "tree",
            "-p",
            "volley-rpc",
            "--no-default-features",
            "--features",
        ])
        .arg(feature)
        .args(args)
        .args(["--prefix", "none"])
        .output()
        .map_err(|e| format!("cannot run cargo tree: {e}"))?;
    Ok(String::from_utf8_lossy(&tree.stdout).into_owned())
}

/// The rpc suite's TLS peers (`benches/tls`, outside the workspace, built only by `cargo
/// xtask bench` with `--locked`) still resolve from their lock file: a dependency added to
/// a workspace crate they use must be added to that lock too, or the bench stops at its
/// build. Resolving is enough; nothing is built.
fn tls_peers_locked() -> Result<(), String> {
    let manifest = crate::root().join("benches").join("tls").join("Cargo.toml");
    exec(
        cargo()
            .args([
                "metadata",
                "--locked",
                "--format-version",
                "1",
                "--manifest-path",
            ])
            .arg(&manifest)
            .stdout(std::process::Stdio::null()),
    )
    .map_err(|e| {
        format!(
            "{e}\nbenches/tls/Cargo.lock is out of date: run `cargo metadata --manifest-path \
             {}` (or build it) and commit the lock",
            manifest.display()
        )
    })
}

/// Builds volley-proto with no default features for a bare-metal target, proving it needs
/// neither std nor alloc, and again with `alloc` alone, proving the window and the channel
/// need no std. Falls back to the host (saying so) if the target is unavailable.
fn nostd() -> Result<(), String> {
    let missing = peers::ensure(&[Peer::ThumbTarget])?;
    if !missing.is_empty() {
        eprintln!(
            "xtask: WARNING: the {NO_STD_TARGET} target could not be installed; \
             building volley-proto without default features for the host instead, \
             which does not prove it is no_std"
        );
    }
    // Bare (the wire formats alone), then with `alloc` (the window and the channel too).
    for features in [None, Some("alloc")] {
        let mut cmd = cargo();
        cmd.args(["build", "-p", "volley-proto", "--no-default-features"]);
        if let Some(features) = features {
            cmd.args(["--features", features]);
        }
        if missing.is_empty() {
            cmd.args(["--target", NO_STD_TARGET]);
        }
        exec(&mut cmd)?;
    }
    Ok(())
}

/// Checks the library crates and the CLI with the toolchain the workspace declares as its
/// `rust-version`, installed with rustup if missing.
fn msrv() -> Result<(), String> {
    let manifest = crate::root().join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| format!("cannot read {}: {e}", manifest.display()))?;
    let version = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = "))
        .map(|v| v.trim_matches('"').to_owned())
        .ok_or("no rust-version in the workspace manifest")?;
    peers::ensure(&[Peer::Toolchain(version.clone())])?;
    let mut cmd = std::process::Command::new("cargo");
    cmd.current_dir(crate::root())
        .arg(format!("+{version}"))
        .args(["check", "--locked"]);
    for package in MSRV_PACKAGES {
        cmd.args(["-p", package]);
    }
    exec(&mut cmd)
}
