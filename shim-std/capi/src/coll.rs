//! Collectives: barriers, broadcast, collect, fcollect, alltoall(s) and
//! reductions, on teams and in the active-set forms with `pSync`/`pWrk`.
//!
//! * [`link`]: the messaging primitive (links between ranks, counted
//!   messages) and the two ways of counting (team scratch, user `pSync`).
//! * [`algo`]: the algorithms, written once over a [`link::Group`], used by
//!   both the team and the active-set entry points.
//! * [`ops`]: the reduction operators per element type.
//! * [`api`]: the C entry points (generated per type by macros from the
//!   specification's type tables).

pub mod algo;
pub mod api;
pub mod link;
pub mod ops;
