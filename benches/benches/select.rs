//! Route selection: the real bitmap path beside a `HashMap` topology and a full
//! N×N matrix, over 4,096 and 1,000,000 PEs with random destinations and a mix of
//! short and long messages.
//!
//! | id | what |
//! |---|---|
//! | `select/bitmap/{4096,1M}` | `PinnedSelector::select`, one pin held across the batch |
//! | `select/bitmap_pin_each/4096` | `Selector::select`, which pins and unpins per call |
//! | `select/hashmap/{4096,1M}` | same decision over `HashMap`s (baseline) |
//! | `select/matrix/4096` | same decision over an N×N 2-bit matrix (baseline) |
//! | `select/bitmap_lookup_only/4096` | the bitmap's class and health read through the public lookups, no `Route` (where the time goes) |
//! | `select/health_flip/4096` | flip the dst's RDMA health bit, then select |
//! | `select/flip_only/4096` | the flip alone, to subtract from the above |
//! | `select/shift_twin/{4096,1M}` | a bench-local select with the core's decision (table rebuilt from the public `Policy::candidates`), reading class and health by shift and mask as the core does |
//! | `select/bitvec/{4096,1M}` | the same twin reading each loaded word through a `bitvec` `BitArray` view (what the core could use: its loads still go through `switchyard_core::sync`), the class code as a 2-bit `BitField::load_le` |
//! | `select/bitvec_bits/{4096,1M}` | as `bitvec`, the class code read as two single bits |
//! | `select/bitvec_atomic/4096` | the same twin reading through `BitSlice<AtomicUsize>` over the shared words (bitvec's own atomic storage, which loom cannot see) |
//!
//! The three twins differ only in how a bit is read, so `bitvec / shift_twin`
//! is what bitvec would cost the core's select; `shift_twin / bitmap` shows how
//! close the twin is to the real select.
//!
//! There is no matrix at 1M PEs: 10^12 pairs × 2 bits is 250 GB.
//!
//! Each iteration is a batch of [`BATCH`] selects (`Throughput::Elements`), so
//! criterion's time is per batch and its throughput per select; every field of
//! every result is folded into a sum that criterion `black_box`es. Before any
//! timing, the three implementations and the twins must agree on every
//! pre-generated query.
//! After criterion, a quick `Instant` cross-check prints the median and the
//! fastest of 9 runs per case, in ns/select, with the hashmap/case ratio; the
//! cases' runs are interleaved, so load from other processes falls on all of
//! them alike (criterion runs its benches one after the other).

use std::{hint::black_box, time::Instant};

use bitvec::{array::BitArray, field::BitField, order::Lsb0, slice::BitSlice};
use criterion::{BenchmarkGroup, Criterion, Throughput, measurement::WallTime};
use switchyard_benches::{
    HashMapTopology, MatrixTopology, N_TRANSPORTS, QUERIES, QUERY_MASK, Queries, RDMA, TCP,
    initially_healthy, measuring, policy, tid, topology, topology_box,
};
use switchyard_core::{
    class::{PathClass, TransportId},
    route::{ContextId, Downgrade, Op, PinnedSelector, Policy, Route, SelectError, Selector},
    sync::atomic::{AtomicUsize, Ordering::Relaxed},
    topology::{PEERS_PER_WORD, Topology, TopologyBox},
};

/// Selects per timed iteration.
const BATCH: usize = 1024;
/// The PE whose row is read.
const ME: u32 = 5;

/// One line of the closing summary.
struct Row {
    case: String,
    /// Median ns per select.
    ns: f64,
    /// Fastest round's ns per select.
    min: f64,
}

/// One timed iteration: [`BATCH`] selects over the queries from `*k` on (cyclic),
/// each result folded into the returned value. Folding every field of every
/// route keeps the compiler from skipping any part of a select, without the
/// memory clobber of a `black_box` per call; criterion `black_box`es the sum.
#[inline(always)]
fn batch(q: &Queries, k: &mut usize, mut select: impl FnMut(u32, u32) -> u64) -> u64 {
    let start = *k;
    *k = start.wrapping_add(BATCH);
    let mut acc = 0u64;
    for j in 0..BATCH {
        let i = start.wrapping_add(j) & QUERY_MASK;
        acc = acc.wrapping_add(select(q.dst[i], q.len[i]));
    }
    acc
}

