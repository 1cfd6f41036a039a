//! Route selection: `select(dst, len, op) -> Route` in O(1), from the class row
//! and the health and load bits.
//!
//! # Default policy (docs/ARCHITECTURE.md, "The route policy")
//!
//! 1. `LOCAL`/`SHM` → shared memory if healthy.
//! 2. `NEAR` → RDMA if healthy; a stream (TCP) rail is not a candidate while RDMA
//!    is healthy and under its load watermark.
//! 3. `ROUTED`, or the preferred transport unhealthy → fallback: messages shorter
//!    than [`PolicyConfig::short_threshold`] take a stream rail, longer ones RDMA if
//!    healthy, else a stream rail.
//! 4. A preferred transport over its load watermark yields to the next healthy
//!    one that is not (if every healthy one is over, the first healthy one is used:
//!    load never fails a message).
//! 5. Nothing healthy → [`SelectError::Unreachable`] at once, with the reason.
//!
//! Atomics have a band of their own when RDMA atomics may not be used
//! ([`PolicyConfig::rdma_atomics`] off: the NIC's atomics are not atomic with
//! respect to the CPU's, which shared memory, the stream target and a PE's own
//! atomics use): its candidates are the class's without RDMA, so an atomic to
//! a NEAR peer takes a stream rail as its *first* choice (not a downgrade).
//!
//! Taking anything but the first candidate of a (class, length band) is a
//! *downgrade*; per class it is allowed, allowed and counted, or forbidden
//! ([`Downgrade`]). The candidate lists are computed once, in
//! [`Policy::new`]; a select walks at most [`MAX_TRANSPORTS`] of them.

use core::fmt;

use crate::{
    class::{MAX_TRANSPORTS, PathClass, TransportId},
    topology::{LinkAt, Pinned, READER_IDLE, Reader, RowView, Topology},
};

/// Which transport id plays which role. The core names roles, never drivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TransportRoles {
    /// Shared memory (same node).
    pub shm: Option<TransportId>,
    /// RDMA (verbs).
    pub rdma: Option<TransportId>,
    /// Stream rails (TCP), in order of preference; unused entries `None`.
    pub stream: [Option<TransportId>; 4],
}

/// What a class does when it has to take a worse transport than its first choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Downgrade {
    /// Fall back silently.
    #[default]
    Allow,
    /// Fall back and count it ([`Selector::downgrades`]).
    AllowAndCount,
    /// Never fall back: select fails with [`SelectError::DowngradeForbidden`].
    Forbid,
}

/// A load watermark: the queue occupancy above which a transport yields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadWatermark {
    /// Per mille of the queue capacity, 0..=1000.
    pub per_mille: u16,
}

impl LoadWatermark {
    /// Whether `used` out of `capacity` is over the watermark. A driver feeds the
    /// answer to [`Topology::set_overloaded`].
    #[inline]
    pub const fn exceeded(self, used: u32, capacity: u32) -> bool {
        (used as u64) * 1000 > (capacity as u64) * (self.per_mille as u64)
    }
}

/// The kind of operation being routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Put (write to the peer's heap).
    Put,
    /// Get (read from the peer's heap).
    Get,
    /// An atomic that returns a value (fetch-add, compare-swap, swap, fetch).
    FetchingAtomic,
    /// An atomic that returns nothing (add, set, and/or/xor).
    Atomic,
}

impl Op {
    /// Whether the op is an atomic (not idempotent: see [`PolicyConfig::retry_atomics`]).
    #[inline]
    pub const fn is_atomic(self) -> bool {
        matches!(self, Op::FetchingAtomic | Op::Atomic)
    }
}

