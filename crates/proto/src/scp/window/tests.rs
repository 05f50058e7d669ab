//! Deterministic simulation of the window against a fake SCP board over a seeded link,
//! with a fake clock that jumps to the next event (the quinn `Pair` idea).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use super::*;
use crate::scp::sdp::Address;
use crate::scp::{self, ReplyRepr, RequestRepr, ReturnCode};
use crate::simlink::{LinkSpec, SimLink};

pub(super) fn request(token: u32) -> Vec<u8> {
    let data = token.to_le_bytes();
    let repr = scp::write_request(Address::core(0, 0, 1), 0x6000_0000 + token * 4, &data).unwrap();
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    buf
}

pub(super) fn seq_of(datagram: &[u8]) -> u16 {
    RequestRepr::parse(datagram).unwrap().seq
}

pub(super) fn token_of(datagram: &[u8]) -> u32 {
    let data = RequestRepr::parse(datagram).unwrap().data;
    u32::from_le_bytes(data.try_into().unwrap())
}

pub(super) fn reply_to(datagram: &[u8], rc: ReturnCode) -> Vec<u8> {
    let repr = RequestRepr::parse(datagram).unwrap().reply(rc);
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    buf
}

/// The shared simulated link, `latency_ms` each way; a datagram held back (chance
/// `reorder`) lands up to 3 ms late. `true` is towards the board.
fn sim_link(seed: u64, latency_ms: u64, loss: f64, dup: f64, reorder: f64) -> SimLink<bool> {
    SimLink::new(
        seed,
        LinkSpec {
            loss,
            duplicate: dup,
            delay: Duration::from_millis(latency_ms),
            jitter: Duration::from_micros(3000),
            reorder,
        },
    )
}

/// What the simulation saw.
#[derive(Default)]
struct Outcomes {
    completed: BTreeMap<u32, Instant>,
    timed_out: BTreeMap<u32, u32>,
    failed: BTreeMap<u32, u16>,
    transmits: Vec<(Instant, Vec<u8>)>,
}

