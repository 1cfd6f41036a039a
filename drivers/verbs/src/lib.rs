//! # switchyard-verbs: the RDMA verbs transport of switchyard
//!
//! Placeholder while the modules land.
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::unnecessary_safety_comment)]

pub mod atomic_plan;
pub mod card;
pub mod params;
pub mod probe;
pub mod qp_plan;
pub mod seq;
pub mod signal;

/// The path-class encoding this driver speaks.
pub use switchyard_core::class::CLASS_ENCODING_VERSION;
use switchyard_core::transport::ProbeReport;

/// Whether this driver is implemented in this build (it is; it needs a
/// device to run).
pub const IMPLEMENTED: bool = true;

/// What this machine offers for RDMA, for `switchyard info` ([`probe::probe`]
/// has the typed result).
pub fn probe() -> ProbeReport {
    probe::probe().report()
}