/// Every field of a route as one number.
#[inline(always)]
fn fold(r: Result<Route, SelectError>) -> u64 {
    match r {
        Ok(r) => {
            r.context.seq
                ^ u64::from(r.context.pe) << 32
                ^ (r.transport.index() as u64) << 8
                ^ (r.class.index() as u64) << 12
                ^ u64::from(r.retry_allowed) << 16
                ^ u64::from(r.downgraded) << 17
        }
        Err(_) => 0xFF,
    }
}

/// The decision from the bitmap through the public lookups only
/// (`PinnedSelector::class`, `Policy::candidates`, `Topology::is_healthy`).
#[inline(always)]
fn lookup_only(
    pinned: &PinnedSelector<'_, '_>,
    topo: &Topology<'_>,
    policy: &Policy,
    dst: u32,
    len: u32,
) -> u64 {
    let Some(class) = pinned.class(dst) else {
        return 0xFF;
    };
    let mut cands = policy.candidates(class, len);
    fold_baseline(
        cands
            .find(|&t| topo.is_healthy(t, dst))
            .map(|t| t.index() as u8),
    )
}

/// A baseline's answer as one number.
#[inline(always)]
fn fold_baseline(t: Option<u8>) -> u64 {
    t.map_or(0xFF, u64::from)
}

/// Bits per word of the topology's storage.
const WORD: usize = usize::BITS as usize;

/// How a twin reads the topology's words: the 2-bit row code of a peer, and a
/// peer's health bits as a mask (bit `t` for transport `t`).
trait RowBits {
    /// The row code of `p` (0 `Shm`, 1 `Near`, 2 `Routed`, 3 `Unreachable`).
    fn code(&self, p: usize) -> usize;
    /// `p`'s health bits, transport `t` in bit `t`.
    fn healthy(&self, p: usize) -> usize;
}

/// `b(0) | b(1) << 1 | …` for `n` transports, unrolled for the usual counts as
/// the core's `gather` is, so the twins differ only in how `b` reads a bit.
#[inline(always)]
fn unrolled(n: usize, b: impl Fn(usize) -> usize) -> usize {
    match n {
        1 => b(0),
        2 => b(0) | b(1) << 1,
        3 => b(0) | b(1) << 1 | b(2) << 2,
        4 => b(0) | b(1) << 1 | b(2) << 2 | b(3) << 3,
        _ => (0..n).fold(0, |m, i| m | b(i) << i),
    }
}

/// The words a twin reads: the pinned class slot and the link words.
#[derive(Clone, Copy)]
struct Words<'a> {
    row: &'a [AtomicUsize],
    links: &'a [AtomicUsize],
    /// Link words per group of [`WORD`] peers (no load bits in the bench job).
    stride: usize,
}

impl<'a> Words<'a> {
    /// The words of the bench job's version 1 (class slot 0) in `store`.
    fn of(store: &'a TopologyBox) -> Self {
        let mem = store.mem();
        Words {
            row: mem.slots[0],
            links: mem.links,
            stride: N_TRANSPORTS as usize,
        }
    }

    /// The link words of `p`'s group, and `p`'s bit in them.
    #[inline(always)]
    fn group(&self, p: usize) -> (&'a [AtomicUsize], usize) {
        let start = (p / WORD) * self.stride;
        (&self.links[start..start + self.stride], p % WORD)
    }
}

/// The core's reads: a load, a shift and a mask.
struct ShiftBits<'a>(Words<'a>);

