//! `volley emulate`'s TCP side with more hosts than it has file descriptors: it pauses
//! between accept attempts instead of spinning, and serves the hosts that waited once
//! others go.

use core::time::Duration;
use std::io::{Read, Write};
use std::net::TcpStream;

use tokio::process::Command;
use volley_proto::scp;
use volley_proto::scp::sdp::Address;
use volley_proto::wire::frame::{HEADER_LEN, Header};
use volley_transport_udp::SCP_FRAME_TYPE;

mod common;

use common::{VOLLEY, cpu_ticks, spawn_with};

/// Sends one framed sver on `stream` and reads its framed reply.
fn sver(stream: &mut TcpStream, id: u32) -> Vec<u8> {
    let mut request = [0u8; scp::MAX_DATAGRAM_LEN];
    let n = scp::sver_request(Address::core(0, 0, 0))
        .emit(&mut request)
        .unwrap();
    let header = Header::new(SCP_FRAME_TYPE, id, n).unwrap();
    stream.write_all(&header.emit()).unwrap();
    stream.write_all(&request[..n]).unwrap();
    let mut head = [0u8; HEADER_LEN];
    stream.read_exact(&mut head).unwrap();
    let len = u32::from_be_bytes(head[..4].try_into().unwrap()) as usize;
    assert_eq!(head[4], SCP_FRAME_TYPE);
    assert_eq!(u32::from_be_bytes(head[5..].try_into().unwrap()), id);
    let mut body = vec![0u8; len - 5];
    stream.read_exact(&mut body).unwrap();
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_tcp_side_waits_without_spinning() {
    let mut command = Command::new("prlimit");
    command.arg("--nofile=64:64").arg(VOLLEY).args([
        "emulate",
        "--udp",
        "127.0.0.1:0",
        "--tcp",
        "127.0.0.1:0",
    ]);
    let (board, line) = spawn_with(&mut command).await;
    let tcp = line
        .rsplit("tcp=")
        .next()
        .unwrap_or_else(|| panic!("unexpected line `{line}`"))
        .to_owned();
    let pid = board.id().expect("running");
    // 150 hosts connect and say nothing: more than the board has descriptors for.
    let (mut hosts, before, used) = tokio::task::spawn_blocking(move || {
        let hosts: Vec<TcpStream> = (0..150)
            .map(|_| {
                let s = TcpStream::connect(&tcp).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                s
            })
            .collect();
        // Two seconds of nothing but accept attempts out of descriptors.
        std::thread::sleep(Duration::from_millis(200));
        let before = cpu_ticks(pid);
        std::thread::sleep(Duration::from_secs(2));
        (hosts, before, cpu_ticks(pid) - before)
    })
    .await
    .unwrap();
    // 200 ticks would be a whole core; the accept loop used to take all of one.
    assert!(
        used <= 20,
        "the board used {used} CPU ticks in 2 s out of descriptors (from {before})"
    );
    // The first hosts go; the last one, which waited in the backlog, is served.
    let answered = tokio::task::spawn_blocking(move || {
        hosts.drain(..100);
        let last = hosts.last_mut().unwrap();
        sver(last, 7)
    })
    .await
    .unwrap();
    assert_eq!(
        scp::ReplyRepr::parse(&answered).unwrap().rc,
        scp::ReturnCode::OK
    );
    drop(board);
}
