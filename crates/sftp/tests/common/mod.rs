//! What the SFTP tests share.

#![allow(dead_code, unreachable_pub)]

#[allow(unused_imports)]
pub use volley_testkit::{listing, mkfifo};

#[allow(unused_imports)]
pub use volley_testkit::pattern;
