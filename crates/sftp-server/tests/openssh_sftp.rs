//! OpenSSH's own `sftp` client, in batch mode, against volley's server and against
//! OpenSSH's `sftp-server`: the same commands must print the same and leave the same
//! files behind.

use std::path::{Path, PathBuf};
use std::process::Command;

use volley_testkit::pattern;

/// OpenSSH's client; the test fails saying how to get it if it is missing.
fn sftp() -> PathBuf {
    let path = PathBuf::from("/usr/bin/sftp");
    assert!(
        path.exists(),
        "no OpenSSH sftp client at /usr/bin/sftp: run `cargo xtask test` (it installs \
         openssh-client) or `apt-get install openssh-client`"
    );
    path
}

/// Runs `commands` with `sftp -D server -b -` in a fresh directory: what it printed,
/// with the directory's path replaced by `DIR`, and the files it left, each with its
/// mode, size and bytes.
fn run(name: &str, server: &str, commands: &str) -> (String, Vec<(String, u32, Vec<u8>)>) {
    let dir = volley_testkit::scratch(&format!("sftp-batch-{name}"));
    let (remote, local) = (dir.join("remote"), dir.join("local"));
    std::fs::create_dir_all(&remote).unwrap();
    std::fs::create_dir_all(local.join("sub")).unwrap();
    std::fs::write(local.join("big"), pattern(3_000_017, 1)).unwrap();
    std::fs::write(local.join("small"), b"hello").unwrap();
    std::fs::write(local.join("sub/inner"), pattern(70_000, 2)).unwrap();
    std::fs::write(local.join("empty"), b"").unwrap();
    let batch = dir.join("batch");
    let commands = commands
        .replace("REMOTE", &remote.display().to_string())
        .replace("LOCAL", &local.display().to_string());
    std::fs::write(&batch, commands).unwrap();
    let out = Command::new(sftp())
        .arg("-D")
        .arg(server)
        .arg("-b")
        .arg(&batch)
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).replace(&dir.display().to_string(), "DIR");
    assert!(
        out.status.success(),
        "sftp against {server} failed:\n{printed}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut files = Vec::new();
    collect(&dir, &dir, &mut files);
    let _ = std::fs::remove_dir_all(&dir);
    (printed, files)
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, u32, Vec<u8>)>) {
    use std::os::unix::fs::PermissionsExt;
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let name = path.strip_prefix(root).unwrap().display().to_string();
        let mode = meta.permissions().mode();
        if name == "batch" {
            continue;
        }
        if meta.is_dir() {
            out.push((name, mode, Vec::new()));
            collect(root, &path, out);
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).unwrap();
            out.push((name, mode, target.into_os_string().into_encoded_bytes()));
        } else {
            out.push((name, mode, std::fs::read(&path).unwrap()));
        }
    }
}

#[test]
fn openssh_s_client_sees_the_same_as_with_openssh_s_server() {
    let commands = "\
cd REMOTE
lcd LOCAL
put big
put small
put empty
ls -ln
mkdir d
put -r LOCAL d/tree
rename small renamed
chmod 600 renamed
ln -s renamed sym
ln renamed hard
ls -ln
ls -ln d/tree
get big big.back
reget big big.back
-reput big
get -r d/tree treeback
get -p big kept
cp big copied
rm sym
rename renamed gone
rmdir nothing-here-is-ok-to-fail
";
    // A command that fails ends a batch unless it starts with `-`: the last line must
    // fail on both, so it is left out of what both must do.
    let commands = commands.replace(
        "rmdir nothing-here-is-ok-to-fail\n",
        "-rmdir nothing\npwd\n",
    );
    let openssh = volley_testkit::sftp_server();
    let theirs = run(
        "openssh",
        &format!("{} -e -l ERROR", openssh.display()),
        &commands,
    );
    let ours = run(
        "volley",
        &format!("{} -e -l ERROR", env!("CARGO_BIN_EXE_volley-sftp-server")),
        &commands,
    );
    assert_eq!(ours.0, theirs.0, "sftp printed differently");
    let names =
        |files: &[(String, u32, Vec<u8>)]| files.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&ours.1),
        names(&theirs.1),
        "different files were left"
    );
    for (a, b) in ours.1.iter().zip(&theirs.1) {
        assert_eq!((&a.0, a.1), (&b.0, b.1), "{} has another mode", a.0);
        assert!(a.2 == b.2, "{} holds other bytes", a.0);
    }
}
