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
//!
//! There is no matrix at 1M PEs: 10^12 pairs × 2 bits is 250 GB.
//!
//! Each iteration is a batch of [`BATCH`] selects (`Throughput::Elements`), so
//! criterion's time is per batch and its throughput per select; every field of
//! every result is folded into a sum that criterion `black_box`es. Before any
//! timing, the three implementations must agree on every pre-generated query.
//! After criterion, a quick `Instant` cross-check prints ns/select and the
//! hashmap/bitmap ratio.

use std::{hint::black_box, time::Instant};

use criterion::{Criterion, Throughput};
use switchyard_benches::{
    HashMapTopology, MatrixTopology, N_TRANSPORTS, QUERIES, QUERY_MASK, Queries, RDMA, TCP,
    initially_healthy, measuring, policy, tid, topology, topology_box,
};
use switchyard_core::{
    route::{Op, PinnedSelector, Policy, Route, SelectError, Selector},
    topology::Topology,
};

/// Selects per timed iteration.
const BATCH: usize = 1024;
/// The PE whose row is read.
const ME: u32 = 5;

/// One line of the closing summary.
struct Row {
    case: String,
    ns: f64,
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

/// Median ns per select over `rounds` runs of `batches` batches.
fn cross_check(
    rounds: usize,
    batches: usize,
    q: &Queries,
    mut select: impl FnMut(u32, u32) -> u64,
) -> f64 {
    let mut per_call: Vec<f64> = (0..rounds)
        .map(|_| {
            let mut k = 0;
            let t = Instant::now();
            for _ in 0..batches {
                black_box(batch(q, &mut k, &mut select));
            }
            t.elapsed().as_nanos() as f64 / (batches * BATCH) as f64
        })
        .collect();
    per_call.sort_by(f64::total_cmp);
    per_call[per_call.len() / 2]
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
    let store = topology_box(ME, n_pes, 2);
    let topo = topology(&store, ME, n_pes);
    let mut sel = Selector::new(&topo, policy).expect("a free reader slot");
    let mut hm = HashMapTopology::new(ME, n_pes, &policy);
    let mut mx = with_matrix.then(|| MatrixTopology::new(ME, n_pes, &policy));
    let q = Queries::new(n_pes, 0x5EED ^ n_pes as u64);
    check_agree(&topo, &mut sel, &mut hm, mx.as_mut(), &q, n_pes);
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

    // Quick cross-check with a plain clock: median of several long runs of the
    // same batches.
    let (rounds, batches) = if measuring() {
        (9, 16 * QUERIES / BATCH)
    } else {
        (1, QUERIES / BATCH)
    };
    let mut add = |case: &str, ns: f64| {
        rows.push(Row {
            case: format!("{case}/{label}"),
            ns,
        })
    };
    let ns = {
        let mut pinned = sel.pin();
        cross_check(rounds, batches, &q, |d, l| {
            fold(pinned.select(d, l, Op::Put))
        })
    };
    add("bitmap", ns);
    if with_matrix {
        let ns = cross_check(rounds, batches, &q, |d, l| fold(sel.select(d, l, Op::Put)));
        add("bitmap_pin_each", ns);
    }
    if with_matrix {
        let pinned = sel.pin();
        let ns = cross_check(rounds, batches, &q, |d, l| {
            lookup_only(&pinned, &topo, &policy, d, l)
        });
        add("bitmap_lookup_only", ns);
    }
    if let Some(m) = &mx {
        let ns = cross_check(rounds, batches, &q, |d, l| fold_baseline(m.select(d, l)));
        add("matrix", ns);
    }
    let ns = cross_check(rounds, batches, &q, |d, l| fold_baseline(hm.select(d, l)));
    add("hashmap", ns);
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
            "quick cross-check (std::time::Instant, median of 9 runs of {} selects; \
             criterion's estimates above are the reference):",
            16 * QUERIES
        );
    } else {
        println!("quick cross-check (test mode: one short run, not a measurement):");
    }
    println!(
        "  {:<24} {:>10} {:>14}",
        "case", "ns/select", "hashmap/this"
    );
    for r in &rows {
        let size = r.case.rsplit('/').next().unwrap_or_default();
        let hashmap = rows
            .iter()
            .find(|h| h.case == format!("hashmap/{size}"))
            .map_or(f64::NAN, |h| h.ns);
        println!("  {:<24} {:>10.2} {:>13.1}x", r.case, r.ns, hashmap / r.ns);
    }
}
