//! Route selection: `select(dst, len, op) -> Route` in O(1), from the class row
//! and the health and load bits.
//!
//! # Default policy (DESIGN.md)
//!
//! 1. `LOCAL`/`SHM` → shared memory if healthy.
//! 2. `NEAR` → RDMA if healthy; a stream (TCP) rail is not a candidate while RDMA
//!    is healthy and under its load watermark.
//! 3. `ROUTED`, or the preferred transport unhealthy → fallback: messages shorter
//!    than [`Policy::short_threshold`] take a stream rail, longer ones RDMA if
//!    healthy, else a stream rail.
//! 4. A preferred transport over its load watermark yields to the next healthy
//!    one that is not (if every healthy one is over, the first healthy one is used:
//!    load never fails a message).
//! 5. Nothing healthy → [`SelectError::Unreachable`] at once, with the reason.
//!
//! Taking anything but the first candidate of a (class, length band) is a
//! *downgrade*; per class it is allowed, allowed and counted, or forbidden
//! ([`Downgrade`]). The candidate lists are computed once, in
//! [`Policy::new`]; a select walks at most [`MAX_TRANSPORTS`] of them.

use core::fmt;

use crate::{
    class::{MAX_TRANSPORTS, PathClass, TransportId},
    sync::atomic::Ordering,
    topology::{Pinned, Reader, Topology},
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
    /// Whether a fetching atomic may be retried on another transport. Off by
    /// default: if the first transport applied it and only the reply was lost, a
    /// retry elsewhere would apply it twice.
    pub retry_fetching_atomics: bool,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            roles: TransportRoles::default(),
            short_threshold: 8192,
            load_watermark: LoadWatermark { per_mille: 750 },
            downgrade: [Downgrade::Allow; 5],
            retry_fetching_atomics: false,
        }
    }
}

/// Transports to try for one (class, length band), in order.
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

/// A route policy with its candidate lists computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    config: PolicyConfig,
    /// `[class][band]`, band 0 short, 1 long. Unreachable has no candidates.
    table: [[Candidates; 2]; 5],
}

impl Policy {
    /// Computes the candidate lists for `config`.
    pub fn new(config: PolicyConfig) -> Policy {
        let r = &config.roles;
        let mut table = [[Candidates::EMPTY; 2]; 5];
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
            table[PathClass::Local.index()][band] = same_node;
            table[PathClass::Shm.index()][band] = same_node;
            // NEAR: RDMA, then stream rails.
            let mut near = Candidates::EMPTY;
            near.push(r.rdma);
            near.push_all(&r.stream);
            table[PathClass::Near.index()][band] = near;
            // ROUTED: short → stream first; long → RDMA first.
            let mut routed = Candidates::EMPTY;
            if long {
                routed.push(r.rdma);
                routed.push_all(&r.stream);
            } else {
                routed.push_all(&r.stream);
                routed.push(r.rdma);
            }
            table[PathClass::Routed.index()][band] = routed;
        }
        Policy { config, table }
    }

    /// The configuration this policy was built from.
    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    /// The transports tried for `class` and a message of `len` bytes, in order.
    pub fn candidates(&self, class: PathClass, len: u32) -> impl Iterator<Item = TransportId> + '_ {
        let band = (len >= self.config.short_threshold) as usize;
        self.table[class.index()][band].as_slice().iter().copied()
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
    lane_bits: u64,
    counter: u64,
    downgrades: [u64; 5],
}

/// Why a selector could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectorError {
    /// Every reader slot of the topology is taken.
    NoReaderSlot,
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("every reader slot of the topology is taken")
    }
}

impl core::error::Error for SelectorError {}

impl<'a> Selector<'a> {
    /// A selector for `topo` with `policy`. `lane` (0..=255) goes into every
    /// context id, so that several selectors of one PE never issue the same id.
    ///
    /// # Errors
    /// [`SelectorError::NoReaderSlot`] when every reader slot is taken.
    pub fn new(topo: &Topology<'a>, policy: Policy, lane: u8) -> Result<Self, SelectorError> {
        let reader = topo.reader().ok_or(SelectorError::NoReaderSlot)?;
        Ok(Selector {
            pe: topo.shape().me,
            reader,
            policy,
            lane_bits: (lane as u64) << CONTEXT_COUNTER_BITS,
            counter: 0,
            downgrades: [0; 5],
        })
    }

