//! Splits arbitrary bytes into frames with a small maximum, as a reader would.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volley_proto::wire::frame::Decoder;

fuzz_target!(|data: &[u8]| {
    let decoder = Decoder::new(1024);
    let mut at = 0;
    while let Ok(Some((frame, used))) = decoder.decode(&data[at..]) {
        assert!(used <= 1024);
        assert_eq!(frame.header().emit()[..], data[at..at + 9]);
        at += used;
    }
});