/// Runs requests `0..n` through a window and a link to a board that answers with
/// `board(request, times seen) -> Option<rc>` (None: no answer).
fn simulate(
    config: Config,
    link: &mut SimLink<bool>,
    n: u32,
    mut board: impl FnMut(&[u8], u32) -> Option<ReturnCode>,
    mut on_transmit: impl FnMut(&Window<ScpProtocol, u32>, &[u8]),
) -> (Window<ScpProtocol, u32>, Outcomes) {
    let mut window = Window::new(ScpProtocol::default(), config);
    let mut out = Outcomes::default();
    let mut seen: BTreeMap<u32, u32> = BTreeMap::new();
    let mut now = Instant::ZERO;
    let mut next = 0;
    let mut steps = 0u64;
    loop {
        steps += 1;
        assert!(steps < 10_000_000, "simulation did not finish");
        // Keep the queue short, as a driver would.
        while next < n && window.queued() < 2 {
            window.push(request(next), next).unwrap();
            next += 1;
        }
        while let Some(datagram) = window.poll_transmit(now) {
            let datagram = datagram.to_vec();
            on_transmit(&window, &datagram);
            link.send(now, true, &datagram);
            out.transmits.push((now, datagram));
        }
        while let Some(Event::TimedOut { token, tries, .. }) = window.poll_event() {
            assert!(
                out.timed_out.insert(token, tries).is_none(),
                "{token} timed out twice"
            );
        }
        if next == n && window.is_idle() {
            return (window, out);
        }
        // Jump the clock to the next thing that happens.
        let wake = [link.next_at(), window.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(wake) = wake else {
            panic!("stalled with {} outstanding", window.outstanding());
        };
        now = now.max(wake);
        while let Some((to_board, bytes)) = link.pop_due(now) {
            if to_board {
                let token = token_of(&bytes);
                let count = seen.entry(token).or_default();
                *count += 1;
                if let Some(rc) = board(&bytes, *count) {
                    link.send(now, false, &reply_to(&bytes, rc));
                }
            } else {
                match window.handle_reply(now, &bytes) {
                    ReplyOutcome::Completed { token, .. } => {
                        assert!(
                            out.completed.insert(token, now).is_none(),
                            "{token} completed twice"
                        );
                    }
                    ReplyOutcome::Failed { token, code, .. } => {
                        assert!(
                            out.failed.insert(token, code).is_none(),
                            "{token} failed twice"
                        );
                    }
                    ReplyOutcome::RetryLater
                    | ReplyOutcome::Duplicate
                    | ReplyOutcome::Abandoned
                    | ReplyOutcome::Unknown => {}
                }
            }
        }
        window.handle_timeout(now);
    }
}

fn ok(_: &[u8], _: u32) -> Option<ReturnCode> {
    Some(ReturnCode::OK)
}

#[test]
fn retransmits_the_exact_bytes_at_exact_times_then_gives_up() {
    let mut link = sim_link(1, 1, 1.0, 0.0, 0.0); // everything lost
    let (window, out) = simulate(Config::rig(), &mut link, 1, ok, |_, _| {});
    let times: Vec<u64> = out.transmits.iter().map(|(t, _)| t.as_micros()).collect();
    assert_eq!(times, [0, 500_000, 1_000_000, 1_500_000, 2_000_000]);
    let first = &out.transmits[0].1;
    assert_eq!(first, &request_with_seq(0, 0));
    assert!(out.transmits.iter().all(|(_, bytes)| bytes == first));
    assert_eq!(out.timed_out.get(&0), Some(&5));
    assert_eq!(window.stats().retransmits, 4);
    assert_eq!(window.stats().gave_up, 1);
}

fn request_with_seq(token: u32, seq: u16) -> Vec<u8> {
    let mut bytes = request(token);
    bytes[12..14].copy_from_slice(&seq.to_le_bytes());
    bytes
}

#[test]
fn adaptive_timeout_backs_off_exponentially_within_bounds() {
    let config = Config {
        window: 1,
        rto: Rto::Adaptive(RtoBounds::new(
            Duration::from_millis(100),
            Duration::from_millis(5),
            Duration::from_millis(500),
        )),
        max_tries: 6,
    };
    let mut link = sim_link(1, 1, 1.0, 0.0, 0.0);
    let (_, out) = simulate(config, &mut link, 1, ok, |_, _| {});
    let times: Vec<u64> = out
        .transmits
        .iter()
        .map(|(t, _)| t.as_micros() / 1000)
        .collect();
    // 100, 200, 400, then capped at 500.
    assert_eq!(times, [0, 100, 300, 700, 1200, 1700]);
    assert_eq!(out.timed_out.get(&0), Some(&6));
}

#[test]
fn rtt_samples_drive_the_timeout_and_skip_retransmissions() {
    let config = Config {
        window: 4,
        ..Config::default()
    };
    // 2 ms latency each way: the RTT is 4 ms.
    let mut link = sim_link(7, 2, 0.0, 0.0, 0.0);
    let (window, out) = simulate(config, &mut link, 100, ok, |_, _| {});
    assert_eq!(out.completed.len(), 100);
    assert_eq!(window.rtt().srtt(), Some(Duration::from_millis(4)));
    // SRTT 4 ms, variance decayed towards 0: the RTO sits at the 10 ms floor.
    assert_eq!(window.rtt().rto(), Duration::from_millis(10));

    // Karn: a request answered only after a retransmission gives no sample.
    let mut link = sim_link(7, 2, 0.0, 0.0, 0.0);
    let (window, out) = simulate(
        Config::default(),
        &mut link,
        1,
        |_, seen| (seen >= 2).then_some(ReturnCode::OK),
        |_, _| {},
    );
    assert_eq!(out.completed.len(), 1);
    assert_eq!(out.transmits.len(), 2);
    assert_eq!(window.rtt().srtt(), None);
}

#[test]
fn seventy_thousand_requests_wrap_the_sequence_space() {
    let mut link = sim_link(3, 1, 0.0, 0.0, 0.0);
    let mut max_seq = 0u16;
    let mut wrapped = false;
    let config = Config {
        window: 16,
        ..Config::default()
    };
    let (window, out) = simulate(config, &mut link, 70_000, ok, |_, bytes| {
        let seq = seq_of(bytes);
        if seq < max_seq && max_seq == u16::MAX {
            wrapped = true;
        }
        max_seq = max_seq.max(seq);
    });
    assert!(wrapped, "sequence numbers never passed 0xFFFF");
    assert_eq!(out.completed.len(), 70_000);
    assert!(out.timed_out.is_empty());
    assert_eq!(window.stats().sent, 70_000);
    assert_eq!(window.stats().retransmits, 0);
}

#[test]
fn outstanding_sequence_numbers_are_skipped_on_wrap() {
    // Request 0 is never answered and never times out within the run; 65 600 others
    // go through a window of 2, so the counter passes seq 0 while it is outstanding.
    let config = Config::fixed(Duration::from_secs(1_000_000), 1, 2);
    let mut link = sim_link(5, 1, 0.0, 0.0, 0.0);
    let mut transmits_of_seq_0 = 0;
    let (_, out) = simulate(
        config,
        &mut link,
        65_600,
        |bytes, _| (token_of(bytes) != 0).then_some(ReturnCode::OK),
        |_, bytes| {
            if seq_of(bytes) == 0 {
                transmits_of_seq_0 += 1;
                assert_eq!(token_of(bytes), 0, "seq 0 reused while outstanding");
            }
        },
    );
    assert_eq!(transmits_of_seq_0, 1);
    assert_eq!(out.completed.len(), 65_599);
    assert_eq!(out.timed_out.len(), 1);
}

#[test]
fn every_request_finishes_exactly_once_over_a_bad_link() {
    for seed in 0..4 {
        let config = Config {
            window: 8,
            max_tries: 8,
            ..Config::default()
        };
        let mut link = sim_link(seed, 1, 0.1, 0.05, 0.2);
        let (window, out) = simulate(config, &mut link, 3000, ok, |_, _| {});
        let done = out.completed.len() + out.timed_out.len();
        assert_eq!(done, 3000, "seed {seed}");
        assert!(out.completed.keys().all(|t| !out.timed_out.contains_key(t)));
        // 8 tries at 10% loss each way: giving up is rare, but possible.
        assert!(
            out.completed.len() > 2990,
            "seed {seed}: {}",
            out.completed.len()
        );
        let stats = window.stats();
        assert!(
            stats.retransmits > 0 && stats.duplicates > 0,
            "seed {seed}: {stats:?}"
        );
    }
}

#[test]
fn retry_codes_wait_for_the_timer_and_fatal_codes_fail_at_once() {
    let mut link = sim_link(9, 1, 0.0, 0.0, 0.0);
    let (window, out) = simulate(
        Config::rig(),
        &mut link,
        2,
        |bytes, seen| match (token_of(bytes), seen) {
            (0, 1) => Some(ReturnCode::P2P_BUSY),
            (0, _) => Some(ReturnCode::OK),
            _ => Some(ReturnCode::ARG),
        },
        |_, _| {},
    );
    assert_eq!(out.failed.get(&1), Some(&ReturnCode::ARG.0));
    assert!(out.completed.contains_key(&0));
    // Busy: resent when its 0.5 s timer ran out, not when the busy reply came.
    let resend = out
        .transmits
        .iter()
        .filter(|(_, b)| token_of(b) == 0)
        .nth(1)
        .unwrap();
    assert_eq!(resend.0, Instant::from_millis(500));
    assert_eq!(window.stats().retry_replies, 1);
}

#[test]
fn duplicates_and_strays_are_counted_not_completed() {
    let mut window: Window<ScpProtocol, u32> = Window::new(ScpProtocol::default(), Config::rig());
    window.push(request(1), 1).unwrap();
    let sent = window.poll_transmit(Instant::ZERO).unwrap().to_vec();
    let reply = reply_to(&sent, ReturnCode::OK);
    assert!(matches!(
        window.handle_reply(Instant::from_millis(1), &reply),
        ReplyOutcome::Completed { token: 1, .. }
    ));
    assert_eq!(
        window.handle_reply(Instant::from_millis(2), &reply),
        ReplyOutcome::Duplicate
    );
    let stray = reply_to(&request_with_seq(9, 999), ReturnCode::OK);
    assert_eq!(
        window.handle_reply(Instant::from_millis(2), &stray),
        ReplyOutcome::Unknown
    );
    assert_eq!(
        window.handle_reply(Instant::from_millis(2), &[1, 2, 3]),
        ReplyOutcome::Unknown
    );
    assert_eq!(window.stats().duplicates, 1);
    assert_eq!(window.stats().unknown, 2);
    // A read reply carries data the caller reads from its own buffer.
    let parsed = ReplyRepr::parse(&reply).unwrap();
    assert_eq!(parsed.seq, 0);
}

#[test]
fn window_limits_requests_in_flight_and_clear_drops_them() {
    let mut window: Window<ScpProtocol, u32> = Window::new(
        ScpProtocol::default(),
        Config::fixed(Duration::from_millis(10), 3, 3),
    );
    for token in 0..5 {
        window.push(request(token), token).unwrap();
    }
    let mut sent = 0;
    while window.poll_transmit(Instant::ZERO).is_some() {
        sent += 1;
    }
    assert_eq!((sent, window.outstanding(), window.queued()), (3, 3, 2));
    let dropped = window.clear();
    assert_eq!(dropped.len(), 5);
    assert!(window.is_idle());
    assert_eq!(window.poll_timeout(), None);
}

#[test]
fn clear_also_drops_unreported_timeouts() {
    let mut window: Window<ScpProtocol, u32> = Window::new(
        ScpProtocol::default(),
        Config::fixed(Duration::from_millis(10), 1, 4),
    );
    window.push(request(1), 1).unwrap();
    window.push(request(2), 2).unwrap();
    while window.poll_transmit(Instant::ZERO).is_some() {}
    // Both give up at once; the caller reads one event, then abandons the operation.
    window.handle_timeout(Instant::from_millis(10));
    assert!(matches!(window.poll_event(), Some(Event::TimedOut { .. })));
    assert_eq!(window.clear().len(), 1);
    assert!(window.is_idle());
    assert_eq!(window.poll_event(), None);
}

#[test]
fn windows_past_the_maximum_are_refused_by_check_and_clamped_by_new() {
    let config = |window| Config {
        window,
        ..Config::default()
    };
    for window in [0, MAX_WINDOW + 1, 65_537] {
        assert_eq!(config(window).check(), Err(ConfigError::Window(window)));
    }
    assert_eq!(config(MAX_WINDOW).check(), Ok(()));
    // Unanswered, a window asked for 65 537 sends MAX_WINDOW requests and stops (the
    // allocator used to loop for ever once every sequence number was taken).
    let mut window: Window<ScpProtocol, u32> = Window::new(ScpProtocol::default(), config(65_537));
    for token in 0..70_000 {
        window.push(request(token % 1000), token).unwrap();
    }
    let mut sent = 0;
    while window.poll_transmit(Instant::ZERO).is_some() {
        sent += 1;
    }
    assert_eq!((sent, window.outstanding()), (MAX_WINDOW, MAX_WINDOW));
    assert_eq!(window.config().window, MAX_WINDOW);
}

#[test]
fn the_largest_window_finishes_every_request_exactly_once_over_a_bad_link() {
    let config = Config {
        window: MAX_WINDOW,
        ..Config::default()
    };
    let mut link = sim_link(11, 1, 0.05, 0.02, 0.1);
    let mut most = 0;
    let (window, out) = simulate(config, &mut link, 20_000, ok, |w, _| {
        most = most.max(w.outstanding());
    });
    assert_eq!(out.completed.len() + out.timed_out.len(), 20_000);
    assert!(out.completed.len() > 19_990, "{}", out.completed.len());
    assert_eq!(most, MAX_WINDOW);
    assert!(window.is_idle() && window.poll_timeout().is_none());
}

#[test]
fn a_dead_peer_gives_up_after_the_documented_budget() {
    let config = Config::default();
    assert_eq!(config.give_up_after(), Duration::from_millis(9100));
    assert_eq!(Config::rig().give_up_after(), Duration::from_millis(2500));
    let mut link = sim_link(1, 1, 1.0, 0.0, 0.0);
    let (_, out) = simulate(config, &mut link, 1, ok, |_, _| {});
    let first = out.transmits[0].0;
    assert_eq!(out.transmits.len(), 8);
    assert_eq!(out.timed_out.get(&0), Some(&8));
    // The last send's timer is what gives up: 9.1 s after the first send.
    let last = out.transmits[7].0;
    assert_eq!(
        last - first + Duration::from_secs(2),
        config.give_up_after()
    );
}

#[test]
fn a_request_that_only_ever_hears_busy_says_so_when_it_gives_up() {
    let mut window: Window<ScpProtocol, u32> = Window::new(
        ScpProtocol::default(),
        Config::fixed(Duration::from_millis(10), 3, 4),
    );
    window.push(request(1), 1).unwrap();
    let mut now = Instant::ZERO;
    for _ in 0..3 {
        let sent = window.poll_transmit(now).expect("a send").to_vec();
        let busy = reply_to(&sent, ReturnCode::P2P_BUSY);
        assert_eq!(window.handle_reply(now, &busy), ReplyOutcome::RetryLater);
        now += Duration::from_millis(10);
        window.handle_timeout(now);
    }
    match window.poll_event() {
        Some(Event::TimedOut { tries, busy, .. }) => {
            assert_eq!((tries, busy), (3, Some((ReturnCode::P2P_BUSY.0, 3))));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn config_check_refuses_zero_and_huge_timeouts() {
    assert_eq!(
        Config::fixed(Duration::ZERO, 3, 8).check(),
        Err(ConfigError::Timeout {
            what: "timeout",
            value: Duration::ZERO
        })
    );
    let hour_and_a_bit = Duration::from_secs(3601);
    assert!(Config::fixed(hour_and_a_bit, 3, 8).check().is_err());
    assert_eq!(
        Config::fixed(Duration::from_millis(1), 0, 8).check(),
        Err(ConfigError::Tries)
    );
    assert_eq!(Config::rig().check(), Ok(()));
    assert_eq!(Config::default().check(), Ok(()));
}

#[test]
fn a_request_too_short_to_number_is_refused_at_push() {
    let mut window: Window<ScpProtocol, u32> = Window::new(ScpProtocol::default(), Config::rig());
    let refused = window.push(vec![0u8; 10], 7).unwrap_err();
    assert_eq!((refused.token, refused.request.len()), (7, 10));
    assert!(
        matches!(refused.error, crate::wire::Error::Truncated { .. }),
        "{:?}",
        refused.error
    );
    assert!(window.is_idle());
    assert!(window.poll_transmit(Instant::ZERO).is_none());
}
