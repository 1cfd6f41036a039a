//! Ordering and the job-wide barrier: `shmem_fence`, `shmem_quiet`,
//! `shmem_barrier_all`.

use crate::state;

/// `shmem_fence`: orders this PE's earlier puts and non-fetching atomics to
/// each PE before its later ones.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_fence() {
    state::with("shmem_fence", |ctx| state::ok("shmem_fence", ctx.fence()));
}

/// `shmem_quiet`: waits until every earlier operation of this PE is complete
/// at its target.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_quiet() {
    state::with("shmem_quiet", |ctx| state::ok("shmem_quiet", ctx.quiet()));
}

/// `shmem_barrier_all`: a quiet, then waits until every PE called it.
#[unsafe(no_mangle)]
pub extern "C" fn shmem_barrier_all() {
    state::with("shmem_barrier_all", |ctx| {
        state::ok("shmem_barrier_all", ctx.barrier_all())
    });
}
