//! The rate tests on the PE side (what each times and checks is in the
//! worker's module doc), one thread or several.
//!
//! Each stream of operations works in a *lane* of its own: put-rate's
//! target place on PE 1, get-rate's destination on PE 0 and atomic-rate's
//! word on PE 1 are [`LANE_BYTES`] apart per lane, so the streams of
//! different threads share no cache line at either end. With one thread
//! (the default) PE 0's own context streams in lane 0, as it always did.
//!
//! With `--threads N` ([`WorkerPlan::threads`] > 1), PE 0 measures twice
//! per size, each stream on a context of its own made from the PE's handle
//! ([`Pe::context`]) in its own thread: first one thread (lane `N`), then `N`
//! threads at once (lanes 0 to `N - 1`). The threads line up after their
//! warm-up rounds; the aggregate rate is every thread's measured operations
//! over the span from the first thread's start to the last one's end. PE 1
//! checks every lane afterwards.

use std::{sync::Barrier, thread, time::Instant};

use switchyard::context::{Context, Pe, Sym};

use super::{ATOMIC_BASE, WorkerError, WorkerPlan, le_u64};
use crate::perf::{Rounds, Test, baseline::rate::pattern, stats::Measurement};

/// Bytes between two lanes (a cache line, and the largest rate size).
const LANE_BYTES: usize = 64;

/// The symmetric objects the rate tests use.
pub(super) struct RateSyms<'a> {
    /// put-rate's target and get-rate's source (PE 1's copy).
    pub(super) data: &'a Sym<u8>,
    /// get-rate's destination (PE 0's copy).
    pub(super) src: &'a Sym<u8>,
    /// atomic-rate's words (PE 1's copy).
    pub(super) counter: &'a Sym<u64>,
}

/// Lanes of a plan: one per thread, plus the one-thread run's with threads.
pub(super) fn lanes(plan: &WorkerPlan) -> usize {
    match plan.threads {
        0 | 1 => 1,
        n => n as usize + 1,
    }
}

/// Bytes `data` and `src` need for messages of up to `max` bytes.
pub(super) fn bytes_needed(plan: &WorkerPlan, max: usize) -> usize {
    LANE_BYTES * (lanes(plan) - 1) + max
}

/// Words `counter` needs.
pub(super) fn words_needed(plan: &WorkerPlan) -> usize {
    LANE_BYTES / 8 * (lanes(plan) - 1) + 1
}

/// Runs rate test `plan.test` at `size` on this PE (PEs 0 and 1 take part,
/// the others wait at the barriers); PE 0's measurements go to `out`.
pub(super) fn run(
    ctx: &mut Context,
    plan: &WorkerPlan,
    syms: &RateSyms<'_>,
    size: usize,
    out: &mut Vec<Measurement>,
) -> Result<(), WorkerError> {
    let window = if plan.test == Test::AtomicRate {
        1
    } else {
        plan.window
    };
    let r = Rounds::new(plan.iters, plan.warmup, window);
    let me = ctx.my_pe();
    let lanes = lanes(plan);
    let block = pattern(size);
    // Before: put-rate's places cleared, get-rate's block written (once:
    // every lane reads the same bytes) and its destinations cleared,
    // atomic-rate's words at their base.
    for lane in 0..lanes {
        match (plan.test, me) {
            (Test::PutRate, 1) => ctx.write_local(syms.data, lane * LANE_BYTES, &vec![0; size])?,
            (Test::GetRate, 1) if lane == 0 => ctx.write_local(syms.data, 0, &block)?,
            (Test::GetRate, 0) => ctx.write_local(syms.src, lane * LANE_BYTES, &vec![0; size])?,
            (Test::AtomicRate, 1) => {
                ctx.write_local(syms.counter, lane * LANE_BYTES / 8, &[ATOMIC_BASE])?;
            }
            _ => {}
        }
    }
    ctx.barrier_all()?;
    if me == 0 {
        let name = plan.test.name();
        let size64 = size as u64;
        if lanes == 1 {
            let mut seq = Seq::new();
            let secs = r.time(|_| round(ctx, plan.test, syms, 0, size, r, &mut seq))?;
            out.push(Measurement::throughput(name, size64, r.ops(), secs));
        } else {
            let n = lanes - 1;
            let pe = ctx.pe();
            let one = threaded(&pe, plan.test, syms, n..n + 1, size, r)?;
            let all = threaded(&pe, plan.test, syms, 0..n, size, r)?;
            let mut m1 = Measurement::throughput(name, size64, r.ops(), one);
            m1.threads = Some(1);
            let mut mn = Measurement::throughput(name, size64, r.ops() * n as u64, all);
            mn.threads = Some(n as u32);
            mn.thread_ratio = match (m1.bandwidth, mn.bandwidth) {
                (Some(a), Some(b)) if a.msgs_per_s > 0.0 => Some(b.msgs_per_s / a.msgs_per_s),
                _ => None,
            };
            out.extend([m1, mn]);
        }
        if plan.test == Test::GetRate {
            let mut got = vec![0u8; size];
            for lane in 0..lanes {
                ctx.read_local(syms.src, lane * LANE_BYTES, &mut got)?;
                if let Some(at) = got.iter().zip(&block).position(|(g, b)| g != b) {
                    return Err(WorkerError::Missed {
                        test: "get-rate",
                        ops: r.total_ops(),
                        what: "a byte of the gets' destination",
                        found: got[at].into(),
                        expected: block[at].into(),
                    });
                }
            }
        }
    }
    // PE 1's block stays as it is until every get is done.
    ctx.barrier_all()?;
    if me == 1 {
        for lane in 0..lanes {
            check_target(ctx, plan.test, syms, lane, size, r)?;
        }
    }
    Ok(())
}

