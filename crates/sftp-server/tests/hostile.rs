//! Clients that break the rules: malformed and truncated requests, handles that were
//! never given, a length field past the limit, and a client that sends without reading.

use core::time::Duration;
use std::io::{Read, Write};
use std::time::Instant;

use volley_sftp_server::Config;

mod common;
use common::{frame, reply, session, status, string};

#[test]
fn bad_requests_get_a_status_and_the_session_goes_on() {
    let (mut client, running) = session(Config::default());
    // A READ cut short, a handle never given, a type no request has, an unknown
    // extension: each answered, in turn, with its own id.
    client.write_all(&frame(5, 10, &string(b"h")[..3])).unwrap();
    client
        .write_all(&frame(
            5,
            11,
            &[
                string(b"nope"),
                0u64.to_be_bytes().to_vec(),
                10u32.to_be_bytes().to_vec(),
            ]
            .concat(),
        ))
        .unwrap();
    client.write_all(&frame(99, 12, b"")).unwrap();
    client
        .write_all(&frame(200, 13, &string(b"nosuch@example.com")))
        .unwrap();
    client.write_all(&frame(17, 14, &string(b"/"))).unwrap();
    let mut got = Vec::new();
    for _ in 0..5 {
        let (ty, id, body) = reply(&mut client);
        got.push((ty, id, if ty == 101 { status(&body) } else { 0 }));
    }
    got.sort_by_key(|g| g.1);
    assert_eq!(
        got,
        [
            (101, 10, 5),
            (101, 11, 4),
            (101, 12, 5),
            (101, 13, 8),
            (105, 14, 0)
        ]
    );
    client.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(running.join().unwrap().unwrap().requests, 6);
}

#[test]
fn a_length_past_the_limit_ends_the_session_with_a_reason() {
    let (mut client, running) = session(Config::default());
    client
        .write_all(&[0xff, 0xff, 0xff, 0xff, 5, 0, 0, 0, 1])
        .unwrap();
    let error = running.join().unwrap().unwrap_err();
    assert!(error.to_string().contains("framing"), "{error}");
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest);
}

#[test]
fn a_client_that_does_not_read_stops_the_server_reading() {
    // A small budget: READs of 64 KiB, so a few fill it.
    let dir = volley_testkit::scratch("sftp-server-unread");
    let file = dir.join("data");
    std::fs::write(&file, vec![7u8; 1 << 20]).unwrap();
    let config = Config {
        budget: 1 << 20,
        max_io: 64 << 10,
        ..Config::default()
    };
    let (mut client, running) = session(config);
    let mut open = string(file.as_os_str().as_encoded_bytes());
    open.extend_from_slice(&1u32.to_be_bytes());
    open.extend_from_slice(&0u32.to_be_bytes());
    client.write_all(&frame(3, 1, &open)).unwrap();
    let (ty, _, body) = reply(&mut client);
    assert_eq!(ty, 102, "HANDLE");
    let handle = body[4..].to_vec();
    // 10,000 READs of 64 KiB (625 MiB of replies) sent without reading one: the server
    // must stop taking them (its writes block, then its reads), not buffer them all.
    client.set_nonblocking(true).unwrap();
    let read = [
        string(&handle),
        0u64.to_be_bytes().to_vec(),
        (64u32 << 10).to_be_bytes().to_vec(),
    ]
    .concat();
    // Stopped: a second with nothing taken (bounded at 20 s in all).
    let mut sent = 0;
    let (start, mut progress) = (Instant::now(), Instant::now());
    let mut pending = Vec::new();
    while sent < 10_000
        && progress.elapsed() < Duration::from_secs(1)
        && start.elapsed() < Duration::from_secs(20)
    {
        if pending.is_empty() {
            pending = frame(5, 100 + sent, &read);
        }
        match client.write(&pending) {
            Ok(n) => {
                progress = Instant::now();
                pending.drain(..n);
                if pending.is_empty() {
                    sent += 1;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        sent < 10_000,
        "the server took every request without its replies being read"
    );
    // Reading the replies lets it go on: every request sent is answered.
    client.set_nonblocking(false).unwrap();
    let mut answered = 0;
    let reader = std::thread::spawn(move || {
        while answered < sent {
            let (ty, _, _) = reply(&mut client);
            assert_eq!(ty, 103, "DATA");
            answered += 1;
        }
        client.shutdown(std::net::Shutdown::Write).unwrap();
        answered
    });
    assert_eq!(reader.join().unwrap(), sent);
    running.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn replies_come_in_the_order_requests_came() {
    // OpenSSH's scp counts a WRITE's acknowledgement toward the file's length only once
    // those before it have come: replies out of order cut its files short. Eight slow
    // READs of 1 MiB, each followed by a quick STAT: the replies must alternate.
    let dir = volley_testkit::scratch("sftp-server-order");
    let file = dir.join("data");
    std::fs::write(&file, vec![3u8; 8 << 20]).unwrap();
    let (mut client, running) = session(Config::default());
    let name = string(file.as_os_str().as_encoded_bytes());
    let open = [
        name.clone(),
        1u32.to_be_bytes().to_vec(),
        0u32.to_be_bytes().to_vec(),
    ]
    .concat();
    client.write_all(&frame(3, 1, &open)).unwrap();
    let (ty, _, body) = reply(&mut client);
    assert_eq!(ty, 102, "HANDLE");
    let handle = string(&body[4..]);
    let mut ids = Vec::new();
    for i in 0..8u32 {
        let read = [
            handle.clone(),
            (u64::from(i) << 20).to_be_bytes().to_vec(),
            (1u32 << 20).to_be_bytes().to_vec(),
        ]
        .concat();
        client.write_all(&frame(5, 100 + 2 * i, &read)).unwrap();
        client.write_all(&frame(17, 101 + 2 * i, &name)).unwrap();
        ids.extend([100 + 2 * i, 101 + 2 * i]);
    }
    let got: Vec<u32> = (0..16).map(|_| reply(&mut client).1).collect();
    assert_eq!(got, ids);
    client.shutdown(std::net::Shutdown::Write).unwrap();
    running.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