impl RowBits for ShiftBits<'_> {
    #[inline(always)]
    fn code(&self, p: usize) -> usize {
        let w = self.0.row[p / PEERS_PER_WORD].load(Relaxed);
        (w >> ((p % PEERS_PER_WORD) * 2)) & 3
    }
    #[inline(always)]
    fn healthy(&self, p: usize) -> usize {
        let (words, bit) = self.0.group(p);
        unrolled(self.0.stride, |t| (words[t].load(Relaxed) >> bit) & 1)
    }
}

/// Each loaded word read through a `bitvec` `BitArray` view: the class code
/// as a 2-bit `BitField` (`FIELD`), or as two single bits.
struct BitvecBits<'a, const FIELD: bool>(Words<'a>);

impl<const FIELD: bool> RowBits for BitvecBits<'_, FIELD> {
    #[inline(always)]
    fn code(&self, p: usize) -> usize {
        let w = BitArray::<usize, Lsb0>::new(self.0.row[p / PEERS_PER_WORD].load(Relaxed));
        let lane = (p % PEERS_PER_WORD) * 2;
        if FIELD {
            w[lane..lane + 2].load_le::<usize>()
        } else {
            usize::from(w[lane]) | usize::from(w[lane + 1]) << 1
        }
    }
    #[inline(always)]
    fn healthy(&self, p: usize) -> usize {
        let (words, bit) = self.0.group(p);
        unrolled(self.0.stride, |t| {
            usize::from(BitArray::<usize, Lsb0>::new(words[t].load(Relaxed))[bit])
        })
    }
}

/// `BitSlice<AtomicUsize>` over the shared words: bitvec's own atomic storage.
struct BitvecAtomicBits<'a> {
    row: &'a BitSlice<AtomicUsize, Lsb0>,
    links: &'a BitSlice<AtomicUsize, Lsb0>,
    stride: usize,
}

impl<'a> BitvecAtomicBits<'a> {
    fn new(w: Words<'a>) -> Self {
        BitvecAtomicBits {
            row: BitSlice::from_slice(w.row),
            links: BitSlice::from_slice(w.links),
            stride: w.stride,
        }
    }
}

impl RowBits for BitvecAtomicBits<'_> {
    #[inline(always)]
    fn code(&self, p: usize) -> usize {
        self.row[2 * p..2 * p + 2].load_le::<usize>()
    }
    #[inline(always)]
    fn healthy(&self, p: usize) -> usize {
        let group = &self.links[(p / WORD) * self.stride * WORD..][..self.stride * WORD];
        let bit = p % WORD;
        unrolled(self.stride, |t| usize::from(group[t * WORD + bit]))
    }
}

/// Decision entry bits of the twin (the same meaning as the core's table).
const T_VALID: u8 = 1 << 7;
const T_DOWNGRADED: u8 = 1 << 6;
const T_RETRY: u8 = 1 << 3;
const T_ID: u8 = 0x07;
/// Health masks of the bench job's transports.
const T_MASKS: usize = 1 << N_TRANSPORTS;

/// A bench-local select taking the core's decision for puts (no load bits, as
/// in the bench job), with the row read through `B`: the decision table is
/// rebuilt from the public `Policy::candidates`, so only the bit reads differ
/// between twins.
struct Twin<B> {
    bits: B,
    /// `[class][band][healthy mask]` → entry.
    table: [[[u8; T_MASKS]; 2]; 5],
    ids: [TransportId; 8],
    short_threshold: u32,
    me: u32,
    n_pes: u32,
    counter: u64,
}

