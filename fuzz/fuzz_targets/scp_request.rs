//! Decodes arbitrary datagrams as SCP requests; whatever decodes must re-encode to the
//! same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volley_proto::scp::{MAX_DATAGRAM_LEN, RequestRepr};

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = RequestRepr::parse(data) {
        let _ = request.transfer_args();
        let mut out = [0u8; MAX_DATAGRAM_LEN];
        if let Ok(n) = request.emit(&mut out) {
            // The two pad bytes are ignored on the way in and written as zeros.
            assert_eq!(&out[2..n], &data[2..]);
        }
    }
});
