//! `volley-bench`, the binary behind `cargo xtask bench`: runs one suite, prints its table,
//! writes its results as JSON and Markdown. Release builds only; ratios over absolute
//! figures (the machines are shared and noisy); several rounds, medians.
//!
//! Every allocation is counted here, so suites can report allocations per operation.
//! The counters are shared atomics, which cost most where threads allocate most: the
//! suites that compare transports by speed alone (`matrix`, `channel`) and the rpc
//! suite's speed tables run under `volley-bench-plain`, the same code with the system
//! allocator as it is; the rpc suite asks this binary for its allocations table
//! (`volley-bench rpc-allocations`).

use std::process::ExitCode;

#[global_allocator]
static GLOBAL: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// Allocations and bytes allocated so far, process-wide.
fn alloc_counts() -> (u64, u64) {
    let stats = GLOBAL.stats();
    (stats.allocations as u64, stats.bytes_allocated as u64)
}

fn main() -> ExitCode {
    volley_benches::harness::count_allocations_with(alloc_counts);
    volley_benches::cli::main()
}