/// Policy settings, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyConfig {
    /// Which ids are which transports.
    pub roles: TransportRoles,
    /// Messages shorter than this many bytes are "short" on a fallback path.
    pub short_threshold: u32,
    /// Load watermark (drivers compare against it; kept here so one config
    /// carries every routing knob).
    pub load_watermark: LoadWatermark,
    /// Per class ([`PathClass::index`]) downgrade behaviour.
    pub downgrade: [Downgrade; 5],
    /// Whether an atomic (fetching or not) may be retried on another transport.
    /// Off by default: atomics are not idempotent, and if the first transport
    /// applied one and only the ack or reply was lost, a retry elsewhere would
    /// apply it twice. Puts and gets may always be retried.
    pub retry_atomics: bool,
    /// Whether atomics may take the RDMA transport. On by default. Off when
    /// the NIC's atomics are atomic only among themselves (`IBV_ATOMIC_HCA`)
    /// while other agents update the same words with CPU atomics (shared
    /// memory, the stream transport's target, a PE's own atomics): atomics
    /// then use the class's candidates without RDMA (the atomic band), and a
    /// stream rail is their first choice, not a downgrade.
    pub rdma_atomics: bool,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            roles: TransportRoles::default(),
            short_threshold: 8192,
            load_watermark: LoadWatermark { per_mille: 750 },
            downgrade: [Downgrade::Allow; 5],
            retry_atomics: false,
            rdma_atomics: true,
        }
    }
}

/// Transports to try for one (class, length band), in order.
// A `heapless::Vec<TransportId, MAX_TRANSPORTS>` in all but name, kept by hand
// because `heapless::Vec` implements `Drop` and so cannot be `Copy`, and
// `Policy` (which holds 15 of these) is `Copy`: callers and tests hand one
// policy to several selectors by value. Only `Policy::new` writes it and only
// the cold paths read it (`candidates_for`, `explain`); a select reads the
// decision table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Candidates {
    ids: [TransportId; MAX_TRANSPORTS],
    len: u8,
}

impl Candidates {
    const EMPTY: Candidates = Candidates {
        ids: [TransportId(0); MAX_TRANSPORTS],
        len: 0,
    };

    fn push(&mut self, t: Option<TransportId>) {
        if let Some(t) = t
            && !self.as_slice().contains(&t)
            && (self.len as usize) < MAX_TRANSPORTS
        {
            self.ids[self.len as usize] = t;
            self.len += 1;
        }
    }

    fn push_all(&mut self, ts: &[Option<TransportId>]) {
        for t in ts {
            self.push(*t);
        }
    }

    fn as_slice(&self) -> &[TransportId] {
        &self.ids[..self.len as usize]
    }
}

/// A decision table entry: the transport id in bits 0..=2, "may retry
/// elsewhere" for puts and gets in bit 3 and for atomics in bit 4,
/// "downgraded" in bit 6, "valid" in bit 7. Everything a `Route` needs besides
/// the class comes from this one byte.
const ENTRY_VALID: u8 = 1 << 7;
const ENTRY_DOWNGRADED: u8 = 1 << 6;
const ENTRY_RETRY: u8 = 1 << 3;
const ENTRY_ID: u8 = 0x07;
static_assertions::const_assert!(MAX_TRANSPORTS <= ENTRY_ID as usize + 1);
/// One entry per subset of the [`MAX_TRANSPORTS`] transports.
const MASKS: usize = 1 << MAX_TRANSPORTS;
/// Length bands: 0 short, 1 long, 2 atomics without RDMA.
const BANDS: usize = 3;
/// The band of atomics when [`PolicyConfig::rdma_atomics`] is off.
const ATOMIC_BAND: usize = 2;

/// A route policy with its decisions computed.
///
/// [`Policy::new`] walks the candidate list of every (class, length band) for
/// every subset of usable transports once and stores the outcome, so a select is
/// a handful of loads and one table lookup, with no branch that depends on the
/// health bits or the candidate order (which random traffic would mispredict).
/// The table is 3,840 bytes and stays in L1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    config: PolicyConfig,
    /// `[class][band]`, band 0 short, 1 long, 2 atomics without RDMA.
    /// Unreachable has no candidates.
    candidates: [[Candidates; BANDS]; 5],
    /// `[class][band][usable mask]` → entry.
    // A dense array with every entry written: nothing for `heapless` to
    // bound, and its entries are bytes, not bits (a select does one indexed
    // load, keyed by the usable-transport mask).
    table: [[[u8; MASKS]; BANDS]; 5],
    /// Per [`Op`] (`op as usize`): whether it uses the atomic band.
    atomic_band: [bool; 4],
    /// `[class]`: whether downgrades are counted.
    count: [bool; 5],
    /// Whether any class counts downgrades.
    counting: bool,
    /// `[class][band]`: the transport index of the first candidate, or
    /// [`NO_FIRST`] when there is none.
    first: [[u8; BANDS]; 5],
    /// `[class][band]`: the entry of every mask in which the first candidate
    /// is usable (the same for all of them: it is taken, not downgraded).
    first_entry: [[u8; BANDS]; 5],
    /// `[class][band]`: the transport index of the second candidate, or
    /// [`NO_FIRST`] when there is none or the class may not fall back to it
    /// (`Downgrade::Forbid`).
    second: [[u8; BANDS]; 5],
    /// `[class][band]`: the entry of every mask in which the first candidate
    /// is not usable and the second is (the same for all of them: the
    /// second is taken, a downgrade).
    second_entry: [[u8; BANDS]; 5],
}

