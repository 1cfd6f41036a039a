//! Threads of one PE on contexts of their own ([`Pe::context`]), sharing
//! the PE's verbs driver on the fake HCA: puts and fetch-adds over verbs
//! from two threads at once, checked at the target; each context's quiet;
//! a QP failure in the middle of the threaded run; which context is told
//! of an operation lost in a failover; and an idle context's quiet
//! raising a link that came back.

use std::thread;

use super::*;
use crate::context::{Cmp, Error, verbs::LossBook};

/// Threads (contexts) of PE 0 (no more: a test spins at most two).
const THREADS: usize = 2;
/// Puts and fetch-adds per thread.
const OPS: usize = 300;
/// A thread quiets (and reads its last put back) every `QUIET_EVERY` puts.
const QUIET_EVERY: usize = 50;

/// The value thread `t` puts as its `i`-th.
fn stamp(t: usize, i: usize) -> u64 {
    ((t as u64 + 1) << 32) | (i as u64 + 1)
}

/// The symmetric blocks of a run: each thread's stamps, each thread's
/// last-stamp word (overwritten by every put: an older put replayed after
/// a newer one would show there), the counters and the done count.
struct Blocks {
    data: Sym<u64>,
    last: Sym<u64>,
    counters: Sym<u64>,
    done: Sym<u64>,
}

/// PE 0: `THREADS` threads, each on a context of its own, put their
/// stamps (and their last-stamp word) at PE 1 and fetch-add its counter;
/// each quiet is checked by reading the thread's last put back. With
/// `break_at`, thread 0 breaks every QP of the fabric after that many
/// puts (the others' operations meet the failure as they come). Returns
/// each thread's fetch-add results.
fn threads(ctx: &Context, b: &Blocks, fabric: &Fabric, break_at: Option<usize>) -> Vec<u64> {
    let pe = ctx.pe();
    let mut olds = Vec::new();
    thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let (pe, fabric) = (pe.clone(), fabric.clone());
                s.spawn(move || {
                    let mut c = pe.context().expect("a context per thread of a verbs PE");
                    let mut olds = Vec::with_capacity(OPS);
                    for i in 0..OPS {
                        if t == 0 && break_at == Some(i) {
                            fabric.break_links();
                        }
                        c.put(&b.data, t * OPS + i, &[stamp(t, i)], 1).unwrap();
                        c.put(&b.last, t, &[stamp(t, i)], 1).unwrap();
                        olds.push(c.fetch_add(&b.counters, 0, 1, 1).unwrap());
                        if (i + 1) % QUIET_EVERY == 0 {
                            // This context's quiet completes its own puts.
                            c.quiet().unwrap();
                            let mut g = [0u64];
                            c.get(&b.data, t * OPS + i, &mut g, 1).unwrap();
                            assert_eq!(g[0], stamp(t, i), "thread {t}: put {i} after quiet");
                        }
                    }
                    c.quiet().unwrap();
                    c.add(&b.done, 0, 1, 1).unwrap();
                    c.quiet().unwrap();
                    (olds, c.stats())
                })
            })
            .collect();
        for h in hs {
            let (o, st) = h.join().expect("a thread");
            if break_at.is_none() {
                assert!(
                    st.ops[VERBS.index()] >= 2 * OPS as u64,
                    "the context's puts went over verbs: {st:?}"
                );
            }
            olds.extend(o);
        }
    });
    olds
}

/// PE 1: waits until PE 0's threads are done, then checks every stamp,
/// each last-stamp word and the counter.
fn check(ctx: &mut Context, b: &Blocks) {
    let n = THREADS as u64;
    assert_eq!(ctx.wait_until(&b.done, 0, Cmp::Eq, n).unwrap(), n);
    let mut got = vec![0u64; THREADS * OPS];
    ctx.read_local(&b.data, 0, &mut got).unwrap();
    for t in 0..THREADS {
        for i in 0..OPS {
            assert_eq!(got[t * OPS + i], stamp(t, i), "thread {t}, put {i}");
        }
    }
    let mut last = [0u64; THREADS];
    ctx.read_local(&b.last, 0, &mut last).unwrap();
    for (t, l) in last.iter().enumerate() {
        assert_eq!(
            *l,
            stamp(t, OPS - 1),
            "thread {t}: an older put applied last"
        );
    }
    let mut c = [0u64];
    ctx.read_local(&b.counters, 0, &mut c).unwrap();
    assert_eq!(c[0], (THREADS * OPS) as u64, "each fetch-add applied once");
}

