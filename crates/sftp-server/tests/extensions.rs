//! The extensions OpenSSH's `sftp` does not reach in the batch test: check-file's hashes,
//! whole and by block, checked against hashes computed here; copy-data within one file
//! refused.

use std::io::Write;

use sha2::{Digest, Sha256};
use volley_sftp_server::Config;

mod common;
use common::{frame, reply, session, status, string};

fn u64s(values: &[u64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_be_bytes()).collect()
}

#[test]
fn check_file_hashes_the_range_whole_and_by_block() {
    let dir = volley_testkit::scratch("sftp-server-check-file");
    let path = dir.join("data");
    let data = volley_testkit::pattern(10_000, 5);
    std::fs::write(&path, &data).unwrap();
    let name = path.as_os_str().as_encoded_bytes();
    let (mut client, running) = session(Config::default());
    // The whole file, naming an algorithm the server lacks first.
    let ask = |from: u64, len: u64, block: u32| {
        [
            string(b"check-file-name"),
            string(name),
            string(b"whirlpool,sha256"),
            u64s(&[from, len]),
            block.to_be_bytes().to_vec(),
        ]
        .concat()
    };
    client.write_all(&frame(200, 1, &ask(0, 0, 0))).unwrap();
    let (ty, id, body) = reply(&mut client);
    assert_eq!((ty, id), (201, 1), "EXTENDED_REPLY");
    let head = [string(b"check-file"), string(b"sha256")].concat();
    assert_eq!(&body[..head.len()], &head[..]);
    assert_eq!(&body[head.len()..], &Sha256::digest(&data)[..]);
    // 1000 bytes from 100, by blocks of 256: four hashes, the last of 232 bytes.
    client
        .write_all(&frame(200, 2, &ask(100, 1000, 256)))
        .unwrap();
    let (_, _, body) = reply(&mut client);
    let hashes: Vec<u8> = data[100..1100]
        .chunks(256)
        .flat_map(|c| Sha256::digest(c).to_vec())
        .collect();
    assert_eq!(&body[head.len()..], &hashes[..]);
    // A block under the draft's floor.
    client.write_all(&frame(200, 3, &ask(0, 0, 100))).unwrap();
    let (ty, _, body) = reply(&mut client);
    assert_eq!((ty, status(&body)), (101, 8), "refused as unsupported");
    client.shutdown(std::net::Shutdown::Write).unwrap();
    running.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn copy_data_copies_between_handles_and_not_within_one_file() {
    let dir = volley_testkit::scratch("sftp-server-copy-data");
    let (src, dst) = (dir.join("src"), dir.join("dst"));
    let data = volley_testkit::pattern(3_000_000, 6);
    std::fs::write(&src, &data).unwrap();
    let (mut client, running) = session(Config::default());
    let open = |id: u32,
                path: &std::path::Path,
                flags: u32,
                client: &mut std::os::unix::net::UnixStream| {
        let body = [
            string(path.as_os_str().as_encoded_bytes()),
            flags.to_be_bytes().to_vec(),
            0u32.to_be_bytes().to_vec(),
        ]
        .concat();
        client.write_all(&frame(3, id, &body)).unwrap();
        let (ty, _, body) = reply(client);
        assert_eq!(ty, 102, "HANDLE");
        body[4..].to_vec()
    };
    let from = open(1, &src, 0x01, &mut client);
    let to = open(2, &dst, 0x02 | 0x08 | 0x10, &mut client);
    let copy = |id: u32, a: &[u8], b: &[u8], client: &mut std::os::unix::net::UnixStream| {
        let body = [
            string(b"copy-data"),
            string(a),
            u64s(&[1000, 0]),
            string(b),
            u64s(&[0]),
        ]
        .concat();
        client.write_all(&frame(200, id, &body)).unwrap();
        let (ty, _, body) = reply(client);
        assert_eq!(ty, 101);
        status(&body)
    };
    assert_eq!(copy(3, &from, &to, &mut client), 0, "copied");
    assert!(
        std::fs::read(&dst).unwrap() == data[1000..],
        "the copy differs"
    );
    assert_eq!(
        copy(4, &from, &from, &mut client),
        4,
        "within one file: refused"
    );
    client.shutdown(std::net::Shutdown::Write).unwrap();
    running.join().unwrap().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}
