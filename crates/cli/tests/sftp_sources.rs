//! What users type, as OpenSSH's `sftp` and `scp` take it: a directory as the
//! destination of a single file (both ways), several sources, and remote wildcards
//! expanded on the server. Against the local sftp-server, where remote and local paths
//! are alike.

mod common;

use common::*;

fn arg(p: &std::path::Path) -> &str {
    p.to_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_receives_a_single_file_both_ways() {
    let dir = scratch("sources-dir");
    let (src, into) = (dir.join("f.bin"), dir.join("into"));
    std::fs::write(&src, pattern(5000)).unwrap();
    std::fs::create_dir(&into).unwrap();
    let (ok, stderr) = run(&["sftp", "get", arg(&src), arg(&into)]).await;
    assert!(ok && stderr.starts_with("5000 bytes in "), "{stderr}");
    assert!(std::fs::read(into.join("f.bin")).unwrap() == pattern(5000));
    let remote = dir.join("remote");
    std::fs::create_dir(&remote).unwrap();
    let trailing = format!("{}/", remote.display());
    let (ok, stderr) = run(&["sftp", "put", arg(&src), &trailing]).await;
    assert!(ok && stderr.starts_with("5000 bytes in "), "{stderr}");
    assert!(std::fs::read(remote.join("f.bin")).unwrap() == pattern(5000));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_sources_and_wildcards_go_into_a_directory() {
    let dir = scratch("sources-many");
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub.bin")).unwrap();
    for (name, len) in [
        ("a.bin", 100),
        ("b.bin", 200),
        ("c.txt", 300),
        (".h.bin", 400),
    ] {
        std::fs::write(src.join(name), pattern(len)).unwrap();
    }
    // Several sources, both ways.
    let got = dir.join("got");
    std::fs::create_dir(&got).unwrap();
    let (a, c) = (src.join("a.bin"), src.join("c.txt"));
    let (ok, stderr) = run(&["sftp", "get", arg(&a), arg(&c), arg(&got)]).await;
    assert!(ok, "{stderr}");
    assert_eq!(listing(&got), ["a.bin", "c.txt"]);
    let put = dir.join("put");
    std::fs::create_dir(&put).unwrap();
    let (ok, stderr) = run(&["sftp", "put", arg(&a), arg(&c), arg(&put)]).await;
    assert!(ok, "{stderr}");
    assert_eq!(listing(&put), ["a.bin", "c.txt"]);
    assert!(std::fs::read(put.join("c.txt")).unwrap() == pattern(300));
    // A wildcard: files it matches, not a hidden one, not a directory without -r.
    let globbed = dir.join("globbed");
    std::fs::create_dir(&globbed).unwrap();
    let pattern_arg = format!("{}/*.bin", src.display());
    let (ok, stderr) = run(&["sftp", "get", &pattern_arg, arg(&globbed)]).await;
    assert!(
        !ok,
        "a directory among the matches fails without -r: {stderr}"
    );
    assert!(stderr.contains("1 of 3 sources failed"), "{stderr}");
    assert!(stderr.contains("sub.bin is a directory"), "{stderr}");
    assert_eq!(listing(&globbed), ["a.bin", "b.bin"]);
    let class = format!("{}/[ab].bin", src.display());
    let (ok, stderr) = run(&["sftp", "get", &class, arg(&dir.join("class"))]).await;
    assert!(!ok && stderr.contains("is not a directory"), "{stderr}");
    let none = format!("{}/*.none", src.display());
    let (ok, stderr) = run(&["sftp", "get", &none, arg(&globbed)]).await;
    assert!(!ok && stderr.contains("matches nothing"), "{stderr}");
    // Several sources into what is not a directory.
    let (ok, stderr) = run(&["sftp", "put", arg(&a), arg(&c), arg(&dir.join("nope"))]).await;
    assert!(!ok && stderr.contains("is not a directory"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_show_escaped_alike_everywhere() {
    use std::os::unix::ffi::OsStrExt;
    let dir = scratch("sources-names");
    let odd = dir.join(std::ffi::OsStr::from_bytes(b"a\xffb\\c\nd"));
    std::fs::write(&odd, b"x").unwrap();
    // U+FFFD itself: it must not print like the byte 0xff.
    std::fs::write(dir.join("a\u{fffd}b"), b"y").unwrap();
    let (ok, stdout, stderr) = run_out(&["sftp", "ls", arg(&dir)]).await;
    assert!(ok, "{stderr}");
    // Sorted by their bytes: U+FFFD's (ef bf bd) before 0xff.
    assert_eq!(stdout, "a\u{fffd}b\na\\xffb\\\\c\\nd\n");
    // ls -l of a file gives its line, name escaped as in the listing.
    let (ok, stdout, stderr) = run_out(&["sftp", "ls", "-l", arg(&dir.join("a\u{fffd}b"))]).await;
    assert!(ok, "{stderr}");
    assert!(
        stdout.starts_with("-rw") && stdout.trim_end().ends_with("a\u{fffd}b"),
        "{stdout}"
    );
    // An error names the file the same way, and holds no raw control byte.
    let (ok, stderr) = run(&[
        "sftp",
        "get",
        &format!("{}/\u{7}bell", dir.display()),
        arg(&dir),
    ])
    .await;
    assert!(
        !ok && stderr.contains("\\u{7}bell") && !stderr.contains('\u{7}'),
        "{stderr}"
    );
    // mkdir -p names the directory it could not make (a file is in the way), no `//`.
    std::fs::write(dir.join("file"), b"").unwrap();
    let (ok, stderr) = run(&[
        "sftp",
        "mkdir",
        "-p",
        &format!("{}/file/sub", dir.display()),
    ])
    .await;
    assert!(!ok && !stderr.contains("//"), "{stderr}");
    assert!(
        stderr.contains(&format!("mkdir {}/file: ", dir.display())),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
