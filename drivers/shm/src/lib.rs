//! # switchyard-shm: the POSIX shared-memory transport of switchyard
//!
//! **Not implemented yet.** This crate reserves its place in the workspace (it
//! depends on `switchyard-core` only, as every driver must); the driver itself
//! arrives with its own issue. Nothing here can move data today.
#![no_std]
#![deny(missing_docs)]
#![deny(unsafe_code)]

/// Whether this driver is implemented in this build. Always `false` for now, so
/// that callers can report the transport as unavailable with a reason.
pub const IMPLEMENTED: bool = false;

/// Why the transport is unavailable in this build.
pub const UNAVAILABLE_REASON: &str = "the POSIX shared-memory transport is not implemented yet";

/// The path-class encoding this driver speaks (re-exported for its future cards).
pub use switchyard_core::class::CLASS_ENCODING_VERSION;
