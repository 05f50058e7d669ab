//! `codec`: encode and decode throughput of volley-proto's wire formats, in packets (or
//! frames) per second and MB/s, and the price of copying a payload behind its header
//! instead of writing the header alone (the pkg/sftp lesson).

use core::hint::black_box;
use serde_json::json;

use volley_proto::scp::sdp::Address;
use volley_proto::scp::{self, ReplyRepr, RequestRepr, ReturnCode};
use volley_proto::sftp::{Request, Response};
use volley_proto::wire::frame::{Decoder, Header};

use crate::harness::{Mode, Report, Samples, median, si, throughput};

pub(crate) fn run(mode: Mode) -> Report {
    let chip = Address::core(0, 0, 0);
    let data = [0xA5u8; scp::MAX_DATA_LEN];
    let mut request_bytes = [0u8; scp::MAX_DATAGRAM_LEN];
    let request_len = scp::write_request(chip, 0x6000_0000, &data)
        .and_then(|r| r.emit(&mut request_bytes))
        .expect("a 256-byte write fits a datagram");
    let request = RequestRepr::parse(&request_bytes[..request_len]).expect("just encoded");
    let reply = ReplyRepr {
        body: &data,
        ..request.reply(ReturnCode::OK)
    };
    let mut reply_bytes = [0u8; scp::MAX_DATAGRAM_LEN];
    let reply_len = reply.emit(&mut reply_bytes).expect("fits");

    // 64 frames of 32 KiB back to back, as a reader would find them in its buffer.
    const FRAME_BODY: usize = 32 * 1024;
    let body = vec![7u8; FRAME_BODY];
    let mut stream = Vec::new();
    for id in 0..64u32 {
        stream.extend_from_slice(&Header::new(103, id, FRAME_BODY).expect("fits").emit());
        stream.extend_from_slice(&body);
    }
    let decoder = Decoder::new(1 << 20);

    let payload = vec![0x5Au8; 32 * 1024];
    let write = Request::Write {
        id: 1,
        handle: b"00000001",
        offset: 1 << 20,
        data: &payload,
    };
    let mut frame_buf = vec![0u8; write.buffer_len()];
    let big = vec![1u8; 261_120];
    let data_reply = Response::Data { id: 9, data: &big }.to_vec().expect("fits");

    let mut cases: Vec<(&str, Samples)> = Vec::new();
    cases.push((
        "SCP write request: build + emit (256 B data)",
        throughput(mode, request_len as u64, || {
            let mut buf = [0u8; scp::MAX_DATAGRAM_LEN];
            let mut r = scp::write_request(chip, black_box(0x6000_0100), &data).ok()?;
            r.seq = black_box(42);
            r.emit(&mut buf).ok().map(|n| buf[n - 1])
        }),
    ));
    cases.push((
        "SCP request parse (282 B)",
        throughput(mode, request_len as u64, || {
            RequestRepr::parse(black_box(&request_bytes[..request_len]))
                .ok()
                .map(|r| r.data.len())
        }),
    ));
    cases.push((
        "SCP read reply parse (270 B)",
        throughput(mode, reply_len as u64, || {
            ReplyRepr::parse(black_box(&reply_bytes[..reply_len]))
                .ok()
                .map(|r| r.seq)
        }),
    ));
    cases.push((
        "frame decode, 64 x 32 KiB from one buffer (per frame)",
        throughput(mode, stream.len() as u64 / 64, {
            let mut at = 0;
            move || {
                if at >= stream.len() {
                    at = 0;
                }
                let (frame, used) = decoder.decode(&stream[at..]).ok()??;
                at += used;
                Some(frame.id)
            }
        }),
    ));
    let head = throughput(mode, write.buffer_len() as u64, || {
        let mut head = [0u8; 64];
        write.emit_head(black_box(&mut head)).ok()
    });
    let copy = throughput(mode, write.buffer_len() as u64, || {
        write.emit(black_box(&mut frame_buf)).ok()
    });
    let zero_copy_ratio = head.median() / copy.median();
    cases.push(("SFTP WRITE 32 KiB: head only (payload sent uncopied)", head));
    cases.push(("SFTP WRITE 32 KiB: head + payload copied", copy));
    cases.push((
        "SFTP DATA 255 KiB parse (payload borrowed)",
        throughput(mode, data_reply.len() as u64, || {
            let (frame, _) = Decoder::default().decode(black_box(&data_reply)).ok()??;
            Response::parse(frame).ok().map(|r| r.bulk().len())
        }),
    ));

    let mut report = Report::new("codec", "Codec throughput (volley-proto)", mode);
    report.columns = vec![
        "case",
        "bytes/op",
        "ops/s",
        "MB/s",
        "ops/s min..max",
        "CPU ns/op",
    ];
    for (name, samples) in &cases {
        report.rows.push(vec![
            name.to_string(),
            samples.bytes_per_op.to_string(),
            si(samples.median()),
            format!("{:.0}", samples.median_mb_per_sec()),
            format!("{}..{}", si(samples.min()), si(samples.max())),
            format!("{:.1}", median(&samples.cpu_ns_per_op)),
        ]);
        report.data.push(json!({
            "case": name,
            "bytes_per_op": samples.bytes_per_op,
            "ops_per_sec": samples.median(),
            "mb_per_sec": samples.median_mb_per_sec(),
            "ops_per_sec_rounds": samples.ops_per_sec,
            "cpu_ns_per_op": median(&samples.cpu_ns_per_op),
        }));
    }
    report.notes.push(format!(
        "encoding a 32 KiB SFTP WRITE's head alone is {zero_copy_ratio:.1}x faster than \
         copying its payload behind the head (same run, medians)"
    ));
    report.notes.push(
        "one thread does every operation; CPU ns/op is that thread's CPU time (scheduler \
         statistics) over the round, per operation; the wall time per operation (1e9 / ops/s) \
         less it is time the thread waited for a CPU"
            .into(),
    );
    report
        .data
        .push(json!({ "case": "sftp_write_head_vs_copy_ratio", "ratio": zero_copy_ratio }));
    report
}
