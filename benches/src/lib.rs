//! Shared helpers for the switchyard benches: a realistic job topology, the real
//! bitmap selector built over it, and the baselines it is compared with in the
//! same run (docs/ARCHITECTURE.md, "Code rules": performance is measured
//! beside a baseline from the same run).
//!
//! # The job
//!
//! [`PES_PER_NODE`] PEs per node, [`NODES_PER_SWITCH`] nodes per leaf switch,
//! as many switches as the job needs, all joined by a router: the class of a
//! pair comes from `pe / 8` (node) and `pe / 128` (switch). Three transports:
//! [`SHM`] (0), [`RDMA`] (1) and [`TCP`] (2). Every (transport, peer) is healthy
//! except the RDMA link to the peers for which [`rdma_down`] holds (about 1.6%),
//! so some NEAR and long ROUTED selects take the fallback.
//!
//! # The baselines
//!
//! They implement the same decision as the real path (class lookup, candidate
//! list for (class, length band), first healthy candidate), with the candidate
//! lists copied from the same [`Policy`], so only the data structures differ:
//!
//! * [`HashMapTopology`]: class in a `HashMap<(u32, u32), u8>` keyed (me, dst),
//!   health in a `HashMap<(u8, u32), bool>` keyed (transport, peer) (std
//!   `HashMap`, default hasher).
//! * [`MatrixTopology`]: the full N×N matrix, 2 bits per ordered pair in a
//!   row-major `Vec<u64>` indexed `me * N + dst`, health in one `Vec<bool>` per
//!   transport. At 1,000,000 PEs it would take 10^12 pairs × 2 bits = 250 GB, so
//!   it is only built for small jobs.
//!
//! Neither baseline models load bits, so the real path is built without them
//! ([`Shape::load_hints`] false): same decision, different layout.

use std::{collections::HashMap, time::Duration};

use criterion::Criterion;
use switchyard_core::{
    class::{InterSwitch, Locality, PathClass, TransportId, class_between},
    route::{Policy, PolicyConfig, TransportRoles},
    topology::{Shape, Topology, TopologyBox},
};

/// Transport id of shared memory.
pub const SHM: u8 = 0;
/// Transport id of RDMA (verbs).
pub const RDMA: u8 = 1;
/// Transport id of TCP.
pub const TCP: u8 = 2;
/// Transports in the job.
pub const N_TRANSPORTS: u8 = 3;
/// PEs per node.
pub const PES_PER_NODE: u32 = 8;
/// Nodes per leaf switch.
pub const NODES_PER_SWITCH: u32 = 16;
/// PEs per leaf switch.
pub const PES_PER_SWITCH: u32 = PES_PER_NODE * NODES_PER_SWITCH;
/// Short-message threshold of the bench policy (the default, 8 KiB).
pub const SHORT_THRESHOLD: u32 = 8192;

/// `TransportId` of a bench transport index.
///
/// # Panics
/// If `i` is not a valid transport index (never for [`SHM`], [`RDMA`], [`TCP`]).
pub fn tid(i: u8) -> TransportId {
    TransportId::new(i).expect("transport index below MAX_TRANSPORTS")
}

/// Where `pe` runs: node `pe / 8`, switch `pe / 128`.
pub fn locality(pe: u32) -> Locality {
    Locality {
        node: pe / PES_PER_NODE,
        switch: pe / PES_PER_SWITCH,
    }
}

/// The class of (`me`, `peer`) in the bench job.
pub fn class_of(me: u32, peer: u32) -> PathClass {
    class_between(me, locality(me), peer, locality(peer), InterSwitch::Routed)
}

/// Whether the RDMA link to `peer` is down in the bench job (about 1 peer in 61).
pub fn rdma_down(peer: u32) -> bool {
    peer % 61 == 7
}

/// Initial health of (`t`, `peer`): everything up but the RDMA links of [`rdma_down`].
pub fn initially_healthy(t: u8, peer: u32) -> bool {
    !(t == RDMA && rdma_down(peer))
}

/// The bench policy: shm 0, rdma 1, one TCP rail 2, defaults otherwise.
pub fn policy() -> Policy {
    let roles = TransportRoles {
        shm: Some(tid(SHM)),
        rdma: Some(tid(RDMA)),
        stream: [Some(tid(TCP)), None, None, None],
    };
    Policy::new(PolicyConfig {
        roles,
        short_threshold: SHORT_THRESHOLD,
        ..PolicyConfig::default()
    })
}

