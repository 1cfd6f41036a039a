//! The per-context submission rings of a `dedicated` progress engine.
//!
//! With `progress = dedicated`, a small put (at most [`INLINE`] bytes) that a
//! context routes to a TCP rail does not take the driver: the application
//! copies it into its own single-producer ring (the core's [`SubmitRing`],
//! one per context: a `Ring` and two state words saying who consumes it
//! and whether it stalled) and returns; the progress thread, which holds the driver in
//! its bursts, takes the entries of every registered ring and hands them to
//! the driver (`SocketDriver::put` on the rail the context chose). The
//! application's cost is the route decision and one push: no lock, no
//! syscall, no allocation.
//!
//! A `put_signal` of at most [`SIGNAL_INLINE`] bytes whose data and signal
//! word fit one frame ([`switchyard_socket::SignalFit`]) is one entry too:
//! the payload, then the signal word's offset and value, its operation (set
//! or add) in [`Entry::op`]; the thread issues it as one `PutSignal` frame
//! (`Rail::put_signal`), in order with the ring's other entries, so it
//! keeps the ordering the direct path gives it. Taken back after a stall,
//! it is re-issued as the direct path issues it (one frame where it fits,
//! otherwise put, fence, signal atomic).
//!
//! A non-fetching atomic (`add`, `bitwise`, `set`: complete by quiet, no
//! reply awaited) routed to a TCP rail is one entry of one slot too: its
//! kind in [`Entry::op`] (above [`ATOMIC`]), its width in [`Entry::len`],
//! its operand in the data; the thread issues it with `Rail::atomic_start`
//! (a non-fetching op keeps no ticket), in order with the ring's other
//! entries. Taken back after a stall, it is re-issued through the routed
//! loop as the direct path issues it.
//!
//! # Guarantees, by construction
//!
//! * **Nothing overtakes a ring entry.** Every other use of the driver by the
//!   context ([`Tcp::get`](super::progress::Tcp::get): gets, atomics, larger
//!   puts, fence, quiet, waits, finalize) first waits until the progress
//!   thread has taken everything the context pushed (the ring's head, the
//!   consumed counter, caught up with its tail). A context never pushes while
//!   it holds the driver.
//! * **Taken means issued.** The thread pops an entry only after the driver
//!   accepted it. A full send window (`WouldBlock`) leaves it at the head, to
//!   be retried at the next burst; the thread makes progress meanwhile.
//! * **Errors stop the ring.** Any other error leaves the entry at the head,
//!   records the error and marks the ring *stalled*: the thread takes nothing
//!   more from it. The context, at its next routed operation, fence or quiet
//!   ([`Context::ring_sync`]), takes the entry back with the error and runs
//!   it through the routed path's error handling (`on_error`: health bit,
//!   failover; an entry refused unsent by a down rail, `DrvError::not_issued`,
//!   is re-issued on another rail), then issues every later entry of the ring
//!   itself through the routed path, in order, and un-stalls the ring. So an
//!   entry is issued once, never lost, never doubled; an error the put would
//!   have returned is returned by that next operation (which is then not
//!   performed).
//! * **A full ring** makes the put take the existing path (which waits for
//!   the ring to drain first, as every other use of the driver does).
//! * **Every wait for the ring is bounded** by the op timeout: past it, a
//!   routed operation, fence or quiet fails with
//!   [`Error::Timeout`](super::Error::Timeout) naming the peer of the entry
//!   it waited on (the head), and is not performed; a driver use outside
//!   an operation ([`Tcp::get`](super::progress::Tcp::get) in a wait's
//!   progress step) stops waiting there, and its timeout is returned once,
//!   by the wait step or the next operation. The entries stay in the ring,
//!   taken when the thread runs again (a context dropped meanwhile issues
//!   them itself, under the driver lock).
//! * **No thread.** When the progress thread has stopped (`finalize`, the
//!   PE's own context dropped), a context waiting for its ring to drain
//!   takes the driver and drains the ring itself.
//!
//! # Load bits
//!
//! The context cannot read the driver's backlog after a push (`load_after`
//! does after a direct put), so the thread does: after each drain it reads
//! the backlog of the last issued entry's (rail, peer) against the
//! context's watermark (given at the ring's registration) and publishes the
//! pair, or none, as a hint in the ring's state word
//! ([`SubmitRing::set_hint`]; one store, only when it changed). The push
//! already reads that word (the stall bit); when the hint changed and
//! names a pair, the context sets that pair's load bit (`load_mark`, cold),
//! so route selection sees ring puts' load as a direct put's. A pair over
//! its watermark that is not the last of a drain is caught at a later
//! drain; the bits clear as any other (`load.rs`).
//!
//! # Counting
//!
//! A ring put is counted (`Stats::ops`, the stats segment's ops and bytes)
//! and traced when pushed. One taken back after a stall is re-issued
//! through the routed loop, which does not count it again (the handle is
//! `redoing`); its re-issue is traced, as a failover's is.

