use super::*;

fn remote(arg: &str) -> Option<(Option<&'static str>, String, Option<u16>, String)> {
    Remote::parse(arg).unwrap().map(|r| {
        (
            r.destination.user.map(|u| &*Box::leak(u.into_boxed_str())),
            r.destination.host,
            r.destination.port,
            r.path,
        )
    })
}

#[test]
fn a_colon_before_any_slash_makes_an_argument_remote() {
    assert_eq!(
        remote("host:dir/file"),
        Some((None, "host".into(), None, "dir/file".into()))
    );
    assert_eq!(
        remote("me@host:/abs/p:x"),
        Some((Some("me"), "host".into(), None, "/abs/p:x".into()))
    );
    assert_eq!(
        remote("host:"),
        Some((None, "host".into(), None, String::new()))
    );
    // The last `@` before the colon splits the user off.
    assert_eq!(
        remote("a@b@host:f"),
        Some((Some("a@b"), "host".into(), None, "f".into()))
    );
    // IPv6 in brackets; its colons do not count.
    assert_eq!(
        remote("[::1]:f"),
        Some((None, "::1".into(), None, "f".into()))
    );
    assert_eq!(
        remote("u@[fe80::1%eth0]:d/f"),
        Some((Some("u"), "fe80::1%eth0".into(), None, "d/f".into()))
    );
    // Local: a slash first, no colon, a leading colon.
    for local in ["./a:b", "/a:b", "a", "dir/x:y", ":x", ""] {
        assert_eq!(remote(local), None, "{local}");
    }
    assert_eq!(Remote::parse("@:x"), Err(RemoteError::NoHost("@:x".into())));
}

#[test]
fn sftp_uris_take_user_port_and_an_absolute_path() {
    assert_eq!(
        remote("sftp://me@host:2222/srv/a%20b"),
        Some((Some("me"), "host".into(), Some(2222), "/srv/a b".into()))
    );
    assert_eq!(
        remote("sftp://host/~/rel"),
        Some((None, "host".into(), None, "rel".into()))
    );
    assert_eq!(
        remote("sftp://host"),
        Some((None, "host".into(), None, String::new()))
    );
    assert_eq!(
        remote("sftp://[::1]:22/x"),
        Some((None, "::1".into(), Some(22), "/x".into()))
    );
    assert_eq!(
        Remote::parse("sftp://host:0/x"),
        Err(RemoteError::BadPort("sftp://host:0/x".into()))
    );
    assert_eq!(
        Remote::parse("sftp://host:99999/x"),
        Err(RemoteError::BadPort("sftp://host:99999/x".into()))
    );
    assert_eq!(
        Remote::parse("sftp:///x"),
        Err(RemoteError::NoHost("sftp:///x".into()))
    );
    assert_eq!(
        Remote::parse("sftp://h/%zz"),
        Err(RemoteError::BadEncoding("sftp://h/%zz".into()))
    );
}

#[test]
fn ssh_gets_sftps_defaults_first_then_the_users_options() {
    let options = SshOptions {
        program: Some("/opt/hpnssh".into()),
        config: Some("/tmp/cfg".into()),
        port: Some(2200),
        identities: vec!["/k1".into(), "/k2".into()],
        jump: Some("jump".into()),
        options: vec!["ForwardAgent=yes".into(), "LogLevel DEBUG".into()],
    };
    let destination = Destination {
        user: Some("me".into()),
        host: "-host".into(),
        port: None,
    };
    let (program, args) = options.args(&destination);
    assert_eq!(program, "/opt/hpnssh");
    let args: Vec<&str> = args.iter().map(|a| a.to_str().unwrap()).collect();
    assert_eq!(
        args,
        [
            "-oForwardX11 no",
            "-oPermitLocalCommand no",
            "-oClearAllForwardings yes",
            "-oControlMaster no",
            "-oForwardAgent no",
            "-F",
            "/tmp/cfg",
            "-J",
            "jump",
            "-i",
            "/k1",
            "-i",
            "/k2",
            "-o",
            "ForwardAgent=yes",
            "-o",
            "LogLevel DEBUG",
            "-oPort 2200",
            "-l",
            "me",
            "-s",
            "--",
            "-host",
            "sftp",
        ]
    );
    // A URI's port wins over -P; no options, no user: only the defaults and the host.
    let (program, args) = SshOptions::default().args(&Destination {
        user: None,
        host: "h".into(),
        port: Some(7),
    });
    assert_eq!(program, "ssh");
    assert_eq!(args.len(), SSH_DEFAULTS.len() + 5);
    assert_eq!(args[SSH_DEFAULTS.len()], "-oPort 7");
}

#[test]
fn ssh_errors_keep_its_last_lines() {
    assert_eq!(
        last_lines(b"Warning: x\n\nme@h: Permission denied (publickey).\r\n"),
        "Warning: x; me@h: Permission denied (publickey)."
    );
    assert_eq!(last_lines(b""), "ssh printed nothing");
    assert_eq!(last_lines(b"a\nb\nc\nd\n"), "b; c; d");
}
