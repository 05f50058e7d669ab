//! What an rpc peer reads at and right after the hello: the hello with its appended
//! fields and token, the method table, and a call's metadata block. Whatever parses must
//! describe exactly the bytes given and encode back to them; nothing may panic or read
//! past the end.
#![no_main]

use libfuzzer_sys::fuzz_target;
use volley_proto::rpc::Hello;
use volley_proto::rpc::metadata::{self, Metadata};
use volley_proto::rpc::methods::{MethodEntry, MethodTable};

fuzz_target!(|data: &[u8]| {
    if let Ok(hello) = Hello::parse(data) {
        let bytes = hello.emit();
        assert_eq!(bytes[..24], data[..24]);
        if data.len() >= 32 {
            assert_eq!(bytes[24..32], data[24..32]);
        }
        if let Ok(Some(token)) = Hello::token(data) {
            let mut out = vec![0u8; bytes.len() + 2 + token.len()];
            let n = hello.emit_with_token(token, &mut out).expect("a token read re-encodes");
            assert_eq!(Hello::token(&out[..n]).unwrap(), Some(token));
        }
    }
    if let Ok(table) = MethodTable::parse(data) {
        let entries: Vec<MethodEntry> = table.iter().collect();
        assert_eq!(entries.len(), table.len());
        let mut out = vec![0u8; MethodTable::buffer_len(table.service(), entries.len())];
        let n = MethodTable::emit(table.service(), &entries, &mut out).expect("re-encodes");
        assert_eq!(out[..n], data[..]);
    }
    if let Ok((block, rest)) = Metadata::split(data) {
        let pairs: Vec<(&[u8], &[u8])> = block.iter().map(|(k, v)| (k.as_bytes(), v)).collect();
        let mut out = vec![0u8; data.len()];
        let n = metadata::emit(pairs.iter().copied(), &mut out).expect("re-encodes");
        assert_eq!(out[..n], data[..data.len() - rest.len()]);
    }
});