/// [`Policy::first`] of a (class, band) with no candidate: above every
/// transport index, so never usable.
const NO_FIRST: u8 = u8::MAX;

impl Policy {
    /// Computes the candidate lists and decisions for `config`.
    pub fn new(config: PolicyConfig) -> Policy {
        let r = &config.roles;
        let mut candidates = [[Candidates::EMPTY; BANDS]; 5];
        for (band, long) in [(0, false), (1, true)] {
            // LOCAL / SHM: shared memory, then the rule-3 fallback.
            let mut same_node = Candidates::EMPTY;
            same_node.push(r.shm);
            if long {
                same_node.push(r.rdma);
                same_node.push_all(&r.stream);
            } else {
                same_node.push_all(&r.stream);
                same_node.push(r.rdma);
            }
            candidates[PathClass::Local.index()][band] = same_node;
            candidates[PathClass::Shm.index()][band] = same_node;
            // NEAR: RDMA, then stream rails.
            let mut near = Candidates::EMPTY;
            near.push(r.rdma);
            near.push_all(&r.stream);
            candidates[PathClass::Near.index()][band] = near;
            // ROUTED: short → stream first; long → RDMA first.
            let mut routed = Candidates::EMPTY;
            if long {
                routed.push(r.rdma);
                routed.push_all(&r.stream);
            } else {
                routed.push_all(&r.stream);
                routed.push(r.rdma);
            }
            candidates[PathClass::Routed.index()][band] = routed;
        }
        // Atomics without RDMA: each class's short candidates, RDMA left out.
        for bands in &mut candidates {
            let mut c = Candidates::EMPTY;
            for &t in bands[0].as_slice() {
                if Some(t) != r.rdma {
                    c.push(Some(t));
                }
            }
            bands[ATOMIC_BAND] = c;
        }

        let mut table = [[[0u8; MASKS]; BANDS]; 5];
        let mut count = [false; 5];
        for class in 0..5 {
            let rule = config.downgrade[class];
            let forbid = rule == Downgrade::Forbid;
            count[class] = rule == Downgrade::AllowAndCount;
            for band in 0..BANDS {
                let ids = candidates[class][band].as_slice();
                let allowed = if forbid {
                    &ids[..ids.len().min(1)]
                } else {
                    ids
                };
                // Retrying elsewhere needs somewhere else to go.
                let alternatives = !forbid && ids.len() > 1;
                let atomic_retry = alternatives && config.retry_atomics;
                let retry =
                    (alternatives as u8 * ENTRY_RETRY) | (atomic_retry as u8 * (ENTRY_RETRY << 1));
                for (mask, entry) in table[class][band].iter_mut().enumerate() {
                    if let Some(i) = allowed.iter().position(|t| mask & (1 << t.index()) != 0) {
                        let downgraded = if i > 0 { ENTRY_DOWNGRADED } else { 0 };
                        *entry = ENTRY_VALID | downgraded | retry | allowed[i].0;
                    }
                }
            }
        }
        let counting = count.iter().any(|&c| c);
        let no_rdma_atomics = !config.rdma_atomics;
        let mut first = [[NO_FIRST; BANDS]; 5];
        let mut first_entry = [[0u8; BANDS]; 5];
        let mut second = [[NO_FIRST; BANDS]; 5];
        let mut second_entry = [[0u8; BANDS]; 5];
        for class in 0..5 {
            for band in 0..BANDS {
                let ids = candidates[class][band].as_slice();
                if let Some(t) = ids.first() {
                    first[class][band] = t.0;
                    first_entry[class][band] = table[class][band][1 << t.index()];
                }
                if let Some(t) = ids.get(1) {
                    // Only where the table takes it when it is the one usable
                    // candidate (not under `Forbid`).
                    let entry = table[class][band][1 << t.index()];
                    if entry & ENTRY_VALID != 0 && entry & ENTRY_ID == t.0 {
                        second[class][band] = t.0;
                        second_entry[class][band] = entry;
                    }
                }
            }
        }
        Policy {
            config,
            candidates,
            table,
            // Indexed by `Op as usize`: Put, Get, FetchingAtomic, Atomic.
            atomic_band: [false, false, no_rdma_atomics, no_rdma_atomics],
            count,
            counting,
            first,
            first_entry,
            second,
            second_entry,
        }
    }