#![allow(unsafe_code)]

use std::sync::Arc;

use switchyard_core::{
    class::TransportId,
    ring::Producer,
    route::{ContextId, LoadWatermark, Op, Route},
    submit::{Issue, SubmitRing},
    transport::{AtomicOp, AtomicWidth, ErrorKind, Transport, TransportError},
    wire::{AtomicKind, FrameOp, FrameSignal},
};
use switchyard_socket::{Backlog, SocketDriver, SocketError};
use zerocopy::FromBytes;

use super::{Context, Result, drv::DrvError, order, progress::RingState, rail_of};

/// The longest put that goes through a submission ring, in bytes: what
/// fits in two slots beside the entry's header ([`Slot`]: 8 bytes in the
/// first, 32 in the second).
pub const INLINE: usize = 40;
/// The longest `put_signal` payload that goes through a submission ring,
/// in bytes: the entry's data holds the payload, then the signal word's
/// offset and value (8 bytes each).
pub const SIGNAL_INLINE: usize = INLINE - 16;
/// Slots per context's ring (16 KiB: 512 puts of at most 8 bytes, 256
/// longer ones).
pub(super) const DEPTH: usize = 512;
/// How many slots ahead a push prefetches its line for writing
/// ([`Producer::prefetch`]): 8 lines.
const PREFETCH: usize = 16;
/// The bytes of a put the first slot holds.
const FIRST: usize = 8;

/// One put or `put_signal`, as pushed: where it goes and its bytes (copied:
/// the source may be reused once the put returns); for a `put_signal`, the
/// signal word's offset and value follow the payload in `data`. In the ring
/// it takes one [`Slot`] or two ([`Entry::slots`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    /// Offset in the target's heap.
    pub(super) off: u64,
    /// The route decision's id ([`ContextId::seq`]; its PE is the ring's).
    pub(super) ctx_seq: u64,
    /// The target PE.
    pub(super) pe: u32,
    /// Bytes of `data` in use.
    pub(super) len: u8,
    /// The TCP rail the route chose.
    pub(super) rail: u8,
    /// The route's `retry_allowed`.
    pub(super) retry: u8,
    /// [`PUT`], [`SIGNAL_SET`], [`SIGNAL_ADD`], or [`ATOMIC`] plus the
    /// atomic's kind.
    pub(super) op: u8,
    /// The bytes.
    pub(super) data: [u8; INLINE],
}

/// A slot of a context's ring: half a cache line. The first slot of an
/// entry holds its header and the first [`FIRST`] bytes of its data: `off`,
/// `ctx_seq`, then `pe | len << 32 | rail << 40 | retry << 48 | op << 56`,
/// then the data (little-endian words); a second slot, for a put over
/// [`FIRST`] bytes or a `put_signal`, holds the rest of the data. So a put
/// of at most 8 bytes writes half a line, and the progress thread's core
/// gives up one line every two such puts.
#[derive(Debug, Clone, Copy, FromBytes)]
#[repr(C, align(32))]
pub(super) struct Slot([u64; 4]);

const _: () = assert!(core::mem::size_of::<Slot>() == 32);

/// Little-endian word `k` of `data`.
#[inline(always)]
fn word(data: &[u8; INLINE], k: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&data[k * 8..k * 8 + 8]);
    u64::from_le_bytes(b)
}

impl Slot {
    /// Slots the entry starting with this one takes (the ring's span
    /// function).
    fn span(&self) -> usize {
        let meta = self.0[2];
        let (len, op) = ((meta >> 32) as u8, (meta >> 56) as u8);
        if (op == PUT && usize::from(len) <= FIRST) || op & ATOMIC != 0 {
            1
        } else {
            2
        }
    }

    /// The target PE of the entry starting with this slot.
    fn pe(&self) -> u32 {
        self.0[2] as u32
    }
}

/// [`Entry::op`]: a put.
const PUT: u8 = 0;
/// [`Entry::op`]: a `put_signal` that sets the word.
const SIGNAL_SET: u8 = 1;
/// [`Entry::op`]: a `put_signal` that adds to the word.
const SIGNAL_ADD: u8 = 2;
/// [`Entry::op`]: a non-fetching atomic, of kind `op & 0x0F` (the
/// [`AtomicKind`] encoding), width [`Entry::len`] bytes, operand in the
/// first 8 bytes of the data. One slot.
const ATOMIC: u8 = 0x10;