/// The shape of row `me` of an `n_pes` job with the bench transports, no load bits.
pub fn shape(me: u32, n_pes: u32) -> Shape {
    Shape {
        me,
        n_pes,
        n_transports: N_TRANSPORTS,
        load_hints: false,
    }
}

/// Storage for row `me` of an `n_pes` job, with `readers` reader slots.
pub fn topology_box(me: u32, n_pes: u32, readers: usize) -> TopologyBox {
    TopologyBox::new(shape(me, n_pes), readers)
}

/// Lays the bench job's row `me` over `store` and sets its health bits.
///
/// # Panics
/// If `store` was not made by [`topology_box`] with the same `me` and `n_pes`.
pub fn topology(store: &TopologyBox, me: u32, n_pes: u32) -> Topology<'_> {
    let topo = Topology::new(store.mem(), shape(me, n_pes), |peer| class_of(me, peer))
        .expect("storage matches the shape");
    for peer in 0..n_pes {
        for t in 0..N_TRANSPORTS {
            if initially_healthy(t, peer) {
                topo.set_health(tid(t), peer, true);
            }
        }
    }
    topo
}

/// Candidate lists per (class, length band), copied out of a [`Policy`] so the
/// baselines take exactly the same decision as the real selector.
#[derive(Debug, Clone, Copy)]
pub struct CandidateTable {
    /// `[class index][band]`: transport indices, then how many are valid.
    table: [[([u8; 8], u8); 2]; 5],
    short_threshold: u32,
}

impl CandidateTable {
    /// Copies the candidate lists of `policy`.
    pub fn from_policy(policy: &Policy) -> Self {
        let short_threshold = policy.config().short_threshold;
        let mut table = [[([0u8; 8], 0u8); 2]; 5];
        for class in PathClass::ALL {
            for (band, len) in [(0, 0), (1, short_threshold)] {
                let entry = &mut table[class.index()][band];
                for t in policy.candidates(class, len) {
                    entry.0[entry.1 as usize] = t.index() as u8;
                    entry.1 += 1;
                }
            }
        }
        CandidateTable {
            table,
            short_threshold,
        }
    }

    /// The candidates for class index `class` and a message of `len` bytes.
    #[inline]
    pub fn get(&self, class: usize, len: u32) -> &[u8] {
        let (ids, n) = &self.table[class][(len >= self.short_threshold) as usize];
        &ids[..*n as usize]
    }
}

/// Baseline: class and health in std `HashMap`s (default hasher).
#[derive(Debug)]
pub struct HashMapTopology {
    me: u32,
    /// Class index ([`PathClass::index`]) per (me, dst).
    class: HashMap<(u32, u32), u8>,
    /// Health per (transport, peer).
    health: HashMap<(u8, u32), bool>,
    cands: CandidateTable,
}

impl HashMapTopology {
    /// Row `me` of the bench job of `n_pes`, with the bench health.
    pub fn new(me: u32, n_pes: u32, policy: &Policy) -> Self {
        let mut class = HashMap::with_capacity(n_pes as usize);
        let mut health = HashMap::with_capacity(n_pes as usize * N_TRANSPORTS as usize);
        for peer in 0..n_pes {
            class.insert((me, peer), class_of(me, peer).index() as u8);
            for t in 0..N_TRANSPORTS {
                health.insert((t, peer), initially_healthy(t, peer));
            }
        }
        HashMapTopology {
            me,
            class,
            health,
            cands: CandidateTable::from_policy(policy),
        }
    }

    /// Sets the health of (`t`, `peer`).
    pub fn set_health(&mut self, t: u8, peer: u32, up: bool) {
        self.health.insert((t, peer), up);
    }

    /// The transport index for `len` bytes to `dst`, `None` when nothing is
    /// healthy (or `dst` is unknown).
    #[inline]
    pub fn select(&self, dst: u32, len: u32) -> Option<u8> {
        let class = *self.class.get(&(self.me, dst))?;
        self.cands
            .get(class as usize, len)
            .iter()
            .copied()
            .find(|&t| self.health.get(&(t, dst)).copied().unwrap_or(false))
    }
}