    /// The configuration this policy was built from.
    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    /// The transports tried for `class` and a message of `len` bytes, in order
    /// (puts and gets; see [`Policy::candidates_for`]).
    pub fn candidates(&self, class: PathClass, len: u32) -> impl Iterator<Item = TransportId> + '_ {
        self.candidates_for(class, len, Op::Put)
    }

    /// The transports tried for `class`, a message of `len` bytes and `op`,
    /// in order: atomics leave RDMA out when
    /// [`PolicyConfig::rdma_atomics`] is off.
    pub fn candidates_for(
        &self,
        class: PathClass,
        len: u32,
        op: Op,
    ) -> impl Iterator<Item = TransportId> + '_ {
        self.candidates[class.index()][self.band(len, op)]
            .as_slice()
            .iter()
            .copied()
    }

    /// The band of `len` bytes of `op`: short, long, or the atomic band.
    #[inline(always)]
    fn band(&self, len: u32, op: Op) -> usize {
        if self.atomic_band[op as usize] {
            ATOMIC_BAND
        } else {
            (len >= self.config.short_threshold) as usize
        }
    }

    /// Why nothing was selected for `class`/`band` with `healthy` transports.
    #[cold]
    fn explain(&self, dst: u32, class: PathClass, band: usize, healthy: usize) -> SelectError {
        let ids = self.candidates[class.index()][band].as_slice();
        let reason = if class == PathClass::Unreachable {
            UnreachableReason::NoLink
        } else if ids.is_empty() {
            UnreachableReason::NoTransportConfigured
        } else if self.config.downgrade[class.index()] == Downgrade::Forbid
            && ids[1..].iter().any(|t| healthy & (1 << t.index()) != 0)
        {
            // Forbid is the reason only if a fallback would have been healthy.
            return SelectError::DowngradeForbidden {
                dst,
                class,
                preferred: ids[0],
            };
        } else {
            UnreachableReason::NoHealthyTransport
        };
        SelectError::Unreachable { dst, class, reason }
    }
}

/// Identifies one routing decision across machines: the deciding PE and a
/// sequence unique to it over the job's life. Travels in every frame and trace
/// record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContextId {
    /// The deciding PE.
    pub pe: u32,
    /// `lane << 56 | counter`: the selector's lane and its own counter.
    pub seq: u64,
}

/// Bits of [`ContextId::seq`] taken by the counter; the top 8 carry the lane.
pub const CONTEXT_COUNTER_BITS: u32 = 56;

impl fmt::Display for ContextId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}",
            self.pe,
            self.seq >> CONTEXT_COUNTER_BITS,
            self.seq & ((1 << CONTEXT_COUNTER_BITS) - 1)
        )
    }
}

/// The outcome of a select.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The transport to use.
    pub transport: TransportId,
    /// The class of the pair.
    pub class: PathClass,
    /// Whether the operation may be retried on another transport if this one fails.
    pub retry_allowed: bool,
    /// Whether this is not the class's first choice (a fallback or a load yield).
    pub downgraded: bool,
    /// The decision's id.
    pub context: ContextId,
}

/// Why nothing could be selected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnreachableReason {
    /// The topology says there is no link to the peer (class `UNREACHABLE`).
    NoLink,
    /// The class has candidates, but none of them is healthy.
    NoHealthyTransport,
    /// No transport is configured for this class at all.
    NoTransportConfigured,
}

/// A select that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectError {
    /// `dst` is not a PE of this job.
    InvalidPe {
        /// The destination asked for.
        dst: u32,
        /// The job size.
        n_pes: u32,
    },
    /// No usable transport toward `dst`.
    Unreachable {
        /// The destination.
        dst: u32,
        /// Its class.
        class: PathClass,
        /// Why.
        reason: UnreachableReason,
    },
    /// The first choice is unhealthy and the class forbids falling back.
    DowngradeForbidden {
        /// The destination.
        dst: u32,
        /// Its class.
        class: PathClass,
        /// The first choice, which is unhealthy.
        preferred: TransportId,
    },
}

