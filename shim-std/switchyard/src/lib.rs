//! # switchyard
//!
//! The library a PE links: a [`context::Context`] per PE with symmetric
//! allocation, put/get, atomics, waits, barriers, `fence` and `quiet`, each
//! operation routed per message over shared memory, RDMA verbs or TCP by the
//! `no_std` core's route selector ([`switchyard_core::route::Selector`]), with
//! failover when a link or transport fails.
//!
//! ## The data path
//!
//! An operation such as [`Context::put`](context::Context::put) goes:
//!
//! 1. **Context op**: the range is checked against the symmetric handle and
//!    becomes a heap offset and a length;
//! 2. **select**: the core's route selector
//!    ([`Selector::select`](switchyard_core::route::Selector::select)) picks
//!    a transport for (PE, length, kind of operation) from this PE's
//!    topology row and the health bit of each transport toward that PE;
//! 3. **driver**: the chosen driver (shared memory, a TCP rail or RDMA verbs)
//!    runs it through the core's
//!    [`Transport`](switchyard_core::transport::Transport) contract, and the
//!    decision is recorded in the route trace ring
//!    ([`Context::trace`](context::Context::trace));
//! 4. **wire**: a copy into the peer's mapped heap, TCP frames in the core's
//!    [`wire`](switchyard_core::wire) format, or RDMA work requests.
//!
//! A driver that fails toward a peer clears its health bit, and the operation
//! selects again (failover is the next select). The [`context`] module docs
//! follow each step into its source file.
//!
//! The layers under it (see `docs/ARCHITECTURE.md` in the repository):
//!
//! * [`switchyard_core`] (`no_std`): topology rows, route selection, the wire
//!   format, rings, the transport contract;
//! * the drivers [`switchyard_shm`], [`switchyard_socket`] and
//!   `switchyard_verbs` (with the `verbs` feature), each implementing the
//!   core's [`Transport`](switchyard_core::transport::Transport);
//! * [`switchyard_bootstrap`]: rank, size, job id and the card exchange.
//!
//! The `switchyard` command (launcher, `info`, `perf`, `topo`, `sim`, `cc`)
//! lives in the `switchyard-cli` crate, topology files in `switchyard-topo`,
//! the launcher and simulated clusters in `switchyard-launch`: this crate holds
//! no command-line code.
//!
//! ## Modules
//!
//! * [`context`]: the Rust API of a PE, its heap, its routing glue, the
//!   progress thread for TCP and verbs peers, and the executable's global
//!   variables made symmetric on request (for the C API in `shim-std/capi`).
//! * [`config`]: run-time configuration from built-in defaults, a named
//!   template (`trading`, `storage`, `ai`), a TOML file and `SWITCHYARD_*`
//!   variables, each value with its source; errors name key, value and what
//!   was expected. [`Context::with_config`](context::Context::with_config)
//!   takes one; [`Context::from_env`](context::Context::from_env) loads it.
//! * [`sys`]: thread pinning and the trace clock.
//!
//! ## Features
//!
//! * `verbs` (default): the RDMA verbs transport, the `switchyard-verbs`
//!   driver over the `ibverbs` crate. Building it runs bindgen and cmake
//!   (rdma-core), and the library links `libibverbs`, `libnl-3` and
//!   `libnl-route-3`. Without it (`default-features = false`; here `cargo
//!   build -p switchyard --no-default-features`) nothing of that is built or
//!   linked and a context routes over shared memory and TCP: NEAR and ROUTED
//!   peers take TCP exactly as on a machine without RDMA. The configuration
//!   still accepts the `verbs*` keys (one file serves both builds), and
//!   [`Context::verbs_status`](context::Context::verbs_status) says why verbs
//!   is not used ([`NO_VERBS`](context::verbs::NO_VERBS)). Only with the
//!   feature: the verbs driver's helpers in [`context::verbs`]
//!   (`nic_atomics`, the control `Record`, the cards) and
//!   `context::Error::Verbs`.
//!
//! ## Example
//!
//! Run as one PE (no launcher), or under `switchyard run -n N`:
//!
//! ```
//! use switchyard::context::{Cmp, Context};
//!
//! let mut ctx = Context::from_env()?;
//! let (me, n) = (ctx.my_pe(), ctx.n_pes());
//! let counter = ctx.alloc::<u64>(1)?; // collective
//! ctx.fetch_add(&counter, 0, 1, 0)?; // everyone adds 1 on PE 0
//! ctx.barrier_all()?;
//! if me == 0 {
//!     assert_eq!(ctx.wait_until(&counter, 0, Cmp::Eq, u64::from(n))?, u64::from(n));
//! }
//! # Ok::<(), switchyard::context::Error>(())
//! ```
//!
//! ## Logs
//!
//! The library never writes to stderr itself: what it has to say (a
//! fallback it took, a peer lost, where a route trace was dumped) is a
//! [`tracing`](https://docs.rs/tracing) event at `warn` (or `info`, `debug`)
//! with the fields `pe`, `peer`, `transport`, `op` where they apply, under
//! the target `switchyard`. An application that embeds switchyard sees them
//! in its own subscriber, or nowhere without one; the `switchyard` CLI and
//! the C API install the `SWITCHYARD_LOG` subscriber (feature `subscriber`,
//! `logging`).
//!
//! MSRV: 1.89 (the workspace's `rust-version`).
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod channel;
pub mod config;
pub mod context;
pub mod cpus;
#[cfg(feature = "subscriber")]
pub mod logging;
pub mod statseg;
pub mod sys;
// The counting allocator of the no-allocation unit tests (the verbs glue's,
// the load bits').
#[cfg(test)]
mod test_alloc;