impl Entry {
    /// An entry for `bytes` (at most [`INLINE`]).
    #[inline(always)]
    pub(super) fn new(
        pe: u32,
        off: u64,
        bytes: &[u8],
        rail: u8,
        retry: bool,
        ctx: ContextId,
    ) -> Entry {
        let mut data = [0u8; INLINE];
        data[..bytes.len()].copy_from_slice(bytes);
        Entry {
            off,
            ctx_seq: ctx.seq,
            pe,
            len: bytes.len() as u8,
            rail,
            retry: u8::from(retry),
            op: PUT,
            data,
        }
    }

    /// An entry for a `put_signal` of `bytes` (at most [`SIGNAL_INLINE`])
    /// with signal `sig` (set, or added for [`AtomicKind::FetchAdd`]).
    #[inline(always)]
    pub(super) fn signal(
        pe: u32,
        off: u64,
        bytes: &[u8],
        sig: FrameSignal,
        rail: u8,
        retry: bool,
        ctx: ContextId,
    ) -> Entry {
        let mut e = Entry::new(pe, off, bytes, rail, retry, ctx);
        e.data[SIGNAL_INLINE..SIGNAL_INLINE + 8].copy_from_slice(&sig.offset.to_le_bytes());
        e.data[SIGNAL_INLINE + 8..].copy_from_slice(&sig.value.to_le_bytes());
        e.op = if sig.kind == AtomicKind::FetchAdd {
            SIGNAL_ADD
        } else {
            SIGNAL_SET
        };
        e
    }

    /// An entry for the non-fetching atomic `op` (`op.is_fetching()` false;
    /// its `compare` is not kept: no non-fetching kind reads it).
    #[inline(always)]
    pub(super) fn atomic(
        pe: u32,
        off: u64,
        op: AtomicOp,
        rail: u8,
        retry: bool,
        ctx: ContextId,
    ) -> Entry {
        debug_assert!(!op.is_fetching());
        let mut e = Entry::new(pe, off, &op.operand.to_le_bytes(), rail, retry, ctx);
        e.len = op.width.bytes() as u8;
        e.op = ATOMIC | op.kind as u8;
        e
    }

    /// The atomic of an atomic entry; `None` for the others.
    #[inline]
    pub(super) fn atomic_of(&self) -> Option<AtomicOp> {
        if self.op & ATOMIC == 0 {
            return None;
        }
        Some(AtomicOp {
            kind: AtomicKind::from_u8(self.op & 0x0F)?,
            width: if self.len == 4 {
                AtomicWidth::W32
            } else {
                AtomicWidth::W64
            },
            operand: word(&self.data, 0),
            compare: 0,
            fetch: false,
        })
    }

    /// The bytes of the put.
    #[inline]
    pub(super) fn bytes(&self) -> &[u8] {
        let max = if self.op == PUT {
            INLINE
        } else {
            SIGNAL_INLINE
        };
        &self.data[..usize::from(self.len).min(max)]
    }

    /// The signal of a `put_signal` entry; `None` for a put.
    #[inline]
    pub(super) fn signal_of(&self) -> Option<FrameSignal> {
        let kind = match self.op {
            SIGNAL_SET => AtomicKind::Set,
            SIGNAL_ADD => AtomicKind::FetchAdd,
            _ => return None,
        };
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&self.data[at..at + 8]);
            u64::from_le_bytes(b)
        };
        Some(FrameSignal {
            offset: word(SIGNAL_INLINE),
            value: word(SIGNAL_INLINE + 8),
            kind,
        })
    }

    /// The route decision's id, made on PE `me`.
    #[inline]
    pub(super) fn ctx(&self, me: u32) -> ContextId {
        ContextId {
            pe: me,
            seq: self.ctx_seq,
        }
    }

    /// The rail's transport id.
    pub(super) fn transport(&self) -> TransportId {
        super::tcp_rail(usize::from(self.rail))
    }

    /// The entry as the ring holds it: its first slot, and a second one
    /// when it takes two ([`Slot::span`]).
    #[inline(always)]
    pub(super) fn slots(&self) -> (Slot, Option<Slot>) {
        let meta = u64::from(self.pe)
            | u64::from(self.len) << 32
            | u64::from(self.rail) << 40
            | u64::from(self.retry) << 48
            | u64::from(self.op) << 56;
        let first = Slot([self.off, self.ctx_seq, meta, word(&self.data, 0)]);
        if first.span() == 1 {
            return (first, None);
        }
        let d = &self.data;
        (
            first,
            Some(Slot([word(d, 1), word(d, 2), word(d, 3), word(d, 4)])),
        )
    }

    /// The entry the slots `s` hold (one or two, as [`Entry::slots`] made
    /// them; at least one).
    #[inline]
    pub(super) fn from_slots(s: &[Slot]) -> Entry {
        let h = s[0].0;
        let mut data = [0u8; INLINE];
        data[..FIRST].copy_from_slice(&h[3].to_le_bytes());
        if let Some(rest) = s.get(1) {
            for (k, w) in rest.0.iter().enumerate() {
                data[FIRST + k * 8..FIRST + k * 8 + 8].copy_from_slice(&w.to_le_bytes());
            }
        }
        Entry {
            off: h[0],
            ctx_seq: h[1],
            pe: h[2] as u32,
            len: (h[2] >> 32) as u8,
            rail: (h[2] >> 40) as u8,
            retry: (h[2] >> 48) as u8,
            op: (h[2] >> 56) as u8,
            data,
        }
    }
}