impl<B: RowBits> Twin<B> {
    fn new(bits: B, policy: &Policy, me: u32, n_pes: u32) -> Self {
        let threshold = policy.config().short_threshold;
        let mut table = [[[0u8; T_MASKS]; 2]; 5];
        for class in PathClass::ALL {
            let forbid = policy.config().downgrade[class.index()] == Downgrade::Forbid;
            for (band, len) in [(0, 0), (1, threshold)] {
                let cands: Vec<TransportId> = policy.candidates(class, len).collect();
                let allowed = if forbid {
                    &cands[..cands.len().min(1)]
                } else {
                    &cands[..]
                };
                let retry = if !forbid && cands.len() > 1 {
                    T_RETRY
                } else {
                    0
                };
                for (mask, entry) in table[class.index()][band].iter_mut().enumerate() {
                    if let Some(i) = allowed.iter().position(|t| mask >> t.index() & 1 != 0) {
                        let down = if i > 0 { T_DOWNGRADED } else { 0 };
                        *entry = T_VALID | down | retry | allowed[i].index() as u8;
                    }
                }
            }
        }
        Twin {
            bits,
            table,
            ids: core::array::from_fn(|i| tid(i as u8)),
            short_threshold: threshold,
            me,
            n_pes,
            counter: 0,
        }
    }

    #[inline(always)]
    fn select(&mut self, dst: u32, len: u32) -> Result<Route, SelectError> {
        if dst >= self.n_pes {
            return Err(SelectError::InvalidPe {
                dst,
                n_pes: self.n_pes,
            });
        }
        let p = dst as usize;
        let ci = if dst == self.me {
            0
        } else {
            self.bits.code(p) + 1
        };
        let band = (len >= self.short_threshold) as usize;
        let entry = self.table[ci][band][self.bits.healthy(p) & (T_MASKS - 1)];
        let class = PathClass::ALL[ci];
        if entry & T_VALID == 0 {
            return Err(SelectError::Unreachable {
                dst,
                class,
                reason: switchyard_core::route::UnreachableReason::NoHealthyTransport,
            });
        }
        let seq = self.counter;
        self.counter += 1;
        Ok(Route {
            transport: self.ids[(entry & T_ID) as usize],
            class,
            retry_allowed: entry & T_RETRY != 0,
            downgraded: entry & T_DOWNGRADED != 0,
            context: ContextId { pe: self.me, seq },
        })
    }
}

/// Adds the bench `name/label` of a twin's selects to `g`.
fn bench_twin<B: RowBits>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    label: &str,
    q: &Queries,
    twin: &mut Twin<B>,
) {
    g.bench_function(format!("{name}/{label}"), |b| {
        let mut k = 0;
        b.iter(|| batch(q, &mut k, |d, l| fold(twin.select(d, l))));
    });
}

/// The cross-check case `name` of a twin's selects.
fn twin_case<'a, B: RowBits>(
    name: &'static str,
    batches: usize,
    q: &'a Queries,
    twin: &'a mut Twin<B>,
) -> Case<'a> {
    (
        name,
        Box::new(move || round(batches, q, |d, l| fold(twin.select(d, l)))),
    )
}

/// A route without its context id (twins number their decisions themselves).
fn decision(r: Result<Route, SelectError>) -> Option<(TransportId, PathClass, bool, bool)> {
    r.ok()
        .map(|r| (r.transport, r.class, r.retry_allowed, r.downgraded))
}

/// Asserts that a twin takes the real selector's decision on every query and
/// refuses a PE outside the job.
fn check_twin<B: RowBits>(name: &str, sel: &mut Selector<'_>, twin: &mut Twin<B>, q: &Queries) {
    let mut pinned = sel.pin();
    for i in 0..QUERIES {
        let (dst, len) = (q.dst[i], q.len[i]);
        assert_eq!(
            decision(twin.select(dst, len)),
            decision(pinned.select(dst, len, Op::Put)),
            "{name}, dst {dst} len {len}"
        );
    }
    assert!(matches!(
        twin.select(twin.n_pes, 8),
        Err(SelectError::InvalidPe { .. })
    ));
}

/// One cross-check case: each call runs one round and returns its ns per select.
type Case<'a> = (&'static str, Box<dyn FnMut() -> f64 + 'a>);

/// One round: ns per select over `batches` batches.
fn round(batches: usize, q: &Queries, mut select: impl FnMut(u32, u32) -> u64) -> f64 {
    let mut k = 0;
    let t = Instant::now();
    for _ in 0..batches {
        black_box(batch(q, &mut k, &mut select));
    }
    t.elapsed().as_nanos() as f64 / (batches * BATCH) as f64
}

