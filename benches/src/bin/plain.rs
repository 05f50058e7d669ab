//! `volley-bench-plain`: `volley-bench` without the counting allocator, for the suites
//! that compare transports by speed alone (`matrix`, `channel`) and for `rpc`: the
//! counters are shared atomics, and a path that allocates more pays more for them than
//! it would in use. `rpc` gets its allocations table from `volley-bench` beside this
//! binary; other suites that report allocations print none here.

use std::process::ExitCode;

fn main() -> ExitCode {
    volley_benches::cli::main()
}