/// One context's ring, shared by the context (producer) and the progress
/// thread (consumer; or the context itself while the ring is stalled or the
/// thread is gone): the core's [`SubmitRing`], whose state words say who
/// consumes and whether the ring stalled (loom-checked in switchyard-core).
pub(super) struct SubRing {
    ring: SubmitRing<Slot, SocketError, DEPTH>,
    /// The PE the context's route decisions are made on.
    me: u32,
    /// The context's load rule: the watermark over which a rail's backlog
    /// sets its load bit, and the capacity it is measured against; `None`:
    /// load bits off.
    load: Option<(LoadWatermark, Backlog)>,
}

/// The ring's load hint ([`SubmitRing::set_hint`]) for (`pe`, `rail`) over
/// its watermark: bit 0 set, the rail in bits 1-3, the PE above; 0 (none)
/// for a pair that does not fit the hint's 24 bits.
fn hint_of(pe: u32, rail: usize) -> u32 {
    if pe < 1 << 20 && rail < 8 {
        (pe << 4) | ((rail as u32) << 1) | 1
    } else {
        0
    }
}

/// The (PE, rail) a load hint names, if any.
pub(super) fn hint_pair(h: u32) -> Option<(u32, usize)> {
    (h & 1 != 0).then_some((h >> 4, ((h >> 1) & 7) as usize))
}

impl SubRing {
    fn new(me: u32, load: Option<(LoadWatermark, Backlog)>) -> Arc<SubRing> {
        Arc::new(SubRing {
            ring: SubmitRing::with_span(Slot::span),
            me,
            load,
        })
    }

    /// The load hint the thread published last (0: none).
    #[inline]
    pub(super) fn hint(&self) -> u32 {
        self.ring.hint()
    }

    /// Whether everything pushed has been taken.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Whether the ring stopped at an error (Acquire: the error and the
    /// consumer's head are visible).
    #[inline]
    pub(super) fn stalled(&self) -> bool {
        self.ring.stalled()
    }

    /// Issues the ring's entries on `d` in order, until it is empty, an
    /// entry meets a full send window (left at the head), or an error
    /// (left at the head, the ring stalled). Skips a stalled ring and one
    /// another consumer holds. Returns how many were issued.
    ///
    /// Then publishes the load hint: the pair of the last entry issued when
    /// its rail's backlog toward its peer is over the context's watermark
    /// (one backlog read per drain), none when it is not.
    pub(super) fn drain(&self, d: &mut SocketDriver) -> usize {
        let mut last = None;
        let n = self.ring.drain(|s| {
            let e = &Entry::from_slots(s);
            let rail = usize::from(e.rail);
            let r = if rail >= d.rails() {
                Err(SocketError::RailDown { peer: e.pe, rail })
            } else if let Some(sig) = e.signal_of() {
                d.rail(rail)
                    .put_signal(e.pe, e.off, e.bytes(), sig, e.ctx(self.me))
            } else if let Some(op) = e.atomic_of() {
                // Non-fetching: no ticket kept, nothing to poll.
                d.rail(rail)
                    .atomic_start(e.pe, e.off, op, e.ctx(self.me))
                    .map(|_| ())
            } else {
                d.rail(rail).put(e.pe, e.off, e.bytes(), e.ctx(self.me))
            };
            match r {
                Ok(()) => {
                    last = Some((e.pe, rail));
                    Issue::Done
                }
                Err(err) if err.kind() == ErrorKind::WouldBlock => Issue::Busy,
                Err(err) => Issue::Failed(err),
            }
        });
        if let (Some((pe, rail)), Some((level, cap))) = (last, self.load) {
            let over = d.backlog(pe, rail).exceeds(level, cap);
            self.ring.set_hint(if over { hint_of(pe, rail) } else { 0 });
        }
        n
    }

