//! Arbitrary datagrams (each a length byte, then that many bytes) fed to the emulator's
//! request handling: no panic, every reply an SCP reply, memory within its budget.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volley_proto::scp::{MAX_DATAGRAM_LEN, ReplyRepr};
use volley_emulator::{BoardConfig, Handler};

const BUDGET: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let config = BoardConfig {
        memory_budget: BUDGET,
        width: 2,
        height: 2,
        ..BoardConfig::default()
    };
    let mut board = Handler::new(config).expect("a valid config");
    let mut data = data;
    while let Some((&len, rest)) = data.split_first() {
        let len = (usize::from(len) * 2).min(rest.len());
        let (datagram, rest) = rest.split_at(len);
        data = rest;
        if let Some(reply) = board.handle(datagram) {
            assert!(reply.len() <= MAX_DATAGRAM_LEN);
            assert!(
                ReplyRepr::parse(&reply).is_ok(),
                "the board sent a reply it cannot parse"
            );
        }
        assert!(board.memory_bytes() <= BUDGET);
    }
});
