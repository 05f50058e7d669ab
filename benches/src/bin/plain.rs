//! `volley-bench-plain`: `volley-bench` without the counting allocator, for the suites
//! that compare transports by speed alone (`matrix`, `channel`) and for `rpc`: the
//! counters are shared atomics, and a path that allocates more pays more for them than
//! it would in use. `rpc` gets its allocations table from `volley-bench` beside this
//! binary; other suites that report allocations print none here.

use std::process::ExitCode;

#[path = "../charts/mod.rs"]
mod charts;
#[path = "../cli.rs"]
mod cli;
#[path = "../compare.rs"]
mod compare;
#[path = "../harness.rs"]
mod harness;
#[path = "../kit.rs"]
mod kit;
#[path = "../suites/mod.rs"]
mod suites;

/// No counting allocator here: no counts.
pub(crate) fn alloc_counts() -> Option<(u64, u64)> {
    None
}

fn main() -> ExitCode {
    cli::main()
}
