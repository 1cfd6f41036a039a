//! Fixed-capacity structures of the socket driver's data path, each beside
//! its version on the workspace's collection crates (`bitvec`, `heapless`),
//! in the same run.
//!
//! | id | what |
//! |---|---|
//! | `dedup/{in_order,reordered}/hand` | the dedup window hand-written (a `[u64; 64]` with shifts, as the driver had it): `check` + `mark` of 4096 sequences, in order (one connection) or each block of 64 shuffled (frames from several connections and rails) |
//! | `dedup/{…}/bitvec` | the driver's `DedupWindow`: the same algorithm on `bitvec::BitArray<[u64; 64]>` |
//! | `dedup/duplicates/{hand,bitvec}` | `check` of 4096 sequences already applied (replays): half below the base, half in the bitmap |
//! | `replay_table/steady/hand` | the replay ring's entry table (a boxed slice indexed by `seq % 4096`, live from `tail` to `next`, as in `drivers/socket/src/replay.rs`): per op one push, two look-ups, one release, 64 entries in flight |
//! | `replay_table/steady/heapless_deque` | the same on `heapless::Deque<Entry, 4096>` (`push_back`, `get(seq - tail)`, `pop_front`) |
//! | `replay_table/scan/{hand,heapless_deque}` | a walk by sequence over 4096 live entries (what failover, take-over and the fence rule do) |
//! | `rails/index/{std_vec,heapless_vec}` | one touch of a per-peer table of 4 rails at a random index (`Vec` vs `heapless::Vec<_, 4>`) |
//!
//! Throughput is in elements (sequences, ops, entries or touches). Each pair is
//! checked to give the same answers on the same workload before it is timed.
//!
//! On a shared machine the load moves between two criterion measurements
//! taken one after the other, by more than the difference measured. So
//! `cargo bench` also prints, per pair, `ratio <id>: crate/hand`: the median
//! over 400 rounds of the ratio of the two times in one round, each round
//! timing 20 calls of each, alternately first. That is the figure the
//! choices in the driver rest on.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rand::{SeedableRng, rngs::SmallRng, seq::SliceRandom};
use switchyard_socket::dedup::{DedupWindow, Seen, WINDOW};

/// Sequences per timed iteration of the dedup benches.
const BLOCK: u64 = WINDOW;

/// The dedup window as it was hand-written before the driver's moved to
/// `bitvec` (the baseline): the same algorithm on a `[u64; 64]` with shifts.
struct HandDedup {
    base: u64,
    bits: [u64; (WINDOW / 64) as usize],
}

impl HandDedup {
    const fn new() -> Self {
        HandDedup {
            base: 0,
            bits: [0; (WINDOW / 64) as usize],
        }
    }

    #[inline]
    fn bit(seq: u64) -> (usize, u64) {
        let i = (seq % WINDOW) as usize;
        (i / 64, 1u64 << (i % 64))
    }
}

/// The dedup API both versions share.
trait Dedup {
    fn check(&self, seq: u64) -> Seen;
    fn mark(&mut self, seq: u64);
    fn base(&self) -> u64;
}

impl Dedup for HandDedup {
    #[inline]
    fn check(&self, seq: u64) -> Seen {
        if seq == 0 || seq > self.base.saturating_add(WINDOW) {
            return Seen::OutOfWindow;
        }
        if seq <= self.base {
            return Seen::Duplicate;
        }
        let (w, m) = Self::bit(seq);
        if self.bits[w] & m != 0 {
            Seen::Duplicate
        } else {
            Seen::New
        }
    }
    #[inline]
    fn mark(&mut self, seq: u64) {
        let (w, m) = Self::bit(seq);
        self.bits[w] |= m;
        loop {
            let (w, m) = Self::bit(self.base + 1);
            if self.bits[w] & m == 0 {
                break;
            }
            self.bits[w] &= !m;
            self.base += 1;
        }
    }
    #[inline]
    fn base(&self) -> u64 {
        self.base
    }
}

impl Dedup for DedupWindow {
    #[inline]
    fn check(&self, seq: u64) -> Seen {
        DedupWindow::check(self, seq)
    }
    #[inline]
    fn mark(&mut self, seq: u64) {
        DedupWindow::mark(self, seq)
    }
    #[inline]
    fn base(&self) -> u64 {
        DedupWindow::base(self)
    }
}

