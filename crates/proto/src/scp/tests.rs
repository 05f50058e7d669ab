//! Fixture tests over bytes captured from rig 2.4.1 and SpiNNMan, plus
//! property tests: emit-then-parse round-trips and no panic on arbitrary input.

use proptest::prelude::*;

use super::*;
use crate::scp::sdp::Flags;

use super::fixtures::{
    READ_REP, READ_REQ, SPINNMAN_READ_REQ, SVER_REP, SVER_REQ, WRITE_REP, WRITE_REQ,
};

fn emit_request(repr: &RequestRepr<'_>) -> ([u8; MAX_DATAGRAM_LEN], usize) {
    let mut buf = [0u8; MAX_DATAGRAM_LEN];
    let n = repr.emit(&mut buf).unwrap();
    (buf, n)
}

fn emit_reply(repr: &ReplyRepr<'_>) -> ([u8; MAX_DATAGRAM_LEN], usize) {
    let mut buf = [0u8; MAX_DATAGRAM_LEN];
    let n = repr.emit(&mut buf).unwrap();
    (buf, n)
}

#[test]
fn every_captured_datagram_reemits_byte_for_byte() {
    for request in [SVER_REQ, WRITE_REQ, READ_REQ, SPINNMAN_READ_REQ] {
        let repr = RequestRepr::parse(request).unwrap();
        let (buf, n) = emit_request(&repr);
        assert_eq!(&buf[..n], request);
    }
    for reply in [SVER_REP, WRITE_REP, READ_REP] {
        let repr = ReplyRepr::parse(reply).unwrap();
        let (buf, n) = emit_reply(&repr);
        assert_eq!(&buf[..n], reply);
    }
}

#[test]
fn builders_reproduce_rigs_requests() {
    let chip = Address::core(1, 2, 3);
    let mut write =
        write_request(chip, 0x6024_0002, &[0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]).unwrap();
    write.seq = 1;
    assert_eq!(write.args[2], DataType::Short as u32);
    let (buf, n) = emit_request(&write);
    assert_eq!(&buf[..n], WRITE_REQ);

    let mut read = read_request(chip, 0x6024_0000, 8).unwrap();
    read.seq = 2;
    let (buf, n) = emit_request(&read);
    assert_eq!(&buf[..n], READ_REQ);

    // rig asks chip (255, 255), core 0, which the monitor answers whatever its address.
    let (buf, n) = emit_request(&sver_request(Address::core(255, 255, 0)));
    assert_eq!(&buf[..n], SVER_REQ);

    let mut spinnman = read;
    spinnman.sdp.src.x = 255;
    spinnman.sdp.src.y = 255;
    let (buf, n) = emit_request(&spinnman);
    assert_eq!(&buf[..n], SPINNMAN_READ_REQ);
}

#[test]
fn replies_answer_their_requests() {
    let write = RequestRepr::parse(WRITE_REQ).unwrap();
    let (buf, n) = emit_reply(&write.reply(ReturnCode::OK));
    assert_eq!(&buf[..n], WRITE_REP);

    let read = RequestRepr::parse(READ_REQ).unwrap();
    let data = [0, 1, 2, 3, 4, 5, 6, 7];
    let reply = ReplyRepr {
        body: &data,
        ..read.reply(ReturnCode::OK)
    };
    let (buf, n) = emit_reply(&reply);
    assert_eq!(&buf[..n], READ_REP);
    assert_eq!(reply.sdp.flags, Flags::NO_REPLY);
    assert_eq!(read.transfer_args(), Ok((0x6024_0000, 8, DataType::Word)));
}

#[test]
fn sver_reply_decodes_and_reencodes() {
    let reply = ReplyRepr::parse(SVER_REP).unwrap();
    assert_eq!(reply.rc, ReturnCode::OK);
    let info = VersionInfo::parse(reply.body).unwrap();
    assert_eq!(info.buffer_size, 256);
    assert_eq!(info.name, "SC&MP/SpiNNaker");
    assert_eq!(
        info.version,
        Version::Semantic {
            major: 4,
            minor: 0,
            patch: 0
        }
    );
    let mut body = [0u8; 64];
    let n = info.emit(&mut body).unwrap();
    assert_eq!(n, info.buffer_len());
    assert_eq!(&body[..n], reply.body);
}

