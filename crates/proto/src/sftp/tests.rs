//! Fixtures built from the draft's layouts and OpenSSH's replies, round-trips, and
//! decoding of arbitrary bytes.

use proptest::prelude::*;
use std::vec;
use std::vec::Vec;

use super::*;
use crate::wire::frame::{Decoder, Frame};

fn frame(bytes: &[u8]) -> Frame<'_> {
    let (frame, used) = Decoder::default().decode(bytes).unwrap().unwrap();
    assert_eq!(used, bytes.len());
    frame
}

fn be32(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

/// Builds a frame by hand from the spec's field list: type, then fields.
fn spec_frame(ty: u8, fields: &[&[u8]]) -> Vec<u8> {
    let body: Vec<u8> = fields.concat();
    let mut out = be32(1 + body.len() as u32).to_vec();
    out.push(ty);
    out.extend_from_slice(&body);
    out
}

fn sstr(s: &[u8]) -> Vec<u8> {
    let mut out = be32(s.len() as u32).to_vec();
    out.extend_from_slice(s);
    out
}

#[test]
fn body_heads_are_the_frame_heads_without_their_header() {
    let long_path = vec![b'p'; 2000];
    let requests = [
        Request::Open {
            id: 7,
            filename: &long_path,
            pflags: OpenFlags::READ,
            attrs: Attrs::EMPTY,
        },
        Request::Write {
            id: 8,
            handle: b"h",
            offset: 5,
            data: &[1, 2, 3],
        },
        Request::Stat { id: 9, path: b"/" },
    ];
    for request in &requests {
        let mut frame = vec![0u8; request.head_len()];
        let n = request.emit_head(&mut frame).unwrap();
        let mut body = vec![0u8; request.body_head_len()];
        let m = request.emit_body_head(&mut body).unwrap();
        assert_eq!((n - 9, &body[..m]), (m, &frame[9..n]), "{request:?}");
    }
    let head = WriteHead {
        id: 3,
        handle: &long_path,
        offset: 1 << 40,
        len: 99,
    };
    let mut frame = vec![0u8; 9 + head.body_len()];
    let n = head.emit(&mut frame).unwrap();
    let mut body = vec![0u8; head.body_len()];
    let m = head.emit_body(&mut body).unwrap();
    assert_eq!(&body[..m], &frame[9..n]);
    assert!(matches!(
        head.emit_body(&mut [0u8; 16]),
        Err(Error::BufferTooSmall { .. })
    ));
}

#[test]
fn init_and_openssh_version() {
    let init = spec_frame(1, &[&be32(3)]);
    assert_eq!(init, [0, 0, 0, 5, 1, 0, 0, 0, 3]);
    let parsed = Request::parse(frame(&init)).unwrap();
    assert_eq!(
        parsed,
        Request::Init {
            version: 3,
            extensions: Pairs::EMPTY
        }
    );
    assert_eq!(parsed.to_vec().unwrap(), init);

    let version = spec_frame(
        2,
        &[
            &be32(3),
            &sstr(b"posix-rename@openssh.com"),
            &sstr(b"1"),
            &sstr(b"limits@openssh.com"),
            &sstr(b"1"),
        ],
    );
    let parsed = Response::parse(frame(&version)).unwrap();
    let Response::Version {
        version: 3,
        extensions,
    } = parsed
    else {
        panic!("not a VERSION: {parsed:?}");
    };
    assert_eq!(extensions.count(), 2);
    assert_eq!(extensions.get(LIMITS_EXTENSION), Some(&b"1"[..]));
    assert_eq!(extensions.get(b"nope"), None);
    assert_eq!(parsed.to_vec().unwrap(), version);
}

#[test]
fn open_read_write_close_layouts() {
    let attrs = [be32(Attrs::FLAG_PERMISSIONS), be32(0o644)].concat();
    let open = spec_frame(3, &[&be32(1), &sstr(b"/tmp/f"), &be32(0x1a), &attrs]);
    let parsed = Request::parse(frame(&open)).unwrap();
    assert_eq!(
        parsed,
        Request::Open {
            id: 1,
            filename: b"/tmp/f",
            pflags: OpenFlags::WRITE | OpenFlags::CREAT | OpenFlags::TRUNC,
            attrs: Attrs {
                permissions: Some(0o644),
                ..Attrs::EMPTY
            }
        }
    );
    assert_eq!(parsed.to_vec().unwrap(), open);

    let read = spec_frame(
        5,
        &[
            &be32(2),
            &sstr(b"h"),
            &(1u64 << 33).to_be_bytes(),
            &be32(32768),
        ],
    );
    let parsed = Request::parse(frame(&read)).unwrap();
    assert_eq!(
        parsed,
        Request::Read {
            id: 2,
            handle: b"h",
            offset: 1 << 33,
            len: 32768
        }
    );
    assert_eq!(parsed.to_vec().unwrap(), read);

    let payload = [0x5a; 300];
    let write = spec_frame(
        6,
        &[&be32(3), &sstr(b"h"), &7u64.to_be_bytes(), &sstr(&payload)],
    );
    let parsed = Request::parse(frame(&write)).unwrap();
    let Request::Write { data, .. } = parsed else {
        panic!("not a WRITE");
    };
    // The payload is borrowed from the input, not copied.
    assert_eq!(data.as_ptr(), write[write.len() - 300..].as_ptr());
    let mut head = [0u8; 64];
    let n = parsed.emit_head(&mut head).unwrap();
    assert_eq!(&head[..n], &write[..write.len() - 300]);
    assert_eq!(parsed.bulk(), &payload[..]);
    // The same head without the data in memory.
    let apart = WriteHead {
        id: 3,
        handle: b"h",
        offset: 7,
        len: 300,
    };
    let mut head2 = [0u8; 64];
    let m = apart.emit(&mut head2).unwrap();
    assert_eq!(&head2[..m], &head[..n]);
    assert!(matches!(
        apart.emit(&mut head2[..m - 1]),
        Err(Error::BufferTooSmall { .. })
    ));

    let close = spec_frame(4, &[&be32(4), &sstr(b"h")]);
    assert_eq!(
        Request::parse(frame(&close)).unwrap(),
        Request::Close {
            id: 4,
            handle: b"h"
        }
    );
}

#[test]
fn status_data_name_attrs_layouts() {
    let status = spec_frame(
        101,
        &[&be32(9), &be32(1), &sstr(b"End of file"), &sstr(b"")],
    );
    let parsed = Response::parse(frame(&status)).unwrap();
    assert_eq!(
        parsed,
        Response::Status {
            id: 9,
            code: StatusCode::EOF,
            message: b"End of file",
            language: b""
        }
    );
    assert_eq!(parsed.to_vec().unwrap(), status);
    // A STATUS with no message or language still decodes.
    let bare = spec_frame(101, &[&be32(9), &be32(4)]);
    assert!(matches!(
        Response::parse(frame(&bare)),
        Ok(Response::Status {
            code: StatusCode::FAILURE,
            message: b"",
            ..
        })
    ));

    let data = spec_frame(103, &[&be32(10), &sstr(b"hello")]);
    let parsed = Response::parse(frame(&data)).unwrap();
    assert_eq!(
        parsed,
        Response::Data {
            id: 10,
            data: b"hello"
        }
    );
    assert_eq!(parsed.head_len() + parsed.bulk().len(), data.len());

    let file_attrs = [
        &be32(0xf)[..],
        &4096u64.to_be_bytes(),
        &be32(1000),
        &be32(1000),
        &be32(0o100644),
        &be32(1_700_000_000),
        &be32(1_700_000_001),
    ]
    .concat();
    let name = spec_frame(
        104,
        &[
            &be32(11),
            &be32(2),
            &sstr(b"a.txt"),
            &sstr(b"-rw-r--r-- 1 u u 4096 a.txt"),
            &file_attrs,
            &sstr(b"d"),
            &sstr(b"drwxr-xr-x d"),
            &[be32(Attrs::FLAG_PERMISSIONS), be32(0o040755)].concat(),
        ],
    );
    let parsed = Response::parse(frame(&name)).unwrap();
    let Response::Name { id: 11, names } = parsed else {
        panic!("not a NAME");
    };
    let entries: Vec<_> = names.iter().collect();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].filename, b"a.txt");
    assert_eq!(entries[0].attrs.size, Some(4096));
    assert!(entries[0].attrs.is_file());
    assert!(entries[1].attrs.is_dir());
    let mut buf = [0u8; 256];
    let rebuilt = Names::write(&entries, &mut buf).unwrap();
    assert_eq!(rebuilt, names);
    assert_eq!(parsed.to_vec().unwrap(), name);

    let attrs = spec_frame(105, &[&be32(12), &file_attrs]);
    let parsed = Response::parse(frame(&attrs)).unwrap();
    assert!(
        matches!(parsed, Response::Attrs { id: 12, attrs } if attrs.uid_gid == Some((1000, 1000)))
    );
    assert_eq!(parsed.to_vec().unwrap(), attrs);
}

