//! Operations routed over per-context QP sets (`verbs_context_sets = on`)
//! through the normal `Context` API, on the fake HCA: two contexts of PE 0
//! in two threads put (stamped values, each followed by a fence and a flag
//! put), get and fetch-add to PE 1; their first operation opens their set,
//! they stay on the shared driver while their earlier writes may be
//! pending, switch after a quiet, and then post nothing on the shared
//! driver; PE 1 never sees a flag before its data, across the switch too.
//! With the setting off everything stays on the shared driver. A set
//! broken mid-stream under the API: nothing lost, nothing applied twice,
//! the context back on its set after the rebuild.

use std::{sync::Barrier, thread};

use switchyard_core::route::Op;

use super::*;
use crate::{
    config::VerbsAtomics,
    context::{Cmp, Pe, SHM, Stats},
    test_alloc::{allocations, count_here},
};

/// Threads (contexts) of PE 0.
const THREADS: usize = 2;
/// Operations per thread: `PRE` before its set is up, `PRE` more after
/// (still on the shared driver: its writes there are pending), the rest
/// after its quiet, on its set.
const OPS: usize = 160;
const PRE: usize = 20;

/// The value thread `t` puts as its `i`-th.
fn stamp(t: usize, i: usize) -> u64 {
    ((t as u64 + 3) << 40) | (i as u64 + 1)
}

/// Polls `c` until `f(c)` (bounded: 15 s).
/// Runs `script` on a pair whose contexts open QP sets
/// (`verbs_context_sets = on`), as `opts` says otherwise.
fn run_sets(tag: u64, opts: Opts, script: Script) {
    let opts = Opts {
        context_sets: true,
        ..opts
    };
    run_pair(tag, opts, VerbsConfig::default(), script);
}