/// Runs `rounds` rounds of every case, interleaved (round `r` of every case
/// before round `r + 1` of any), so that whatever else loads the machine
/// meanwhile falls on all cases alike; returns each case's median and minimum.
fn cross_check(rounds: usize, mut cases: Vec<Case<'_>>) -> Vec<(&'static str, f64, f64)> {
    let mut times = vec![Vec::with_capacity(rounds); cases.len()];
    for _ in 0..rounds {
        for ((_, run), t) in cases.iter_mut().zip(&mut times) {
            t.push(run());
        }
    }
    cases
        .iter()
        .zip(&mut times)
        .map(|((name, _), t)| {
            t.sort_by(f64::total_cmp);
            (*name, t[t.len() / 2], t[0])
        })
        .collect()
}

/// The transport the real selector picks, as the baselines report it.
fn bitmap_choice(r: Result<Route, SelectError>) -> Option<u8> {
    match r {
        Ok(route) => Some(route.transport.index() as u8),
        Err(SelectError::Unreachable { .. }) => None,
        Err(e) => panic!("unexpected select error: {e}"),
    }
}

/// Asserts that the bitmap selector and the baselines agree on every query, and
/// again after flipping some health bits.
fn check_agree(
    topo: &Topology<'_>,
    sel: &mut Selector<'_>,
    hm: &mut HashMapTopology,
    mut mx: Option<&mut MatrixTopology>,
    q: &Queries,
    n_pes: u32,
) {
    let mut downgraded = 0usize;
    {
        let mut pinned = sel.pin();
        for i in 0..QUERIES {
            let (dst, len) = (q.dst[i], q.len[i]);
            let r = pinned.select(dst, len, Op::Put);
            downgraded += r.is_ok_and(|r| r.downgraded) as usize;
            let want = bitmap_choice(r);
            assert_eq!(hm.select(dst, len), want, "hashmap, dst {dst} len {len}");
            if let Some(m) = mx.as_deref() {
                assert_eq!(m.select(dst, len), want, "matrix, dst {dst} len {len}");
            }
        }
        assert!(
            matches!(
                pinned.select(n_pes, 8, Op::Put),
                Err(SelectError::InvalidPe { .. })
            ),
            "dst out of range"
        );
        assert_eq!(hm.select(n_pes, 8), None);
    }
    assert!(downgraded > 0, "the sample exercises the RDMA fallback");
    // Failover: the same answers after flipping RDMA and TCP bits of a few peers.
    let flipped: Vec<u32> = q.dst.iter().copied().take(256).collect();
    for &p in &flipped {
        for t in [RDMA, TCP] {
            let up = !initially_healthy(t, p);
            topo.set_health(tid(t), p, up);
            hm.set_health(t, p, up);
            if let Some(m) = mx.as_deref_mut() {
                m.set_health(t, p, up);
            }
        }
    }
    for i in 0..4096 {
        let (dst, len) = (q.dst[i], q.len[i]);
        let want = bitmap_choice(sel.select(dst, len, Op::Get));
        assert_eq!(hm.select(dst, len), want, "hashmap after flips, dst {dst}");
        if let Some(m) = mx.as_deref() {
            assert_eq!(m.select(dst, len), want, "matrix after flips, dst {dst}");
        }
    }
    for &p in &flipped {
        for t in 0..N_TRANSPORTS {
            let up = initially_healthy(t, p);
            topo.set_health(tid(t), p, up);
            hm.set_health(t, p, up);
            if let Some(m) = mx.as_deref_mut() {
                m.set_health(t, p, up);
            }
        }
    }
}

/// Restores every health bit of the bench job.
fn restore_health(topo: &Topology<'_>, n_pes: u32) {
    for p in 0..n_pes {
        for t in 0..N_TRANSPORTS {
            topo.set_health(tid(t), p, initially_healthy(t, p));
        }
    }
}

