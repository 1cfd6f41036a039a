//! # switchyard-core
//!
//! The `no_std` heart of switchyard, a data plane for SHMEM-style one-sided
//! communication: everything a PE needs to choose a transport for each message in
//! O(1) and to move frames, with no allocation, lock or system call on the data
//! path.
//!
//! | module | what |
//! |---|---|
//! | [`class`] | path classes (`LOCAL`, `SHM`, `NEAR`, `ROUTED`, `UNREACHABLE`), their versioned encoding, transport ids, localities |
//! | [`topology`] | a PE's row: 2 bits of class per peer, health and load bits per (transport, peer), the versioned double buffer |
//! | [`route`] | the route policy and `select(dst, len, op) -> Route` |
//! | [`wire`] | the 64-byte frame header and its checked decoding |
//! | [`crc`] | CRC32C |
//! | [`ring`] | the SPSC ring (also across processes in shared memory) |
//! | [`shared_ring`] | a ring in a shared mapping behind a checked header (`create`, `attach`) |
//! | [`credit`] | credit-based flow control |
//! | [`lock`] | one-word locks for state two threads take turns on: the application/progress-thread hand-off, a try-lock |
//! | [`trace`] | the route trace ring |
//! | [`transport`] | the transport contract every driver implements (non-blocking, clock-free) |
//!
//! The transport drivers (shared memory, TCP, RDMA verbs) live in their own
//! crates and depend on this one; nothing here names them.
//!
//! ## Invariants
//!
//! * Lookups, health flips, `select`, frame encode/decode, ring push/pop and trace
//!   records never allocate (a counting-allocator test proves it).
//! * Bytes from outside are decoded into typed errors, never a panic.
//! * Readers of the versioned topology never wait; a writer never overwrites a
//!   slot a reader is in (loom test in `tests/loom.rs`).
//! * The [`lock`]s exclude: the application and the helper thread never hold
//!   an [`lock::EntryLock`] together, each entry is counted and the helper
//!   leaves the count alone; two holders of a [`lock::TryLock`] never overlap
//!   (loom models in `tests/loom.rs`).
//!
//! ## Features
//!
//! * *(none, the default)*: `no_std`, no `alloc`.
//! * `alloc`: `topology::TopologyBox` and `trace::TraceRingBox` (a trace ring
//!   whose capacity is chosen at run time), owned storage allocated once at
//!   set-up.
//! * `std`: `alloc` plus hardware CRC32C detected at run time.
//!
//! MSRV: 1.89 (the workspace's `rust-version`).
//!
//! ## Example
//!
//! ```
//! # #[cfg(feature = "alloc")] {
//! use switchyard_core::{
//!     class::{PathClass, TransportId},
//!     route::{Op, Policy, PolicyConfig, Selector, TransportRoles},
//!     topology::{Shape, Topology, TopologyBox},
//! };
//!
//! let (shm, rdma, tcp) = (TransportId::new(0).unwrap(), TransportId::new(1).unwrap(), TransportId::new(2).unwrap());
//! let shape = Shape { me: 0, n_pes: 4, n_transports: 3, load_hints: true };
//! let store = TopologyBox::new(shape, 1);
//! // PEs 0 and 1 share a node, 2 is behind the same switch, 3 behind another one.
//! let topo = Topology::new(store.mem(), shape, |pe| {
//!     [PathClass::Local, PathClass::Shm, PathClass::Near, PathClass::Routed][pe as usize]
//! })?;
//! for pe in 0..4 {
//!     for t in [shm, rdma, tcp] {
//!         topo.set_health(t, pe, true);
//!     }
//! }
//! let roles = TransportRoles { shm: Some(shm), rdma: Some(rdma), stream: [Some(tcp), None, None, None] };
//! let policy = Policy::new(PolicyConfig { roles, ..PolicyConfig::default() });
//! let mut sel = Selector::new(&topo, policy)?;
//!
//! assert_eq!(sel.select(2, 64, Op::Put)?.transport, rdma);
//! topo.set_health(rdma, 2, false); // the verbs link to PE 2 failed
//! assert_eq!(sel.select(2, 64, Op::Put)?.transport, tcp); // at once, no version swap
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![no_std]
#![deny(unsafe_code)]
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(
    clippy::std_instead_of_core,
    clippy::std_instead_of_alloc,
    clippy::alloc_instead_of_core,
    clippy::undocumented_unsafe_blocks,
    clippy::unnecessary_safety_comment
)]
// Unit tests use std freely.
#![cfg_attr(test, allow(clippy::std_instead_of_alloc, clippy::std_instead_of_core))]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

#[cfg(all(loom, not(feature = "std")))]
compile_error!("loom models need std: build with --features std under --cfg loom");

pub mod class;
pub mod crc;
pub mod credit;
pub mod lock;
pub mod pad;
pub mod ring;
pub mod route;
pub mod shared_ring;
pub mod submit;
pub mod sync;
pub mod topology;
pub mod trace;
pub mod transport;
pub mod wire;