    /// The peer of the head entry, when the ring is not empty and no other
    /// consumer (the thread, in a burst) holds it now.
    pub(super) fn head_pe(&self) -> Option<u32> {
        self.ring.head().map(|s| s.pe())
    }

    /// Tests: stalls the ring as an error at its head would, with `err`.
    #[cfg(test)]
    pub(super) fn debug_stall(&self, err: Option<SocketError>) {
        self.ring.stall(err);
    }

    /// Takes the head entry of a stalled ring and the error it met, or,
    /// with `None` for the error, the next later entry; `None` when the
    /// ring is empty (and then un-stalls it). Only the context calls it.
    pub(super) fn take_stalled(&self) -> Option<(Entry, Option<SocketError>)> {
        self.ring
            .take_stalled()
            .map(|(t, err)| (Entry::from_slots(t.slots()), err))
    }
}

/// The producing end a context holds, with its ring.
pub(super) struct Submit {
    /// Declared before `ring`: it borrows it.
    tx: Producer<'static, Slot, DEPTH>,
    ring: Arc<SubRing>,
}

// SAFETY: the producer end (its cached head is a `Cell`) is used only through
// `&mut self` (`push`); `&self` reaches only the `Arc<SubRing>`, which is
// `Sync`. So sharing a `&Submit` between threads shares nothing unsynchronised.
unsafe impl Sync for Submit {}

impl core::fmt::Debug for Submit {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Submit")
            .field("len", &self.ring.ring.len())
            .finish()
    }
}

impl Submit {
    /// A new ring and its producer end, for a context on PE `me` whose load
    /// rule is `load` (the watermark and the capacity it applies to).
    pub(super) fn new(me: u32, load: Option<(LoadWatermark, Backlog)>) -> Submit {
        let ring = SubRing::new(me, load);
        // SAFETY: the ring lives in the `Arc` held in `ring` beside `tx`,
        // never moves, and outlives `tx` (declared first, so dropped first;
        // `Producer` has no drop glue that touches it anyway). This is the
        // ring's only producer end, ever.
        let tx = unsafe { (*Arc::as_ptr(&ring)).ring.producer() };
        // SAFETY: as above: the borrow is valid for as long as `tx` lives.
        let tx: Producer<'static, Slot, DEPTH> = unsafe { core::mem::transmute(tx) };
        Submit { tx, ring }
    }

    /// The ring, for the registration list.
    pub(super) fn ring(&self) -> &Arc<SubRing> {
        &self.ring
    }

    /// Pushes one entry (its one or two slots, with one publish); false
    /// when the ring has no room for it.
    #[inline(always)]
    pub(super) fn push(&mut self, e: Entry) -> bool {
        self.tx.prefetch(PREFETCH);
        match e.slots() {
            (first, None) => self.tx.push(first).is_ok(),
            (first, Some(second)) => self.tx.push_all(&[first, second]).is_ok(),
        }
    }
}

impl Context {
    /// A put of at most [`INLINE`] bytes routed `route` to a TCP rail, through
    /// this context's submission ring when the progress thread runs
    /// `dedicated`: the routed loop's bookkeeping (ordering bits, counters,
    /// trace) without taking the driver. False (nothing done) when the put
    /// must take the routed loop: not a TCP rail, a load yield or verbs
    /// hold possible, a write over verbs pending to `pe`, no ring, the ring
    /// full or stalled.
    #[inline]
    pub(super) fn ring_put(&mut self, pe: u32, off: u64, bytes: &[u8], route: &Route) -> bool {
        bytes.len() <= INLINE
            && self.ring_push(pe, bytes.len(), route, FrameOp::Put, |rail| {
                Entry::new(pe, off, bytes, rail, route.retry_allowed, route.context)
            })
    }

