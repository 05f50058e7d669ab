//! Through a real sshd whose `Subsystem sftp` is volley's server, the clients users have:
//! OpenSSH's `sftp` and `scp` (which speaks SFTP), rclone's sftp backend, and volley's
//! own client over ssh. One sshd serves them all (starting one costs a key exchange's
//! worth of setup); each copy is verified byte for byte.

use std::path::Path;
use std::process::Command;

use volley_sftp::testing::sshd::Sshd;
use volley_sftp::{Destination, SftpClient, SshOptions, TransferOptions};
use volley_testkit::{pattern, within};

fn same(a: &Path, b: &Path) -> bool {
    std::fs::read(a).unwrap() == std::fs::read(b).unwrap()
}

/// Runs `program` with `args`; fails the test with what it printed when it fails.
fn run(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {program}: {e} (`cargo xtask test` installs it)"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_users_have_copy_through_sshd() {
    let server = format!("{} -e -l ERROR", env!("CARGO_BIN_EXE_volley-sftp-server"));
    let sshd = within(20, Sshd::with_subsystem(&server))
        .await
        .expect("sshd starts");
    let config = sshd.config();
    let config = config.to_str().unwrap();
    let dir = volley_testkit::scratch("sftp-server-sshd");
    let src = dir.join("src.bin");
    std::fs::write(&src, pattern(5 << 20, 9)).unwrap();
    let host = Sshd::HOST;
    let at = |name: &str| format!("{host}:{}", dir.join(name).display());

    // OpenSSH's sftp: put, get, cp (copy-data) and ls through sshd.
    let batch = dir.join("batch");
    std::fs::write(
        &batch,
        format!(
            "put {src} {a}\nget {a} {b}\ncp {a} {c}\nls -l {d}\n",
            src = src.display(),
            a = dir.join("sftp-put.bin").display(),
            b = dir.join("sftp-get.bin").display(),
            c = dir.join("sftp-cp.bin").display(),
            d = dir.display(),
        ),
    )
    .unwrap();
    run("sftp", &["-F", config, "-b", batch.to_str().unwrap(), host]);
    for name in ["sftp-put.bin", "sftp-get.bin", "sftp-cp.bin"] {
        assert!(same(&src, &dir.join(name)), "sftp: {name} differs");
    }

    // OpenSSH's scp, which speaks SFTP to the server since OpenSSH 9.0.
    run(
        "scp",
        &[
            "-F",
            config,
            "-q",
            src.to_str().unwrap(),
            &at("scp-put.bin"),
        ],
    );
    run(
        "scp",
        &[
            "-F",
            config,
            "-q",
            &at("scp-put.bin"),
            dir.join("scp-get.bin").to_str().unwrap(),
        ],
    );
    for name in ["scp-put.bin", "scp-get.bin"] {
        assert!(same(&src, &dir.join(name)), "scp: {name} differs");
    }

    // rclone's sftp backend: copy there and back.
    let remote = format!(
        ":sftp,host=127.0.0.1,port={},user=root,key_file={}:{}",
        sshd.port(),
        sshd.identity().display(),
        dir.join("rclone").display()
    );
    run(
        "rclone",
        &[
            "--config",
            "/dev/null",
            "copy",
            src.to_str().unwrap(),
            &remote,
        ],
    );
    run(
        "rclone",
        &[
            "--config",
            "/dev/null",
            "copyto",
            &format!("{remote}/src.bin"),
            dir.join("rclone-back.bin").to_str().unwrap(),
        ],
    );
    assert!(
        same(&src, &dir.join("rclone/src.bin")),
        "rclone: the server's copy differs"
    );
    assert!(
        same(&src, &dir.join("rclone-back.bin")),
        "rclone: the copy back differs"
    );

    // volley's own client over ssh, with the server's 1 MiB requests.
    within(60, async {
        let destination = Destination {
            user: None,
            host: host.into(),
            port: None,
        };
        let options = SshOptions {
            config: Some(sshd.config()),
            ..SshOptions::default()
        };
        let sftp = SftpClient::ssh(&destination, &options).await.unwrap();
        assert_eq!(sftp.limits().map(|l| l.max_read_len), Some(1 << 20));
        let there = dir.join("volley-put.bin");
        let opts = TransferOptions::default();
        sftp.put(&src, there.as_os_str().as_encoded_bytes(), &opts)
            .await
            .unwrap();
        sftp.get(
            there.as_os_str().as_encoded_bytes(),
            dir.join("volley-get.bin"),
            &opts,
        )
        .await
        .unwrap();
    })
    .await;
    for name in ["volley-put.bin", "volley-get.bin"] {
        assert!(same(&src, &dir.join(name)), "volley: {name} differs");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
