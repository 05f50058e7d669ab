//! Raw SFTP for the tests that speak it byte by byte: frames out, replies in, a server on
//! one end of a socket pair.
#![allow(dead_code, unreachable_pub)]

use core::time::Duration;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use volley_sftp_server::{Config, Report, serve};

/// A frame: length, type, id, body.
pub fn frame(ty: u8, id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = ((body.len() + 5) as u32).to_be_bytes().to_vec();
    out.push(ty);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(body);
    out
}

pub fn string(s: &[u8]) -> Vec<u8> {
    let mut out = (s.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(s);
    out
}

/// The next reply's type, id and body.
pub fn reply(stream: &mut UnixStream) -> (u8, u32, Vec<u8>) {
    let mut head = [0u8; 9];
    stream.read_exact(&mut head).expect("a reply");
    let len = u32::from_be_bytes(head[..4].try_into().unwrap()) as usize;
    let mut body = vec![0; len - 5];
    stream.read_exact(&mut body).unwrap();
    (
        head[4],
        u32::from_be_bytes(head[5..9].try_into().unwrap()),
        body,
    )
}

pub fn status(body: &[u8]) -> u32 {
    u32::from_be_bytes(body[..4].try_into().unwrap())
}

/// A server on one end of a socket pair, and the client's end, INIT done.
pub fn session(config: Config) -> (UnixStream, std::thread::JoinHandle<std::io::Result<Report>>) {
    let (mut client, server) = UnixStream::pair().unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let running = std::thread::spawn(move || serve(&server, &server, &config));
    client.write_all(&frame(1, 3, b"")).unwrap();
    assert_eq!(reply(&mut client).0, 2, "VERSION");
    (client, running)
}
