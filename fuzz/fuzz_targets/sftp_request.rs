//! Decodes arbitrary frames as SFTP requests; whatever decodes must re-encode exactly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volley_proto::wire::frame::Frame;
use volley_proto::sftp::Request;

fuzz_target!(|input: (u8, u32, &[u8])| {
    let (ty, id, body) = input;
    if let Ok(request) = Request::parse(Frame { ty, id, body }) {
        let wire = request.to_vec().expect("a parsed request re-encodes");
        assert_eq!(&wire[9..], body);
    }
});
