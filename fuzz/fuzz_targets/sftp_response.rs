//! Decodes arbitrary frames as SFTP responses, walking every NAME entry and ATTRS.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volley_proto::wire::frame::Frame;
use volley_proto::sftp::{Limits, Response};

fuzz_target!(|input: (u8, u32, &[u8])| {
    let (ty, id, body) = input;
    if let Ok(response) = Response::parse(Frame { ty, id, body }) {
        match response {
            Response::Name { names, .. } => {
                let _ = names.iter().count();
            }
            Response::ExtendedReply { data, .. } => {
                let _ = Limits::parse(data);
            }
            _ => {}
        }
        let wire = response.to_vec().expect("a parsed response re-encodes");
        assert!(wire[9..].starts_with(body));
    }
});