/// Applies the next block of [`BLOCK`] sequences after `d`'s base, in the
/// order `offsets` gives (a permutation of `1..=BLOCK`); returns how many
/// were new (all of them).
#[inline]
fn apply_block<D: Dedup>(d: &mut D, offsets: &[u64]) -> u64 {
    let start = d.base();
    let mut new = 0;
    for &o in offsets {
        let s = start + o;
        if d.check(s) == Seen::New {
            d.mark(s);
            new += 1;
        }
    }
    new
}

/// Checks every sequence of `seqs`; returns how many were duplicates.
#[inline]
fn check_all<D: Dedup>(d: &D, seqs: &[u64]) -> u64 {
    seqs.iter()
        .map(|&s| u64::from(d.check(s) == Seen::Duplicate))
        .sum()
}

/// `1..=BLOCK` in order, and shuffled within each run of 64.
fn orders() -> [(&'static str, Vec<u64>); 2] {
    let in_order: Vec<u64> = (1..=BLOCK).collect();
    let mut reordered = in_order.clone();
    let mut rng = SmallRng::seed_from_u64(0x5EED_DEDF);
    for chunk in reordered.chunks_mut(64) {
        chunk.shuffle(&mut rng);
    }
    [("in_order", in_order), ("reordered", reordered)]
}

/// A window with base 2048 and 2050..=4096 applied, and the 4095 sequences
/// it calls duplicates.
fn with_duplicates<D: Dedup>(mut d: D) -> (D, Vec<u64>) {
    for s in (1..=2048).chain(2050..=4096) {
        assert_eq!(d.check(s), Seen::New);
        d.mark(s);
    }
    assert_eq!(d.base(), 2048);
    (d, (1..=2048).chain(2050..=4096).collect())
}

fn dedup(c: &mut Criterion) {
    let orders = orders();
    // Correctness before timing: both versions give the same verdict for
    // every sequence of a long random run (fresh, duplicate, out of window),
    // and the same base.
    {
        let (mut h, mut b) = (HandDedup::new(), DedupWindow::new());
        let mut rng = SmallRng::seed_from_u64(7);
        for _ in 0..200_000 {
            let s = (h.base() as i64 + rand::Rng::random_range(&mut rng, -4..WINDOW as i64 + 8))
                .max(0) as u64;
            let v = h.check(s);
            assert_eq!(v, Dedup::check(&b, s), "seq {s}");
            if v == Seen::New {
                h.mark(s);
                Dedup::mark(&mut b, s);
            }
            assert_eq!(h.base(), Dedup::base(&b));
        }
        for (_, o) in &orders {
            let (mut h, mut b) = (HandDedup::new(), DedupWindow::new());
            for _ in 0..3 {
                assert_eq!(apply_block(&mut h, o), BLOCK);
                assert_eq!(apply_block(&mut b, o), BLOCK);
            }
            assert_eq!((h.base(), Dedup::base(&b)), (3 * BLOCK, 3 * BLOCK));
        }
        let (h, seqs) = with_duplicates(HandDedup::new());
        let (b, _) = with_duplicates(DedupWindow::new());
        assert_eq!(check_all(&h, &seqs), seqs.len() as u64);
        assert_eq!(check_all(&b, &seqs), seqs.len() as u64);
        assert_eq!(h.check(2049), Seen::New);
        assert_eq!(Dedup::check(&b, 2049), Seen::New);
    }

    let mut g = c.benchmark_group("dedup");
    g.throughput(Throughput::Elements(BLOCK));
    for (label, o) in &orders {
        let mut h = HandDedup::new();
        g.bench_function(format!("{label}/hand"), |bch| {
            bch.iter(|| apply_block(&mut h, black_box(o)))
        });
        let mut b = DedupWindow::new();
        g.bench_function(format!("{label}/bitvec"), |bch| {
            bch.iter(|| apply_block(&mut b, black_box(o)))
        });
    }
    let (h, seqs) = with_duplicates(HandDedup::new());
    g.throughput(Throughput::Elements(seqs.len() as u64));
    g.bench_function("duplicates/hand", |bch| {
        bch.iter(|| check_all(black_box(&h), black_box(&seqs)))
    });
    let (b, _) = with_duplicates(DedupWindow::new());
    g.bench_function("duplicates/bitvec", |bch| {
        bch.iter(|| check_all(black_box(&b), black_box(&seqs)))
    });
    g.finish();
}

/// A replay-ring entry: 56 bytes, as the driver's (`replay::Entry`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Entry {
    seq: u64,
    at: usize,
    stored: usize,
    payload: [u64; 2],
    slot: u32,
    credit: u32,
    rail: u8,
    conn: u8,
    sent: bool,
    acked: bool,
    awaiting_reply: bool,
    op: u8,
}

