//! The transport contract: what every driver (shared memory, TCP, RDMA verbs)
//! implements, and what the std shim drives.
//!
//! # Shape
//!
//! The contract is **non-blocking** and **clock-free**, like smoltcp's `Device`:
//! every call returns at once, and the caller (the std shim's progress engine)
//! owns the clock, the deadlines and the choice between spinning and parking.
//! A blocking `get` is [`Transport::get_start`] followed by
//! [`Transport::get_poll`] until it reports completion; a blocking `quiet` is
//! [`Transport::quiet_poll`] until it returns `true`, with
//! [`Transport::progress`] in between.
//!
//! Addresses are *symmetric*: a byte offset into the target PE's symmetric heap.
//! The target checks bounds and alignment, always, and an operation that fails
//! them changes nothing.
//!
//! # Completion and ordering
//!
//! * `put` returns when the source buffer may be reused (the bytes are copied,
//!   sent or staged). The put is *complete at the target* only after a later
//!   `quiet_poll` returned `true`.
//! * `fence` orders: puts and non-fetching atomics to one PE issued before it
//!   become visible at that PE before those issued after it.
//! * `quiet_poll() == true` means every operation issued before it is complete
//!   at its target (visible to any later get or load there).
//! * A get or fetching atomic is complete when its poll returns the value.
//!
//! # Errors
//!
//! Each driver has one rich error type; [`TransportError::kind`] classifies it
//! so the shim can react without knowing the driver: retry after progress
//! ([`ErrorKind::WouldBlock`]), fall back to another transport
//! ([`ErrorKind::PeerDown`], only where the route allows a retry), or report
//! to the caller (everything else).
//!
//! # Allocation
//!
//! After `connect`, nothing in `put`, `get_*`, `atomic_*`, `quiet_poll`,
//! `fence` or `progress` allocates.

use core::fmt;

pub use crate::topology::LinkState;
use crate::{route::ContextId, wire::AtomicKind};

/// A point in time, in nanoseconds since an origin the caller chooses (the
/// core has no clock; smoltcp passes time in the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant {
    /// Nanoseconds since the caller's origin.
    pub nanos: u64,
}

impl Instant {
    /// The instant `nanos` nanoseconds after the origin.
    #[inline]
    pub const fn from_nanos(nanos: u64) -> Instant {
        Instant { nanos }
    }
}

/// Operand width of an atomic. Signed operands use the same bits: two's
/// complement addition and comparison for equality do not care about sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicWidth {
    /// 4 bytes, 4-byte aligned.
    W32,
    /// 8 bytes, 8-byte aligned.
    W64,
}

impl AtomicWidth {
    /// Size in bytes.
    #[inline]
    pub const fn bytes(self) -> usize {
        match self {
            AtomicWidth::W32 => 4,
            AtomicWidth::W64 => 8,
        }
    }

    /// Keeps the low bits of `v` that this width holds.
    #[inline]
    pub const fn truncate(self, v: u64) -> u64 {
        match self {
            AtomicWidth::W32 => v & 0xFFFF_FFFF,
            AtomicWidth::W64 => v,
        }
    }
}

/// One atomic operation on a symmetric address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicOp {
    /// What to do ([`AtomicKind`] is also the wire encoding).
    pub kind: AtomicKind,
    /// Operand width.
    pub width: AtomicWidth,
    /// The operand (the new value for swap, set and compare-swap; the addend
    /// for fetch-add; the mask for the bitwise ops; ignored by fetch).
    pub operand: u64,
    /// The value compare-swap compares with; ignored by the others.
    pub compare: u64,
    /// Whether the caller wants the old value. `false` turns a fetching kind
    /// (an add, a bitwise op) into a non-fetching atomic: the target still
    /// applies `kind` (the wire encoding is the same), the initiator keeps
    /// no per-op state for a result and drops any reply, and the op is
    /// complete at the target after a quiet, like a put. `Set` never
    /// returns a value, whatever this says.
    pub fetch: bool,
}

impl AtomicOp {
    /// Whether the op returns a value the caller waits for: not for `Set`,
    /// nor for any kind with [`fetch`](AtomicOp::fetch) `false` (both are
    /// complete at the target after a quiet).
    #[inline]
    pub const fn is_fetching(&self) -> bool {
        self.fetch && !matches!(self.kind, AtomicKind::Set)
    }

