extern crate alloc;

use super::*;
use alloc::vec;
use alloc::vec::Vec;
use proptest::prelude::*;

#[test]
fn header_layout_matches_the_table() {
    let mut buf = [0u8; 32];
    let n = emit_header(
        &PacketHeader {
            ty: PacketType::INITIAL,
            dcid: 0x0807_0605_0403_0201,
            scid: Some(0x11),
            pn: 0x0a0b_0c0d,
        },
        &mut buf,
    )
    .unwrap();
    assert_eq!(n, LONG_HEADER);
    assert_eq!(
        buf[..n],
        [
            1, 1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0, 0, 0, 0, 0, 0, 0, 0x0d, 0x0c, 0x0b, 0x0a
        ]
    );
    let n = emit_header(
        &PacketHeader {
            ty: PacketType::DATA,
            dcid: 9,
            scid: None,
            pn: 1,
        },
        &mut buf,
    )
    .unwrap();
    assert_eq!(buf[..n], [3, 9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
    // A retry has the long header, its packet type 4.
    let n = emit_header(
        &PacketHeader {
            ty: PacketType::RETRY,
            dcid: 2,
            scid: Some(3),
            pn: 0,
        },
        &mut buf,
    )
    .unwrap();
    assert_eq!(n, LONG_HEADER);
    assert_eq!(buf[0], 4);
    let mut frame = [0u8; 8];
    assert_eq!(emit_frame(&PacketFrame::Token(b"abc"), &mut frame), Ok(5));
    assert_eq!(frame[..5], [0x06, 3, b'a', b'b', b'c']);
}

#[test]
fn malformed_frames_are_errors() {
    let header = [3u8, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let with = |frame: &[u8]| {
        let mut d = header.to_vec();
        d.extend_from_slice(frame);
        d
    };
    // A fragment that runs past its message.
    let mut data = vec![0x03];
    data.extend_from_slice(&0u64.to_le_bytes());
    data.extend_from_slice(&4u32.to_le_bytes());
    data.extend_from_slice(&2u32.to_le_bytes());
    data.extend_from_slice(&3u16.to_le_bytes());
    data.extend_from_slice(b"abc");
    let d = with(&data);
    let (_, mut frames) = parse(&d).unwrap();
    assert!(matches!(
        frames.next(),
        Some(Err(Error::InvalidValue { .. }))
    ));
    assert_eq!(frames.next(), None, "nothing after a malformed frame");
    // An ack claiming 200 ranges; an unknown frame type; a truncated header.
    let mut ack = vec![0x02];
    ack.extend_from_slice(&[0; 16]);
    ack.push(200);
    let d = with(&ack);
    assert!(matches!(
        parse(&d).unwrap().1.next(),
        Some(Err(Error::TooLarge { .. }))
    ));
    let d = with(&[0x77]);
    assert!(matches!(
        parse(&d).unwrap().1.next(),
        Some(Err(Error::InvalidValue { .. }))
    ));
    // A token longer than MAX_TOKEN, and one cut short.
    let d = with(&[0x06, MAX_TOKEN as u8 + 1]);
    assert!(matches!(
        parse(&d).unwrap().1.next(),
        Some(Err(Error::TooLarge { what: "token", .. }))
    ));
    let d = with(&[0x06, 4, 1, 2]);
    assert!(matches!(
        parse(&d).unwrap().1.next(),
        Some(Err(Error::Truncated { what: "token", .. }))
    ));
    assert!(matches!(
        emit_frame(&PacketFrame::Token(&[0; MAX_TOKEN + 1]), &mut [0; 128]),
        Err(Error::TooLarge { what: "token", .. })
    ));
    assert!(parse(&header[..5]).is_err());
    assert!(parse(&[9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
}

#[test]
fn ack_ranges_follow_quic() {
    let ranges = [(90, 100), (80, 87), (5, 5)];
    let mut buf = [0u8; 128];
    let n = emit_ack(&ranges, 25, 1 << 40, &mut buf).unwrap();
    assert_eq!(n, ack_len(3));
    let mut d = vec![3u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    d.extend_from_slice(&buf[..n]);
    let (_, mut frames) = parse(&d).unwrap();
    let Some(Ok(PacketFrame::Ack(ack))) = frames.next() else {
        panic!("an ack")
    };
    assert_eq!((ack.largest, ack.delay_us, ack.window), (100, 25, 1 << 40));
    assert_eq!(ack.ranges().collect::<Vec<_>>(), ranges);
    // Overlapping or misordered ranges cannot be written.
    assert!(emit_ack(&[(10, 20), (15, 30)], 0, 0, &mut buf).is_err());
}

fn ranges() -> impl Strategy<Value = Vec<(u32, u32)>> {
    // Build disjoint descending ranges from gaps and lengths.
    (
        0u32..1_000_000,
        prop::collection::vec((0u32..50, 0u32..50), 0..=MAX_ACK_RANGES),
    )
        .prop_map(|(low_start, steps)| {
            let mut out = Vec::new();
            let mut hi: u64 = 3_000_000 + u64::from(low_start);
            for (gap, len) in core::iter::once((0, 3)).chain(steps) {
                let top = hi;
                let bottom = top.saturating_sub(u64::from(len));
                out.push((bottom as u32, top as u32));
                hi = bottom.saturating_sub(u64::from(gap) + 2);
                if bottom < u64::from(gap) + 2 + 60 {
                    break;
                }
            }
            out
        })
}

proptest! {
    #[test]
    fn packets_round_trip(
        ty in prop::sample::select(PacketType::KNOWN),
        dcid in any::<u64>(),
        scid in any::<u64>(),
        pn in any::<u32>(),
        acks in ranges(),
        delay in any::<u32>(),
        window in any::<u64>(),
        start in any::<u64>(),
        data in prop::collection::vec(any::<u8>(), 0..300),
        extra in 0u32..1000,
        reason in prop::collection::vec(any::<u8>(), 0..=MAX_REASON),
        params in (any::<u32>(), any::<u64>(), any::<u16>()),
        token in prop::collection::vec(any::<u8>(), 0..=MAX_TOKEN),
    ) {
        let header = PacketHeader { ty, dcid, scid: (ty != PacketType::DATA).then_some(scid), pn };
        let mut buf = vec![0u8; 4096];
        let mut n = emit_header(&header, &mut buf).unwrap();
        n += emit_ack(&acks, delay, window, &mut buf[n..]).unwrap();
        let total = data.len() as u32 + extra;
        let frames = [
            PacketFrame::Ping,
            PacketFrame::Data { start, total, offset: extra, data: &data },
            PacketFrame::Close { code: 7, reason: &reason },
            PacketFrame::Params(Params { max_message: params.0, window: params.1, max_datagram: params.2 }),
            PacketFrame::Token(&token),
            PacketFrame::Padding,
        ];
        for f in &frames {
            n += emit_frame(f, &mut buf[n..]).unwrap();
        }
        let (got, mut parsed) = parse(&buf[..n]).unwrap();
        prop_assert_eq!(got, header);
        let Some(Ok(PacketFrame::Ack(ack))) = parsed.next() else { panic!("an ack") };
        prop_assert_eq!(ack.ranges().collect::<Vec<_>>(), acks);
        prop_assert_eq!((ack.delay_us, ack.window), (delay, window));
        for f in &frames {
            prop_assert_eq!(parsed.next(), Some(Ok(*f)));
        }
        prop_assert_eq!(parsed.next(), None);
        // Every strict prefix either fails or yields fewer whole frames, never a panic.
        for cut in 0..n {
            if let Ok((_, frames)) = parse(&buf[..cut]) {
                for f in frames {
                    let _ = f;
                }
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        if let Ok((_, frames)) = parse(&bytes) {
            for frame in frames {
                if let Ok(PacketFrame::Ack(ack)) = frame {
                    for (lo, hi) in ack.ranges() {
                        prop_assert!(lo <= hi);
                    }
                }
            }
        }
    }
}