fn until(c: &mut Context, what: &str, mut f: impl FnMut(&mut Context) -> bool) {
    let start = Instant::now();
    while !f(c) {
        assert!(start.elapsed() < Duration::from_secs(15), "{what}");
        c.call().poll_once();
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Work requests posted on PE 0's shared verbs driver so far.
fn shared_wrs(c: &Context) -> u64 {
    c.with_verbs(|v| v.drv.stats().wrs).expect("verbs")
}

struct Blocks {
    data: Sym<u64>,
    flags: Sym<u64>,
    counter: Sym<u64>,
    done: Sym<u64>,
}

/// Thread `t`'s `i`-th step: its stamp, a fence, its flag; and a
/// fetch-add (returned).
fn step(c: &mut Context, b: &Blocks, t: usize, i: usize) -> u64 {
    c.put(&b.data, t * OPS + i, &[stamp(t, i)], 1).unwrap();
    c.fence().unwrap();
    c.put(&b.flags, t, &[stamp(t, i)], 1).unwrap();
    c.fetch_add(&b.counter, 0, 1, 1).unwrap()
}

/// PE 0's thread `t` on a context of its own; with the setting `on`, the
/// switch checked. Returns its fetch-add results and its last counters.
fn thread_run(pe: &Pe, b: &Blocks, t: usize, on: bool, both: &Barrier) -> (Vec<u64>, Stats) {
    let mut c = pe.context().expect("a context per thread");
    let mut olds = Vec::with_capacity(OPS);
    // Before the set is up: on the shared driver (the first operation
    // opens the set).
    for i in 0..PRE {
        olds.push(step(&mut c, b, t, i));
    }
    if on {
        until(&mut c, "the set usable at both ends", |c| {
            c.verbs_set_usable(1)
        });
    }
    // Up, but this context's puts over the shared driver may be pending:
    // still the shared driver (a fence-ordered flag there must not
    // overtake its data).
    for i in PRE..2 * PRE {
        olds.push(step(&mut c, b, t, i));
    }
    assert_eq!(c.stats().verbs_set_ops, 0, "thread {t}: no switch yet");
    c.quiet().unwrap();
    // The switch: at the next operation, with the setting on.
    olds.push(step(&mut c, b, t, 2 * PRE));
    let switched = c.stats().verbs_set_ops;
    assert_eq!(
        switched,
        if on { 3 } else { 0 },
        "thread {t}: {:?}",
        c.stats()
    );
    both.wait();
    let wrs = shared_wrs(&c);
    both.wait();
    for i in 2 * PRE + 1..OPS {
        olds.push(step(&mut c, b, t, i));
        if i % 40 == 0 {
            // Quiet completes this context's set; a get (on the set)
            // reads the put back.
            c.quiet().unwrap();
            let mut g = [0u64];
            c.get(&b.data, t * OPS + i, &mut g, 1).unwrap();
            assert_eq!(g[0], stamp(t, i), "thread {t}: put {i} after quiet");
        }
    }
    c.quiet().unwrap();
    both.wait();
    let s = c.stats();
    if on {
        // Puts, fetch-adds and gets after the switch: all on the set, and
        // neither thread posted on the shared driver meanwhile.
        let gets = (2 * PRE + 1..OPS).filter(|i| i % 40 == 0).count() as u64;
        let after = (OPS - 2 * PRE) as u64 * 3 + gets;
        assert_eq!(s.verbs_set_ops, after, "thread {t}: {s:?}");
        assert_eq!(
            shared_wrs(&c),
            wrs,
            "thread {t}: posted on the shared driver"
        );
        assert_eq!(s.verbs_sets_refused, 0);
    } else {
        assert_eq!(s.verbs_set_ops, 0, "{s:?}");
        assert!(shared_wrs(&c) > wrs, "the shared driver carries everything");
    }
    both.wait();
    c.add(&b.done, 0, 1, 1).unwrap();
    c.quiet().unwrap();
    // What the context publishes when it drops.
    (olds, c.stats())
}

/// PE `ctx`'s stats segment, read now (from outside, as `switchyard stat`
/// reads it).
fn segment(ctx: &Context) -> crate::statseg::Snapshot {
    crate::statseg::Reader::open(ctx.stats_segment().expect("a stats segment"))
        .expect("readable")
        .snapshot()
}

fn sets_script(mut ctx: Context, _: &Fabric, done: &AtomicU32, _: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    let on = ctx.verbs_sets_on;
    // The PEs' first contexts keep the shared driver (their barriers would
    // open sets too): only the threads' contexts open sets.
    ctx.verbs_sets_on = false;
    let b = Blocks {
        data: ctx.alloc(THREADS * OPS).expect("alloc"),
        flags: ctx.alloc(THREADS).expect("alloc"),
        counter: ctx.alloc(1).expect("alloc"),
        done: ctx.alloc(1).expect("alloc"),
    };
    ctx.barrier_all().unwrap();
    if me == 0 {
        let pe = ctx.pe();
        let both = Barrier::new(THREADS);
        let (mut olds, last): (Vec<u64>, Vec<Stats>) = thread::scope(|s| {
            let hs: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (pe, b, both) = (&pe, &b, &both);
                    s.spawn(move || thread_run(pe, b, t, on, both))
                })
                .collect();
            let mut olds = Vec::new();
            let mut last = Vec::new();
            for h in hs {
                let (o, s) = h.join().expect("a thread");
                olds.extend(o);
                last.push(s);
            }
            (olds, last)
        });
        // The threads' contexts published their counters when they
        // dropped: the segment sums them (this context posts on no set).
        let seg = segment(&ctx);
        let own = ctx.stats();
        assert_eq!((own.verbs_set_ops, own.verbs_sets_refused), (0, 0));
        let set_ops: u64 = last.iter().map(|s| s.verbs_set_ops).sum();
        assert_eq!(set_ops > 0, on, "{last:?}");
        assert_eq!(seg.pe["verbs_set_ops"], set_ops, "{:?}", seg.pe);
        assert_eq!(seg.pe["verbs_sets_refused"], 0, "{:?}", seg.pe);
        // Every fetch-add saw a distinct old value: none lost, none twice.
        olds.sort_unstable();
        assert!(olds.iter().enumerate().all(|(i, &o)| o == i as u64));
        // The threads' contexts dropped: their sets closed.
        until(&mut ctx, "PE 0's sets closed", |c| {
            c.verbs_sets_open() == (0, 0)
        });
    } else {
        // Watching the flags while PE 0's threads run: a flag is never
        // seen before the data put before it (fence), over the shared
        // driver, over a set, or across the switch.
        let start = Instant::now();
        let mut seen = [0u64; THREADS];
        loop {
            assert!(start.elapsed() < Duration::from_secs(60), "PE 0's threads");
            ctx.poll_once();
            let mut f = [0u64; THREADS];
            ctx.read_local(&b.flags, 0, &mut f).unwrap();
            std::sync::atomic::fence(Ordering::Acquire);
            for (t, &flag) in f.iter().enumerate() {
                if flag == 0 || flag == seen[t] {
                    continue;
                }
                let i = (flag & 0xFF_FFFF_FFFF) as usize - 1;
                assert!(i < OPS && flag == stamp(t, i), "thread {t}: flag {flag:#x}");
                let mut d = [0u64];
                ctx.read_local(&b.data, t * OPS + i, &mut d).unwrap();
                assert_eq!(d[0], stamp(t, i), "thread {t}: flag {i} before its data");
                seen[t] = flag;
            }
            let mut n = [0u64];
            ctx.read_local(&b.done, 0, &mut n).unwrap();
            if n[0] == THREADS as u64 {
                break;
            }
        }
        let mut got = vec![0u64; THREADS * OPS];
        ctx.read_local(&b.data, 0, &mut got).unwrap();
        for t in 0..THREADS {
            for i in 0..OPS {
                assert_eq!(got[t * OPS + i], stamp(t, i), "thread {t}, put {i}");
            }
        }
        let total = (THREADS * OPS) as u64;
        assert_eq!(
            ctx.wait_until(&b.counter, 0, Cmp::Eq, total).unwrap(),
            total
        );
        // The sets PE 1 answered (one per thread with the setting on)
        // closed when the threads' contexts dropped.
        let want = if on { THREADS as u64 } else { 0 };
        assert_eq!(ctx.verbs_sets_answered(), (want, 0));
        until(&mut ctx, "PE 1's sets closed", |c| {
            c.verbs_sets_open() == (0, 0)
        });
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn contexts_switch_to_their_own_sets_and_post_nothing_more_on_the_shared_driver() {
    let opts = Opts {
        atomics: VerbsAtomics::Nic,
        ..Opts::default()
    };
    run_sets(0xB1, opts, sets_script);
}

#[test]
fn with_the_setting_off_everything_stays_on_the_shared_driver() {
    let opts = Opts {
        atomics: VerbsAtomics::Nic,
        ..Opts::default()
    };
    run_pair(0xB2, opts, VerbsConfig::default(), sets_script);
}

/// PE 1 answers one set: the first context of PE 0 gets it; the second
/// is refused, counted, and stays on the shared driver for good (its
/// later operations open nothing more).
fn refused_script(mut ctx: Context, _: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    ctx.verbs_sets_on = false;
    ctx.verbs_set_budget(if me == 0 { 8 } else { 1 });
    let data: Sym<u64> = ctx.alloc(64).expect("alloc");
    ctx.barrier_all().unwrap();
    if me == 0 {
        let pe = ctx.pe();
        let mut a = pe.context().expect("context a");
        let mut b = pe.context().expect("context b");
        a.put(&data, 0, &[1], 1).unwrap();
        until(&mut a, "a's set usable", |a| a.verbs_set_usable(1));
        a.quiet().unwrap();
        b.put(&data, 1, &[2], 1).unwrap();
        until(&mut b, "b's opening refused", |b| {
            b.stats().verbs_sets_refused == 1
        });
        b.quiet().unwrap();
        for i in 2..64 {
            b.put(&data, i, &[i as u64 + 1], 1).unwrap();
            b.quiet().unwrap();
        }
        a.put(&data, 0, &[1], 1).unwrap();
        a.quiet().unwrap();
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!(sa.verbs_set_ops, 1, "a on its set: {sa:?}");
        assert_eq!((sb.verbs_set_ops, sb.verbs_sets_refused), (0, 1), "{sb:?}");
        drop((a, b));
        // Published when they dropped: the segment shows both counters.
        let seg = segment(&ctx);
        assert_eq!(
            (seg.pe["verbs_set_ops"], seg.pe["verbs_sets_refused"]),
            (1, 1),
            "{:?}",
            seg.pe
        );
        // A context that takes a's slot adds to its counts (its publish
        // at drop does not wipe a's).
        drop(pe.context().expect("context c"));
        let seg = segment(&ctx);
        assert_eq!(
            (seg.pe["verbs_set_ops"], seg.pe["verbs_sets_refused"]),
            (1, 1),
            "after c: {:?}",
            seg.pe
        );
        step.store(1, Ordering::SeqCst);
    } else {
        until(&mut ctx, "PE 0 done", |_| step.load(Ordering::SeqCst) == 1);
        // One opening answered, one refused: b did not ask again.
        assert_eq!(ctx.verbs_sets_answered(), (1, 1));
        let mut got = [0u64; 64];
        ctx.read_local(&data, 0, &mut got).unwrap();
        for (i, &g) in got.iter().enumerate() {
            assert_eq!(g, i as u64 + 1, "put {i}");
        }
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn a_refused_set_leaves_the_context_on_the_shared_driver_for_good() {
    run_sets(0xB3, Opts::default(), refused_script);
}

/// Words of a long put (8 KiB: `short_threshold`, so it takes verbs to a
/// ROUTED peer; an 8-byte put takes TCP).
const LONG: usize = 1024;
/// Rounds of the ordering test.
const ROUNDS: u64 = 40;

/// A ROUTED pair: PE 0's second context puts long blocks over verbs (on
/// its set, once switched) and short words over TCP, fenced in both
/// orders; PE 1 never sees the later write without the earlier one.
fn cross_script(mut ctx: Context, _: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    ctx.verbs_sets_on = false;
    // `a` then `flag_a`: set, fence, TCP. `b` then `blk_b`: TCP, fence, set.
    let a: Sym<u64> = ctx.alloc(LONG).expect("alloc");
    let flag_a: Sym<u64> = ctx.alloc(1).expect("alloc");
    let b: Sym<u64> = ctx.alloc(1).expect("alloc");
    let blk_b: Sym<u64> = ctx.alloc(LONG).expect("alloc");
    ctx.barrier_all().unwrap();
    if me == 0 {
        let pe = ctx.pe();
        let mut c = pe.context().expect("a second context");
        // Open the set (the first long put, on the shared driver), then
        // switch after a quiet.
        c.put(&a, 0, &[0u64; LONG], 1).unwrap();
        until(&mut c, "the set usable", |c| c.verbs_set_usable(1));
        c.quiet().unwrap();
        c.put(&a, 0, &[0u64; LONG], 1).unwrap();
        assert_eq!(c.stats().verbs_set_ops, 1, "switched: {:?}", c.stats());
        let tcp0 = c.stats().ops[TCP.index()];
        step.store(1, Ordering::SeqCst);
        for r in 1..=ROUNDS {
            c.put(&a, 0, &[r; LONG], 1).unwrap();
            c.fence().unwrap();
            c.put(&flag_a, 0, &[r], 1).unwrap();
            // The TCP put after the fence first completed the set's.
            let on_set = c.verbs_set_for(1).and_then(|d| d.backlog(1));
            assert_eq!(on_set.map(|b| b.wrs), Some(0), "round {r}");
            c.put(&b, 0, &[r], 1).unwrap();
            c.fence().unwrap();
            c.put(&blk_b, 0, &[r; LONG], 1).unwrap();
        }
        c.quiet().unwrap();
        let s = c.stats();
        assert_eq!(
            s.verbs_set_ops,
            1 + 2 * ROUNDS,
            "long puts on the set: {s:?}"
        );
        assert_eq!(
            s.ops[TCP.index()] - tcp0,
            2 * ROUNDS,
            "short ones over TCP: {s:?}"
        );
        assert!(s.ordering_waits >= ROUNDS, "the fences waited: {s:?}");
        drop(c);
        step.store(2, Ordering::SeqCst);
    } else {
        let start = Instant::now();
        let mut blk = vec![0u64; LONG];
        loop {
            assert!(start.elapsed() < Duration::from_secs(60), "PE 0");
            ctx.poll_once();
            let fin = step.load(Ordering::SeqCst) == 2;
            let mut f = [0u64];
            ctx.read_local(&flag_a, 0, &mut f).unwrap();
            std::sync::atomic::fence(Ordering::Acquire);
            ctx.read_local(&a, 0, &mut blk).unwrap();
            assert!(
                blk.iter().all(|&w| w >= f[0]),
                "flag {} (TCP) before its block (set)",
                f[0]
            );
            ctx.read_local(&blk_b, 0, &mut blk).unwrap();
            std::sync::atomic::fence(Ordering::Acquire);
            let newest = blk.iter().copied().max().unwrap_or(0);
            let mut w = [0u64];
            ctx.read_local(&b, 0, &mut w).unwrap();
            assert!(w[0] >= newest, "block {newest} (set) before its word (TCP)");
            if fin {
                assert_eq!((f[0], w[0], newest), (ROUNDS, ROUNDS, ROUNDS));
                break;
            }
        }
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn a_fence_orders_a_sets_writes_and_tcps_both_ways() {
    let opts = Opts {
        routed: true,
        ..Opts::default()
    };
    run_sets(0xB4, opts, cross_script);
}

/// Puts of the lock test.
const UNLOCKED: usize = 64;

/// Once switched, a context's puts on its set take no entry lock: they
/// complete while another context of the PE holds the PE's verbs state
/// (and so the TCP entry lock) checked out; and its operations on the set
/// allocate nothing.
fn unlocked_script(mut ctx: Context, _: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    ctx.verbs_sets_on = false;
    let data: Sym<u64> = ctx.alloc(UNLOCKED).expect("alloc");
    ctx.barrier_all().unwrap();
    if me == 0 {
        let mut c = ctx.pe().context().expect("a second context");
        c.put(&data, 0, &[1], 1).unwrap();
        until(&mut c, "the set usable", |c| c.verbs_set_usable(1));
        c.quiet().unwrap();
        c.put(&data, 0, &[1], 1).unwrap();
        assert_eq!(c.stats().verbs_set_ops, 1, "switched");
        // The first context takes the entry lock and keeps it.
        let _ = ctx.verbs_mut();
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            // Nor any allocation.
            let before = allocations();
            count_here(true);
            for i in 1..UNLOCKED {
                c.put(&data, i, &[i as u64 + 1], 1).unwrap();
            }
            count_here(false);
            assert_eq!(allocations(), before, "allocations posting on a set");
            tx.send(()).unwrap();
            c
        });
        let r = rx.recv_timeout(Duration::from_secs(10));
        // Given back (whatever happened), so a blocked thread could go on.
        drop(ctx.call());
        assert!(r.is_ok(), "the puts on the set waited for the entry lock");
        let mut c = h.join().expect("the thread");
        c.quiet().unwrap();
        assert_eq!(c.stats().verbs_set_ops, UNLOCKED as u64, "{:?}", c.stats());
        // Puts, a get, fetch-adds, fence and quiet on the set: no
        // allocation (a pass to warm up, then one counted).
        let mut g = [0u64];
        for pass in 0..2 {
            let before = allocations();
            count_here(pass == 1);
            for i in 0..UNLOCKED {
                c.put(&data, i, &[i as u64 + 1], 1).unwrap();
                c.fence().unwrap();
                c.add(&data, UNLOCKED - 1, 0, 1).unwrap();
                c.fetch_add(&data, 0, 0, 1).unwrap();
            }
            c.get(&data, 1, &mut g, 1).unwrap();
            c.quiet().unwrap();
            count_here(false);
            if pass == 1 {
                assert_eq!(allocations(), before, "allocations on the set's path");
            }
        }
        assert_eq!(g[0], 2);
        // All of it on the set: the puts, adds, fetch-adds and gets.
        let s = c.stats();
        assert_eq!(s.verbs_set_ops, UNLOCKED as u64 * 7 + 2, "{s:?}");
        // Puts left in flight when the context drops: its drop completes
        // them before its set closes (the fake HCA runs a post at once, so
        // this checks that none is lost, not the wait itself).
        for i in 0..UNLOCKED {
            c.put(&data, i, &[i as u64 + 100], 1).unwrap();
        }
        drop(c);
        step.store(1, Ordering::SeqCst);
    } else {
        until(&mut ctx, "PE 0's puts", |_| {
            step.load(Ordering::SeqCst) == 1
        });
        let mut got = [0u64; UNLOCKED];
        ctx.read_local(&data, 0, &mut got).unwrap();
        for (i, &g) in got.iter().enumerate() {
            assert_eq!(g, i as u64 + 100, "put {i}, before the drop");
        }
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn puts_on_a_set_take_no_entry_lock_and_allocate_nothing() {
    let opts = Opts {
        atomics: VerbsAtomics::Nic,
        ..Opts::default()
    };
    run_sets(0xB5, opts, unlocked_script);
}

/// Runs `f` on `c` in a thread while `holder` keeps the PE's verbs state
/// (and so the TCP entry lock) checked out; gives the lock back after
/// `held` or once `f` returned, whichever is first. Returns the context,
/// `f`'s result, and whether `f` returned while the lock was held.
fn under_lock<R: Send + 'static>(
    holder: &mut Context,
    mut c: Context,
    held: Duration,
    f: impl FnOnce(&mut Context) -> R + Send + 'static,
) -> (Context, R, bool) {
    let _ = holder.verbs_mut();
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let r = f(&mut c);
        let _ = tx.send(());
        (c, r)
    });
    let in_time = rx.recv_timeout(held).is_ok();
    // Given back (whatever happened), so a blocked thread goes on.
    drop(holder.call());
    let (c, r) = h.join().expect("the thread");
    (c, r, in_time)
}

/// Words of the quiet tests.
const QUIETS: usize = 32;

/// A context's `quiet` and `fence` act on what it used: on its set and
/// over shared memory only, they take no entry lock (they complete while
/// another context holds it) and allocate nothing; with TCP writes, or
/// writes on the shared verbs driver, outstanding, its quiet takes the
/// lock and waits for them (their values are at the target when it
/// returns).
fn quiet_script(mut ctx: Context, _: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    ctx.verbs_sets_on = false;
    let data: Sym<u64> = ctx.alloc(QUIETS).expect("alloc");
    let mine: Sym<u64> = ctx.alloc(1).expect("alloc");
    let counter: Sym<u64> = ctx.alloc(1).expect("alloc");
    let shared: Sym<u64> = ctx.alloc(QUIETS).expect("alloc");
    ctx.barrier_all().unwrap();
    if me == 0 {
        // 1. On its set, and to itself over shared memory: no lock.
        let mut c = ctx.pe().context().expect("a second context");
        c.put(&data, 0, &[1], 1).unwrap();
        until(&mut c, "the set usable", |c| c.verbs_set_usable(1));
        c.quiet().unwrap();
        c.put(&data, 0, &[1], 1).unwrap();
        assert_eq!(c.stats().verbs_set_ops, 1, "switched");
        assert_eq!(c.route(0, 8, Op::Put).unwrap().transport, SHM);
        // Warm up the paths once (first-use allocations are not counted).
        c.fence().unwrap();
        c.put(&mine, 0, &[1], 0).unwrap();
        c.quiet().unwrap();
        assert_eq!(c.order.shared, 0, "nothing on the shared drivers");
        let wrs = shared_wrs(&c);
        let (mut c, allocs, in_time) = under_lock(&mut ctx, c, Duration::from_secs(10), move |c| {
            let before = allocations();
            count_here(true);
            for i in 1..QUIETS {
                c.put(&data, i, &[i as u64 + 1], 1).unwrap();
                c.fence().unwrap();
                c.put(&mine, 0, &[i as u64 + 1], 0).unwrap();
                c.fence().unwrap();
                if i % 4 == 0 {
                    c.quiet().unwrap();
                }
            }
            c.quiet().unwrap();
            count_here(false);
            allocations() - before
        });
        assert!(
            in_time,
            "the set's quiet or fence waited for the entry lock"
        );
        assert_eq!(allocs, 0, "allocations in fence and quiet");
        assert_eq!(shared_wrs(&c), wrs, "nothing on the shared driver");
        assert_eq!(c.stats().verbs_set_ops, QUIETS as u64, "{:?}", c.stats());
        let mut m = [0u64];
        c.get(&mine, 0, &mut m, 0).unwrap();
        assert_eq!(m[0], QUIETS as u64);
        step.store(1, Ordering::SeqCst);
        wait_for_step(step, 2);
        // 2. Atomics over TCP (`verbs_atomics = cpu`): its quiet takes the
        //    lock (it does not return while another context holds it) and
        //    waits for them.
        for _ in 0..QUIETS {
            c.add(&counter, 0, 1, 1).unwrap();
        }
        assert_eq!(c.order.shared, crate::context::order::T, "TCP used");
        let hold = Duration::from_millis(300);
        let (c, r, in_time) = under_lock(&mut ctx, c, hold, |c| c.quiet());
        r.unwrap();
        assert!(!in_time, "a quiet with TCP writes pending took no lock");
        assert_eq!(c.order.shared, 0);
        step.store(3, Ordering::SeqCst);
        wait_for_step(step, 4);
        drop(c);
        // 3. A context on the shared verbs driver (no sets): likewise.
        let mut s = ctx.pe().context().expect("a third context");
        s.verbs_sets_on = false;
        for i in 0..QUIETS {
            s.put(&shared, i, &[i as u64 + 7], 1).unwrap();
        }
        assert_ne!(s.order.shared & crate::context::order::V, 0, "shared verbs");
        let (s, r, in_time) = under_lock(&mut ctx, s, hold, |s| s.quiet());
        r.unwrap();
        assert!(
            !in_time,
            "a quiet with shared verbs writes pending took no lock"
        );
        assert_eq!(s.stats().verbs_set_ops, 0);
        drop(s);
        step.store(5, Ordering::SeqCst);
    } else {
        until(&mut ctx, "PE 0's set puts", |_| {
            step.load(Ordering::SeqCst) == 1
        });
        let mut got = [0u64; QUIETS];
        ctx.read_local(&data, 0, &mut got).unwrap();
        for (i, &g) in got.iter().enumerate() {
            assert_eq!(g, i as u64 + 1, "put {i} on the set");
        }
        step.store(2, Ordering::SeqCst);
        until(&mut ctx, "PE 0's TCP quiet", |_| {
            step.load(Ordering::SeqCst) == 3
        });
        // Read at once: the quiet returned after they were applied.
        let mut n = [0u64];
        ctx.read_local(&counter, 0, &mut n).unwrap();
        assert_eq!(n[0], QUIETS as u64, "the adds over TCP, after the quiet");
        step.store(4, Ordering::SeqCst);
        until(&mut ctx, "PE 0's shared verbs quiet", |_| {
            step.load(Ordering::SeqCst) == 5
        });
        ctx.read_local(&shared, 0, &mut got).unwrap();
        for (i, &g) in got.iter().enumerate() {
            assert_eq!(g, i as u64 + 7, "put {i} on the shared driver");
        }
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn quiet_and_fence_wait_only_for_the_drivers_a_context_used() {
    let opts = Opts {
        atomics: VerbsAtomics::Cpu,
        ..Opts::default()
    };
    run_sets(0xB8, opts, quiet_script);
}

/// The PEs' first contexts, with the setting on, open their sets at their
/// first barrier (its puts go over verbs), right after init: neither end
/// refuses (a link up at both ends whose health bit is not set yet is up).
fn first_use_script(mut ctx: Context, _: &Fabric, done: &AtomicU32, _: &AtomicU32) -> Context {
    let other = 1 - ctx.my_pe();
    let data: Sym<u64> = ctx.alloc(8).expect("alloc");
    ctx.barrier_all().unwrap();
    until(&mut ctx, "the set up", |c| c.verbs_set_up(other));
    ctx.barrier_all().unwrap();
    for i in 0..8 {
        ctx.put(&data, i, &[i as u64 + 1], other).unwrap();
    }
    ctx.quiet().unwrap();
    ctx.barrier_all().unwrap();
    let s = ctx.stats();
    assert_eq!(s.verbs_sets_refused, 0, "{s:?}");
    assert!(s.verbs_set_ops >= 8, "the puts on the set: {s:?}");
    assert_eq!(
        ctx.verbs_sets_answered(),
        (1, 0),
        "the other's set answered"
    );
    let mut got = [0u64; 8];
    ctx.read_local(&data, 0, &mut got).unwrap();
    assert_eq!(got, [1, 2, 3, 4, 5, 6, 7, 8]);
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn the_first_contexts_open_their_sets_at_their_first_barrier() {
    run_sets(0xB6, Opts::default(), first_use_script);
}

/// Puts of the routed failover test: before the break (a third of the
/// way in), then after it; and after the set came back.
const ROUTED_N: usize = 60;
const ROUTED_AFTER: usize = 16;

/// What PE 0 tells PE 1 (same process): the puts that landed over the set
/// PE 1 answers, as PE 0 counts them (posted on the set minus replayed).
static ROUTED_LANDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A context routed over its set (`verbs_context_sets = on`), through
/// the `Context` API only: its set's QPs break mid-stream. Every put
/// returns `Ok`; those in doubt on the set are settled by the receipts
/// and the rest replayed over TCP (never twice: PE 1 counts what landed
/// over its set); the context's later puts wait for that and take the
/// shared driver; after its rebuild and a quiet the context is back on
/// its set.
fn routed_fail_script(
    mut ctx: Context,
    fabric: &Fabric,
    done: &AtomicU32,
    step: &AtomicU32,
) -> Context {
    let me = ctx.my_pe();
    // The first contexts keep the shared driver: only `a` opens a set.
    ctx.verbs_sets_on = false;
    let data: Sym<u64> = ctx.alloc(ROUTED_N + ROUTED_AFTER).expect("alloc");
    let flag: Sym<u64> = ctx.alloc(1).expect("alloc");
    ctx.barrier_all().unwrap();
    if me == 0 {
        let mut a = ctx.pe().context().expect("context a");
        // The first put opens the set (it goes on the shared driver);
        // the switch comes after a quiet once the set is usable.
        a.put(&data, 0, &[stamp(0, 0)], 1).unwrap();
        until(&mut a, "a's set usable", |c| c.verbs_set_usable(1));
        a.quiet().unwrap();
        a.put(&data, 1, &[stamp(0, 1)], 1).unwrap();
        assert_eq!(a.stats().verbs_set_ops, 1, "switched: {:?}", a.stats());
        let qpns: Vec<u32> = a
            .verbs_set_drv(1)
            .unwrap()
            .card_for(1)
            .unwrap()
            .qps()
            .iter()
            .map(|q| q.qpn)
            .collect();
        let mut healed = false;
        for i in 2..ROUTED_N {
            if i == ROUTED_N / 3 {
                fabric.break_qps(&qpns);
            }
            a.put(&data, i, &[stamp(0, i)], 1).unwrap();
            if i >= ROUTED_N / 3 && !healed && a.verbs_set_link(1).unwrap().0 > 0 {
                // The set noticed: it may be rebuilt from now on.
                fabric.heal();
                healed = true;
            }
            if i % 8 == 0 {
                // Progress: completions (and the set's error) come in.
                a.call().poll_once();
            }
        }
        a.quiet().expect("nothing lost");
        if !healed {
            until(&mut a, "a's set failed", |c| {
                c.verbs_set_link(1).unwrap().0 > 0
            });
            fabric.heal();
        }
        let (fails, replays, _) = a.verbs_set_link(1).unwrap();
        assert_eq!(fails, 1, "a's set failed once");
        let settled = a.verbs_set_drv(1).unwrap().stats().receipts_settled;
        // Both kinds of puts in doubt: known landed, and replayed.
        assert!(settled > 0, "puts in doubt known landed by the receipts");
        assert!(replays > 0, "puts posted on the broken set were replayed");
        let on_set = a.stats().verbs_set_ops;
        assert!(
            on_set < ROUTED_N as u64,
            "some puts took the shared driver while the set was down"
        );
        assert!(a.verbs_up(1), "the shared link stays up");
        assert_eq!(
            a.with_verbs(|v| v.drv.stats().peer_failures).unwrap(),
            0,
            "the shared driver never failed"
        );
        // Rebuilt, raised by a quiet: the context goes back to its set.
        until(&mut a, "a's set usable again", |c| {
            c.quiet().expect("quiet");
            c.verbs_set_usable(1)
        });
        for i in ROUTED_N..ROUTED_N + ROUTED_AFTER {
            a.put(&data, i, &[stamp(0, i)], 1).unwrap();
        }
        a.quiet().unwrap();
        let s = a.stats();
        assert_eq!(
            s.verbs_set_ops,
            on_set + ROUTED_AFTER as u64,
            "back on the set: {s:?}"
        );
        // The flag goes on the set too (checked below).
        ROUTED_LANDED.store(s.verbs_set_ops + 1 - replays, Ordering::SeqCst);
        a.put(&flag, 0, &[1], 1).unwrap();
        a.quiet().unwrap();
        assert_eq!(a.stats().verbs_set_ops, s.verbs_set_ops + 1, "the flag");
        wait_for_step(step, 1);
        drop(a);
    } else {
        assert_eq!(ctx.wait_until_for(&flag, 0, Cmp::Eq, 1, WAIT).unwrap(), 1);
        let mut got = vec![0u64; ROUTED_N + ROUTED_AFTER];
        ctx.read_local(&data, 0, &mut got).unwrap();
        for (i, &x) in got.iter().enumerate() {
            assert_eq!(x, stamp(0, i), "slot {i}");
        }
        // Every put posted on the set landed over it or was replayed: not
        // both, not neither. The last receive completions may still be
        // queued here.
        let landed = ROUTED_LANDED.load(Ordering::SeqCst);
        until(&mut ctx, "the set's receipts", |c| {
            c.verbs_sets_answering_stats().0 >= landed
        });
        let (receipts, fails) = ctx.verbs_sets_answering_stats();
        assert_eq!(fails, 1, "the set failed at this end too");
        assert_eq!(receipts, landed, "landed over the set exactly once");
        step.store(1, Ordering::SeqCst);
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn a_routed_set_broken_mid_stream_loses_nothing_applies_nothing_twice_and_comes_back() {
    run_sets(0xB7, Opts::default(), routed_fail_script);
}