#[test]
fn limits_extension() {
    let request = Request::Extended {
        id: 1,
        request: LIMITS_EXTENSION,
        data: b"",
    };
    let bytes = request.to_vec().unwrap();
    assert_eq!(bytes, spec_frame(200, &[&be32(1), &sstr(LIMITS_EXTENSION)]));
    let openssh = Limits {
        max_packet_len: 262144,
        max_read_len: 261120,
        max_write_len: 261120,
        max_open_handles: 19995,
    };
    let data = openssh.emit();
    let reply = spec_frame(201, &[&be32(1), &data]);
    let Response::ExtendedReply { id: 1, data } = Response::parse(frame(&reply)).unwrap() else {
        panic!("not an EXTENDED_REPLY");
    };
    assert_eq!(Limits::parse(data), Ok(openssh));
    assert!(Limits::parse(&data[..31]).is_err());
}

#[test]
fn every_remaining_request_round_trips() {
    let mut ext = [0u8; 64];
    let extended = Pairs::write(&[(b"k", b"v")], &mut ext).unwrap();
    let attrs = Attrs {
        size: Some(1),
        extended: Some(extended),
        ..Attrs::EMPTY
    };
    let requests = [
        Request::Lstat { id: 1, path: b"p" },
        Request::Fstat {
            id: 2,
            handle: b"h",
        },
        Request::Setstat {
            id: 3,
            path: b"p",
            attrs,
        },
        Request::Fsetstat {
            id: 4,
            handle: b"h",
            attrs,
        },
        Request::Opendir { id: 5, path: b"/" },
        Request::Readdir {
            id: 6,
            handle: b"h",
        },
        Request::Remove {
            id: 7,
            filename: b"f",
        },
        Request::Mkdir {
            id: 8,
            path: b"d",
            attrs: Attrs::EMPTY,
        },
        Request::Rmdir { id: 9, path: b"d" },
        Request::Realpath { id: 10, path: b"." },
        Request::Stat { id: 11, path: b"p" },
        Request::Rename {
            id: 12,
            oldpath: b"a",
            newpath: b"b",
        },
        Request::Readlink { id: 13, path: b"l" },
        Request::Symlink {
            id: 14,
            linkpath: b"l",
            targetpath: b"t",
        },
        Request::Extended {
            id: 15,
            request: POSIX_RENAME_EXTENSION,
            data: &[0, 0, 0, 1, b'a'],
        },
    ];
    for request in requests {
        let bytes = request.to_vec().unwrap();
        assert_eq!(bytes[4], request.packet_type().0);
        assert_eq!(Request::parse(frame(&bytes)), Ok(request));
    }
}

