//! Parses arbitrary bytes as an RPC message and a hello; whatever parses must describe
//! exactly the bytes given, and re-encode to the same head.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volley_proto::rpc::{Hello, Message};

fuzz_target!(|data: &[u8]| {
    if let Ok(msg) = Message::parse(data) {
        let mut end = msg.args_range().end;
        for r in msg.segments() {
            assert_eq!(r.start, end);
            end = r.end;
        }
        assert_eq!(end, data.len());
        let mut head = vec![0u8; msg.head.buffer_len(msg.segment_count())];
        let lens: Vec<usize> = msg.segments().map(|r| r.len()).collect();
        let n = msg
            .head
            .emit(msg.args().len(), lens, &mut head)
            .expect("a parsed head re-encodes");
        assert_eq!(head[..n], data[..n]);
    }
    if let Ok(hello) = Hello::parse(data) {
        // The fields every version-1 hello has, and the appended one where present.
        let bytes = hello.emit();
        assert_eq!(bytes[..24], data[..24]);
        if data.len() >= 32 {
            assert_eq!(bytes[24..32], data[24..32]);
        }
    }
});