impl fmt::Display for SelectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidPe { dst, n_pes } => {
                write!(f, "PE {dst} does not exist (job of {n_pes} PEs)")
            }
            Self::Unreachable { dst, class, reason } => {
                let why = match reason {
                    UnreachableReason::NoLink => "no link in the topology",
                    UnreachableReason::NoHealthyTransport => "no healthy transport",
                    UnreachableReason::NoTransportConfigured => "no transport configured",
                };
                write!(f, "PE {dst} ({class}) is unreachable: {why}")
            }
            Self::DowngradeForbidden {
                dst,
                class,
                preferred,
            } => write!(
                f,
                "PE {dst} ({class}): preferred transport {preferred} is unhealthy and the policy forbids falling back"
            ),
        }
    }
}

impl core::error::Error for SelectError {}

/// Per-thread route selector: a claimed reader of the topology, the policy, and
/// the counters of this thread's decisions. `&mut self` everywhere: no sharing, no
/// atomics of its own on the hot path.
#[derive(Debug)]
pub struct Selector<'a> {
    reader: Reader<'a>,
    policy: Policy,
    pe: u32,
    n_transports: u8,
    lane_bits: u64,
    counter: u64,
    /// `counter` when this selector was made.
    first: u64,
    downgrades: [u64; 5],
    /// The view of the version the reader's sticky pin holds, valid while
    /// `view_key` is the published `current` word ([`Selector::select_sticky`]);
    /// `view_key` is `READER_IDLE` (never published) when there is none.
    view: RowView<'a>,
    view_key: usize,
    /// What [`Selector::select_sticky`] learned of recent destinations in
    /// the held version, slot `dst % MEMO_SLOTS`; emptied with the view
    /// and when the policy changes.
    memo: [Memo; MEMO_SLOTS],
}

/// Destinations [`Selector::select_sticky`] remembers (direct-mapped).
const MEMO_SLOTS: usize = 16;

/// One destination and band as [`decide`] finds them in a version: its class
/// index, the (class, band)'s first candidate's entry and where that
/// candidate's health and load bits toward it are, and the same for the
/// second candidate (the fallback: TCP where RDMA comes first and the PE
/// has none). Nothing here changes within a version and a policy; the bits
/// themselves are read per select.
#[derive(Debug, Clone, Copy)]
struct Memo {
    /// `u32::MAX` (never a PE: `dst < n_pes <= u32::MAX`) when empty.
    dst: u32,
    band: u8,
    ci: u8,
    entry: u8,
    /// [`Policy::second_entry`]: taken when `at` is not usable and `fall`
    /// is.
    fall_entry: u8,
    at: LinkAt,
    /// The second candidate's bits ([`LinkAt::NONE`]: none to fall to).
    fall: LinkAt,
}

impl Memo {
    const EMPTY: Memo = Memo {
        dst: u32::MAX,
        band: 0,
        ci: 0,
        entry: 0,
        fall_entry: 0,
        at: LinkAt::NONE,
        fall: LinkAt::NONE,
    };
}

impl Drop for Selector<'_> {
    fn drop(&mut self) {
        // The next selector on this reader slot continues the sequence.
        self.reader.save_counter(self.counter);
    }
}

/// Why a selector could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectorError {
    /// Every reader slot of the topology is taken.
    NoReaderSlot,
    /// A role names a transport id the topology keeps no health bits for: it
    /// could never be selected.
    RoleOutOfRange {
        /// The role (`"shm"`, `"rdma"` or `"stream"`).
        role: &'static str,
        /// The id given.
        id: TransportId,
        /// Transports the topology has.
        n_transports: u8,
    },
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoReaderSlot => f.write_str("every reader slot of the topology is taken"),
            Self::RoleOutOfRange {
                role,
                id,
                n_transports,
            } => write!(
                f,
                "the {role} role is transport {id}, but the topology has {n_transports} transports"
            ),
        }
    }
}

impl core::error::Error for SelectorError {}

