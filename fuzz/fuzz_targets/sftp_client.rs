//! Feeds the SFTP client a whole scripted reply stream: every request it sends is
//! answered with the input's next frame (its type, body and, unless it is a VERSION,
//! the request's own id, so the client goes as deep as the bytes let it: listings,
//! attributes with extended pairs, STATUS, DATA, limits), with stray frames mixed in.
//! The client lists and copies a tree and a file; whatever the bytes, it must end (time
//! is virtual, so a request never answered times out at once) without a panic, and
//! write nothing outside its scratch directory.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use volley_proto::wire::frame::Decoder;
use volley_sftp::{SftpClient, TransferOptions};

/// A frame of the input: a type, a 16-bit length and that many bytes of body; a type
/// with its top bit set is sent with an id no request has, before the next frame.
async fn serve(mut stream: DuplexStream, mut input: &[u8]) {
    let decoder = Decoder::default();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let (id, used) = loop {
            if let Ok(Some((frame, used))) = decoder.decode(&buf) {
                break (frame.id, used);
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        buf.drain(..used);
        loop {
            let [ty, a, b, rest @ ..] = input else {
                return;
            };
            let len = usize::from(u16::from_be_bytes([*a, *b])).min(rest.len());
            let (body, tail) = rest.split_at(len);
            input = tail;
            let (stray, ty) = (ty & 0x80 != 0, ty & 0x7f);
            let mut frame = Vec::with_capacity(len + 9);
            let id = if stray { id.wrapping_add(7) } else { id };
            // VERSION (2) carries the version where others carry an id.
            let head = if ty == 2 { 1 } else { 5 };
            frame.extend_from_slice(&((len + head) as u32).to_be_bytes());
            frame.push(ty);
            if ty != 2 {
                frame.extend_from_slice(&id.to_be_bytes());
            }
            frame.extend_from_slice(body);
            if stream.write_all(&frame).await.is_err() {
                return;
            }
            if !stray {
                break;
            }
        }
    }
}

fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = PathBuf::from("/dev/shm");
        let base = if base.is_dir() { base } else { std::env::temp_dir() };
        base.join(format!("volley-fuzz-sftp-{}", std::process::id()))
    })
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a runtime")
    })
}

fuzz_target!(|input: &[u8]| {
    let dir = scratch();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("scratch");
    let input = input.to_vec();
    runtime().block_on(async move {
        let (ours, theirs) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move { serve(theirs, &input).await });
        let (read, write) = tokio::io::split(ours);
        if let Ok(mut sftp) = SftpClient::connect(read, write).await {
            sftp.set_timeout(core::time::Duration::from_secs(1));
            let opts = TransferOptions {
                requests: 4,
                max_depth: 3,
                max_entries: 64,
                ..TransferOptions::default()
            };
            let _ = sftp.get_tree(b"/t", dir.join("tree"), &opts, |_| {}).await;
            let _ = sftp.get(b"/f", dir.join("file"), &opts).await;
            let _ = sftp.read_dir(b"/d").await;
            let _ = sftp.glob(b"/g/*/x?", 64).await;
        }
        server.abort();
    });
    // Nothing but what the client was asked for: the tree and the file (or their parts).
    for entry in std::fs::read_dir(dir).expect("scratch").flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        assert!(
            name.starts_with("tree") || name.starts_with("file"),
            "wrote {name}"
        );
    }
});