    /// The policy in use.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Downgrades counted so far per class ([`PathClass::index`]), for classes
    /// whose policy is [`Downgrade::AllowAndCount`].
    pub fn downgrades(&self) -> [u64; 5] {
        self.downgrades
    }

    /// Decisions made so far.
    pub fn decisions(&self) -> u64 {
        self.counter
    }

    /// Enters the published topology version for a batch of selects. Hold the
    /// guard for a batch (one progress step, one burst), not forever: the writer
    /// cannot reuse the older slot while it lives.
    #[inline]
    pub fn pin(&mut self) -> PinnedSelector<'_, 'a> {
        PinnedSelector {
            pinned: self.reader.pin(),
            policy: &self.policy,
            pe: self.pe,
            lane_bits: self.lane_bits,
            counter: &mut self.counter,
            downgrades: &mut self.downgrades,
        }
    }

    /// One select with its own pin: for callers outside a batch.
    ///
    /// # Errors
    /// See [`PinnedSelector::select`].
    #[inline]
    pub fn select(&mut self, dst: u32, len: u32, op: Op) -> Result<Route, SelectError> {
        self.pin().select(dst, len, op)
    }
}

/// A selector inside one topology version (see [`Selector::pin`]).
#[derive(Debug)]
pub struct PinnedSelector<'s, 'a> {
    pinned: Pinned<'s, 'a>,
    policy: &'s Policy,
    pe: u32,
    lane_bits: u64,
    counter: &'s mut u64,
    downgrades: &'s mut [u64; 5],
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
    #[inline]
    pub fn select(&mut self, dst: u32, len: u32, op: Op) -> Result<Route, SelectError> {
        let Some(class) = self.pinned.class(dst) else {
            let n_pes = self.pinned.topology().shape().n_pes;
            return Err(SelectError::InvalidPe { dst, n_pes });
        };
        let cfg = &self.policy.config;
        let band = (len >= cfg.short_threshold) as usize;
        let cands = &self.policy.table[class.index()][band];
        let ids = cands.as_slice();
        if ids.is_empty() {
            let reason = if class == PathClass::Unreachable {
                UnreachableReason::NoLink
            } else {
                UnreachableReason::NoTransportConfigured
            };
            return Err(SelectError::Unreachable { dst, class, reason });
        }
        let n_t = self.pinned.topology().shape().n_transports as usize;
        let load = self.pinned.topology().shape().load_hints;
        let (words, bit) = self.pinned.link_group(dst);
        let healthy = |t: TransportId| {
            t.index() < n_t && (words[t.index()].load(Ordering::Relaxed) >> bit) & 1 != 0
        };
        let over = |t: TransportId| {
            load && t.index() < n_t
                && (words[n_t + t.index()].load(Ordering::Relaxed) >> bit) & 1 != 0
        };
        let forbid = cfg.downgrade[class.index()] == Downgrade::Forbid;

        // First healthy candidate not over its watermark; else first healthy one.
        let mut first_healthy = None;
        let mut chosen = None;
        for (i, &t) in ids.iter().enumerate() {
            if forbid && i > 0 {
                break;
            }
            if healthy(t) {
                if !over(t) {
                    chosen = Some(i);
                    break;
                }
                if first_healthy.is_none() {
                    first_healthy = Some(i);
                }
            }
        }
        let Some(i) = chosen.or(first_healthy) else {
            // Forbid is the reason only if a fallback would have been healthy.
            if forbid && ids[1..].iter().any(|&t| healthy(t)) {
                return Err(SelectError::DowngradeForbidden {
                    dst,
                    class,
                    preferred: ids[0],
                });
            }
            return Err(SelectError::Unreachable {
                dst,
                class,
                reason: UnreachableReason::NoHealthyTransport,
            });
        };
        let downgraded = i > 0;
        if downgraded && cfg.downgrade[class.index()] == Downgrade::AllowAndCount {
            self.downgrades[class.index()] += 1;
        }
        let seq = self.lane_bits | (*self.counter & ((1 << CONTEXT_COUNTER_BITS) - 1));
        *self.counter += 1;
        let retry_allowed = match op {
            Op::FetchingAtomic => cfg.retry_fetching_atomics && ids.len() > 1 && !forbid,
            _ => ids.len() > 1 && !forbid,
        };
        Ok(Route {
            transport: ids[i],
            class,
            retry_allowed,
            downgraded,
            context: ContextId { pe: self.pe, seq },
        })
    }
}