/// One thread's count of operations in its lane: put-rate's sequence
/// number, atomic-rate's expected old value.
struct Seq {
    next: u64,
    msg: [u8; LANE_BYTES],
}

impl Seq {
    fn new() -> Seq {
        Seq {
            next: 0,
            msg: [0xA5; LANE_BYTES],
        }
    }
}

/// One round of `test` in `lane`: `r.window` puts then a quiet, `r.window`
/// gets then a quiet, or one fetch-add (its old value checked).
fn round(
    ctx: &mut Context,
    test: Test,
    syms: &RateSyms<'_>,
    lane: usize,
    size: usize,
    r: Rounds,
    seq: &mut Seq,
) -> Result<(), WorkerError> {
    let at = lane * LANE_BYTES;
    match test {
        Test::PutRate => {
            let k = size.min(8);
            let msg = &mut seq.msg[..size];
            for _ in 0..r.window {
                seq.next += 1;
                msg[..k].copy_from_slice(&seq.next.to_le_bytes()[..k]);
                ctx.put(syms.data, at, msg, 1)?;
            }
            ctx.quiet()?;
        }
        Test::GetRate => {
            for _ in 0..r.window {
                ctx.get_nbi(syms.src, at, syms.data, 0, size, 1)?;
            }
            ctx.quiet()?;
        }
        _ => {
            let expected = ATOMIC_BASE + seq.next;
            let old = ctx.fetch_add(syms.counter, at / 8, 1u64, 1)?;
            if old != expected {
                return Err(WorkerError::Missed {
                    test: "atomic-rate",
                    ops: seq.next,
                    what: "a fetch-add's old value",
                    found: old,
                    expected,
                });
            }
            seq.next += 1;
        }
    }
    Ok(())
}

/// Streams `test` in each of `lanes` at once, one thread and one new
/// context of `pe` per lane; the seconds from the first thread's first
/// measured round to the last thread's end.
fn threaded(
    pe: &Pe,
    test: Test,
    syms: &RateSyms<'_>,
    lanes: std::ops::Range<usize>,
    size: usize,
    r: Rounds,
) -> Result<f64, WorkerError> {
    let start = Barrier::new(lanes.len());
    let spans = thread::scope(|s| {
        let handles: Vec<_> = lanes
            .map(|lane| {
                let start = &start;
                s.spawn(move || {
                    let mut lined_up = false;
                    let span = pe.context().map_err(WorkerError::from).and_then(|mut ctx| {
                        let mut seq = Seq::new();
                        let ready = || {
                            lined_up = true;
                            start.wait();
                        };
                        r.span(ready, |_| {
                            round(&mut ctx, test, syms, lane, size, r, &mut seq)
                        })
                    });
                    // A thread that failed before the line-up still joins
                    // it, so the others do not wait for it forever.
                    if !lined_up {
                        start.wait();
                    }
                    span
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect::<Result<Vec<(Instant, Instant)>, WorkerError>>()
    })?;
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.1).max();
    Ok(match (first, last) {
        (Some(a), Some(b)) => (b - a).as_secs_f64(),
        _ => 0.0,
    })
}

/// PE 1's check of one lane after the run: put-rate's place holds the last
/// put's number, atomic-rate's word its base plus every fetch-add.
fn check_target(
    ctx: &mut Context,
    test: Test,
    syms: &RateSyms<'_>,
    lane: usize,
    size: usize,
    r: Rounds,
) -> Result<(), WorkerError> {
    let at = lane * LANE_BYTES;
    match test {
        Test::PutRate => {
            let k = size.min(8);
            let mut got = [0u8; 8];
            ctx.read_local(syms.data, at, &mut got[..k])?;
            let (found, expected) = (le_u64(&got[..k]), le_u64(&r.total_ops().to_le_bytes()[..k]));
            if found != expected {
                return Err(WorkerError::Missed {
                    test: "put-rate",
                    ops: r.total_ops(),
                    what: "PE 1's copy (the last put's number)",
                    found,
                    expected,
                });
            }
        }
        Test::AtomicRate => {
            let mut total = [0u64];
            ctx.read_local(syms.counter, at / 8, &mut total)?;
            if total[0] != ATOMIC_BASE + r.total_ops() {
                return Err(WorkerError::Missed {
                    test: "atomic-rate",
                    ops: r.total_ops(),
                    what: "PE 1's word",
                    found: total[0],
                    expected: ATOMIC_BASE + r.total_ops(),
                });
            }
        }
        _ => {}
    }
    Ok(())
}