    /// Applies the op to `old` and returns the new value (both truncated to the
    /// width): the reference semantics every driver must match.
    #[inline]
    pub const fn apply(&self, old: u64) -> u64 {
        let w = self.width;
        let old = w.truncate(old);
        let v = match self.kind {
            AtomicKind::FetchAdd => old.wrapping_add(self.operand),
            AtomicKind::CompareSwap => {
                if old == w.truncate(self.compare) {
                    self.operand
                } else {
                    old
                }
            }
            AtomicKind::Swap | AtomicKind::Set => self.operand,
            AtomicKind::Fetch => old,
            AtomicKind::FetchAnd => old & self.operand,
            AtomicKind::FetchOr => old | self.operand,
            AtomicKind::FetchXor => old ^ self.operand,
        };
        w.truncate(v)
    }
}

/// Defines a hardware read-modify-write of one heap word for one width: the
/// single implementation every driver that touches a mapped heap calls (shm
/// for same-node peers, TCP's target side), so their atomics on the same word
/// are the same instructions and atomic against each other.
macro_rules! heap_rmw {
    ($(#[$m:meta])* $name:ident, $atomic:ty, $int:ty) => {
        $(#[$m])*
        // SYNC POINT (all of them): fetching ops are AcqRel, so that an atomic
        // both publishes this PE's earlier puts and sees what the previous
        // writer published; `Set` is a Release store, `Fetch` an Acquire load.
        #[inline]
        pub fn $name(a: &$atomic, op: &AtomicOp) -> u64 {
            use crate::sync::atomic::Ordering::{AcqRel, Acquire, Release};
            let operand = op.width.truncate(op.operand) as $int;
            let compare = op.width.truncate(op.compare) as $int;
            let old = match op.kind {
                AtomicKind::FetchAdd => a.fetch_add(operand, AcqRel),
                AtomicKind::CompareSwap => match a.compare_exchange(compare, operand, AcqRel, Acquire) {
                    Ok(v) | Err(v) => v,
                },
                AtomicKind::Swap => a.swap(operand, AcqRel),
                AtomicKind::Fetch => a.load(Acquire),
                AtomicKind::Set => {
                    a.store(operand, Release);
                    0
                }
                AtomicKind::FetchAnd => a.fetch_and(operand, AcqRel),
                AtomicKind::FetchOr => a.fetch_or(operand, AcqRel),
                AtomicKind::FetchXor => a.fetch_xor(operand, AcqRel),
            };
            u64::from(old)
        }
    };
}

heap_rmw!(
    /// Runs `op` (64-bit) on the word `a`, returning the old value (0 for
    /// `Set`). Matches [`AtomicOp::apply`].
    #[cfg(target_has_atomic = "64")]
    heap_rmw_u64,
    crate::sync::atomic::AtomicU64,
    u64
);
heap_rmw!(
    /// Runs `op` (32-bit) on the word `a`, returning the old value (0 for
    /// `Set`). Matches [`AtomicOp::apply`].
    heap_rmw_u32,
    crate::sync::atomic::AtomicU32,
    u32
);

/// A started get or fetching atomic, to be polled until it completes. Plain
/// data: drivers that complete at once (shared memory) keep what they need in
/// it, others use `slot` to find their own record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// Target PE.
    pub peer: u32,
    /// Symmetric offset at the target.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
    /// Driver-defined slot (an index into the driver's fixed table).
    pub slot: u32,
    /// The operation, for atomics.
    pub atomic: Option<AtomicOp>,
    /// The decision that started it.
    pub context: ContextId,
}

/// What one [`Transport::progress`] step did, so a busy-poller can count idle
/// spins and decide when to park.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollResult {
    /// Nothing happened.
    Idle,
    /// Some work was done (completions reaped, frames applied, state changed).
    Busy,
}

/// How the shim should react to a driver error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A queue is full: make progress and retry the same call.
    WouldBlock,
    /// The target PE is not reachable over this transport now (link down,
    /// connection lost, object gone). Another transport may be tried when the
    /// route allows a retry.
    PeerDown,
    /// The symmetric address is outside the target's heap.
    OutOfBounds,
    /// The address is not aligned for the operation.
    Misaligned,
    /// The PE is not part of the job, or this transport cannot reach it at all.
    InvalidPe,
    /// The driver does not do this operation.
    Unsupported,
    /// Anything else: the transport is unusable.
    Fatal,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::WouldBlock => "would block",
            ErrorKind::PeerDown => "peer down",
            ErrorKind::OutOfBounds => "out of bounds",
            ErrorKind::Misaligned => "misaligned",
            ErrorKind::InvalidPe => "invalid PE",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Fatal => "fatal",
        })
    }
}

/// A driver error the shim can classify.
pub trait TransportError: core::error::Error {
    /// How to react.
    fn kind(&self) -> ErrorKind;
    /// The peer the error is about, if one.
    fn peer(&self) -> Option<u32>;
}