    /// A `put_signal` of at most [`SIGNAL_INLINE`] bytes routed `route` to a
    /// TCP rail, through this context's submission ring, as
    /// [`Context::ring_put`]: one entry, issued by the thread as one
    /// `PutSignal` frame, in order with the ring's other entries. False
    /// (nothing done) as there, or when the put and its signal word do not
    /// fit one frame ([`switchyard_socket::SignalFit`]).
    #[inline]
    pub(super) fn ring_put_signal(
        &mut self,
        pe: u32,
        off: u64,
        bytes: &[u8],
        sig: FrameSignal,
        route: &Route,
    ) -> bool {
        bytes.len() <= SIGNAL_INLINE
            && self
                .tcp
                .as_ref()
                .is_some_and(|t| t.signal_fit().fits(off, bytes.len() as u64, sig.offset))
            && self.ring_push(pe, bytes.len(), route, FrameOp::PutSignal, |rail| {
                Entry::signal(
                    pe,
                    off,
                    bytes,
                    sig,
                    rail,
                    route.retry_allowed,
                    route.context,
                )
            })
    }

    /// A non-fetching atomic (`op.is_fetching()` false) routed `route` to a
    /// TCP rail, through this context's submission ring, as
    /// [`Context::ring_put`]: one entry of one slot, issued by the thread
    /// with `atomic_start`, complete by quiet. False (nothing done) as there,
    /// for a fetching atomic, or for one on this PE's own heap (the driver
    /// applies that at once, and the C API's collectives count on it: a
    /// decrement of their own link word must be seen by their next wait).
    #[inline]
    pub(super) fn ring_atomic(&mut self, pe: u32, off: u64, op: AtomicOp, route: &Route) -> bool {
        !op.is_fetching()
            && pe != self.me
            && self.ring_push(pe, op.width.bytes(), route, FrameOp::Atomic, |rail| {
                Entry::atomic(pe, off, op, rail, route.retry_allowed, route.context)
            })
    }

    /// Pushes the entry `make` builds for the rail `route` chose, with the
    /// routed loop's bookkeeping for an operation of `len` bytes.
    #[inline(always)]
    fn ring_push(
        &mut self,
        pe: u32,
        len: usize,
        route: &Route,
        frame: FrameOp,
        make: impl FnOnce(u8) -> Entry,
    ) -> bool {
        let Some(rail) = rail_of(route.transport) else {
            return false;
        };
        if (route.downgraded & self.load.any()) || self.verbs_holds(pe) {
            return false;
        }
        let code = if self.order.enabled {
            let code = self.order.get(pe);
            if code & !order::T != 0 {
                return false;
            }
            code
        } else {
            0
        };
        let load = self.load.ring_rule();
        let Some(t) = self.tcp.as_mut() else {
            return false;
        };
        if !t.submit(make(rail as u8), route.context.pe, load) {
            return false;
        }
        let hint = t.ring_hint();
        // On TCP once the thread takes it: this context's quiet and fence
        // wait for TCP from now on (`order.rs`).
        self.order.shared |= order::T;
        if self.order.enabled {
            self.order.set(pe, code | order::T);
        }
        let len = len as u64;
        self.sx_done(pe, len, route);
        self.trace_route(pe, len, frame, route, false);
        if let Some(h) = hint {
            self.ring_load_hint(h);
        }
        true
    }

    /// Starts this PE's progress thread as `progress = dedicated` does,
    /// pinned to `cpu` when given, for a context built by
    /// [`Context::from_parts`] ([`Context::from_env`] starts the thread the
    /// configuration asks for). Does nothing without TCP peers, or when a
    /// thread already runs.
    ///
    /// # Errors
    ///
    /// [`Error::Tcp`](super::Error::Tcp) when the thread or its epoll
    /// descriptor cannot be created.
    pub fn start_dedicated_progress(&mut self, cpu: Option<u32>) -> Result<()> {
        let (me, clock) = (self.me, self.clock);
        if let Some(t) = self.tcp.as_mut() {
            t.start(super::progress::ThreadMode::Dedicated, clock, cpu, me)
                .map_err(|e| super::Error::Tcp(SocketError::Epoll { source: e }))?;
        }
        Ok(())
    }

    /// Whether this context's small puts to TCP peers go through its
    /// submission ring under a `dedicated` progress thread (`on`, the
    /// default) or take the TCP driver themselves, as in the other progress
    /// modes. Meant for measuring the two side by side. What the ring holds
    /// is issued first.
    ///
    /// # Errors
    ///
    /// An error a put of the ring met, as [`Context::quiet`] returns it.
    pub fn set_submit_ring(&mut self, on: bool) -> Result<()> {
        self.ring_sync()?;
        if let Some(t) = self.tcp.as_mut() {
            t.set_ring(on);
        }
        Ok(())
    }