/// Builds the job of `n_pes`, checks, benches, cross-checks; appends summary rows.
fn run_size(c: &mut Criterion, n_pes: u32, label: &str, with_matrix: bool, rows: &mut Vec<Row>) {
    let setup = Instant::now();
    let policy = policy();
    // Three readers: the selector of the criterion benches and the pinned
    // ones of the cross-check.
    let store = topology_box(ME, n_pes, 3);
    let topo = topology(&store, ME, n_pes);
    let mut sel = Selector::new(&topo, policy).expect("a free reader slot");
    let mut hm = HashMapTopology::new(ME, n_pes, &policy);
    let mut mx = with_matrix.then(|| MatrixTopology::new(ME, n_pes, &policy));
    let q = Queries::new(n_pes, 0x5EED ^ n_pes as u64);
    check_agree(&topo, &mut sel, &mut hm, mx.as_mut(), &q, n_pes);
    assert_eq!(topo.version(), 1, "the twins read class slot 0");
    let words = Words::of(&store);
    let mut shift = Twin::new(ShiftBits(words), &policy, ME, n_pes);
    let mut bv = Twin::new(BitvecBits::<true>(words), &policy, ME, n_pes);
    let mut bv_bits = Twin::new(BitvecBits::<false>(words), &policy, ME, n_pes);
    let mut bva = with_matrix.then(|| Twin::new(BitvecAtomicBits::new(words), &policy, ME, n_pes));
    check_twin("shift_twin", &mut sel, &mut shift, &q);
    check_twin("bitvec", &mut sel, &mut bv, &q);
    check_twin("bitvec_bits", &mut sel, &mut bv_bits, &q);
    if let Some(t) = bva.as_mut() {
        check_twin("bitvec_atomic", &mut sel, t, &q);
    }
    println!(
        "select/{label}: set-up and agreement check on {QUERIES} queries took {:.2?}",
        setup.elapsed()
    );

    let mut g = c.benchmark_group("select");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function(format!("bitmap/{label}"), |b| {
        let mut pinned = sel.pin();
        let mut k = 0;
        b.iter(|| batch(&q, &mut k, |d, l| fold(pinned.select(d, l, Op::Put))));
    });
    bench_twin(&mut g, "shift_twin", label, &q, &mut shift);
    bench_twin(&mut g, "bitvec", label, &q, &mut bv);
    bench_twin(&mut g, "bitvec_bits", label, &q, &mut bv_bits);
    if let Some(t) = bva.as_mut() {
        bench_twin(&mut g, "bitvec_atomic", label, &q, t);
    }
    g.bench_function(format!("hashmap/{label}"), |b| {
        let mut k = 0;
        b.iter(|| batch(&q, &mut k, |d, l| fold_baseline(hm.select(d, l))));
    });
    if let Some(m) = &mx {
        g.bench_function(format!("matrix/{label}"), |b| {
            let mut k = 0;
            b.iter(|| batch(&q, &mut k, |d, l| fold_baseline(m.select(d, l))));
        });
    }
    if with_matrix {
        // The small job also shows what pinning per call and failover cost.
        g.bench_function(format!("bitmap_pin_each/{label}"), |b| {
            let mut k = 0;
            b.iter(|| batch(&q, &mut k, |d, l| fold(sel.select(d, l, Op::Put))));
        });
        // The same bitmap data read through the public lookups, without the
        // rest of a select (context id, counters, the `Route`): where the time goes.
        g.bench_function(format!("bitmap_lookup_only/{label}"), |b| {
            let pinned = sel.pin();
            let mut k = 0;
            b.iter(|| {
                batch(&q, &mut k, |d, l| {
                    lookup_only(&pinned, &topo, &policy, d, l)
                })
            });
        });
        let rdma = tid(RDMA);
        g.bench_function(format!("flip_only/{label}"), |b| {
            let mut k = 0;
            let mut up = false;
            b.iter(|| {
                batch(&q, &mut k, |d, _| {
                    up = !up;
                    topo.set_health(rdma, d, up).map_or(2, u64::from)
                })
            });
        });
        g.bench_function(format!("health_flip/{label}"), |b| {
            let mut pinned = sel.pin();
            let mut k = 0;
            let mut up = false;
            b.iter(|| {
                batch(&q, &mut k, |d, l| {
                    up = !up;
                    topo.set_health(rdma, d, up);
                    fold(pinned.select(d, l, Op::Put))
                })
            });
        });
        restore_health(&topo, n_pes);
    }
    g.finish();

    // Quick cross-check with a plain clock: several long runs of the same
    // batches per case, interleaved.
    let (rounds, batches) = if measuring() {
        (9, 16 * QUERIES / BATCH)
    } else {
        (1, QUERIES / BATCH)
    };
    let q = &q;
    // Each case has its own reader: the pinned ones stay pinned throughout.
    let mut sel_each = Selector::new(&topo, policy).expect("a second reader slot");
    let mut sel_lookup = Selector::new(&topo, policy).expect("a third reader slot");
    let mut pinned = sel.pin();
    let pinned_lookup = sel_lookup.pin();
    let (topo, policy) = (&topo, &policy);
    let mut cases: Vec<Case<'_>> = vec![
        (
            "bitmap",
            Box::new(|| round(batches, q, |d, l| fold(pinned.select(d, l, Op::Put)))),
        ),
        twin_case("shift_twin", batches, q, &mut shift),
        twin_case("bitvec", batches, q, &mut bv),
        twin_case("bitvec_bits", batches, q, &mut bv_bits),
    ];
    if let Some(t) = bva.as_mut() {
        cases.push(twin_case("bitvec_atomic", batches, q, t));
    }
    if with_matrix {
        cases.push((
            "bitmap_pin_each",
            Box::new(|| round(batches, q, |d, l| fold(sel_each.select(d, l, Op::Put)))),
        ));
        cases.push((
            "bitmap_lookup_only",
            Box::new(|| {
                round(batches, q, |d, l| {
                    lookup_only(&pinned_lookup, topo, policy, d, l)
                })
            }),
        ));
    }
    if let Some(m) = &mx {
        cases.push((
            "matrix",
            Box::new(|| round(batches, q, |d, l| fold_baseline(m.select(d, l)))),
        ));
    }
    cases.push((
        "hashmap",
        Box::new(|| round(batches, q, |d, l| fold_baseline(hm.select(d, l)))),
    ));
    for (case, ns, min) in cross_check(rounds, cases) {
        rows.push(Row {
            case: format!("{case}/{label}"),
            ns,
            min,
        });
    }
}