impl<'a> Selector<'a> {
    /// A selector for `topo` with `policy`, on a free reader slot of `topo`.
    ///
    /// Context ids are unique per PE over the topology's life: the slot's index
    /// is the lane (top 8 bits of [`ContextId::seq`]), and the slot keeps the
    /// counter when a selector is dropped, for the next one on that slot.
    ///
    /// # Errors
    /// [`SelectorError::NoReaderSlot`] when every reader slot is taken;
    /// [`SelectorError::RoleOutOfRange`] when the policy names a transport the
    /// topology has no health bits for.
    pub fn new(topo: &Topology<'a>, policy: Policy) -> Result<Self, SelectorError> {
        check_roles(&policy, topo.shape().n_transports)?;
        let reader = topo.reader().ok_or(SelectorError::NoReaderSlot)?;
        let counter = reader.saved_counter();
        Ok(Selector {
            pe: topo.shape().me,
            n_transports: topo.shape().n_transports,
            lane_bits: (reader.index() as u64) << CONTEXT_COUNTER_BITS,
            reader,
            policy,
            counter,
            first: counter,
            downgrades: [0; 5],
            view: topo.row_view(READER_IDLE),
            view_key: READER_IDLE,
            memo: [Memo::EMPTY; MEMO_SLOTS],
        })
    }

    /// The policy in use.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Replaces the policy (a setting learned after the selector was made,
    /// such as whether the RDMA device's atomics may be used). The decision
    /// counter and the downgrade counts carry on.
    ///
    /// # Errors
    /// [`SelectorError::RoleOutOfRange`] as [`Selector::new`]; the policy is
    /// then unchanged.
    pub fn set_policy(&mut self, policy: Policy) -> Result<(), SelectorError> {
        check_roles(&policy, self.n_transports)?;
        self.policy = policy;
        self.memo = [Memo::EMPTY; MEMO_SLOTS];
        Ok(())
    }

    /// Downgrades counted so far per class ([`PathClass::index`]), for classes
    /// whose policy is [`Downgrade::AllowAndCount`].
    pub fn downgrades(&self) -> [u64; 5] {
        self.downgrades
    }

    /// Decisions made by this selector.
    pub fn decisions(&self) -> u64 {
        self.counter - self.first
    }

    /// Enters the published topology version for a batch of selects. Hold the
    /// guard for a batch (one progress step, one burst), not forever: the writer
    /// cannot reuse the older slot while it lives.
    #[inline]
    pub fn pin(&mut self) -> PinnedSelector<'_, 'a> {
        self.view_key = READER_IDLE;
        let pinned = self.reader.pin();
        PinnedSelector {
            view: pinned.view(),
            pinned,
            policy: &self.policy,
            pe: self.pe,
            lane_bits: self.lane_bits,
            counter: self.counter,
            counter_home: &mut self.counter,
            downgrades: &mut self.downgrades,
        }
    }

    /// As [`pin`](Self::pin), but the reader stays announced in the version
    /// after the guard drops ([`Reader::pin_sticky`]): a run of single
    /// selects then costs no store and no fence each, only a load of the
    /// published version. Call [`unpin`](Self::unpin) before going idle, and
    /// before this thread updates the topology itself.
    #[inline]
    pub fn pin_sticky(&mut self) -> PinnedSelector<'_, 'a> {
        self.view_key = READER_IDLE;
        let pinned = self.reader.pin_sticky();
        PinnedSelector {
            view: pinned.view(),
            pinned,
            policy: &self.policy,
            pe: self.pe,
            lane_bits: self.lane_bits,
            counter: self.counter,
            counter_home: &mut self.counter,
            downgrades: &mut self.downgrades,
        }
    }

    /// Leaves the version a [`pin_sticky`](Self::pin_sticky) or
    /// [`select_sticky`](Self::select_sticky) held.
    #[inline]
    pub fn unpin(&mut self) {
        self.view_key = READER_IDLE;
        self.reader.unpin();
    }