    /// Takes back this context's submission ring when the progress thread
    /// stopped it at an error: the entry it failed on goes through the
    /// routed loop's error handling (health bit, failover; re-issued through
    /// the routed loop when the error allows a retry, as a put refused
    /// unsent by a down rail always does), then every later entry is issued
    /// here through the routed loop, in order, and the ring resumes. Called
    /// before any routed operation, fence or quiet; returns the first error
    /// a put of the ring would have returned (the caller then stops).
    ///
    /// Also waits for the ring to drain first, bounded by the op timeout
    /// (the thread retries an entry a full send window refused at each
    /// burst): [`Error::Timeout`](super::Error::Timeout) past it.
    #[inline]
    pub(super) fn ring_sync(&mut self) -> Result<()> {
        match self.tcp.as_ref() {
            Some(t) if t.ring_pending() || t.ring_stalled() => self.ring_wait(),
            _ => Ok(()),
        }
    }

    /// The timeout a wait for this context's ring to drain met inside a
    /// use of the driver ([`Tcp::get`](super::progress::Tcp::get) waits at
    /// most the op timeout), as the error to return, once.
    #[inline]
    pub(super) fn ring_timed_out(&mut self) -> Option<super::Error> {
        let (pe, waited) = self.tcp.as_mut()?.take_ring_timeout()?;
        Some(super::Error::Timeout {
            what: "the submission ring to drain",
            waited,
            pe,
        })
    }

