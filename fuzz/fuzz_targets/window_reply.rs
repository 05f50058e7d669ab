//! Arbitrary datagrams, replies crafted to outstanding requests and timer expiries fed to
//! the SCP window with requests in flight: no panic, and its books stay straight (each
//! request completes, fails or gives up exactly once; never more in flight than the
//! window; a timer exactly while requests are outstanding).
#![no_main]

use std::collections::BTreeSet;

use libfuzzer_sys::fuzz_target;
use volley_proto::time::{Duration, Instant};
use volley_proto::scp::window::{Config, Event, ReplyOutcome, ScpProtocol, Window};
use volley_proto::scp::{self, RequestRepr, ReturnCode};
use volley_proto::scp::sdp::Address;

fn request(token: u32) -> Vec<u8> {
    let repr = scp::read_request(Address::core(0, 0, 0), 0x6000_0000 + token * 4, 4).unwrap();
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    buf
}

fuzz_target!(|data: &[u8]| {
    let Some((&config, mut data)) = data.split_first() else {
        return;
    };
    let window_size = usize::from(config % 32) + 1;
    let mut window: Window<ScpProtocol, u32> = Window::new(
        ScpProtocol::default(),
        Config::fixed(
            Duration::from_millis(10),
            u32::from(config >> 5) + 1,
            window_size,
        ),
    );
    let mut now = Instant::ZERO;
    let mut sent: Vec<Vec<u8>> = Vec::new();
    let mut next = 0u32;
    let mut finished = BTreeSet::new();
    while let Some((&op, rest)) = data.split_first() {
        data = rest;
        // Keep the window fed.
        while window.queued() < 2 && next < 10_000 {
            window
                .push(request(next), next)
                .expect("a whole SCP request");
            next += 1;
        }
        while let Some(bytes) = window.poll_transmit(now) {
            sent.push(bytes.to_vec());
        }
        assert!(window.outstanding() <= window_size);
        assert_eq!(window.poll_timeout().is_some(), window.outstanding() > 0);
        let outcome = match op % 4 {
            // Raw bytes, length from the next byte.
            0 => {
                let len = data
                    .first()
                    .map_or(0, |&n| usize::from(n))
                    .min(data.len().saturating_sub(1));
                let datagram = data.get(1..1 + len).unwrap_or_default().to_vec();
                data = &data[(1 + len).min(data.len())..];
                window.handle_reply(now, &datagram)
            }
            // A reply to something sent, with a return code from the next byte.
            1 | 2 if !sent.is_empty() => {
                let (pick, code) = (
                    data.first().copied().unwrap_or(0),
                    data.get(1).copied().unwrap_or(0),
                );
                data = &data[data.len().min(2)..];
                let request = &sent[usize::from(pick) % sent.len()];
                let rc = if op % 4 == 1 {
                    ReturnCode::OK
                } else {
                    ReturnCode(0x80 | u16::from(code))
                };
                let repr = RequestRepr::parse(request).unwrap().reply(rc);
                let mut reply = vec![0u8; repr.buffer_len()];
                repr.emit(&mut reply).unwrap();
                window.handle_reply(now, &reply)
            }
            // Time passes.
            _ => {
                now += Duration::from_millis(u64::from(op >> 2));
                window.handle_timeout(now);
                ReplyOutcome::Unknown
            }
        };
        match outcome {
            ReplyOutcome::Completed { token, .. } | ReplyOutcome::Failed { token, .. } => {
                assert!(finished.insert(token), "{token} finished twice");
            }
            _ => {}
        }
        while let Some(Event::TimedOut { token, .. }) = window.poll_event() {
            assert!(finished.insert(token), "{token} finished twice");
        }
    }
});