/// The transport contract (docs/ARCHITECTURE.md, "The transport contract").
/// Dispatched statically: the shim holds each driver as a concrete type.
pub trait Transport {
    /// The driver's error type.
    type Error: TransportError;

    /// Short lower-case name (`"shm"`, `"tcp"`, `"verbs"`).
    fn name(&self) -> &'static str;

    /// Connects to `peer` (idempotent). Separate from route selection: the shim
    /// connects every reachable peer at init, so the data path never does.
    ///
    /// # Errors
    ///
    /// When `peer` cannot be reached over this transport.
    fn connect(&mut self, peer: u32) -> Result<(), Self::Error>;

    /// The link state toward `peer` as this driver sees it.
    fn state(&self, peer: u32) -> LinkState;

    /// Size of `peer`'s symmetric heap, once connected.
    fn heap_len(&self, peer: u32) -> Option<u64>;

    /// Writes `src` at `offset` of `peer`'s heap. Returns when `src` may be
    /// reused; complete at the target after a later successful `quiet_poll`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::OutOfBounds`] (nothing written), [`ErrorKind::WouldBlock`],
    /// [`ErrorKind::PeerDown`], ...
    fn put(
        &mut self,
        peer: u32,
        offset: u64,
        src: &[u8],
        ctx: ContextId,
    ) -> Result<(), Self::Error>;

    /// Writes `len` bytes of this PE's own heap, from `local_offset`, to
    /// `offset` of `peer`'s heap: a put whose source is symmetric, so a driver
    /// may read it later (zero copy; RDMA reads it from the registered heap).
    /// The source must not change before a later successful `quiet_poll`.
    ///
    /// # Errors
    ///
    /// As [`Transport::put`]; a local range outside the own heap is
    /// [`ErrorKind::OutOfBounds`].
    fn put_from_heap(
        &mut self,
        peer: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        ctx: ContextId,
    ) -> Result<(), Self::Error>;

    /// Reads `len` bytes at `offset` of `peer`'s heap into this PE's own heap
    /// at `local_offset`; the bytes are there after a later successful
    /// `quiet_poll` (a non-blocking get).
    ///
    /// # Errors
    ///
    /// As [`Transport::put_from_heap`].
    fn get_into_heap(
        &mut self,
        peer: u32,
        offset: u64,
        local_offset: u64,
        len: u32,
        ctx: ContextId,
    ) -> Result<(), Self::Error>;

    /// The longest `len` [`Transport::get_start`] accepts (a driver that
    /// holds replies until polled bounds it); callers split longer gets.
    fn max_get_len(&self) -> u32 {
        u32::MAX
    }

    /// Starts reading `len` bytes at `offset` of `peer`'s heap.
    ///
    /// # Errors
    ///
    /// As [`Transport::put`], and an error when `len` is over
    /// [`Transport::max_get_len`].
    fn get_start(
        &mut self,
        peer: u32,
        offset: u64,
        len: u32,
        ctx: ContextId,
    ) -> Result<Ticket, Self::Error>;

    /// Completes a get: `Ok(true)` once `dst` (of the ticket's length) holds
    /// the bytes, `Ok(false)` while it is in flight.
    ///
    /// # Errors
    ///
    /// As [`Transport::put`]; after an error the ticket is dead.
    fn get_poll(&mut self, ticket: &Ticket, dst: &mut [u8]) -> Result<bool, Self::Error>;

    /// Starts an atomic at `offset` of `peer`'s heap. A non-fetching op
    /// (`Set`, or any kind with [`AtomicOp::fetch`] `false`) completes by
    /// `quiet_poll`, and the driver frees whatever it kept for it without an
    /// `atomic_poll` (nobody polls its ticket); a fetching one completes by
    /// `atomic_poll`.
    ///
    /// # Errors
    ///
    /// As [`Transport::put`], plus [`ErrorKind::Misaligned`].
    fn atomic_start(
        &mut self,
        peer: u32,
        offset: u64,
        op: AtomicOp,
        ctx: ContextId,
    ) -> Result<Ticket, Self::Error>;

    /// Completes a fetching atomic: `Some(old value)` once done.
    ///
    /// # Errors
    ///
    /// As [`Transport::put`]; after an error the ticket is dead.
    fn atomic_poll(&mut self, ticket: &Ticket) -> Result<Option<u64>, Self::Error>;

    /// Orders earlier puts and non-fetching atomics before later ones, per
    /// target PE.
    ///
    /// # Errors
    ///
    /// When the transport is unusable.
    fn fence(&mut self) -> Result<(), Self::Error>;

    /// Whether every operation issued so far is complete at its target.
    ///
    /// # Errors
    ///
    /// When an outstanding operation failed; the error names its peer.
    fn quiet_poll(&mut self) -> Result<bool, Self::Error>;