    #[cold]
    #[inline(never)]
    fn ring_wait(&mut self) -> Result<()> {
        if let Some(e) = self.ring_timed_out() {
            return Err(e);
        }
        let start = std::time::Instant::now();
        let mut spins = 0u32;
        loop {
            let Some(t) = self.tcp.as_mut() else {
                return Ok(());
            };
            if t.ring_stalled() {
                return self.ring_redo();
            }
            match t.ring_step() {
                RingState::Empty => return Ok(()),
                // Being taken back (`ring_redo` runs the routed loop).
                RingState::Stalled => return Ok(()),
                RingState::Pending => {}
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                if start.elapsed() > self.op_timeout {
                    return Err(super::Error::Timeout {
                        what: "the submission ring to drain",
                        waited: start.elapsed(),
                        pe: t.ring_head_pe(),
                    });
                }
                std::thread::yield_now();
            } else {
                core::hint::spin_loop();
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn ring_redo(&mut self) -> Result<()> {
        let Some(ring) = self.tcp.as_mut().and_then(|t| t.redo(true)) else {
            return Ok(());
        };
        let mut first = None;
        while let Some((e, err)) = ring.take_stalled() {
            // A peer the driver did not know yet (`cards = lazy`): nothing
            // was sent, and the redo below connects it (`first_use.rs`).
            if let Some(err) = err.filter(|e| !matches!(e, SocketError::PeerUnknown { .. })) {
                let t = e.transport();
                let err = DrvError::Tcp(err);
                self.sx_bump(t, e.pe, crate::statseg::PeerWord::Errors);
                if let Some(x) = self.on_error(t, err, e.retry != 0) {
                    first.get_or_insert(x);
                    continue;
                }
            }
            let (pe, off, bytes) = (e.pe, e.off, e.bytes());
            if let Some(op) = e.atomic_of() {
                let sel = self.select(pe, op.width.bytes() as u64, Op::Atomic, FrameOp::Atomic);
                if let Err(x) = self.atomic_slow(sel, pe, off, op) {
                    first.get_or_insert(x);
                }
                continue;
            }
            let r = match e.signal_of() {
                Some(sig) => self.put_signal_redo(pe, off, bytes, sig),
                None => self
                    .routed_from(
                        None,
                        pe,
                        bytes.len() as u64,
                        Op::Put,
                        FrameOp::Put,
                        &mut |d, r| d.put(pe, off, bytes, r.context),
                    )
                    .map(|_| ()),
            };
            if let Err(x) = r {
                first.get_or_insert(x);
            }
        }
        if let Some(t) = self.tcp.as_mut() {
            t.redo(false);
        }
        first.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> ContextId {
        ContextId { pe: 0, seq: 7 }
    }

    #[test]
    fn an_entry_keeps_its_bytes() {
        let e = Entry::new(3, 64, &[1, 2, 3, 4, 5, 6, 7, 8], 1, true, ctx());
        assert_eq!(e.bytes(), &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!((e.pe, e.off, e.rail, e.retry), (3, 64, 1, 1));
        assert_eq!(e.ctx(0), ctx());
    }

    /// A non-fetching atomic of every kind and width: one slot, and back
    /// the same op (its `compare` is not kept); the other entries are not
    /// atomics.
    #[test]
    fn an_atomic_entry_is_one_slot_and_keeps_its_op() {
        use AtomicKind::*;
        for kind in [FetchAdd, FetchAnd, FetchOr, FetchXor, Set] {
            for (width, operand) in [
                (AtomicWidth::W64, u64::MAX - 5),
                (AtomicWidth::W32, 0xFFFF_FFF0),
            ] {
                let op = AtomicOp {
                    kind,
                    width,
                    operand,
                    compare: 0,
                    fetch: false,
                };
                let e = Entry::atomic(3, 4096, op, 2, false, ctx());
                let (first, second) = e.slots();
                assert!(second.is_none(), "{op:?}: one slot");
                assert_eq!(first.span(), 1);
                let back = Entry::from_slots(&[first]);
                assert_eq!(back.atomic_of(), Some(op), "{op:?}");
                assert_eq!(back.signal_of(), None);
                assert_eq!((back.pe, back.off, back.rail, back.retry), (3, 4096, 2, 0));
            }
        }
        assert_eq!(
            Entry::new(1, 0, &[0xFF; 8], 0, true, ctx()).atomic_of(),
            None
        );
    }

    #[test]
    fn a_stalled_ring_gives_back_its_entries_in_order() {
        let mut s = Submit::new(0, None);
        for i in 0..5u8 {
            assert!(s.push(Entry::new(1, u64::from(i) * 8, &[i; 8], 0, true, ctx())));
        }
        // A driver with no peers: the first put fails, the ring stalls.
        let mut d = SocketDriver::with_owned_heap(switchyard_socket::TcpConfig::default(), 1 << 16)
            .expect("a driver");
        assert_eq!(s.ring().drain(&mut d), 0);
        assert!(s.ring().stalled());
        assert!(!s.ring().is_empty());
        // Nothing more is taken while stalled.
        assert_eq!(s.ring().drain(&mut d), 0);
        let (first, err) = s.ring().take_stalled().expect("the head");
        assert_eq!(first.off, 0);
        assert!(err.is_some(), "the error comes with the head");
        for i in 1..5u64 {
            let (e, err) = s.ring().take_stalled().expect("a later entry");
            assert_eq!(e.off, i * 8);
            assert!(err.is_none());
        }
        assert!(s.ring().take_stalled().is_none());
        assert!(!s.ring().stalled());
        assert!(s.ring().is_empty());
    }

    #[test]
    fn a_full_ring_refuses() {
        let mut s = Submit::new(0, None);
        for _ in 0..DEPTH {
            assert!(s.push(Entry::new(1, 0, &[0; 8], 0, true, ctx())));
        }
        assert!(!s.push(Entry::new(1, 0, &[0; 8], 0, true, ctx())));
        // Longer puts take two slots each.
        let mut s = Submit::new(0, None);
        for _ in 0..DEPTH / 2 {
            assert!(s.push(Entry::new(1, 0, &[0; 9], 0, true, ctx())));
        }
        assert!(!s.push(Entry::new(1, 0, &[0; 9], 0, true, ctx())));
        assert!(!s.push(Entry::new(1, 0, &[0; 1], 0, true, ctx())));
    }

    /// Every length of put, and `put_signal`s, through their slots and
    /// back: one slot up to 8 bytes, two above and for a signal.
    #[test]
    fn entries_survive_their_slots() {
        let bytes: [u8; INLINE] = core::array::from_fn(|i| i as u8 + 1);
        for len in 0..=INLINE {
            let e = Entry::new(7, 4096 + len as u64, &bytes[..len], 2, len % 2 == 0, ctx());
            let (first, second) = e.slots();
            assert_eq!(second.is_some(), len > 8, "len {len}");
            assert_eq!(first.span(), if len > 8 { 2 } else { 1 });
            assert_eq!(first.pe(), 7);
            let s: Vec<Slot> = core::iter::once(first).chain(second).collect();
            let back = Entry::from_slots(&s);
            assert_eq!(back.bytes(), &bytes[..len]);
            assert_eq!(
                (back.pe, back.off, back.rail, back.retry, back.op),
                (7, 4096 + len as u64, 2, u8::from(len % 2 == 0), PUT)
            );
            assert_eq!(back.ctx(0), ctx());
            assert!(back.signal_of().is_none());
        }
        let sig = FrameSignal {
            offset: 0x1122_3344,
            value: u64::MAX - 5,
            kind: AtomicKind::FetchAdd,
        };
        let e = Entry::signal(3, 64, &bytes[..3], sig, 1, true, ctx());
        let (first, second) = e.slots();
        assert_eq!(first.span(), 2);
        let back = Entry::from_slots(&[first, second.expect("two slots")]);
        assert_eq!(back.bytes(), &bytes[..3]);
        assert_eq!(back.signal_of(), Some(sig));
    }
}