#[test]
fn legacy_sver_takes_the_version_from_arg2() {
    let mut body = [0u8; 12 + 6];
    body[4..8].copy_from_slice(&(133u32 << 16 | 256).to_le_bytes());
    body[12..].copy_from_slice(b"SC&MP\0");
    let info = VersionInfo::parse(&body).unwrap();
    assert_eq!(info.version, Version::Legacy(133));
    assert_eq!(info.buffer_size, 256);
    let mut out = [0u8; 32];
    let n = info.emit(&mut out).unwrap();
    assert_eq!(&out[..n], &body);
}

#[test]
fn bad_version_text_is_refused() {
    let mut body = [0u8; 12].to_vec();
    body[4..8].copy_from_slice(&0xFFFF_0100u32.to_le_bytes());
    for text in [
        &b"X\x004.0\x00"[..],
        b"X\x004.0.0.1\x00",
        b"X\x00a.b.c\x00",
        b"X\x004.0.0",
    ] {
        let mut full = body.clone();
        full.extend_from_slice(text);
        assert!(VersionInfo::parse(&full).is_err(), "{text:?}");
    }
}

#[test]
fn data_type_rule() {
    assert_eq!(DataType::for_transfer(0x6000_0000, 256), DataType::Word);
    assert_eq!(DataType::for_transfer(0x6000_0002, 256), DataType::Short);
    assert_eq!(DataType::for_transfer(0x6000_0000, 6), DataType::Short);
    assert_eq!(DataType::for_transfer(0x6000_0001, 4), DataType::Byte);
    assert_eq!(DataType::for_transfer(0x6000_0000, 3), DataType::Byte);
}

#[test]
fn fill_and_iptag_requests() {
    let fill = fill_request(Address::core(0, 0, 0), 0x6000_0000, 0xdead_beef, 1024);
    assert_eq!(fill.cmd, Command::FILL);
    assert_eq!(fill.args, [0x6000_0000, 0xdead_beef, 1024]);

    let query = iptag_tto_request(Address::core(0, 0, 0), None).unwrap();
    assert_eq!(query.args, [4 << 16, 16, 0]);
    let set = iptag_tto_request(Address::core(0, 0, 0), Some(3)).unwrap();
    assert_eq!(set.args[1], 3);
    assert!(iptag_tto_request(Address::core(0, 0, 0), Some(16)).is_err());

    let info = TtoInfo {
        fixed_tags: 8,
        pool_size: 8,
        record_size: 32,
        tto: 9,
    };
    let body = info.to_body();
    assert_eq!(u32::from_le_bytes(body), 8 << 24 | 8 << 16 | 32 << 8 | 9);
    assert_eq!(TtoInfo::parse(&body), Ok(info));
    assert_eq!(tto_millis(9), Some(2560));
    assert_eq!(tto_millis(1), Some(10));
    assert_eq!(tto_millis(0), None);
}

#[test]
fn limits_and_truncation_are_clear_errors() {
    // SDP part under 24 bytes: SC&MP answers RC_LEN.
    assert_eq!(
        RequestRepr::parse(&READ_REQ[..20]),
        Err(Error::TooShort {
            what: "SCP request",
            len: 20,
            min: 26
        })
    );
    // A reply too short for its sequence number.
    assert!(matches!(
        ReplyRepr::parse(&WRITE_REP[..12]),
        Err(Error::Truncated {
            needed: 14,
            available: 12,
            ..
        })
    ));
    // A datagram over 282 bytes: SC&MP drops it.
    assert!(matches!(
        RequestRepr::parse(&[0u8; 283]),
        Err(Error::TooLarge { max: 282, .. })
    ));
    assert!(read_request(Address::HOST, 0, 257).is_err());
    assert!(read_request(Address::HOST, 0, 0).is_err());
    assert!(write_request(Address::HOST, 0, &[0; 257]).is_err());
    let big = RequestRepr::new(Address::HOST, Command::WRITE, [0; 3], &[0; 257]);
    assert!(big.emit(&mut [0; 400]).is_err());
    assert_eq!(
        RequestRepr::parse(WRITE_REQ).unwrap().emit(&mut [0; 10]),
        Err(Error::BufferTooSmall {
            needed: 32,
            available: 10
        })
    );
    // A read reply with the wrong length is the caller's to judge: the body says how much.
    assert_eq!(ReplyRepr::parse(&READ_REP[..18]).unwrap().body.len(), 4);
}

