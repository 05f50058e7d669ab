//! The benchmark suites, one module each.

pub(crate) mod channel;
pub(crate) mod codec;
pub(crate) mod machine;
pub(crate) mod matrix;
pub(crate) mod python;
pub mod rpc;
pub(crate) mod scp;
pub(crate) mod script;
pub(crate) mod sftp;
pub(crate) mod sftp_ssh;
pub(crate) mod wake;
