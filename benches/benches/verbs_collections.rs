//! The verbs driver's fixed-capacity structures on its hot path, each
//! beside the crate the workspace names for that job (`heapless` for
//! fixed-capacity collections, `bitvec` for bit sets), same operations,
//! same run.
//!
//! | id | what |
//! |---|---|
//! | `verbs_batch/boxed_slice` | a QP's doorbell batch as the driver keeps it: `Box<[ibv_send_wr]>` and a count, fields written in place, then the chain linked and the count reset |
//! | `verbs_batch/heapless_vec` | the same batch as `heapless::Vec<ibv_send_wr, 16>`: each WR built and pushed, then linked and cleared |
//! | `verbs_settle/hand/{in_order,interleaved}` | `switchyard_verbs::seq::SettleWindow`: a ring of 4096 bits in `[u64; 64]`, hand-written word operations |
//! | `verbs_settle/bitvec/{in_order,interleaved}` | the same ring over `bitvec::BitArray<[u64; 64]>` (index, `set`, `leading_ones`, `fill`) |
//!
//! A batch iteration queues [`BATCH`] work requests and links the chain as
//! a doorbell would (`Throughput::Elements(16)`). A settle iteration
//! settles [`N_SETTLE`] sequence numbers in a fresh window
//! (`Throughput::Elements(4096)`): `in_order` as one QP's completions come,
//! `interleaved` as four data QPs' do (every QP's numbers of a 256-number
//! stretch, one QP after the other, so the window holds runs of settled
//! numbers and advances by long steps). Each variant is checked before it
//! is timed: the chain links every WR with its fields, the window ends with
//! every number settled.

use std::{hint::black_box, ptr};

use bitvec::{BitArr, order::Lsb0};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ibverbs_sys::{ibv_send_wr, ibv_send_wr__bindgen_ty_2__bindgen_ty_1, ibv_sge, ibv_wr_opcode};
use switchyard_verbs::seq::{Settle, SettleWindow, WINDOW};

/// WRs per doorbell batch (the driver's `BATCH`).
const BATCH: usize = 16;
/// Sequence numbers settled per settle iteration.
const N_SETTLE: u64 = WINDOW;

fn empty_wr() -> ibv_send_wr {
    // SAFETY: `ibv_send_wr` is plain C data (integers, raw pointers and
    // unions of those); all-zero is a valid value of every field.
    unsafe { std::mem::zeroed() }
}

/// The fields `queue_wr` writes for a put of 64 bytes from staging.
fn fill(wr: &mut ibv_send_wr, i: u64) {
    wr.wr_id = i;
    wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = if i % 4 == 3 { 2 } else { 0 };
    wr.num_sge = 1;
    wr.__bindgen_anon_1.imm_data = (i as u32).to_be();
    wr.wr.rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
        remote_addr: 0x1000 + i * 64,
        rkey: 7,
    };
}

fn sge(i: u64) -> ibv_sge {
    ibv_sge {
        addr: 0x9000 + i * 64,
        length: 64,
        lkey: 3,
    }
}

/// Links `n` WRs at `base` to their SGEs, as `flush_qp` does.
///
/// # Safety
///
/// `base` and `sges` point to at least `n` elements each.
unsafe fn link(base: *mut ibv_send_wr, sges: *mut ibv_sge, n: usize) {
    for i in 0..n {
        // SAFETY: `i < n`, inside both arrays (the caller's contract).
        unsafe {
            let w = base.add(i);
            (*w).sg_list = sges.add(i);
            (*w).next = if i + 1 < n {
                base.add(i + 1)
            } else {
                ptr::null_mut()
            };
        }
    }
}

/// The driver's batch: boxed slices sized once, a count.
struct Boxed {
    wrs: Box<[ibv_send_wr]>,
    sges: Box<[ibv_sge]>,
    n: usize,
}

impl Boxed {
    fn new() -> Boxed {
        Boxed {
            wrs: vec![empty_wr(); BATCH].into_boxed_slice(),
            sges: vec![sge(0); BATCH].into_boxed_slice(),
            n: 0,
        }
    }

    fn queue(&mut self, i: u64) {
        fill(&mut self.wrs[self.n], i);
        self.sges[self.n] = sge(i);
        self.n += 1;
    }

    /// Links the chain; returns its head (what `ibv_post_send` takes).
    fn flush(&mut self) -> *mut ibv_send_wr {
        let base = self.wrs.as_mut_ptr();
        // SAFETY: `n <= BATCH`, the length of both slices.
        unsafe { link(base, self.sges.as_mut_ptr(), self.n) };
        self.n = 0;
        base
    }
}

/// The batch as a heapless vector (SGEs in a parallel array).
struct Heapless {
    wrs: heapless::Vec<ibv_send_wr, BATCH>,
    sges: [ibv_sge; BATCH],
}

impl Heapless {
    fn new() -> Heapless {
        Heapless {
            wrs: heapless::Vec::new(),
            sges: [sge(0); BATCH],
        }
    }

    fn queue(&mut self, i: u64) {
        let n = self.wrs.len();
        let mut wr = empty_wr();
        fill(&mut wr, i);
        self.sges[n] = sge(i);
        assert!(self.wrs.push(wr).is_ok(), "flushed before full");
    }