#[test]
fn unknown_codes_round_trip() {
    let mut bytes = WRITE_REP.to_vec();
    bytes[10] = 0x99;
    let reply = ReplyRepr::parse(&bytes).unwrap();
    assert_eq!(reply.rc, ReturnCode(0x99));
    assert_eq!(reply.rc.name(), None);
    assert_eq!(std::format!("{}", reply.rc), "unknown(0x99)");
    assert_eq!(std::format!("{}", ReturnCode::P2P_BUSY), "RC_P2P_BUSY");
    let (buf, n) = emit_reply(&reply);
    assert_eq!(&buf[..n], &bytes[..]);
    assert_eq!(Command::KNOWN.len(), 26);
    assert_eq!(ReturnCode::KNOWN.len(), 16);
}

#[test]
fn set_seq_touches_only_the_sequence_number() {
    let mut bytes = WRITE_REQ.to_vec();
    let mut packet = Packet::new_checked(&mut bytes[..]).unwrap();
    packet.set_seq(0xBEEF);
    assert_eq!(packet.seq(), 0xBEEF);
    assert_eq!(packet.cmd_rc(), 3);
    assert_eq!(&bytes[12..14], &[0xEF, 0xBE]);
    assert_eq!(&bytes[..12], &WRITE_REQ[..12]);
    assert_eq!(&bytes[14..], &WRITE_REQ[14..]);
}

fn address() -> impl Strategy<Value = Address> {
    (any::<u8>(), any::<u8>(), 0u8..8, 0u8..32).prop_map(|(x, y, port, cpu)| Address {
        x,
        y,
        port,
        cpu,
    })
}

fn sdp_repr() -> impl Strategy<Value = sdp::Repr> {
    (any::<u8>(), any::<u8>(), address(), address()).prop_map(|(flags, tag, dest, src)| sdp::Repr {
        flags: Flags(flags),
        tag,
        dest,
        src,
    })
}

proptest! {
    #[test]
    fn request_round_trips(
        sdp in sdp_repr(), cmd: u16, seq: u16, args: [u32; 3],
        data in proptest::collection::vec(any::<u8>(), 0..=MAX_DATA_LEN),
    ) {
        let repr = RequestRepr { sdp, cmd: Command(cmd), seq, args, data: &data };
        let (buf, n) = emit_request(&repr);
        prop_assert_eq!(RequestRepr::parse(&buf[..n]), Ok(repr));
    }

    #[test]
    fn reply_round_trips(
        sdp in sdp_repr(), rc: u16, seq: u16,
        body in proptest::collection::vec(any::<u8>(), 0..=MAX_DATAGRAM_LEN - REPLY_HEADER_LEN),
    ) {
        let repr = ReplyRepr { sdp, rc: ReturnCode(rc), seq, body: &body };
        let (buf, n) = emit_reply(&repr);
        prop_assert_eq!(ReplyRepr::parse(&buf[..n]), Ok(repr));
    }

    #[test]
    fn version_round_trips(
        core in address(), phys_cpu: u8, buffer_size: u16, build_date: u32,
        name in "[ -~]{0,40}", semver: Option<(u16, u16, u16)>, legacy in 0u16..0xFFFF,
    ) {
        let version = match semver {
            Some((major, minor, patch)) => Version::Semantic { major, minor, patch },
            None => Version::Legacy(legacy),
        };
        let core = Address { port: 0, ..core };
        let info = VersionInfo { core, phys_cpu, buffer_size, build_date, name: &name, version };
        let mut buf = [0u8; 128];
        let n = info.emit(&mut buf).unwrap();
        prop_assert_eq!(VersionInfo::parse(&buf[..n]), Ok(info));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = RequestRepr::parse(&bytes).map(|r| r.transfer_args());
        let _ = ReplyRepr::parse(&bytes);
        let _ = VersionInfo::parse(&bytes);
        let _ = TtoInfo::parse(&bytes);
        if let Ok(mut p) = Packet::new_checked(bytes) {
            p.set_seq(1);
            let _ = (p.cmd_rc(), p.body().len());
        }
    }
}