/// The run, with the QPs broken after `break_at` puts of thread 0.
fn run(mut ctx: Context, fabric: &Fabric, done: &AtomicU32, break_at: Option<usize>) -> Context {
    let me = ctx.my_pe();
    let b = Blocks {
        data: ctx.alloc(THREADS * OPS).expect("alloc"),
        last: ctx.alloc(THREADS).expect("alloc"),
        counters: ctx.alloc(1).expect("alloc"),
        done: ctx.alloc(1).expect("alloc"),
    };
    ctx.barrier_all().unwrap();
    if me == 0 {
        // A call that used verbs gives the PE's verbs state and the TCP
        // driver back when it returns, so the other contexts can take them.
        ctx.put(&b.data, 0, &[0], 1).unwrap();
        assert!(!ctx.tcp.as_ref().expect("tcp").held(), "held after a put");
        ctx.fence().unwrap();
        assert!(!ctx.tcp.as_ref().expect("tcp").held(), "held after a fence");
        assert!(ctx.verbs.is_none(), "the verbs state stayed checked out");
        let mut olds = threads(&ctx, &b, fabric, break_at);
        // Each fetch-add saw a value of its own: none ran twice, none was
        // lost.
        olds.sort_unstable();
        let want: Vec<u64> = (0..(THREADS * OPS) as u64).collect();
        assert_eq!(olds, want, "fetch-add results");
        if break_at.is_some() {
            let s = ctx.stats();
            assert!(s.verbs_failovers >= 1, "{s:?}");
            fabric.heal();
        }
    } else {
        check(&mut ctx, &b);
    }
    ctx.barrier_all().unwrap();
    close_together(&mut ctx, done);
    ctx
}

fn plain_script(ctx: Context, fabric: &Fabric, done: &AtomicU32, _: &AtomicU32) -> Context {
    run(ctx, fabric, done, None)
}

fn failover_script(ctx: Context, fabric: &Fabric, done: &AtomicU32, _: &AtomicU32) -> Context {
    run(ctx, fabric, done, Some(OPS / 3))
}

/// Atomics over verbs (the NIC's), so both threads' fetch-adds share the
/// driver with their puts.
fn nic() -> Opts {
    Opts {
        atomics: VerbsAtomics::Nic,
        ..Opts::default()
    }
}

#[test]
fn two_contexts_put_and_fetch_add_over_verbs_at_once() {
    run_pair(0x91, nic(), VerbsConfig::default(), plain_script);
}

/// A QP failure while both threads put and fetch-add: their puts fail
/// over to TCP (replayed once, in order, none lost), their atomics
/// (over TCP here, `verbs_atomics = auto` on an HCA-only device, so
/// none is of unknown outcome) each apply once.
#[test]
fn a_qp_failure_during_the_threaded_run_fails_over_with_nothing_lost_or_doubled() {
    run_pair(
        0x92,
        Opts::default(),
        VerbsConfig::default(),
        failover_script,
    );
}

