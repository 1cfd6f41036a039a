//! Per-context QP sets through real contexts on the fake HCA: two
//! contexts of PE 0 in two threads each open a set toward PE 1, which
//! opens the matching ones; puts posted on each set land at PE 1; a
//! context dropped closes its set at both ends; a budget spent (here, or
//! at the peer) leaves the context on the shared driver.

use std::thread;

use switchyard_core::transport::{ErrorKind, TransportError};

use super::*;
use crate::context::{
    Cmp,
    verbs::{Record, SetError, SetId},
};

/// Puts per thread, posted on the thread's own set (fewer than the
/// target set's receive queue holds).
const PUTS: usize = 64;
/// Threads (contexts) of PE 0.
const THREADS: usize = 2;

fn stamp(t: usize, i: usize) -> u64 {
    ((t as u64 + 7) << 40) | (i as u64 + 1)
}

/// Progresses `ctx` until `f(ctx)` (bounded: 15 s).
fn until(ctx: &mut Context, what: &str, mut f: impl FnMut(&mut Context) -> bool) {
    let start = Instant::now();
    while !f(ctx) {
        assert!(start.elapsed() < Duration::from_secs(15), "{what}");
        // A call: the PE's state goes back for the other contexts.
        ctx.call().poll_once();
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Posts `PUTS` stamps on `c`'s own set toward PE 1 and quiets the set
/// (bounded).
fn put_on_set(c: &mut Context, data: &Sym<u64>, t: usize) {
    let base = data.offset() + (t * PUTS * 8) as u64;
    let cid = switchyard_core::route::ContextId { pe: 0, seq: 1 };
    let start = Instant::now();
    for i in 0..PUTS {
        loop {
            assert!(start.elapsed() < Duration::from_secs(15), "put {i}");
            let s = c.verbs_set_drv(1).expect("the context's set");
            match s.put(1, base + (i * 8) as u64, &stamp(t, i).to_le_bytes(), cid) {
                Ok(()) => break,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    s.progress(CoreInstant::from_nanos(0));
                }
                Err(e) => panic!("put {i} on the set: {e}"),
            }
        }
    }
    loop {
        assert!(start.elapsed() < Duration::from_secs(15), "the set's quiet");
        let s = c.verbs_set_drv(1).expect("the context's set");
        if s.quiet_poll().expect("the set's quiet") {
            break;
        }
        s.progress(CoreInstant::from_nanos(0));
        c.call().poll_once();
    }
}

fn two_sets_script(mut ctx: Context, _: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    let data: Sym<u64> = ctx.alloc(THREADS * PUTS).expect("alloc");
    let flag: Sym<u64> = ctx.alloc(1).expect("alloc");
    ctx.barrier_all().unwrap();
    if me == 0 {
        let pe = ctx.pe();
        let wrs = ctx.with_verbs(|v| v.drv.stats().wrs).unwrap();
        thread::scope(|s| {
            let hs: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (pe, data) = (pe.clone(), &data);
                    s.spawn(move || {
                        let mut c = pe.context().expect("a context per thread");
                        let id = c.verbs_open_set(1).expect("a set of its own");
                        assert_eq!(c.verbs_open_set(1).expect("the same set"), id);
                        until(&mut c, "the set up at both ends", |c| c.verbs_set_up(1));
                        put_on_set(&mut c, data, t);
                        id
                        // `c` drops: its set closes, here and at PE 1.
                    })
                })
                .collect();
            let ids: Vec<_> = hs
                .into_iter()
                .map(|h| h.join().expect("a thread"))
                .collect();
            assert_ne!(ids[0], ids[1], "each context has a set of its own");
        });
        // Both contexts dropped: their sets' units are back.
        assert_eq!(ctx.verbs_sets_open(), (0, 0), "PE 0's sets closed");
        // Nothing went over the PE's shared driver meanwhile.
        assert_eq!(
            ctx.with_verbs(|v| v.drv.stats().wrs).unwrap(),
            wrs,
            "the sets' puts posted on the PE's driver"
        );
        ctx.put(&flag, 0, &[1], 1).unwrap();
        ctx.quiet().unwrap();
        wait_for_step(step, 1);
    } else {
        // Answering both openings (two sets open here), then checking the
        // stamps once PE 0 says so.
        until(&mut ctx, "the two sets opened here", |c| {
            c.verbs_sets_answered() == (THREADS as u64, 0)
        });
        assert_eq!(ctx.wait_until(&flag, 0, Cmp::Eq, 1).unwrap(), 1);
        let mut got = vec![0u64; THREADS * PUTS];
        ctx.read_local(&data, 0, &mut got).unwrap();
        for t in 0..THREADS {
            for i in 0..PUTS {
                assert_eq!(got[t * PUTS + i], stamp(t, i), "thread {t}, put {i}");
            }
        }
        // The contexts dropped at PE 0: their sets closed here too.
        until(&mut ctx, "the matching sets closed", |c| {
            c.verbs_sets_open() == (0, 0)
        });
        step.store(1, Ordering::SeqCst);
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn two_contexts_in_two_threads_each_open_a_set_and_drop_closes_it_at_both_ends() {
    run_pair(
        0xA1,
        Opts::default(),
        VerbsConfig::default(),
        two_sets_script,
    );
}

fn budget_script(mut ctx: Context, _: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    // PE 0 may open two sets, PE 1 answer one.
    ctx.verbs_set_budget(if me == 0 { 2 } else { 1 });
    let data: Sym<u64> = ctx.alloc(1).expect("alloc");
    ctx.barrier_all().unwrap();
    if me == 0 {
        let pe = ctx.pe();
        let mut a = pe.context().expect("context a");
        let mut b = pe.context().expect("context b");
        let mut c = pe.context().expect("context c");
        a.verbs_open_set(1).expect("a's set");
        until(&mut a, "a's set up", |a| a.verbs_set_up(1));
        // PE 1's budget is spent: it refuses b's set, which closes here.
        b.verbs_open_set(1).expect("b's set opened here");
        assert_eq!(b.verbs_sets_open().1, 2);
        until(&mut b, "b's set refused and closed", |b| {
            b.verbs_sets_open().1 == 1 && b.verbs_set_drv(1).is_none()
        });
        assert!(!b.verbs_set_up(1));
        // The context keeps the shared driver: its put goes over verbs.
        let before = verbs_ops(&b);
        b.put(&data, 0, &[5], 1).unwrap();
        b.quiet().unwrap();
        assert_eq!(verbs_ops(&b), before + 1, "b's put over the shared driver");
        // PE 0's own budget: a and a set of c's make two, a third is
        // refused here.
        c.verbs_open_set(1).expect("c's set opened here");
        let d = pe.context().expect("context d");
        let mut d = d;
        match d.verbs_open_set(1) {
            Err(SetError::Driver(VerbsError::NoSetLeft { peer: 1, max: 2 })) => {}
            r => panic!("a third set past a budget of 2: {r:?}"),
        }
        until(&mut c, "c's set refused by PE 1", |c| {
            c.verbs_set_drv(1).is_none()
        });
        drop((a, b, c, d));
        until(&mut ctx, "PE 1 closed a's set", |_| {
            step.load(Ordering::SeqCst) == 1
        });
        assert_eq!(ctx.verbs_sets_open(), (0, 0));
    } else {
        until(&mut ctx, "a's set answered, b's and c's refused", |c| {
            c.verbs_sets_answered() == (1, 2)
        });
        until(&mut ctx, "a's set closed", |c| {
            c.verbs_sets_open() == (0, 0)
        });
        let mut g = [0u64];
        ctx.read_local(&data, 0, &mut g).unwrap();
        assert_eq!(g[0], 5, "b's put");
        step.store(1, Ordering::SeqCst);
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn a_budget_spent_at_either_end_leaves_the_context_on_the_shared_driver() {
    run_pair(0xA2, Opts::default(), VerbsConfig::default(), budget_script);
}

/// PE 1 (receive queue of 16) answers a set of PE 0's, starts its
/// progress thread and computes outside the library while PE 0 posts 200
/// puts on its set: the thread re-posts the set's receives, so the set's
/// quiet completes (without it the puts would wait on RNR for ever).
fn idle_answerer_script(
    mut ctx: Context,
    _: &Fabric,
    done: &AtomicU32,
    step: &AtomicU32,
) -> Context {
    const N_PUTS: usize = 200;
    let me = ctx.my_pe();
    let clock = ctx.clock;
    ctx.tcp
        .as_mut()
        .expect("tcp")
        .start(
            progress::ThreadMode::Adaptive {
                tick: Duration::from_millis(1),
            },
            clock,
            None,
            me,
        )
        .expect("progress thread");
    let data: Sym<u64> = ctx.alloc(N_PUTS).expect("alloc");
    ctx.barrier_all().unwrap();
    if me == 0 {
        let pe = ctx.pe();
        let mut c = pe.context().expect("a second context");
        c.verbs_open_set(1).expect("a set");
        until(&mut c, "the set up", |c| c.verbs_set_up(1));
        step.store(1, Ordering::SeqCst);
        let base = data.offset();
        let cid = switchyard_core::route::ContextId { pe: 0, seq: 1 };
        let start = Instant::now();
        let s = c.verbs_set_drv(1).expect("the set");
        for i in 0..N_PUTS {
            loop {
                assert!(start.elapsed() < Duration::from_secs(15), "put {i}");
                match s.put(1, base + (i * 8) as u64, &(i as u64 + 1).to_le_bytes(), cid) {
                    Ok(()) => break,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        s.progress(CoreInstant::from_nanos(0));
                    }
                    Err(e) => panic!("put {i}: {e}"),
                }
            }
        }
        while !s.quiet_poll().expect("the set's quiet") {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "the set's quiet while PE 1 computes"
            );
            s.progress(CoreInstant::from_nanos(0));
        }
        step.store(2, Ordering::SeqCst);
        drop(c);
    } else {
        until(&mut ctx, "PE 0's set answered", |c| {
            c.verbs_sets_answered() == (1, 0)
        });
        // Outside the library until PE 0's puts are complete.
        wait_for_step(step, 2);
        let mut got = vec![0u64; N_PUTS];
        ctx.read_local(&data, 0, &mut got).unwrap();
        for (i, x) in got.iter().enumerate() {
            assert_eq!(*x, i as u64 + 1, "put {i}");
        }
        until(&mut ctx, "the set closed", |c| {
            c.verbs_sets_open() == (0, 0)
        });
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn the_progress_thread_reposts_an_answered_sets_receives_while_the_target_computes() {
    let cfg = VerbsConfig {
        srq_depth: Some(16),
        ..VerbsConfig::default()
    };
    let fabric = run_pair(0xA3, Opts::default(), cfg, idle_answerer_script);
    assert!(
        fabric.rnr_naks() > 0,
        "the set's receive queue ran dry at times"
    );
}

/// PE 1 sleeps outside the library while PE 0's context opens a set: the
/// opening is not answered within its wait, so PE 0 closes its set (its
/// unit back) and tells PE 1, which, once it runs again, closes the set
/// it opened late.
fn unanswered_script(mut ctx: Context, _: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    ctx.barrier_all().unwrap();
    if me == 0 {
        let pe = ctx.pe();
        let mut c = pe.context().expect("a second context");
        c.verbs_set_open_wait(Duration::from_millis(200));
        wait_for_step(step, 1);
        c.verbs_open_set(1).expect("a set");
        assert_eq!(c.verbs_sets_open().1, 1);
        until(&mut c, "the unanswered set closed", |c| {
            c.verbs_set_drv(1).is_none()
        });
        assert!(!c.verbs_set_up(1));
        assert_eq!(c.verbs_sets_open().1, 0, "its unit back");
        step.store(2, Ordering::SeqCst);
        drop(c);
    } else {
        step.store(1, Ordering::SeqCst);
        wait_for_step(step, 2);
        until(&mut ctx, "the late opening answered, then closed", |c| {
            c.verbs_sets_answered().0 == 1 && c.verbs_sets_open() == (0, 0)
        });
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn an_unanswered_opening_closes_its_set_at_its_deadline() {
    run_pair(
        0xA4,
        Opts::default(),
        VerbsConfig::default(),
        unanswered_script,
    );
}

/// Openings a peer never completes (piece 0 of 9-QP sets) are bounded by
/// the budget's size; past it they are refused. A set record with a bad
/// byte is counted, not applied.
fn junk_script(mut ctx: Context, _: &Fabric, done: &AtomicU32, _: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    ctx.barrier_all().unwrap();
    if me == 1 {
        ctx.verbs_set_budget(8);
        let nine: Vec<u32> = (1..=9).collect();
        let mut call = ctx.call();
        for k in 0..100u16 {
            let id = SetId { context: k, set: 0 };
            let (recs, _) = Record::set_qpns(id, false, &nine).unwrap();
            call.verbs_record(0, &recs[0].encode());
        }
        let bad0 = call.verbs_mut().bad_records;
        let mut b = Record::SetClosed {
            id: SetId::default(),
            answer: false,
        }
        .encode();
        b[7] = 2;
        call.verbs_record(0, &b);
        assert_eq!(call.verbs_mut().bad_records, bad0 + 1);
        drop(call);
        assert_eq!(ctx.verbs_sets_pending(), 8, "pending openings bounded");
        assert_eq!(ctx.verbs_sets_answered(), (0, 92), "the rest refused");
        assert_eq!(ctx.verbs_sets_open(), (0, 0), "no set opened");
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn openings_never_completed_are_bounded_and_bad_set_records_counted() {
    run_pair(0xA5, Opts::default(), VerbsConfig::default(), junk_script);
}

/// PE 0 is found dead at PE 1 with a set of its context's answered
/// there: PE 1 closes it (its unit back), as PE 0's context closes its own
/// once told its peer is dead.
fn dead_script(mut ctx: Context, _: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    ctx.barrier_all().unwrap();
    if me == 0 {
        let pe = ctx.pe();
        let mut c = pe.context().expect("a second context");
        c.verbs_open_set(1).expect("a set");
        until(&mut c, "the set up", |c| c.verbs_set_up(1));
        wait_for_step(step, 1);
        // As if PE 1 were found dead here: the context's set closes at its
        // next step.
        c.call().verbs_sets_peer_dead(1);
        until(&mut c, "the set closed", |c| c.verbs_set_drv(1).is_none());
        assert_eq!(c.verbs_sets_open().1, 0);
        step.store(2, Ordering::SeqCst);
    } else {
        until(&mut ctx, "the set answered", |c| {
            c.verbs_sets_open() == (1, 1)
        });
        ctx.call().verbs_sets_peer_dead(0);
        assert_eq!(ctx.verbs_sets_open(), (0, 0), "closed when PE 0 died");
        step.store(1, Ordering::SeqCst);
        wait_for_step(step, 2);
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn a_dead_peer_closes_the_sets_toward_it() {
    run_pair(0xA6, Opts::default(), VerbsConfig::default(), dead_script);
}