const _: () = assert!(size_of::<Entry>() == 56, "the driver's entry size");

/// Entries at most in flight (the dedup window).
const ENTRIES: usize = WINDOW as usize;

/// The entry table both versions implement: sequences from 1, live from the
/// oldest not released to the last pushed.
trait Table {
    /// Appends `e` under the next sequence; `None` when full.
    fn push(&mut self, e: Entry) -> Option<u64>;
    fn get(&self, seq: u64) -> Option<&Entry>;
    fn get_mut(&mut self, seq: u64) -> Option<&mut Entry>;
    /// Releases the oldest entry.
    fn release(&mut self);
    fn tail_seq(&self) -> u64;
    fn next_seq(&self) -> u64;
}

/// The replay ring's table (`drivers/socket/src/replay.rs`): a boxed slice
/// indexed by `seq % 4096`, live from `tail` to `next`.
struct HandTable {
    ents: Box<[Entry]>,
    tail: u64,
    next: u64,
}

impl HandTable {
    fn new() -> Self {
        HandTable {
            ents: vec![Entry::default(); ENTRIES].into_boxed_slice(),
            tail: 1,
            next: 1,
        }
    }
}

impl Table for HandTable {
    #[inline]
    fn push(&mut self, mut e: Entry) -> Option<u64> {
        if self.next - self.tail >= ENTRIES as u64 {
            return None;
        }
        let seq = self.next;
        e.seq = seq;
        self.ents[(seq % ENTRIES as u64) as usize] = e;
        self.next += 1;
        Some(seq)
    }
    #[inline]
    fn get(&self, seq: u64) -> Option<&Entry> {
        (seq >= self.tail && seq < self.next).then(|| &self.ents[(seq % ENTRIES as u64) as usize])
    }
    #[inline]
    fn get_mut(&mut self, seq: u64) -> Option<&mut Entry> {
        (seq >= self.tail && seq < self.next)
            .then(|| &mut self.ents[(seq % ENTRIES as u64) as usize])
    }
    #[inline]
    fn release(&mut self) {
        if self.tail < self.next {
            self.tail += 1;
        }
    }
    fn tail_seq(&self) -> u64 {
        self.tail
    }
    fn next_seq(&self) -> u64 {
        self.next
    }
}

/// The same table on `heapless::Deque` (boxed: 256 KiB).
struct DequeTable {
    ents: Box<heapless::Deque<Entry, ENTRIES>>,
    tail: u64,
}

impl DequeTable {
    fn new() -> Self {
        DequeTable {
            ents: Box::new(heapless::Deque::new()),
            tail: 1,
        }
    }
}

impl Table for DequeTable {
    #[inline]
    fn push(&mut self, mut e: Entry) -> Option<u64> {
        let seq = self.tail + self.ents.len() as u64;
        e.seq = seq;
        self.ents.push_back(e).ok().map(|()| seq)
    }
    #[inline]
    fn get(&self, seq: u64) -> Option<&Entry> {
        self.ents.get(seq.checked_sub(self.tail)? as usize)
    }
    #[inline]
    fn get_mut(&mut self, seq: u64) -> Option<&mut Entry> {
        self.ents.get_mut(seq.checked_sub(self.tail)? as usize)
    }
    #[inline]
    fn release(&mut self) {
        if self.ents.pop_front().is_some() {
            self.tail += 1;
        }
    }
    fn tail_seq(&self) -> u64 {
        self.tail
    }
    fn next_seq(&self) -> u64 {
        self.tail + self.ents.len() as u64
    }
}

/// In flight in the steady workload.
const IN_FLIGHT: u64 = 64;
/// Ops per timed iteration of the steady workload.
const OPS: u64 = 4096;

