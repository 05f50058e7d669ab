//! Criterion micro-benchmarks of volley-proto's codecs (the same cases as the `codec`
//! suite of `cargo xtask bench`, with criterion's statistics): `cargo bench -p volley-benches`.

#![allow(missing_docs)]

use core::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use volley_proto::scp::sdp::Address;
use volley_proto::scp::{self, ReplyRepr, RequestRepr};
use volley_proto::sftp::Request;
use volley_proto::wire::frame::Decoder;

fn scp(c: &mut Criterion) {
    let data = [0xA5u8; scp::MAX_DATA_LEN];
    let mut bytes = [0u8; scp::MAX_DATAGRAM_LEN];
    let n = scp::write_request(Address::core(0, 0, 0), 0x6000_0000, &data)
        .and_then(|r| r.emit(&mut bytes))
        .expect("fits");
    let mut group = c.benchmark_group("scp");
    group.throughput(Throughput::Bytes(n as u64));
    group.bench_function("write_request_emit", |b| {
        b.iter(|| {
            let mut buf = [0u8; scp::MAX_DATAGRAM_LEN];
            scp::write_request(Address::core(0, 0, 0), black_box(0x6000_0000), &data)
                .and_then(|r| r.emit(&mut buf))
        })
    });
    group.bench_function("request_parse", |b| {
        b.iter(|| RequestRepr::parse(black_box(&bytes[..n])).map(|r| r.data.len()))
    });
    group.bench_function("reply_parse", |b| {
        b.iter(|| ReplyRepr::parse(black_box(&bytes[..n])).map(|r| r.seq))
    });
    group.finish();
}

fn sftp(c: &mut Criterion) {
    let payload = vec![0x5Au8; 32 * 1024];
    let write = Request::Write {
        id: 1,
        handle: b"00000001",
        offset: 0,
        data: &payload,
    };
    let wire = write.to_vec().expect("fits");
    let mut group = c.benchmark_group("sftp");
    group.throughput(Throughput::Bytes(wire.len() as u64));
    group.bench_function("write_encode_head", |b| {
        b.iter(|| {
            let mut head = [0u8; 64];
            write.emit_head(black_box(&mut head))
        })
    });
    let mut buf = vec![0u8; wire.len()];
    group.bench_function("write_encode_copy", |b| {
        b.iter(|| write.emit(black_box(&mut buf)))
    });
    group.bench_function("write_decode", |b| {
        b.iter(|| {
            let (frame, _) = Decoder::default()
                .decode(black_box(&wire))
                .ok()
                .flatten()
                .expect("a whole frame");
            Request::parse(frame).map(|r| r.bulk().len())
        })
    });
    group.finish();
}

criterion_group!(benches, scp, sftp);
criterion_main!(benches);
