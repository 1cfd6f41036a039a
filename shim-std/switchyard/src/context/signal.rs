//! Put with signal: data, then a signal word updated on the same PE, so a
//! PE that sees the signal sees the data ([`Context::put_signal`]; the C
//! API's `shmem_put_signal`).

use switchyard_core::{
    route::{Op, Route},
    transport::{AtomicOp, AtomicWidth, Transport},
    wire::{AtomicKind, FrameOp, FrameSignal},
};
use zerocopy::IntoBytes;

use super::{
    Context, Plain, Result, Sym,
    drv::{Drv, DrvError},
    rail_of,
    route::Selected,
};

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
    /// signal word there, so that a PE that sees the signal (e.g. with
    /// [`Context::wait_until`] on it) sees the data (OpenSHMEM's
    /// `put_signal`: the data is delivered before the signal; earlier puts
    /// are ordered before it only by a [`Context::fence`]). Both ranges are
    /// checked before anything is written. Non-blocking like
    /// [`Context::put`]: complete at `pe` after [`Context::quiet`].
    ///
    /// Over TCP it is **one frame** (`PutSignal`: the data and the signal,
    /// one sequence number, applied once, replayed after a cut like a put):
    /// the target writes the data, then sets or adds the signal with
    /// Release ordering. The frame must fit: the data and 16 bytes within
    /// the rail's largest frame, in one placement block, and the signal word
    /// on the data's connection (always with one data connection); otherwise,
    /// and on shared memory and verbs, it is a put, a fence and an atomic set
    /// or add.
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
        let off = self.check(dst, at, src.len())?;
        let sig_off = self.check(signal.sym, signal.at, 1)?;
        let bytes = src.as_bytes();
        let len = bytes.len() as u64;
        // One selection for the put, as `put` makes it: the shm leg stores
        // at once; a TCP rail takes the one-frame path.
        let sel = self.select(pe, len, Op::Put, FrameOp::Put);
        match &sel {
            Ok(route) if self.leg_open(pe, route) && self.shm.put_leg(pe, off, bytes) => {
                self.leg_done(pe, len, FrameOp::Put, route);
            }
            Ok(route) if rail_of(route.transport).is_some() => {
                // A small one under a `dedicated` thread: one entry of the
                // context's submission ring (`submit.rs`).
                let sig = frame_signal(sig_off, &signal);
                if self.ring_put_signal(pe, off, bytes, sig, route) {
                    return Ok(());
                }
                if self.put_signal_frame(Some(sel), off, bytes, sig, pe)? {
                    return Ok(());
                }
            }
            _ => self.put_slow(sel, pe, off, bytes)?,
        }
        self.fence()?;
        match signal.op {
            SignalOp::Set => self.set(signal.sym, signal.at, signal.value, pe),
            SignalOp::Add => self.add(signal.sym, signal.at, signal.value, pe),
        }
    }

    /// A `put_signal` taken back from a stalled submission ring
    /// (`submit.rs`), re-issued through the routed loop: one frame where it
    /// fits, otherwise the put, a fence and the signal word's atomic.
    #[cold]
    pub(super) fn put_signal_redo(
        &mut self,
        pe: u32,
        off: u64,
        bytes: &[u8],
        sig: FrameSignal,
    ) -> Result<()> {
        if self.put_signal_frame(None, off, bytes, sig, pe)? {
            return Ok(());
        }
        self.fence()?;
        let op = AtomicOp {
            kind: sig.kind,
            width: AtomicWidth::W64,
            operand: sig.value,
            compare: sig.value,
            // The signal's old value is not wanted: complete by quiet.
            fetch: false,
        };
        let sel = self.select(pe, 8, Op::Atomic, FrameOp::Atomic);
        self.atomic_slow(sel, pe, sig.offset, op).map(|_| ())
    }

    /// The put of a `put_signal` routed to a TCP rail (selection `sel`): one
    /// `PutSignal` frame when it fits (`true`: signal and all). Otherwise,
    /// or on whatever transport a failover selects instead, a plain put
    /// (`false`: the caller fences and signals).
    #[inline(never)]
    fn put_signal_frame(
        &mut self,
        sel: Option<Selected>,
        off: u64,
        bytes: &[u8],
        sig: FrameSignal,
        pe: u32,
    ) -> Result<bool> {
        let len = bytes.len() as u64;
        let run = &mut |d: &mut Drv<'_>, r: &Route| match d {
            Drv::Tcp(t) if t.put_signal_fits(off, len, sig.offset) => t
                .put_signal(pe, off, bytes, sig, r.context)
                .map(|()| true)
                .map_err(DrvError::Tcp),
            d => d.put(pe, off, bytes, r.context).map(|()| false),
        };
        self.routed_from(sel, pe, len, Op::Put, FrameOp::PutSignal, run)
            .map(|(one, _)| one)
    }
}

/// The frame's signal for `signal`, whose word is at heap offset `sig_off`.
#[inline]
fn frame_signal(sig_off: u64, signal: &Signal<'_>) -> FrameSignal {
    FrameSignal {
        offset: sig_off,
        value: signal.value,
        kind: match signal.op {
            SignalOp::Set => AtomicKind::Set,
            SignalOp::Add => AtomicKind::FetchAdd,
        },
    }
}
