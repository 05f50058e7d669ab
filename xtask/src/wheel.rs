//! `cargo xtask wheel`: the `volley` Python package as an abi3 wheel (CPython 3.10 and
//! later) in `target/wheels/`, built by maturin in release mode and tagged with the
//! lowest `manylinux_2_x` policy the binary's glibc symbols allow (maturin audits it);
//! and, for `cargo xtask test python`, a fresh venv with the wheel installed and no Rust
//! on its PATH.

use std::path::PathBuf;
use std::process::Command;

use crate::peers;
use crate::{exec, root};

/// The maturin release the wheel is built with (the package's build backend takes
/// `>=1.9,<2`).
const MATURIN: &str = "maturin>=1.9,<2";

/// `cargo xtask wheel`: builds the wheel; prints its path.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    if let Some(extra) = args.first() {
        return Err(format!(
            "`cargo xtask wheel` takes no arguments, not `{extra}`"
        ));
    }
    let wheel = build()?;
    println!("{}", wheel.display());
    Ok(())
}

/// Builds the wheel into `target/wheels/` (replacing an older one); returns its path.
pub(crate) fn build() -> Result<PathBuf, String> {
    peers::ensure_in_venv("maturin", MATURIN, "import maturin")?;
    let out = root().join("target/wheels");
    if out.exists() {
        for entry in std::fs::read_dir(&out).map_err(|e| format!("{}: {e}", out.display()))? {
            let path = entry.map_err(|e| e.to_string())?.path();
            if path.extension().is_some_and(|e| e == "whl") {
                std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
    }
    let maturin = peers::venv_python().with_file_name("maturin");
    exec(
        Command::new(&maturin)
            .args(["build", "--release", "--locked", "--manifest-path"])
            .arg(root().join("crates/python/Cargo.toml"))
            .arg("--out")
            .arg(&out)
            // maturin's own audit picks the policy from the symbols the library uses;
            // a wheel it cannot tag fails here rather than install where it would not run.
            .args(["--auditwheel", "check"])
            // From the package's directory, cargo reads its `.cargo/config.toml`: the build
            // goes where `pip install ./crates/python` puts it, so the read-only install
            // test after it finds it built.
            .current_dir(root().join("crates/python")),
    )?;
    let wheels: Vec<PathBuf> = std::fs::read_dir(&out)
        .map_err(|e| format!("{}: {e}", out.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect();
    match wheels.as_slice() {
        [one] => {
            let name = one.file_name().map(|n| n.to_string_lossy().into_owned());
            let name = name.unwrap_or_default();
            if !(name.contains("-cp310-abi3-") && name.contains("manylinux_2_")) {
                return Err(format!(
                    "the wheel {name} is not tagged cp310-abi3 for a manylinux_2_x policy"
                ));
            }
            Ok(one.clone())
        }
        other => Err(format!(
            "expected one wheel in {}, found {other:?}",
            out.display()
        )),
    }
}

/// A venv of its own (`target/wheel-venv`, made afresh) with `wheel` installed from the
/// file alone, and what the tests import beside it; returns its python.
pub(crate) fn fresh_venv(wheel: &PathBuf) -> Result<PathBuf, String> {
    let venv = root().join("target/wheel-venv");
    if venv.exists() {
        std::fs::remove_dir_all(&venv).map_err(|e| format!("{}: {e}", venv.display()))?;
    }
    exec(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    let python = venv.join("bin/python");
    // No cargo, no rustc, no rustup on the PATH: the wheel must not need them.
    let path = format!("{}:/usr/bin:/bin", venv.join("bin").display());
    let pip = |args: &[&str]| {
        let mut cmd = Command::new(&python);
        cmd.args(["-m", "pip", "install", "--quiet"])
            .args(args)
            .env("PATH", &path);
        cmd
    };
    exec(pip(&["--no-index", "--no-deps"]).arg(wheel))?;
    exec(&mut pip(&["pytest", "mypy", peers::SPINNMAN_REQUIREMENT]))?;
    let which = Command::new("sh")
        .args(["-c", "command -v cargo rustc rustup"])
        .env("PATH", &path)
        .output()
        .map_err(|e| e.to_string())?;
    if !which.stdout.is_empty() {
        return Err(format!(
            "the wheel's venv PATH still finds Rust: {}",
            String::from_utf8_lossy(&which.stdout)
        ));
    }
    Ok(python)
}

/// Where `read_only_install` makes its venv.
const READ_ONLY_VENV: &str = "/tmp/volley-readonly-venv";

/// `pip install ./crates/python` (a build from source, as a user with Rust runs it) from
/// the checkout mounted read-only in a mount namespace of its own, so nothing else sees
/// the mount: the build must write nothing inside the checkout (the package's
/// `.cargo/config.toml` sends it to `/tmp/volley-python-target`). Then the package is
/// imported from the venv it went to. Needs root (`unshare --mount`).
pub(crate) fn read_only_install() -> Result<(), String> {
    let venv = PathBuf::from(READ_ONLY_VENV);
    if venv.exists() {
        std::fs::remove_dir_all(&venv).map_err(|e| format!("{}: {e}", venv.display()))?;
    }
    exec(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    let python = venv.join("bin/python");
    // $1 the checkout, $2 the venv's python. A write that succeeds means the mount did
    // not take, and the test would prove nothing.
    let script = r#"mount --bind -o ro "$1" "$1" || exit 2
if touch "$1/.read-only-probe" 2>/dev/null; then
    rm -f "$1/.read-only-probe"; echo "the checkout is still writable"; exit 3
fi
exec "$2" -m pip install --quiet "$1/crates/python""#;
    exec(
        Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(root())
            .arg(&python),
    )
    .map_err(|e| {
        format!(
            "pip install ./crates/python from a read-only checkout failed: {e} \
             (the test needs root for `unshare --mount`)"
        )
    })?;
    let check = "import volley, sys; p = volley.__file__; \
                 assert p.startswith(sys.prefix), p; print('installed at', p)";
    exec(Command::new(&python).args(["-c", check]).current_dir("/"))
}
