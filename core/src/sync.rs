//! The one place where `core` takes its atomics and cells from.
//!
//! Normally these are `core::sync::atomic` and a thin `UnsafeCell` wrapper;
//! under `--cfg loom` they are loom's model-checked versions, so the loom
//! tests in `tests/loom.rs` see every atomic access of the versioned
//! topology and the rings. `.clippy.toml` bans the raw atomic types outside
//! this module (docs/ARCHITECTURE.md, "Code rules"; after crossbeam's
//! `mod primitive`).

/// Atomic types and fences (`core::sync::atomic`, or loom's under `cfg(loom)`).
pub mod atomic {
    /// 64-bit atomics, where the target has them (drivers' atomics on mapped
    /// heaps; thumbv7em has none).
    #[cfg(all(not(loom), target_has_atomic = "64"))]
    pub use core::sync::atomic::AtomicU64;
    #[cfg(not(loom))]
    pub use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize, Ordering, fence};

    #[cfg(all(loom, target_has_atomic = "64"))]
    pub use loom::sync::atomic::AtomicU64;
    #[cfg(loom)]
    pub use loom::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize, Ordering, fence};
}

/// Spin-loop hint (loom yields to the scheduler instead).
#[inline]
pub fn spin_hint() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// An `UnsafeCell` with loom's `with`/`with_mut` access API.
#[cfg(not(loom))]
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    #[inline]
    pub(crate) const fn new(v: T) -> Self {
        Self(core::cell::UnsafeCell::new(v))
    }
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;
