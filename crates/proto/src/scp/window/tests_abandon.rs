//! Abandoning an interrupted operation: no late reply to one of its requests completes a
//! request of a later operation, whatever the timing.

use alloc::vec::Vec;

use proptest::prelude::*;

use super::tests::{reply_to, request, seq_of, token_of};
use super::*;
use crate::scp::ReturnCode;

/// The board's reply, with the request's token after it, so a test can tell which
/// request a reply answers (the window reads only the header).
fn tagged_reply(datagram: &[u8]) -> Vec<u8> {
    let mut reply = reply_to(datagram, ReturnCode::OK);
    reply.extend_from_slice(&token_of(datagram).to_le_bytes());
    reply
}

fn tag(reply: &[u8]) -> u32 {
    u32::from_le_bytes(reply[reply.len() - 4..].try_into().unwrap())
}

#[test]
fn late_replies_to_abandoned_requests_are_recognised_and_their_numbers_held() {
    let mut window: Window<ScpProtocol, u32> = Window::new(ScpProtocol::default(), Config::rig());
    for token in 0..8 {
        window.push(request(token), token).unwrap();
    }
    let mut old = Vec::new();
    while let Some(datagram) = window.poll_transmit(Instant::ZERO) {
        old.push(datagram.to_vec());
    }
    assert_eq!(old.len(), 8);
    window.push(request(8), 8).unwrap();
    let abandoned = window.abandon(Instant::from_millis(1));
    assert_eq!(abandoned.len(), 9, "8 outstanding and 1 queued");
    assert!(window.is_idle());

    // As if the sequence numbers had wrapped: the next new request would take the first
    // abandoned one's number, were it not held.
    window.next_seq = seq_of(&old[0]);
    for token in 100..108 {
        window.push(request(token), token).unwrap();
    }
    let mut new = Vec::new();
    while let Some(datagram) = window.poll_transmit(Instant::from_millis(2)) {
        new.push(datagram.to_vec());
    }
    for datagram in &new {
        assert!(
            old.iter().all(|o| seq_of(o) != seq_of(datagram)),
            "a held number was given out"
        );
    }
    // The old replies arrive late: each is recognised, none completes anything.
    for datagram in &old {
        assert_eq!(
            window.handle_reply(Instant::from_millis(3), &tagged_reply(datagram)),
            ReplyOutcome::Abandoned
        );
    }
    for datagram in &new {
        match window.handle_reply(Instant::from_millis(4), &tagged_reply(datagram)) {
            ReplyOutcome::Completed { token, .. } => assert_eq!(token, token_of(datagram)),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(window.stats().abandoned, 8);
    assert_eq!(window.stats().abandoned_replies, 8);

    // Once the longest timeout (0.5 s here) has passed, the numbers are free again.
    window.push(request(200), 200).unwrap();
    let _ = window.poll_transmit(Instant::from_millis(502));
    assert!(window.holds.is_empty());
    assert!(window.held.iter().all(|w| *w == 0));
}

#[test]
fn holds_stay_bounded_however_often_operations_are_interrupted() {
    let mut window: Window<ScpProtocol, u32> = Window::new(
        ScpProtocol::default(),
        Config::fixed(Duration::from_secs(3600), 5, 1024),
    );
    for round in 0..40u32 {
        for token in 0..1024 {
            window.push(request(token), round * 1024 + token).unwrap();
        }
        while window.poll_transmit(Instant::ZERO).is_some() {}
        let _ = window.abandon(Instant::ZERO);
        assert!(window.holds.len() <= MAX_HELD);
    }
    // Still a number for the next request, at once.
    window.push(request(0), 0).unwrap();
    assert!(window.poll_transmit(Instant::ZERO).is_some());
}

/// One step of a run: push and send an operation's requests, deliver the earliest reply
/// in flight, or interrupt the operation.
#[derive(Clone, Debug)]
enum Step {
    Operation(u8),
    Deliver,
    Interrupt,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1u8..40).prop_map(Step::Operation),
        Just(Step::Deliver),
        Just(Step::Deliver),
        Just(Step::Interrupt),
    ]
}

proptest! {
    /// Random interruptions, random reply delays (each within the retransmit timeout
    /// of its send), sequence numbers forced to wrap after each interruption: every
    /// completion is of a request of the current operation, answered by its own reply.
    #[test]
    fn no_reply_completes_another_operations_request(
        steps in proptest::collection::vec(step(), 1..200),
        delays in proptest::collection::vec(0u64..499, 64),
    ) {
        let rto = Duration::from_millis(500);
        let mut window: Window<ScpProtocol, u32> =
            Window::new(ScpProtocol::default(), Config::fixed(rto, 5, 8));
        let mut now = Instant::ZERO;
        let mut generation = 0u32;
        let mut next_token = 0u32;
        let mut flight: Vec<(Instant, Vec<u8>)> = Vec::new();
        let mut first_abandoned = None;
        for (i, step) in steps.into_iter().enumerate() {
            now = match step {
                // To the earliest reply in flight.
                Step::Deliver => flight.iter().map(|f| f.0).min().unwrap_or(now).max(now),
                _ => now + Duration::from_millis(1),
            };
            // Every reply arrives at its time, never later.
            flight.sort_by_key(|f| Reverse(f.0));
            while flight.last().is_some_and(|f| f.0 <= now) {
                let (_, reply) = flight.pop().unwrap();
                match window.handle_reply(now, &reply) {
                    ReplyOutcome::Completed { token, .. } => {
                        prop_assert_eq!(token >> 16, generation, "another operation's request");
                        prop_assert_eq!(token & 0xffff, tag(&reply), "another request's reply");
                    }
                    ReplyOutcome::Abandoned | ReplyOutcome::Duplicate | ReplyOutcome::Unknown => {}
                    other => prop_assert!(false, "{:?}", other),
                }
            }
            match step {
                Step::Operation(n) => {
                    for _ in 0..n {
                        // The token's high bits carry the operation it belongs to.
                        window.push(request(next_token), (generation << 16) | next_token).unwrap();
                        next_token = (next_token + 1) & 0xffff;
                    }
                }
                Step::Deliver => {}
                Step::Interrupt => {
                    let _ = window.abandon(now);
                    generation += 1;
                    first_abandoned = window.holds.front().map(|&(seq, _)| seq);
                }
            }
            window.handle_timeout(now);
            while let Some(Event::TimedOut { .. }) = window.poll_event() {}
            if let Some(seq) = first_abandoned.take() {
                window.next_seq = seq;
            }
            while let Some(datagram) = window.poll_transmit(now) {
                let delay = Duration::from_millis(delays[i % delays.len()]);
                flight.push((now + delay, tagged_reply(datagram)));
            }
        }
    }
}