/// Baseline: the full N×N class matrix, 2 bits per ordered pair, row-major.
#[derive(Debug)]
pub struct MatrixTopology {
    me: u32,
    n_pes: u32,
    /// 32 pairs per word, pair `(a, b)` at bit index `2 * (a * N + b)`.
    bits: Vec<u64>,
    /// One health flag per peer, per transport.
    health: [Vec<bool>; N_TRANSPORTS as usize],
    cands: CandidateTable,
}

impl MatrixTopology {
    /// The whole matrix of the bench job of `n_pes` (every row, as a tool would
    /// build it), seen from PE `me`, with the bench health.
    ///
    /// # Panics
    /// If `n_pes` is so large the matrix cannot be indexed (it would not fit in
    /// memory long before).
    pub fn new(me: u32, n_pes: u32, policy: &Policy) -> Self {
        let n = n_pes as usize;
        let pairs = n.checked_mul(n).expect("matrix size overflows");
        let mut bits = vec![0u64; pairs.div_ceil(32)];
        for a in 0..n_pes {
            let base = a as usize * n;
            for b in 0..n_pes {
                let i = base + b as usize;
                bits[i / 32] |= (class_of(a, b).row_code() as u64) << ((i % 32) * 2);
            }
        }
        let health =
            core::array::from_fn(|t| (0..n_pes).map(|p| initially_healthy(t as u8, p)).collect());
        MatrixTopology {
            me,
            n_pes,
            bits,
            health,
            cands: CandidateTable::from_policy(policy),
        }
    }

    /// Sets the health of (`t`, `peer`).
    pub fn set_health(&mut self, t: u8, peer: u32, up: bool) {
        self.health[t as usize][peer as usize] = up;
    }

    /// The transport index for `len` bytes to `dst`, `None` when nothing is
    /// healthy (or `dst` is out of range).
    #[inline]
    pub fn select(&self, dst: u32, len: u32) -> Option<u8> {
        if dst >= self.n_pes {
            return None;
        }
        let class = if dst == self.me {
            PathClass::Local
        } else {
            let i = self.me as usize * self.n_pes as usize + dst as usize;
            PathClass::from_row_code(((self.bits[i / 32] >> ((i % 32) * 2)) & 3) as usize)
        };
        self.cands
            .get(class.index(), len)
            .iter()
            .copied()
            .find(|&t| self.health[t as usize][dst as usize])
    }
}

/// Pre-generated random queries, iterated cyclically by the benches so that no
/// random-number generation is timed.
#[derive(Debug, Clone)]
pub struct Queries {
    /// Destinations, uniform over the job.
    pub dst: Vec<u32>,
    /// Message lengths: 3 in 4 short (8 B..4 KiB), 1 in 4 long (8 KiB..1 MiB).
    pub len: Vec<u32>,
}

/// Queries per [`Queries`] set (a power of two: index with `& QUERY_MASK`).
pub const QUERIES: usize = 1 << 16;
/// `QUERIES - 1`.
pub const QUERY_MASK: usize = QUERIES - 1;

impl Queries {
    /// [`QUERIES`] random queries over a job of `n_pes`, from a fixed seed.
    pub fn new(n_pes: u32, seed: u64) -> Self {
        use rand::{Rng, SeedableRng, rngs::SmallRng};
        let mut rng = SmallRng::seed_from_u64(seed);
        let dst = (0..QUERIES).map(|_| rng.random_range(0..n_pes)).collect();
        let len = (0..QUERIES)
            .map(|_| {
                if rng.random_ratio(3, 4) {
                    rng.random_range(8..=4096)
                } else {
                    rng.random_range(SHORT_THRESHOLD..=1 << 20)
                }
            })
            .collect();
        Queries { dst, len }
    }
}

/// Whether this run measures (`cargo bench`), as opposed to criterion's test
/// mode (`cargo test --benches`, or `cargo bench -- --test`), where every bench
/// runs once. Same rule as criterion's own.
pub fn measuring() -> bool {
    let mut bench = false;
    let mut test = false;
    for a in std::env::args() {
        bench |= a == "--bench";
        test |= a == "--test";
    }
    bench && !test
}

/// The criterion configuration every bench here uses: short enough that the
/// whole suite runs in about two minutes on two cores.
pub fn criterion_config() -> Criterion {
    Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
}
