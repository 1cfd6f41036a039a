//! The `shmemx` stats extensions: `shmemx_stats_print`, and the summary
//! `shmem_finalize` prints when `SWITCHYARD_STATS_PRINT` is set. Both print
//! this PE's stats segment ([`switchyard::statseg`]) as
//! [`summary`](switchyard::statseg::summary) writes it (its first line names
//! the PE and the job), to stderr in one write; nothing when the job runs
//! with `stats = off`.

use std::io::Write as _;

use switchyard::context::Context;

use crate::state;

/// The variable that makes `shmem_finalize` print the summary.
pub const PRINT_VAR: &str = "SWITCHYARD_STATS_PRINT";

/// Writes `ctx`'s summary to stderr in one write (lines of PEs do not mix).
pub(crate) fn print(ctx: &mut Context) {
    let Some(text) = ctx.stats_summary() else {
        return;
    };
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// Whether `SWITCHYARD_STATS_PRINT` asks for the summary at finalize
/// (anything but empty, `0`, `no`, `off`, `false`).
pub(crate) fn print_at_finalize() -> bool {
    std::env::var(PRINT_VAR).is_ok_and(|v| {
        !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "0" | "no" | "off" | "false"
        )
    })
}

/// `shmemx_stats_print`: prints this PE's counters and latency percentiles
/// to stderr (a switchyard extension).
#[unsafe(no_mangle)]
pub extern "C" fn shmemx_stats_print() {
    state::with("shmemx_stats_print", print);
}
