//! # switchyard
//!
//! The `std` side of switchyard, a transport-routing data plane for SHMEM-style
//! one-sided communication. The allocation-free data path (topology rows, route
//! selection, wire format, rings) lives in the `no_std` crate
//! [`switchyard_core`]; this crate holds what needs the operating system, and the
//! `switchyard` command.
//!
//! ## What exists now
//!
//! * [`bootstrap`]: rank, size and job id from the launcher, Open MPI, Slurm or
//!   PMI variables, and the rendezvous where every PE posts its [`bootstrap::Card`]
//!   and gets everyone's (an allgather), then barriers; every wait bounded.
//! * [`hostlist`]: Slurm-style hostlist expansion (`node[01-04]`, `n[1,3,5-7]`),
//!   bounded so hostile input cannot exhaust memory.
//! * [`topo`]: cluster topology files (Slurm `topology.conf` or TOML) parsed into a
//!   [`topo::ClusterSpec`], which gives every PE its
//!   [`Locality`](switchyard_core::class::Locality) and every pair of PEs its
//!   [`PathClass`](switchyard_core::class::PathClass).
//! * [`config`]: run-time configuration from built-in defaults, a named
//!   template (`trading`, `storage`, `ai`), a TOML file and `SWITCHYARD_*`
//!   variables, each value with its source; errors name key, value and what was
//!   expected.
//! * [`cli`]: the `switchyard` command. `switchyard topo [FILE]` prints the class
//!   matrix of a job, `--as PE` that PE's transport for each peer and message
//!   size (through the real [`switchyard_core::route::Selector`]), and what the
//!   topology costs in memory; `--json` for machines.
//! * [`launch`]: the `switchyard run` launcher as a library: starts N PEs on this
//!   machine with the environment contract (`SWITCHYARD_RANK`, `SWITCHYARD_ROOT`,
//!   ...), pins them, tags their output, fails fast, forwards signals and removes
//!   the job's shared-memory objects afterwards.
//!
//! * [`context`]: the Rust API of a PE: symmetric allocation, put/get,
//!   atomics, fence/quiet, waits and barriers, routed per message over shared
//!   memory (same node) or TCP rails (`switchyard_socket`), with failover on
//!   link events, a progress thread for TCP peers, and the executable's global
//!   variables made symmetric on request (for the C API in `shim-std/capi`).
//! * [`sim`]: simulated clusters in network namespaces (`switchyard sim`).
//! * [`perf`]: `switchyard perf`, benchmarks beside same-run baselines.
//!
//! ## What comes later
//!
//! Contexts shared by several threads of one PE (today one thread at a time
//! uses a `Context`), metrics export.
//!
//! ## Example
//!
//! ```
//! use switchyard::topo::{Format, parse_topology};
//! use switchyard_core::class::PathClass;
//!
//! let spec = parse_topology(
//!     "SwitchName=leaf0 Nodes=node[01-02]\n\
//!      SwitchName=leaf1 Nodes=node[03-04]\n\
//!      SwitchName=spine Switches=leaf[0-1]\n",
//!     Format::Auto,
//! )?;
//! let pes_per_node = 2;
//! assert_eq!(spec.localities(pes_per_node)?.len(), 8);
//! assert_eq!(spec.class_of(pes_per_node, 0, 1), PathClass::Shm);
//! assert_eq!(spec.class_of(pes_per_node, 0, 2), PathClass::Near);
//! assert_eq!(spec.class_of(pes_per_node, 0, 4), PathClass::Routed);
//! # Ok::<(), switchyard::topo::TopoFileError>(())
//! ```
//!
//! MSRV: 1.89 (the workspace's `rust-version`).
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod bootstrap;
pub mod cli;
pub mod config;
pub mod context;
pub mod hostlist;
pub mod launch;
pub mod perf;
pub mod sim;
mod sys;
#[cfg(test)]
mod test_alloc;
pub mod topo;