    /// One select inside the version a sticky pin holds
    /// ([`pin_sticky`](Self::pin_sticky)): the per-message path of a thread
    /// that selects one operation at a time. While the published version is
    /// the one held, it costs one Acquire load and a compare before the
    /// decision (no store, no fence, and the version's view is kept here,
    /// not rebuilt); a newer version is entered with the full protocol
    /// first. Same decisions, same context ids as [`PinnedSelector::select`].
    /// Call [`unpin`](Self::unpin) before going idle.
    ///
    /// # Errors
    /// See [`PinnedSelector::select`].
    ///
    /// A destination selected again (one of the last few, slot
    /// `dst % 16`) costs less: its class and where its first two
    /// candidates' bits are were kept from the previous decision in the
    /// same version, so the decision is those bits (the first usable:
    /// health set, load clear, that candidate's entry; the second taken
    /// only where the class may fall back) or, when neither is usable, the
    /// full decision.
    #[inline(always)]
    pub fn select_sticky(&mut self, dst: u32, len: u32, op: Op) -> Result<Route, SelectError> {
        if self.reader.published() != self.view_key {
            self.repin_sticky();
        }
        let band = self.policy.band(len, op);
        let m = &self.memo[dst as usize % MEMO_SLOTS];
        // The table takes the first usable candidate: the first when it is
        // usable, else the second when that one is (and the class may fall
        // back to it, or `fall` is NONE); anything else is decided in full.
        let (entry, ci) = if (m.dst == dst) & (usize::from(m.band) == band) {
            if self.view.usable_at(&m.at) {
                (m.entry, usize::from(m.ci))
            } else if self.view.usable_at(&m.fall) {
                (m.fall_entry, usize::from(m.ci))
            } else {
                self.decide_and_memo(dst, band)?
            }
        } else {
            self.decide_and_memo(dst, band)?
        };
        let seq = self.lane_bits | (self.counter & COUNTER_MASK);
        self.counter += 1;
        Ok(route_of(
            &self.policy,
            &mut self.downgrades,
            seq,
            self.pe,
            entry,
            ci,
            op,
        ))
    }

    /// Enters the published version with a sticky pin and keeps its view
    /// (forgetting what the memo held of the previous one).
    #[cold]
    #[inline(never)]
    fn repin_sticky(&mut self) {
        let pinned = self.reader.pin_sticky();
        self.view = pinned.view();
        drop(pinned);
        self.view_key = self.reader.held();
        self.memo = [Memo::EMPTY; MEMO_SLOTS];
    }

    /// The full decision of [`Selector::select_sticky`], remembering `dst`'s
    /// class and its first candidate's bits for the next one.
    #[inline(never)]
    fn decide_and_memo(&mut self, dst: u32, band: usize) -> Result<(u8, usize), SelectError> {
        let (entry, ci) = decide(&self.view, &self.policy, dst, band)?;
        let first = usize::from(self.policy.first[ci][band]);
        if let Some(at) = self.view.link_at(dst, first) {
            let second = usize::from(self.policy.second[ci][band]);
            self.memo[dst as usize % MEMO_SLOTS] = Memo {
                dst,
                band: band as u8,
                ci: ci as u8,
                entry: self.policy.first_entry[ci][band],
                fall_entry: self.policy.second_entry[ci][band],
                at,
                fall: self.view.link_at(dst, second).unwrap_or(LinkAt::NONE),
            };
        }
        Ok((entry, ci))
    }

    /// One select with its own pin: for callers outside a batch. Each pin costs
    /// a store and a full fence (about as much as a select); a loop of selects
    /// should take one [`pin`](Self::pin) and call
    /// [`PinnedSelector::select`] on it.
    ///
    /// # Errors
    /// See [`PinnedSelector::select`].
    #[inline]
    pub fn select(&mut self, dst: u32, len: u32, op: Op) -> Result<Route, SelectError> {
        self.pin().select(dst, len, op)
    }
}

/// Refuses a policy whose roles name transports the topology has no health
/// bits for.
fn check_roles(policy: &Policy, n_transports: u8) -> Result<(), SelectorError> {
    let r = &policy.config.roles;
    let roles = [("shm", r.shm), ("rdma", r.rdma)]
        .into_iter()
        .chain(r.stream.iter().map(|&t| ("stream", t)));
    for (role, id) in roles {
        if let Some(id) = id
            && id.index() >= n_transports as usize
        {
            return Err(SelectorError::RoleOutOfRange {
                role,
                id,
                n_transports,
            });
        }
    }
    Ok(())
}