fn main() {
    println!(
        "select: no N×N matrix baseline at 1M PEs (10^12 pairs × 2 bits = 250 GB); \
         the matrix runs at 4096 PEs only"
    );
    let mut c = switchyard_benches::criterion_config()
        .sample_size(30)
        .configure_from_args();
    let mut rows = Vec::new();
    run_size(&mut c, 4096, "4096", true, &mut rows);
    run_size(&mut c, 1_000_000, "1M", false, &mut rows);
    c.final_summary();

    println!();
    if measuring() {
        println!(
            "quick cross-check (std::time::Instant, 9 runs of {} selects per case, \
             the cases' runs interleaved; criterion's estimates above are the reference):",
            16 * QUERIES
        );
    } else {
        println!("quick cross-check (test mode: one short run, not a measurement):");
    }
    println!(
        "  {:<24} {:>10} {:>10} {:>14}",
        "case", "median ns", "min ns", "hashmap/this"
    );
    for r in &rows {
        let size = r.case.rsplit('/').next().unwrap_or_default();
        let hashmap = rows
            .iter()
            .find(|h| h.case == format!("hashmap/{size}"))
            .map_or(f64::NAN, |h| h.ns);
        println!(
            "  {:<24} {:>10.2} {:>10.2} {:>13.1}x",
            r.case,
            r.ns,
            r.min,
            hashmap / r.ns
        );
    }
}