    fn flush(&mut self) -> *mut ibv_send_wr {
        let n = self.wrs.len();
        let base = self.wrs.as_mut_ptr();
        // SAFETY: `n <= BATCH`, the capacity of both.
        unsafe { link(base, self.sges.as_mut_ptr(), n) };
        self.wrs.clear();
        base
    }
}

/// Walks a linked chain: (WRs, sum of wr_ids, sum of SGE lengths).
fn walk(mut w: *const ibv_send_wr) -> (usize, u64, u64) {
    let (mut n, mut ids, mut bytes) = (0, 0, 0);
    while !w.is_null() {
        // SAFETY: the chain was just linked inside a live batch.
        unsafe {
            n += 1;
            ids += (*w).wr_id;
            bytes += u64::from((*(*w).sg_list).length);
            w = (*w).next;
        }
    }
    (n, ids, bytes)
}

fn bench_batch(c: &mut Criterion) {
    let expect = (BATCH, (0..BATCH as u64).sum(), 64 * BATCH as u64);
    let mut boxed = Boxed::new();
    let mut heapless = Heapless::new();
    for i in 0..BATCH as u64 {
        boxed.queue(i);
        heapless.queue(i);
    }
    assert_eq!(walk(boxed.flush()), expect, "boxed batch chain");
    assert_eq!(walk(heapless.flush()), expect, "heapless batch chain");

    let mut g = c.benchmark_group("verbs_batch");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("boxed_slice", |b| {
        let mut q = Boxed::new();
        b.iter(|| {
            for i in 0..BATCH as u64 {
                q.queue(black_box(i));
            }
            black_box(q.flush());
        })
    });
    g.bench_function("heapless_vec", |b| {
        let mut q = Heapless::new();
        b.iter(|| {
            for i in 0..BATCH as u64 {
                q.queue(black_box(i));
            }
            black_box(q.flush());
        })
    });
    g.finish();
}

/// [`SettleWindow`]'s algorithm (a ring of 4096 bits, bit `seq % WINDOW`,
/// cleared as the base passes it) over a bitvec bit array.
struct BitvecWindow {
    base: u64,
    bits: BitArr!(for WINDOW as usize, in u64, Lsb0),
}

impl BitvecWindow {
    fn new() -> BitvecWindow {
        BitvecWindow {
            base: 0,
            bits: Default::default(),
        }
    }

    fn settle(&mut self, seq: u64) -> Settle {
        if seq == 0 || seq > self.base + WINDOW {
            return Settle::OutOfWindow;
        }
        if seq <= self.base {
            return Settle::Duplicate;
        }
        let i = (seq % WINDOW) as usize;
        if self.bits[i] {
            return Settle::Duplicate;
        }
        if seq != self.base + 1 {
            self.bits.set(i, true);
            return Settle::New;
        }
        self.base = seq;
        loop {
            let start = ((self.base + 1) % WINDOW) as usize;
            let run = self.bits[start..].leading_ones();
            if run == 0 {
                break;
            }
            self.bits[start..start + run].fill(false);
            self.base += run as u64;
            if start + run < WINDOW as usize {
                break;
            }
        }
        Settle::New
    }
}

/// The settle order: 1..=N in order, or four QPs' numbers interleaved.
fn order(interleaved: bool) -> Vec<u64> {
    if !interleaved {
        return (1..=N_SETTLE).collect();
    }
    let mut v = Vec::with_capacity(N_SETTLE as usize);
    for chunk in (0..N_SETTLE).step_by(256) {
        for qp in [1u64, 2, 3, 0] {
            v.extend((chunk..chunk + 256).filter(|s| s % 4 == qp).map(|s| s + 1));
        }
    }
    v
}

fn hand(seqs: &[u64]) -> u64 {
    let mut w = SettleWindow::new();
    for &s in seqs {
        black_box(w.settle(s));
    }
    w.base()
}

fn bitvec(seqs: &[u64]) -> u64 {
    let mut w = BitvecWindow::new();
    for &s in seqs {
        black_box(w.settle(s));
    }
    w.base
}

fn bench_settle(c: &mut Criterion) {
    let mut g = c.benchmark_group("verbs_settle");
    g.throughput(Throughput::Elements(N_SETTLE));
    for (name, interleaved) in [("in_order", false), ("interleaved", true)] {
        let seqs = order(interleaved);
        assert_eq!(seqs.len() as u64, N_SETTLE);
        assert_eq!(hand(&seqs), N_SETTLE, "hand-written window, {name}");
        assert_eq!(bitvec(&seqs), N_SETTLE, "bitvec window, {name}");
        let mut w = BitvecWindow::new();
        assert_eq!(w.settle(2), Settle::New);
        assert_eq!(w.settle(2), Settle::Duplicate);
        assert_eq!(w.settle(2 + WINDOW), Settle::OutOfWindow);
        assert_eq!(w.settle(1), Settle::New);
        assert_eq!((w.base, w.bits.not_any()), (2, true));
        g.bench_function(format!("hand/{name}"), |b| b.iter(|| hand(&seqs)));
        g.bench_function(format!("bitvec/{name}"), |b| b.iter(|| bitvec(&seqs)));
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = switchyard_benches::criterion_config();
    targets = bench_batch, bench_settle
}
criterion_main!(benches);