/// A selector inside one topology version (see [`Selector::pin`]).
#[derive(Debug)]
pub struct PinnedSelector<'s, 'a> {
    pinned: Pinned<'s, 'a>,
    view: RowView<'a>,
    policy: &'s Policy,
    pe: u32,
    lane_bits: u64,
    /// This batch's counter, kept by value so a loop of selects keeps it in a
    /// register instead of a store-to-load chain through the selector; written
    /// back on drop.
    counter: u64,
    counter_home: &'s mut u64,
    downgrades: &'s mut [u64; 5],
}

impl Drop for PinnedSelector<'_, '_> {
    #[inline]
    fn drop(&mut self) {
        *self.counter_home = self.counter;
    }
}

impl PinnedSelector<'_, '_> {
    /// The topology version this guard reads.
    #[inline]
    pub fn version(&self) -> u32 {
        self.pinned.version()
    }

    /// The class of `dst` in this version.
    #[inline]
    pub fn class(&self, dst: u32) -> Option<PathClass> {
        self.pinned.class(dst)
    }

    /// Chooses the transport for `len` bytes of `op` toward `dst`. Never
    /// connects, allocates or blocks.
    ///
    /// # Errors
    /// [`SelectError::InvalidPe`] for a PE outside the job;
    /// [`SelectError::Unreachable`] when nothing allowed is healthy;
    /// [`SelectError::DowngradeForbidden`] when the first choice is unhealthy and
    /// the class forbids a fallback.
    #[inline(always)]
    pub fn select(&mut self, dst: u32, len: u32, op: Op) -> Result<Route, SelectError> {
        let band = self.policy.band(len, op);
        let (entry, ci) = decide(&self.view, self.policy, dst, band)?;
        let seq = self.lane_bits | (self.counter & COUNTER_MASK);
        self.counter += 1;
        Ok(route_of(
            self.policy,
            self.downgrades,
            seq,
            self.pe,
            entry,
            ci,
            op,
        ))
    }
}

/// The counter bits of a context id's sequence.
const COUNTER_MASK: u64 = (1 << CONTEXT_COUNTER_BITS) - 1;

/// The decision for an operation of length band `band` ([`Policy::band`])
/// toward `dst` in `view`: the decision table's entry and the class index.
///
/// First the (class, band)'s first candidate alone (two loads: its health
/// bit and its load bit): when it is usable, its entry is the one the table
/// gives for every mask holding it, so the other transports' bits need not
/// be read. Otherwise every transport's bits are gathered and the table
/// decides (a fallback, a load yield, or nothing usable).
#[inline(always)]
fn decide(
    view: &RowView<'_>,
    policy: &Policy,
    dst: u32,
    band: usize,
) -> Result<(u8, usize), SelectError> {
    let Some(ci) = view.class_index(dst) else {
        return Err(SelectError::InvalidPe {
            dst,
            n_pes: view.n_pes,
        });
    };
    if view.usable(dst, usize::from(policy.first[ci][band])) {
        return Ok((policy.first_entry[ci][band], ci));
    }
    let (healthy, over) = view.link_masks(dst);
    let decisions = &policy.table[ci][band];
    let mut entry = decisions[(healthy & !over) & (MASKS - 1)];
    if entry & ENTRY_VALID == 0 {
        // Every usable candidate is over its watermark (load never fails a
        // message), or nothing is usable at all.
        entry = decisions[healthy & (MASKS - 1)];
        if entry & ENTRY_VALID == 0 {
            return Err(policy.explain(dst, PathClass::ALL[ci], band, healthy));
        }
    }
    Ok((entry, ci))
}

/// The route of a decision `entry` for class index `ci`, with sequence `seq`
/// (the downgrade counted when the class counts them).
#[inline(always)]
fn route_of(
    policy: &Policy,
    downgrades: &mut [u64; 5],
    seq: u64,
    pe: u32,
    entry: u8,
    ci: usize,
    op: Op,
) -> Route {
    let downgraded = entry & ENTRY_DOWNGRADED != 0;
    // The outer test is a per-policy constant (predicted perfectly); inside,
    // no branch on whether this destination was downgraded (random traffic
    // would mispredict it): adding zero is cheaper.
    if policy.counting {
        downgrades[ci] += (downgraded & policy.count[ci]) as u64;
    }
    Route {
        transport: TransportId(entry & ENTRY_ID),
        class: PathClass::ALL[ci],
        retry_allowed: entry & (ENTRY_RETRY << op.is_atomic() as u8) != 0,
        downgraded,
        context: ContextId { pe, seq },
    }
}