    /// One busy-poll step: reap completions, apply incoming frames, detect
    /// failures.
    fn progress(&mut self, now: Instant) -> PollResult;

    /// Closes every connection and releases resources. Idempotent.
    ///
    /// # Errors
    ///
    /// When an orderly close failed (resources are released anyway).
    fn close(&mut self) -> Result<(), Self::Error>;
}

/// What a driver's probe found on this machine (feature `alloc`).
#[cfg(feature = "alloc")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeReport {
    /// The transport's name.
    pub name: &'static str,
    /// Whether the transport can be used here.
    pub available: bool,
    /// Why not, when it cannot.
    pub why_not: Option<alloc::string::String>,
    /// The devices found.
    pub devices: alloc::vec::Vec<DeviceInfo>,
}

/// One device a probe found (feature `alloc`).
#[cfg(feature = "alloc")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device's name (`/dev/shm`, `eth0`, `mlx5_0`).
    pub name: alloc::string::String,
    /// What it is, in a few words.
    pub detail: alloc::string::String,
}

#[cfg(test)]
mod test {
    use super::*;

    fn op(kind: AtomicKind, width: AtomicWidth, operand: u64, compare: u64) -> AtomicOp {
        AtomicOp {
            kind,
            width,
            operand,
            compare,
            fetch: true,
        }
    }

    #[test]
    fn reference_semantics() {
        use AtomicKind::*;
        use AtomicWidth::*;
        assert_eq!(op(FetchAdd, W64, 5, 0).apply(7), 12);
        assert_eq!(op(FetchAdd, W32, 1, 0).apply(0xFFFF_FFFF), 0);
        // -1 as i32 added to 5: two's complement, sign does not matter.
        assert_eq!(op(FetchAdd, W32, u64::from(-1i32 as u32), 0).apply(5), 4);
        assert_eq!(op(CompareSwap, W64, 9, 7).apply(7), 9);
        assert_eq!(op(CompareSwap, W64, 9, 8).apply(7), 7);
        assert_eq!(op(CompareSwap, W32, 9, 0x1_0000_0007).apply(7), 9);
        assert_eq!(op(Swap, W64, 3, 0).apply(7), 3);
        assert_eq!(op(Set, W64, 3, 0).apply(7), 3);
        assert_eq!(op(Fetch, W64, 3, 0).apply(7), 7);
        assert_eq!(op(FetchAnd, W64, 0b110, 0).apply(0b011), 0b010);
        assert_eq!(op(FetchOr, W64, 0b110, 0).apply(0b011), 0b111);
        assert_eq!(op(FetchXor, W64, 0b110, 0).apply(0b011), 0b101);
        assert!(!op(Set, W64, 0, 0).is_fetching());
        assert!(op(Fetch, W64, 0, 0).is_fetching());
        // `fetch` false: a non-fetching add, same semantics.
        let add = AtomicOp {
            fetch: false,
            ..op(FetchAdd, W64, 5, 0)
        };
        assert!(!add.is_fetching() && op(FetchAdd, W64, 5, 0).is_fetching());
        assert_eq!(add.apply(7), 12);
        let set = AtomicOp {
            fetch: true,
            ..op(Set, W64, 3, 0)
        };
        assert!(!set.is_fetching(), "a set never fetches");
    }

    #[cfg(not(loom))]
    #[test]
    fn heap_rmw_matches_the_reference() {
        use AtomicKind::*;

        use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};
        let kinds = [
            FetchAdd,
            CompareSwap,
            Swap,
            Fetch,
            Set,
            FetchAnd,
            FetchOr,
            FetchXor,
        ];
        for (i, kind) in kinds.into_iter().enumerate() {
            for (operand, compare) in [(5u64, 7u64), (u64::MAX, 0x1_0000_0007), (0b110, 3)] {
                let start = 7 + i as u64;
                let o64 = op(kind, AtomicWidth::W64, operand, compare);
                let a = AtomicU64::new(start);
                let old = heap_rmw_u64(&a, &o64);
                assert_eq!(a.load(Ordering::Relaxed), o64.apply(start), "{kind:?}");
                if o64.is_fetching() {
                    assert_eq!(old, start, "{kind:?}");
                }
                let o32 = op(kind, AtomicWidth::W32, operand, compare);
                let b = AtomicU32::new(start as u32);
                let old = heap_rmw_u32(&b, &o32);
                assert_eq!(
                    u64::from(b.load(Ordering::Relaxed)),
                    o32.apply(start),
                    "{kind:?}"
                );
                if o32.is_fetching() {
                    assert_eq!(old, start, "{kind:?}");
                }
            }
        }
    }
}
