//! The client over a real ssh to a real OpenSSH `sshd` on 127.0.0.1 (started by each test,
//! see `volley_sftp::testing::sshd`): transfers both ways checked byte for byte, and
//! ssh's own failures coming back as ssh's words. `cargo xtask test` installs
//! openssh-server when it is missing.

mod common;

use core::time::Duration;
use std::os::unix::ffi::OsStrExt;

use common::pattern;
use volley_sftp::testing::sshd::Sshd;
use volley_sftp::{Destination, SftpClient, SftpError, SshOptions, TransferOptions};
use volley_testkit::within;

fn host(user: Option<&str>) -> Destination {
    Destination {
        user: user.map(str::to_owned),
        host: Sshd::HOST.into(),
        port: None,
    }
}

fn options(sshd: &Sshd) -> SshOptions {
    SshOptions {
        config: Some(sshd.config()),
        ..SshOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_then_get_over_ssh_byte_for_byte() {
    let sshd = within(20, Sshd::start()).await.expect("sshd starts");
    let dir = sshd.dir().to_owned();
    let data = pattern(3 << 20, 1);
    let local = dir.join("local");
    std::fs::write(&local, &data).unwrap();
    let remote = dir.join("remote");
    let sftp = within(20, SftpClient::ssh(&host(None), &options(&sshd)))
        .await
        .expect("an SFTP session over ssh");
    assert!(
        sftp.has_extension(b"fsync@openssh.com"),
        "OpenSSH offers fsync, which --fsync uses"
    );
    let opts = TransferOptions {
        fsync: true,
        ..TransferOptions::default()
    };
    let put = within(
        60,
        sftp.put(&local, remote.to_str().unwrap().as_bytes(), &opts),
    )
    .await
    .unwrap();
    assert_eq!(put, data.len() as u64);
    assert_eq!(
        std::fs::read(&remote).unwrap(),
        data,
        "what landed is what was sent"
    );
    let back = dir.join("back");
    let got = within(
        60,
        sftp.get(remote.to_str().unwrap().as_bytes(), &back, &opts),
    )
    .await
    .unwrap();
    assert_eq!(got, data.len() as u64);
    assert_eq!(std::fs::read(&back).unwrap(), data);
    within(10, sftp.shutdown()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_failures_are_ssh_words_not_timeouts() {
    let sshd = within(20, Sshd::start()).await.expect("sshd starts");
    // A user the server does not know: authentication fails.
    let started = std::time::Instant::now();
    let e = within(
        20,
        SftpClient::ssh(&host(Some("nosuchuser")), &options(&sshd)),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, SftpError::Ssh { message, .. } if message.contains("Permission denied")),
        "{e}"
    );
    assert!(
        e.to_string().starts_with("ssh to volley-test failed"),
        "{e}"
    );
    // Nothing listening on the port: ssh says so.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = within(
        20,
        SftpClient::ssh(
            &host(None),
            &SshOptions {
                port: Some(closed),
                options: vec![format!("Port={closed}")],
                ..options(&sshd)
            },
        ),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, SftpError::Ssh { message, .. } if message.contains("Connection refused")),
        "{e}"
    );
    // A program that is not there.
    let e = within(
        20,
        SftpClient::ssh(
            &host(None),
            &SshOptions {
                program: Some("/nonexistent/ssh".into()),
                ..options(&sshd)
            },
        ),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("cannot run /nonexistent/ssh"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_lands_under_a_part_name_then_replaces_the_target() {
    use std::os::unix::fs::FileTypeExt;
    let sshd = within(20, Sshd::start()).await.expect("sshd starts");
    let dir = sshd.dir().to_owned();
    let sftp = within(20, SftpClient::ssh(&host(None), &options(&sshd)))
        .await
        .expect("an SFTP session over ssh");
    let local = dir.join("new");
    std::fs::write(&local, pattern(100_000, 1)).unwrap();
    let remote = dir.join("target");
    std::fs::write(&remote, b"old content").unwrap();
    let opts = TransferOptions::default();
    let rpath = remote.to_str().unwrap().as_bytes();
    within(30, sftp.put(&local, rpath, &opts)).await.unwrap();
    assert_eq!(std::fs::read(&remote).unwrap(), pattern(100_000, 1));
    let mut part = remote.clone().into_os_string();
    part.push(std::ffi::OsStr::from_bytes(volley_sftp::PART_SUFFIX));
    assert!(!std::path::Path::new(&part).exists(), "no part file left");
    // A device is written in place, never renamed over.
    within(30, sftp.put(&local, b"/dev/null", &opts))
        .await
        .unwrap();
    assert!(
        std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device()
    );
    assert!(!std::path::Path::new("/dev/null.volley-part").exists());
    within(10, sftp.shutdown()).await.unwrap();
}