#[test]
fn malformed_messages_are_clear_errors() {
    // A string whose length runs past the end of its frame.
    let bad = spec_frame(17, &[&be32(1), &be32(1000), b"short"]);
    assert_eq!(
        Request::parse(frame(&bad)),
        Err(Error::Truncated {
            what: "STAT path",
            needed: 1000,
            available: 5
        })
    );
    // Bytes after the last field.
    let extra = spec_frame(4, &[&be32(1), &sstr(b"h"), b"xx"]);
    assert_eq!(
        Request::parse(frame(&extra)),
        Err(Error::TrailingBytes {
            what: "SFTP request",
            extra: 2
        })
    );
    // A response type where a request was expected, and an unknown type.
    assert!(matches!(
        Request::parse(frame(&spec_frame(101, &[&be32(1), &be32(0)]))),
        Err(Error::UnexpectedType { found: 101, .. })
    ));
    assert!(matches!(
        Response::parse(frame(&spec_frame(99, &[&be32(1)]))),
        Err(Error::UnexpectedType { found: 99, .. })
    ));
    // ATTRS with a flag bit no version-3 layout defines.
    let attrs = spec_frame(105, &[&be32(1), &be32(0x10)]);
    assert!(matches!(
        Response::parse(frame(&attrs)),
        Err(Error::InvalidValue {
            what: "ATTRS flags",
            value: 0x10
        })
    ));
    // A NAME claiming 4 billion entries in 8 bytes stops at the first missing one.
    let name = spec_frame(104, &[&be32(1), &be32(u32::MAX), &be32(0)]);
    assert!(matches!(
        Response::parse(frame(&name)),
        Err(Error::Truncated { .. })
    ));
    // Output buffers too small say what they needed.
    let write = Request::Write {
        id: 1,
        handle: b"h",
        offset: 0,
        data: &[0; 100],
    };
    assert_eq!(
        write.emit(&mut [0u8; 50]),
        Err(Error::BufferTooSmall {
            needed: write.buffer_len(),
            available: 50
        })
    );
    assert_eq!(
        write.emit_head(&mut [0u8; 10]),
        Err(Error::BufferTooSmall {
            needed: write.head_len(),
            available: 10
        })
    );
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

#[derive(Clone, Debug)]
struct AttrsSeed {
    size: Option<u64>,
    uid_gid: Option<(u32, u32)>,
    permissions: Option<u32>,
    times: Option<(u32, u32)>,
    extended: Option<Vec<(Vec<u8>, Vec<u8>)>>,
}

fn attrs_seed() -> impl Strategy<Value = AttrsSeed> {
    (
        any::<Option<u64>>(),
        any::<Option<(u32, u32)>>(),
        any::<Option<u32>>(),
        any::<Option<(u32, u32)>>(),
        proptest::option::of(proptest::collection::vec((bytes(8), bytes(8)), 0..3)),
    )
        .prop_map(|(size, uid_gid, permissions, times, extended)| AttrsSeed {
            size,
            uid_gid,
            permissions,
            times,
            extended,
        })
}

fn build_attrs<'a>(seed: &AttrsSeed, buf: &'a mut [u8]) -> Attrs<'a> {
    let extended = seed.extended.as_ref().map(|pairs| {
        let pairs: Vec<(&[u8], &[u8])> = pairs
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        Pairs::write(&pairs, buf).unwrap()
    });
    Attrs {
        size: seed.size,
        uid_gid: seed.uid_gid,
        permissions: seed.permissions,
        atime_mtime: seed.times,
        extended,
    }
}