/// Two contexts of PE 0 in one thread: only the context whose put was
/// lost (no room to replay it) is told, once; the other's quiet succeeds.
fn lost_script(mut ctx: Context, fabric: &Fabric, done: &AtomicU32, _: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    let sym: Sym<u64> = ctx.alloc(16).expect("alloc");
    ctx.barrier_all().unwrap();
    ctx.quiet().unwrap();
    ctx.barrier_all().unwrap();
    if me == 0 {
        // The barrier's flags complete: nothing of this context in flight.
        ctx.quiet().unwrap();
        let pe = ctx.pe();
        let mut a = pe.context().expect("context a");
        let mut b = pe.context().expect("context b");
        a.verbs_mut().drv.fake_limit_replays(1, 0);
        a.leave();
        fabric.break_links();
        a.put(&sym, 0, &[5], 1).unwrap();
        b.quiet().expect("b had nothing in flight: not told");
        let r = a.quiet();
        assert!(
            matches!(r, Err(Error::ReplayLost { pe: 1, ops }) if ops >= 1),
            "a's lost put was not reported to a: {r:?}"
        );
        a.quiet().expect("reported once");
        b.quiet().expect("never to b");
        ctx.quiet().expect("nor to the first context");
        fabric.heal();
    }
    ctx.barrier_all().unwrap();
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn a_lost_put_is_reported_to_its_own_context_once() {
    run_pair(0x93, Opts::default(), VerbsConfig::default(), lost_script);
}

/// A context that used neither shared driver (its quiet takes no entry
/// lock) still raises a verbs link that came back up: while a health bit
/// waits, the shared verbs state names every context's lane
/// (`Context::verbs_attention`), so its quiet completes both shared
/// drivers and sets the bit.
fn idle_raise_script(
    mut ctx: Context,
    fabric: &Fabric,
    done: &AtomicU32,
    _: &AtomicU32,
) -> Context {
    let me = ctx.my_pe();
    let sym: Sym<u64> = ctx.alloc(8).expect("alloc");
    ctx.barrier_all().unwrap();
    if me == 0 {
        // The link must be up before it is broken (on a loaded machine the
        // first health bit may still wait; the put would then go over TCP,
        // fail nothing, and the quiet raise the link).
        wait_up(&mut ctx);
        fabric.break_links();
        ctx.put(&sym, 0, &[1], 1).unwrap();
        ctx.quiet().unwrap();
        assert!(ctx.stats().verbs_failovers >= 1, "{:?}", ctx.stats());
        assert_eq!(ctx.verbs_status().peers_up, 0, "the link failed");
        fabric.heal();
        let mut idle = ctx.pe().context().expect("an idle context");
        let start = Instant::now();
        while idle.verbs_status().peers_up == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "the idle context's quiet did not raise the link: {:?}",
                idle.verbs_status()
            );
            // Progress (the link's events, its RTS) and quiet, nothing
            // else: the context has nothing on either shared driver.
            idle.call().poll_once();
            assert_eq!(idle.order.shared, 0);
            idle.quiet().expect("quiet");
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    ctx.barrier_all().unwrap();
    if me == 1 {
        let mut v = [0u64];
        ctx.read_local(&sym, 0, &mut v).unwrap();
        assert_eq!(v[0], 1, "the put, replayed over TCP");
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn an_idle_contexts_quiet_raises_a_link_that_came_back() {
    run_pair(
        0x94,
        Opts::default(),
        VerbsConfig::default(),
        idle_raise_script,
    );
}

/// The loss book alone: each context with operations in flight to the
/// peer is told once; one without is not; a loss with none known in flight
/// goes to the context that found it; a quiet driver clears what is in
/// flight; a dropped context's reports go with it.
#[test]
fn each_context_learns_of_a_loss_once() {
    let (a, b, c) = (1u64, 2u64, 4u64);
    let mut book = LossBook::new(3);
    book.issued(1, a);
    book.issued(1, b);
    book.issued(2, c);
    book.record(1, 3, c);
    assert_eq!(book.take(c), None, "c had nothing in flight to PE 1");
    assert_eq!(book.take(a), Some((1, 3)));
    assert_eq!(book.take(a), None, "once");
    assert_eq!(book.take(b), Some((1, 3)));
    assert_eq!(book.take(b), None);
    book.settled();
    book.record(2, 1, b);
    assert_eq!(
        book.take(c),
        None,
        "settled: nothing in flight, so the finder"
    );
    assert_eq!(book.take(b), Some((2, 1)));
    book.issued(0, a);
    book.record(0, 2, b);
    book.forget_lane(a);
    assert_eq!(book.take(a), None, "a dropped context is not told");
    assert_eq!(book.take(b), None);
}
