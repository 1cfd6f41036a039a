//! # switchyard-shmem
//!
//! The OpenSHMEM 1.5 C API over switchyard's [`Context`](switchyard::context::Context):
//! `libswitchyard_shmem.so` / `.a` with `include/shmem.h`, so C programs written
//! for Sandia OpenSHMEM or OSHMEM build with `switchyard cc` and run under
//! `switchyard run` unchanged.
//!
//! The C glue is thin: every entry point translates C pointers into symmetric
//! offsets ([`state`]), checks its arguments (a bad one ends the job with a
//! message naming the call and the argument) and calls the Rust context.
//!
//! Threading: one thread at a time may be inside the library
//! (`SHMEM_THREAD_SERIALIZED`); two at once is detected and reported.

// The whole crate is an FFI boundary: raw pointers from C callers.
#![allow(unsafe_code)]

pub mod amo;
mod cbuf;
pub mod coll;
pub mod globals;
pub mod lock;
pub mod mem;
pub mod order;
pub mod rma;
pub mod setup;
pub mod signal;
pub mod state;
pub mod sync;
pub mod team;