proptest! {
    #[test]
    fn requests_round_trip(
        kind in 0u8..20, id: u32, a in bytes(40), b in bytes(300), offset: u64, len: u32,
        pflags: u32, seed in attrs_seed(),
    ) {
        let mut attr_buf = [0u8; 128];
        let attrs = build_attrs(&seed, &mut attr_buf);
        let mut pair_buf = [0u8; 400];
        let (a, b) = (a.as_slice(), b.as_slice());
        let request = match kind {
            0 => Request::Init { version: id, extensions: Pairs::write(&[(a, b)], &mut pair_buf).unwrap() },
            1 => Request::Open { id, filename: a, pflags: OpenFlags(pflags), attrs },
            2 => Request::Close { id, handle: a },
            3 => Request::Read { id, handle: a, offset, len },
            4 => Request::Write { id, handle: a, offset, data: b },
            5 => Request::Lstat { id, path: a },
            6 => Request::Fstat { id, handle: a },
            7 => Request::Setstat { id, path: a, attrs },
            8 => Request::Fsetstat { id, handle: a, attrs },
            9 => Request::Opendir { id, path: a },
            10 => Request::Readdir { id, handle: a },
            11 => Request::Remove { id, filename: a },
            12 => Request::Mkdir { id, path: a, attrs },
            13 => Request::Rmdir { id, path: a },
            14 => Request::Realpath { id, path: a },
            15 => Request::Stat { id, path: a },
            16 => Request::Rename { id, oldpath: a, newpath: b },
            17 => Request::Readlink { id, path: a },
            18 => Request::Symlink { id, linkpath: a, targetpath: b },
            _ => Request::Extended { id, request: a, data: b },
        };
        let wire = request.to_vec().unwrap();
        prop_assert_eq!(wire.len(), request.buffer_len());
        prop_assert_eq!(Request::parse(frame(&wire)), Ok(request));
        // Head + bulk is the same bytes as the whole encoding.
        let mut head = [0u8; 512];
        let n = request.emit_head(&mut head).unwrap();
        prop_assert_eq!([&head[..n], request.bulk()].concat(), wire);
    }

    #[test]
    fn responses_round_trip(
        kind in 0u8..7, id: u32, a in bytes(40), b in bytes(300), code: u32,
        seed in attrs_seed(), names in proptest::collection::vec((bytes(10), bytes(20)), 0..4),
    ) {
        let mut attr_buf = [0u8; 128];
        let attrs = build_attrs(&seed, &mut attr_buf);
        let mut pair_buf = [0u8; 400];
        let mut name_buf = [0u8; 1024];
        let (a, b) = (a.as_slice(), b.as_slice());
        let entries: Vec<NameEntry<'_>> = names
            .iter()
            .map(|(f, l)| NameEntry { filename: f, longname: l, attrs })
            .collect();
        let response = match kind {
            0 => Response::Version { version: id, extensions: Pairs::write(&[(a, b)], &mut pair_buf).unwrap() },
            1 => Response::Status { id, code: StatusCode(code), message: a, language: b },
            2 => Response::Handle { id, handle: a },
            3 => Response::Data { id, data: b },
            4 => Response::Name { id, names: Names::write(&entries, &mut name_buf).unwrap() },
            5 => Response::Attrs { id, attrs },
            _ => Response::ExtendedReply { id, data: b },
        };
        let wire = response.to_vec().unwrap();
        prop_assert_eq!(Response::parse(frame(&wire)), Ok(response));
        if let Response::Name { names, .. } = response {
            prop_assert_eq!(names.iter().collect::<Vec<_>>(), entries);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(ty: u8, id: u32, body in bytes(200)) {
        let frame = Frame { ty, id, body: &body };
        if let Ok(request) = Request::parse(frame) {
            // Whatever decodes re-encodes to the same bytes.
            let wire = request.to_vec().unwrap();
            prop_assert_eq!(&wire[9..], &body[..]);
        }
        if let Ok(response) = Response::parse(frame) {
            if let Response::Name { names, .. } = response {
                let _ = names.iter().count();
            }
            // STATUS without message/language re-encodes longer; everything else is exact.
            let wire = response.to_vec().unwrap();
            prop_assert!(wire[9..].starts_with(&body));
        }
        let _ = Attrs::parse(&body);
        let _ = Limits::parse(&body);
        let _ = Pairs::from_wire(&body).map(|p| p.iter().count());
    }
}
