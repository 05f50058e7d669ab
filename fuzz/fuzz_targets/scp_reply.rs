//! Decodes arbitrary datagrams as SCP replies and their bodies as sver and iptag replies.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volley_proto::scp::{MAX_DATAGRAM_LEN, ReplyRepr, TtoInfo, VersionInfo};

fuzz_target!(|data: &[u8]| {
    if let Ok(reply) = ReplyRepr::parse(data) {
        let _ = VersionInfo::parse(reply.body);
        let _ = TtoInfo::parse(reply.body);
        let mut out = [0u8; MAX_DATAGRAM_LEN];
        let n = reply
            .emit(&mut out)
            .expect("a parsed reply fits a datagram");
        // The two pad bytes are ignored on the way in and written as zeros.
        assert_eq!(&out[2..n], &data[2..]);
    }
});
