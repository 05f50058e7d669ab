//! A short soak (12 s) as a smoke test: every transfer verified, no errors, and a last
//! line in the documented form. `cargo xtask soak` runs the real thing.

use std::path::Path;
use std::process::Command;

#[test]
fn a_short_soak_has_no_errors_and_says_so_in_its_last_line() {
    let soak = Path::new(env!("CARGO_BIN_EXE_volley-soak"));
    let volley = soak.with_file_name("volley");
    assert!(
        volley.exists(),
        "{} is missing: build it with `cargo build -p volley-cli` (cargo test --workspace does)",
        volley.display()
    );
    assert!(
        Path::new("/usr/lib/openssh/sftp-server").exists(),
        "sftp-server is missing: run `cargo xtask test`, which installs it"
    );
    // The soak bounds its own run (0.2 minutes, then at most 120 s to wind down).
    let output = Command::new(soak)
        .args(["--minutes", "0.2", "--volley"])
        .arg(&volley)
        .output()
        .expect("volley-soak runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with("soak: minutes=0.2 requests="), "{last}");
    assert!(last.contains(" errors=0 emulator_rss_kib="), "{last}");
    let requests: u64 = last["soak: minutes=0.2 requests=".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(requests > 1000, "{last}");
    for part in ["netsim_rss_kib=", "client_rss_kib="] {
        assert!(last.contains(part), "{last}");
    }
}
