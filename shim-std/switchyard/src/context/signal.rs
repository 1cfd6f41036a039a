//! Put with signal: data, then a signal word updated on the same PE, so a
//! PE that sees the signal sees the data ([`Context::put_signal`]; the C
//! API's `shmem_put_signal`).

use super::{Context, Plain, Result, Sym};

/// How [`Context::put_signal`] updates the signal word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalOp {
    /// The word becomes the value (`SHMEM_SIGNAL_SET`).
    Set,
    /// The value is added to the word (`SHMEM_SIGNAL_ADD`).
    Add,
}

/// The signal of a [`Context::put_signal`]: element `at` of the 64-bit
/// symmetric array `sym` on the target PE, updated with `value` as `op`
/// says.
#[derive(Debug, Clone, Copy)]
pub struct Signal<'a> {
    /// The signal words.
    pub sym: &'a Sym<u64>,
    /// The element of `sym`.
    pub at: usize,
    /// The value set or added.
    pub value: u64,
    /// Set or add.
    pub op: SignalOp,
}

impl<'a> Signal<'a> {
    /// Sets element `at` of `sym` to `value`.
    pub fn set(sym: &'a Sym<u64>, at: usize, value: u64) -> Self {
        Signal {
            sym,
            at,
            value,
            op: SignalOp::Set,
        }
    }

    /// Adds `value` to element `at` of `sym`.
    pub fn add(sym: &'a Sym<u64>, at: usize, value: u64) -> Self {
        Signal {
            sym,
            at,
            value,
            op: SignalOp::Add,
        }
    }
}

impl Context {
    /// Puts `src` to elements `at..` of `dst` on PE `pe`, then updates the
    /// signal word there: a fence orders the data before the signal (an
    /// atomic set or add), so a PE that sees the signal (e.g. with
    /// [`Context::wait_until`] on it) sees the data. Both ranges are checked
    /// before anything is written.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`](super::Error::OutOfBounds),
    /// [`Error::ForeignHandle`](super::Error::ForeignHandle), and the errors
    /// of [`Context::put`] and the atomics.
    pub fn put_signal<T: Plain>(
        &mut self,
        dst: &Sym<T>,
        at: usize,
        src: &[T],
        signal: Signal<'_>,
        pe: u32,
    ) -> Result<()> {
        self.check(dst, at, src.len())?;
        self.check(signal.sym, signal.at, 1)?;
        self.put(dst, at, src, pe)?;
        self.fence()?;
        match signal.op {
            SignalOp::Set => self.set(signal.sym, signal.at, signal.value, pe),
            SignalOp::Add => self.add(signal.sym, signal.at, signal.value, pe),
        }
    }
}