/// [`OPS`] times: push a frame, mark it sent, look at the oldest, and
/// release it once [`IN_FLIGHT`] are live. Returns a checksum.
#[inline]
fn steady<T: Table>(t: &mut T) -> u64 {
    let mut sum = 0u64;
    for i in 0..OPS {
        let e = Entry {
            stored: 64 + (i as usize & 1023),
            credit: 64,
            rail: (i & 3) as u8,
            ..Entry::default()
        };
        let Some(seq) = t.push(e) else {
            return u64::MAX;
        };
        if let Some(e) = t.get_mut(seq) {
            e.sent = true;
        }
        let old = t.tail_seq();
        if let Some(e) = t.get(old) {
            sum = sum.wrapping_add(e.stored as u64 ^ e.seq);
        }
        if t.next_seq() - t.tail_seq() >= IN_FLIGHT {
            t.release();
        }
    }
    sum
}

/// Walks every live entry by sequence; returns the sum of their `stored`.
#[inline]
fn scan<T: Table>(t: &T) -> u64 {
    let mut sum = 0u64;
    let mut s = t.tail_seq();
    while s < t.next_seq() {
        if let Some(e) = t.get(s)
            && !e.acked
        {
            sum += e.stored as u64;
        }
        s += 1;
    }
    sum
}

/// A table holding `ENTRIES` live entries after `ENTRIES / 2` were released
/// (so it wraps).
fn full<T: Table>(mut t: T) -> T {
    for i in 0..ENTRIES as u64 * 3 / 2 {
        let e = Entry {
            stored: i as usize,
            ..Entry::default()
        };
        if t.push(e).is_none() {
            t.release();
            t.push(e).expect("room after a release");
        }
    }
    assert_eq!(t.next_seq() - t.tail_seq(), ENTRIES as u64);
    t
}

fn replay_table(c: &mut Criterion) {
    // Correctness before timing: the same answers on both workloads, and
    // the same entry for every sequence, live or not.
    let (mut h, mut d) = (HandTable::new(), DequeTable::new());
    for _ in 0..3 {
        assert_eq!(steady(&mut h), steady(&mut d));
    }
    assert_eq!((h.tail_seq(), h.next_seq()), (d.tail_seq(), d.next_seq()));
    for s in 0..h.next_seq() + 2 {
        assert_eq!(h.get(s), d.get(s), "seq {s}");
    }
    let (fh, fd) = (full(HandTable::new()), full(DequeTable::new()));
    assert_eq!(scan(&fh), scan(&fd));
    assert_eq!(
        scan(&fh),
        (ENTRIES as u64 / 2..ENTRIES as u64 * 3 / 2).sum::<u64>()
    );
    assert_eq!(full(HandTable::new()).push(Entry::default()), None, "full");
    assert_eq!(full(DequeTable::new()).push(Entry::default()), None, "full");

    let mut g = c.benchmark_group("replay_table");
    g.throughput(Throughput::Elements(OPS));
    g.bench_function("steady/hand", |b| b.iter(|| steady(black_box(&mut h))));
    g.bench_function("steady/heapless_deque", |b| {
        b.iter(|| steady(black_box(&mut d)))
    });
    g.throughput(Throughput::Elements(ENTRIES as u64));
    g.bench_function("scan/hand", |b| b.iter(|| scan(black_box(&fh))));
    g.bench_function("scan/heapless_deque", |b| b.iter(|| scan(black_box(&fd))));
    g.finish();
}

/// A rail's state toward a peer, about the driver's size (`RailLink`).
#[derive(Debug, Clone, Default)]
struct RailState {
    frames: u64,
    /// The rest of the state (only its size matters here).
    _rest: [u64; 24],
}

/// Touches per timed iteration of the rails bench.
const TOUCHES: usize = 4096;

#[inline]
fn touch(rails: &mut [RailState], idx: &[u8]) -> u64 {
    for &r in idx {
        if let Some(s) = rails.get_mut(usize::from(r)) {
            s.frames += 1;
        }
    }
    rails.iter().map(|s| s.frames).sum()
}

/// [`TOUCHES`] random rail indices.
fn rail_indices() -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(4);
    (0..TOUCHES)
        .map(|_| rand::Rng::random_range(&mut rng, 0..4u8))
        .collect()
}

