use super::*;
use alloc::vec::Vec;
use proptest::prelude::*;

extern crate alloc;

fn build(head: &Head, args: &[u8], segments: &[Vec<u8>]) -> Vec<u8> {
    let mut buf = alloc::vec![0u8; head.buffer_len(segments.len())];
    let n = head
        .emit(args.len(), segments.iter().map(Vec::len), &mut buf)
        .unwrap();
    assert_eq!(n, buf.len());
    buf.extend_from_slice(args);
    for s in segments {
        buf.extend_from_slice(s);
    }
    buf
}

fn kinds() -> impl Strategy<Value = Kind> {
    prop::sample::select(Kind::KNOWN)
}

#[test]
fn layout_matches_the_documented_table() {
    let head = Head {
        kind: Kind::ERROR,
        call_id: 0x0403_0201,
        method: ErrorCode::BUSY.0,
        deadline_us: Some(0x1122),
        metadata: false,
    };
    let msg = build(&head, b"xy", &[b"abc".to_vec()]);
    assert_eq!(
        msg,
        [
            4, 1, 1, 0, // kind, flags, one segment
            1, 2, 3, 4, // call id
            1, 0, 0, 0, // error code
            2, 0, 0, 0, // args length
            0x22, 0x11, 0, 0, 0, 0, 0, 0, // deadline
            3, 0, 0, 0, // segment length
            b'x', b'y', b'a', b'b', b'c',
        ]
    );
}

#[test]
fn lying_lengths_are_errors_not_reads() {
    let head = Head {
        kind: Kind::CALL,
        call_id: 1,
        method: 2,
        deadline_us: None,
        metadata: false,
    };
    let mut msg = build(&head, b"args", &[b"seg".to_vec()]);
    // The segment claims 4 GiB.
    msg[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        Message::parse(&msg),
        Err(Error::Truncated {
            what: "rpc message body",
            ..
        })
    ));
    // One byte too many.
    let mut msg = build(&head, b"args", &[]);
    msg.push(0);
    assert_eq!(
        Message::parse(&msg),
        Err(Error::TrailingBytes {
            what: "rpc message",
            extra: 1
        })
    );
    // 65 segments.
    let mut msg = build(&head, b"", &[]);
    msg[2] = 65;
    assert!(matches!(
        Message::parse(&msg),
        Err(Error::TooLarge {
            what: "rpc segment count",
            ..
        })
    ));
    // Unknown kind and flags.
    let mut bad = build(&head, b"", &[]);
    bad[0] = 12;
    assert!(matches!(
        Message::parse(&bad),
        Err(Error::InvalidValue {
            what: "rpc message kind",
            value: 12
        })
    ));
    let mut bad = build(&head, b"", &[]);
    bad[1] = 4;
    assert!(matches!(
        Message::parse(&bad),
        Err(Error::InvalidValue {
            what: "rpc flags",
            ..
        })
    ));
}

#[test]
fn encode_refuses_too_many_segments_and_small_buffers() {
    let head = Head {
        kind: Kind::ONE_WAY,
        call_id: 1,
        method: 1,
        deadline_us: None,
        metadata: false,
    };
    let mut buf = [0u8; 1024];
    assert!(matches!(
        head.emit(0, core::iter::repeat_n(1, MAX_SEGMENTS + 1), &mut buf),
        Err(Error::TooLarge { .. })
    ));
    assert_eq!(
        head.emit(0, [1, 2], &mut buf[..10]),
        Err(Error::BufferTooSmall {
            needed: 24,
            available: 10
        })
    );
}

#[test]
fn hello_round_trips_and_checks_its_magic() {
    let hello = Hello {
        version: WIRE_VERSION,
        codec: CodecId::POSTCARD,
        max_message: 16 << 20,
        credit: 256,
        fingerprint: 0xdead_beef_0123_4567,
        calls: 0x0123_4567_89ab_cdef,
        capabilities: CAP_ANSWERS_PINGS,
    };
    let bytes = hello.emit();
    assert_eq!(&bytes[..4], b"VRPC");
    assert_eq!(
        bytes[7], CAP_ANSWERS_PINGS,
        "capability bits live at offset 7"
    );
    assert_eq!(Hello::parse(&bytes), Ok(hello));
    // Later versions may append.
    let mut longer = bytes.to_vec();
    longer.extend_from_slice(&[9; 8]);
    assert_eq!(Hello::parse(&longer), Ok(hello));
    // A version-1 peer from before the calls field calls what it serves.
    assert_eq!(
        Hello::parse(&bytes[..HELLO_MIN_LEN]),
        Ok(Hello {
            calls: hello.fingerprint,
            ..hello
        })
    );
    let mut bad = bytes;
    bad[0] = b'X';
    assert!(matches!(
        Hello::parse(&bad),
        Err(Error::InvalidValue {
            what: "rpc hello magic",
            ..
        })
    ));
    assert!(matches!(
        Hello::parse(&bytes[..20]),
        Err(Error::Truncated { .. })
    ));
}

proptest! {
    #[test]
    fn messages_round_trip(
        kind in kinds(),
        call_id in any::<u32>(),
        method in any::<u32>(),
        deadline_us in any::<Option<u64>>(),
        metadata in any::<bool>(),
        args in prop::collection::vec(any::<u8>(), 0..200),
        segments in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..100), 0..8),
    ) {
        let head = Head { kind, call_id, method, deadline_us, metadata };
        let msg = build(&head, &args, &segments);
        let parsed = Message::parse(&msg).unwrap();
        prop_assert_eq!(parsed.head, head);
        prop_assert_eq!(parsed.args(), &args[..]);
        prop_assert_eq!(parsed.segment_count(), segments.len());
        let got: Vec<&[u8]> = parsed.segments().map(|r| &msg[r]).collect();
        let want: Vec<&[u8]> = segments.iter().map(Vec::as_slice).collect();
        prop_assert_eq!(got, want);
        // Every strict prefix fails cleanly.
        for cut in 0..msg.len() {
            prop_assert!(Message::parse(&msg[..cut]).is_err());
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(msg) = Message::parse(&bytes) {
            let mut end = msg.args_range().end;
            prop_assert!(end <= bytes.len());
            for r in msg.segments() {
                prop_assert_eq!(r.start, end);
                end = r.end;
            }
            prop_assert_eq!(end, bytes.len());
        }
        let _ = Hello::parse(&bytes);
    }
}

#[test]
fn a_hello_carries_a_token_after_its_fields() {
    let hello = Hello {
        version: WIRE_VERSION,
        codec: CodecId::BINCODE2,
        max_message: 1 << 20,
        credit: 8,
        fingerprint: 1,
        calls: 2,
        capabilities: 0,
    };
    let mut out = [0u8; HELLO_LEN + 2 + MAX_TOKEN];
    let n = hello.emit_with_token(b"secret", &mut out).unwrap();
    assert_eq!(Hello::parse(&out[..n]), Ok(hello));
    assert_eq!(Hello::token(&out[..n]), Ok(Some(&b"secret"[..])));
    assert_eq!(Hello::token(&hello.emit()), Ok(None), "no token");
    // A length past the bytes, or over the limit, is an error, not a read past the end.
    assert!(Hello::token(&out[..n - 1]).is_err());
    let mut long = out;
    long[HELLO_LEN..HELLO_LEN + 2].copy_from_slice(&(MAX_TOKEN as u16 + 1).to_le_bytes());
    assert!(matches!(Hello::token(&long), Err(Error::TooLarge { .. })));
    assert!(
        hello
            .emit_with_token(&[0; MAX_TOKEN + 1], &mut out)
            .is_err()
    );
}