/// Four rails, in a `Vec` and in a `heapless::Vec`.
fn rail_tables() -> (Vec<RailState>, heapless::Vec<RailState, 4>) {
    let v = vec![RailState::default(); 4];
    let mut hv = heapless::Vec::new();
    for _ in 0..4 {
        hv.push(RailState::default()).expect("4 fit");
    }
    assert!(hv.push(RailState::default()).is_err(), "capacity 4");
    (v, hv)
}

fn rails(c: &mut Criterion) {
    let idx = rail_indices();
    let (mut v, mut hv) = rail_tables();
    // Correctness before timing: the same counts.
    assert_eq!(touch(&mut v, &idx), touch(&mut hv, &idx));
    assert_eq!(touch(&mut v, &idx), 2 * TOUCHES as u64);

    let mut g = c.benchmark_group("rails");
    g.throughput(Throughput::Elements(TOUCHES as u64));
    g.bench_function("index/std_vec", |b| {
        b.iter(|| touch(black_box(&mut v), black_box(&idx)))
    });
    g.bench_function("index/heapless_vec", |b| {
        b.iter(|| touch(black_box(&mut hv), black_box(&idx)))
    });
    g.finish();
}

/// Times `hand` and `krate` alternately (module docs) and prints the median
/// ratio krate/hand, its quartiles, and the median time per call of each.
fn interleaved(id: &str, mut hand: impl FnMut() -> u64, mut krate: impl FnMut() -> u64) {
    use std::time::Instant;
    const REPS: u32 = 20;
    let rounds = if switchyard_benches::measuring() {
        400
    } else {
        2
    };
    let time = |f: &mut dyn FnMut() -> u64| {
        let t = Instant::now();
        for _ in 0..REPS {
            black_box(f());
        }
        t.elapsed().as_secs_f64() * 1e9 / f64::from(REPS)
    };
    let (mut th, mut tk, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (h, k) = if round % 2 == 0 {
            let h = time(&mut hand);
            (h, time(&mut krate))
        } else {
            let k = time(&mut krate);
            (time(&mut hand), k)
        };
        th.push(h);
        tk.push(k);
        ratio.push(k / h);
    }
    for v in [&mut th, &mut tk, &mut ratio] {
        v.sort_by(f64::total_cmp);
    }
    let at = |v: &[f64], q: usize| v[v.len() * q / 4];
    println!(
        "ratio {id}: crate/hand {:.3} (quartiles {:.3}..{:.3}); per call hand {:.0} ns, crate {:.0} ns",
        at(&ratio, 2),
        at(&ratio, 1),
        at(&ratio, 3),
        at(&th, 2),
        at(&tk, 2),
    );
}

/// The interleaved ratios of every pair (module docs).
fn ratios(_: &mut Criterion) {
    for (label, o) in &orders() {
        let (mut h, mut b) = (HandDedup::new(), DedupWindow::new());
        interleaved(
            &format!("dedup/{label}"),
            || apply_block(&mut h, black_box(o)),
            || apply_block(&mut b, black_box(o)),
        );
    }
    let (h, seqs) = with_duplicates(HandDedup::new());
    let (b, _) = with_duplicates(DedupWindow::new());
    interleaved(
        "dedup/duplicates",
        || check_all(black_box(&h), black_box(&seqs)),
        || check_all(black_box(&b), black_box(&seqs)),
    );
    let (mut h, mut d) = (HandTable::new(), DequeTable::new());
    interleaved(
        "replay_table/steady",
        || steady(black_box(&mut h)),
        || steady(black_box(&mut d)),
    );
    let (fh, fd) = (full(HandTable::new()), full(DequeTable::new()));
    interleaved(
        "replay_table/scan",
        || scan(black_box(&fh)),
        || scan(black_box(&fd)),
    );
    let idx = rail_indices();
    let (mut v, mut hv) = rail_tables();
    interleaved(
        "rails/index",
        || touch(black_box(&mut v), black_box(&idx)),
        || touch(black_box(&mut hv), black_box(&idx)),
    );
}

criterion_group! {
    name = benches;
    config = switchyard_benches::criterion_config();
    targets = dedup, replay_table, rails, ratios
}
criterion_main!(benches);
