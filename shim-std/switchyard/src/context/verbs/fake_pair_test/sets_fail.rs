//! A context's QP set failing, through real contexts on the fake HCA: its
//! QPs broken mid-stream (its receipts, its puts replayed over TCP
//! exactly once, its rebuild, while another context's set and the PE's
//! shared driver stay up); its receipts withheld (that context's `quiet`
//! reports the puts lost, another's does not); a close that overtakes its
//! opening; an opening whose pieces never all come.

use std::sync::atomic::AtomicU64;

use switchyard_core::{
    route::ContextId,
    transport::{ErrorKind, TransportError},
};

use super::*;
use crate::context::{
    Error,
    verbs::{Record, SetId},
};

/// Puts of context `a` on its set before its QPs break a third of the
/// way in (fewer than the target set's receive queue holds), and after
/// its rebuild.
const N: usize = 60;
const AFTER: usize = 16;
/// Puts of context `b` on its own set.
const B_PUTS: usize = 24;

/// What PE 0 tells PE 1 (same process): puts that landed over the sets
/// PE 1 answers, as PE 0 counts them (posted minus replayed).
static LANDED: AtomicU64 = AtomicU64::new(0);

fn stamp(k: u64, i: usize) -> u64 {
    (k + 3) << 40 | (i as u64 + 1)
}

/// Progresses `ctx` until `f(ctx)` (bounded: 15 s).
fn until(ctx: &mut Context, what: &str, mut f: impl FnMut(&mut Context) -> bool) {
    let start = Instant::now();
    while !f(ctx) {
        assert!(start.elapsed() < Duration::from_secs(15), "{what}");
        ctx.call().poll_once();
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// `s.put`, making progress while its queues are full (bounded).
fn set_put(
    s: &mut VerbsDriver,
    off: u64,
    v: u64,
) -> std::result::Result<(), switchyard_verbs::VerbsError> {
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "a put on the set"
        );
        match s.put(1, off, &v.to_le_bytes(), ContextId { pe: 0, seq: 1 }) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                s.progress(CoreInstant::default());
            }
            r => return r,
        }
    }
}

/// Posts `n` stamps of `k` on `c`'s set from slot `first` and quiets the
/// set (bounded).
fn stream_on_set(c: &mut Context, data: &Sym<u64>, k: u64, first: usize, n: usize) {
    for i in first..first + n {
        let s = c.verbs_set_drv(1).expect("the context's set");
        set_put(s, data.offset() + (i * 8) as u64, stamp(k, i)).expect("a put on the set");
    }
    until(c, "the set's quiet", |c| {
        let s = c.verbs_set_drv(1).expect("the context's set");
        s.progress(CoreInstant::default());
        s.quiet_poll().expect("the set's quiet")
    });
}

/// Waits until `c`'s set is usable (progressing and quieting: the end of
/// a quiet raises it after a failure).
fn until_usable(c: &mut Context, what: &str) {
    until(c, what, |c| {
        c.quiet().expect("quiet");
        c.verbs_set_usable(1)
    });
}

fn broken_script(mut ctx: Context, fabric: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    // Context a's slots, then b's.
    let data: Sym<u64> = ctx.alloc(N + AFTER + B_PUTS).expect("alloc");
    let flag: Sym<u64> = ctx.alloc(1).expect("alloc");
    ctx.barrier_all().unwrap();
    if me == 0 {
        let pe = ctx.pe();
        let mut a = pe.context().expect("context a");
        let mut b = pe.context().expect("context b");
        a.verbs_open_set(1).expect("a's set");
        b.verbs_open_set(1).expect("b's set");
        until_usable(&mut a, "a's set usable");
        until_usable(&mut b, "b's set usable");
        let qpns: Vec<u32> = a
            .verbs_set_drv(1)
            .unwrap()
            .card_for(1)
            .unwrap()
            .qps()
            .iter()
            .map(|q| q.qpn)
            .collect();
        // a streams on its set; its QPs break a third of the way in.
        let (mut posted, mut failed_at) = (0u64, None);
        for i in 0..N {
            if i == N / 3 {
                fabric.break_qps(&qpns);
            }
            if failed_at.is_none() {
                let s = a.verbs_set_drv(1).unwrap();
                match set_put(s, data.offset() + (i * 8) as u64, stamp(0, i)) {
                    Ok(()) => {
                        posted += 1;
                        if i % 8 == 7 {
                            s.progress(CoreInstant::default());
                        }
                        if s.state(1) != LinkState::Error {
                            continue;
                        }
                        // Taken before the failure was seen: in doubt.
                        failed_at = Some(i);
                        fabric.heal();
                        // What an operation that met the set's failure
                        // runs: the set's events. It holds now: puts in
                        // doubt (their receipts cannot have come within
                        // the step that sent the question).
                        until(&mut a, "a's set holds", |c| c.verbs_set_holds(1));
                        continue;
                    }
                    Err(e) => {
                        assert_eq!(e.kind(), ErrorKind::PeerDown, "{e}");
                        failed_at = Some(i);
                        fabric.heal();
                        until(&mut a, "a's set holds", |c| c.verbs_set_holds(1));
                    }
                }
            }
            // After the failure: the context's own path (the PE's shared
            // driver), which waits while the set's puts are in doubt.
            a.put(&data, i, &[stamp(0, i)], 1).unwrap();
        }
        let failed_at = failed_at.expect("the set noticed its break");
        assert!(failed_at >= N / 3, "not before the break");
        assert!(!a.verbs_set_holds(1), "settled");
        a.quiet().expect("nothing lost");
        let settled = a.verbs_set_drv(1).unwrap().stats().receipts_settled;
        assert!(settled >= 1, "puts in doubt known landed by the receipts");
        let (fails, replays, _) = a.verbs_set_link(1).unwrap();
        assert_eq!(fails, 1, "a's set failed once");
        assert!(replays > 0, "the puts after the break were replayed");
        // b's set and the PE's shared driver never noticed.
        assert!(b.verbs_set_usable(1), "b's set stays up");
        stream_on_set(&mut b, &data, 1, N + AFTER, B_PUTS);
        assert_eq!(b.verbs_set_link(1).unwrap().0, 0, "b's set never failed");
        assert!(a.verbs_up(1), "the shared link stays up");
        assert_eq!(
            a.with_verbs(|v| v.drv.stats().peer_failures).unwrap(),
            0,
            "the shared driver never failed"
        );
        // a's set is rebuilt (a generation on) and takes puts again.
        until_usable(&mut a, "a's set up again after its rebuild");
        assert_eq!(a.verbs_set_link(1).unwrap().2, 1, "rebuilt to generation 1");
        stream_on_set(&mut a, &data, 0, N, AFTER);
        // Every put a posted on its set landed over it or was replayed:
        // not both, not neither (PE 1 counts what landed over its sets).
        LANDED.store(posted - replays + (AFTER + B_PUTS) as u64, Ordering::SeqCst);
        a.put(&flag, 0, &[1], 1).unwrap();
        a.quiet().unwrap();
        // The sets close once PE 1 counted what landed over them.
        wait_for_step(step, 1);
        drop((a, b));
    } else {
        until(&mut ctx, "both sets answered", |c| {
            c.verbs_sets_answered() == (2, 0)
        });
        assert_eq!(ctx.wait_until_for(&flag, 0, Cmp::Eq, 1, WAIT).unwrap(), 1);
        let mut got = vec![0u64; N + AFTER + B_PUTS];
        ctx.read_local(&data, 0, &mut got).unwrap();
        for (i, &x) in got.iter().enumerate() {
            let want = if i < N + AFTER {
                stamp(0, i)
            } else {
                stamp(1, i)
            };
            assert_eq!(x, want, "slot {i}");
        }
        // The last puts' receive completions may still be queued here.
        let landed = LANDED.load(Ordering::SeqCst);
        let start = Instant::now();
        while ctx.verbs_sets_answering_stats().0 < landed {
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "receipts {:?}, landed {landed}",
                ctx.verbs_sets_answering_stats()
            );
            ctx.poll_once();
            std::thread::sleep(Duration::from_micros(100));
        }
        let (receipts, fails) = ctx.verbs_sets_answering_stats();
        assert_eq!(fails, 1, "a's set failed at this end too");
        assert_eq!(
            receipts, landed,
            "every put on the sets landed exactly once over them or was replayed"
        );
        step.store(1, Ordering::SeqCst);
        until(&mut ctx, "the sets closed", |c| {
            c.verbs_sets_open() == (0, 0)
        });
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn a_set_broken_mid_stream_replays_exactly_once_and_comes_back() {
    run_pair(0xB1, Opts::default(), VerbsConfig::default(), broken_script);
}

/// PE 1's set cannot tell which of context a's puts landed (no last-WQE
/// event): a's next quiet reports its put lost, at once, and only a's;
/// b's quiet does not. a's set is rebuilt and carries puts again.
fn withheld_script(
    mut ctx: Context,
    fabric: &Fabric,
    done: &AtomicU32,
    step: &AtomicU32,
) -> Context {
    let me = ctx.my_pe();
    let data: Sym<u64> = ctx.alloc(4).expect("alloc");
    ctx.barrier_all().unwrap();
    if me == 0 {
        let pe = ctx.pe();
        let mut a = pe.context().expect("context a");
        let mut b = pe.context().expect("context b");
        a.verbs_open_set(1).expect("a's set");
        b.verbs_open_set(1).expect("b's set");
        until_usable(&mut a, "a's set usable");
        until_usable(&mut b, "b's set usable");
        stream_on_set(&mut b, &data, 1, 2, 1);
        fabric.suppress_last_wqe(true);
        fabric.lose_ack_after(0); // the put lands, its ack is lost
        set_put(a.verbs_set_drv(1).unwrap(), data.offset(), stamp(0, 0)).unwrap();
        let start = Instant::now();
        // a's steps find the set failed (what its quiet of the set would).
        until(&mut a, "a's set failed", |c| {
            c.verbs_set_link(1).unwrap().0 == 1
        });
        let r = a.quiet();
        let took = start.elapsed();
        fabric.suppress_last_wqe(false);
        assert!(
            matches!(r, Err(Error::ReplayLost { pe: 1, ops: 1 })),
            "a's put in doubt was not reported lost: {r:?}"
        );
        assert!(took < Duration::from_secs(10), "waited {took:?}");
        a.quiet().expect("reported once");
        b.quiet().expect("b lost nothing");
        ctx.quiet().expect("nor did the PE's first context");
        until_usable(&mut a, "a's set up again after its rebuild");
        stream_on_set(&mut a, &data, 0, 1, 1);
        drop((a, b));
        step.store(1, Ordering::SeqCst);
        wait_for_step(step, 2);
    } else {
        until(&mut ctx, "both sets answered", |c| {
            c.verbs_sets_answered() == (2, 0)
        });
        until(&mut ctx, "PE 0 done", |_| step.load(Ordering::SeqCst) == 1);
        let mut got = [0u64; 3];
        ctx.read_local(&data, 0, &mut got).unwrap();
        assert_eq!(
            got[0],
            stamp(0, 0),
            "the put landed (reported lost: in doubt)"
        );
        assert_eq!(got[1], stamp(0, 1), "a's put after the rebuild");
        assert_eq!(got[2], stamp(1, 2), "b's put");
        until(&mut ctx, "the sets closed", |c| {
            c.verbs_sets_open() == (0, 0)
        });
        step.store(2, Ordering::SeqCst);
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn withheld_receipts_of_a_set_are_lost_to_its_context_only() {
    run_pair(
        0xB2,
        Opts::default(),
        VerbsConfig::default(),
        withheld_script,
    );
}

/// At PE 1: a close that overtook its opening (records take different
/// TCP rails) leaves nothing open; an opening whose pieces never all come
/// is dropped at its deadline, as is the memory of the close.
fn late_script(mut ctx: Context, _: &Fabric, done: &AtomicU32, _: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    ctx.barrier_all().unwrap();
    if me == 1 {
        ctx.verbs_sets_pieces_wait(Duration::from_millis(100));
        let nine: Vec<u32> = (1..=9).collect();
        let closed = SetId { context: 3, set: 9 };
        let half = SetId {
            context: 3,
            set: 10,
        };
        let (c, _) = Record::set_qpns(closed, false, &nine).unwrap();
        let (h, _) = Record::set_qpns(half, false, &nine).unwrap();
        {
            let mut call = ctx.call();
            call.verbs_record(
                0,
                &Record::SetClosed {
                    id: closed,
                    answer: false,
                }
                .encode(),
            );
            call.verbs_record(0, &c[0].encode());
            call.verbs_record(0, &c[1].encode());
        }
        assert_eq!(ctx.verbs_sets_pending(), 0, "the late opening dropped");
        assert_eq!(ctx.verbs_sets_open(), (0, 0), "nothing opened");
        assert_eq!(ctx.verbs_sets_dropped(), 2, "both its pieces");
        // Half an opening: pending until its deadline.
        ctx.call().verbs_record(0, &h[0].encode());
        assert_eq!(ctx.verbs_sets_pending(), 1);
        until(&mut ctx, "the half opening expired", |c| {
            c.verbs_sets_pending() == 0
        });
        assert_eq!(ctx.verbs_sets_dropped(), 3);
        // The close is forgotten by then too: the id may open again.
        ctx.call().verbs_record(0, &c[0].encode());
        assert_eq!(ctx.verbs_sets_pending(), 1, "the id is free again");
        until(&mut ctx, "that one expired too", |c| {
            c.verbs_sets_pending() == 0
        });
        assert_eq!(ctx.verbs_sets_open(), (0, 0));
        assert_eq!(ctx.verbs_sets_answered(), (0, 0));
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn a_close_that_overtakes_its_opening_and_half_openings_leave_nothing_open() {
    run_pair(0xB3, Opts::default(), VerbsConfig::default(), late_script);
}

/// PE 1's RTS for the rebuilt set is lost on the way: PE 0's context
/// sends its own again, PE 1 answers the repeat with its RTS, and the set
/// is usable again.
fn lost_rts_script(
    mut ctx: Context,
    fabric: &Fabric,
    done: &AtomicU32,
    step: &AtomicU32,
) -> Context {
    let me = ctx.my_pe();
    let data: Sym<u64> = ctx.alloc(4).expect("alloc");
    ctx.barrier_all().unwrap();
    if me == 0 {
        let pe = ctx.pe();
        let mut a = pe.context().expect("context a");
        a.verbs_open_set(1).expect("a's set");
        until_usable(&mut a, "a's set usable");
        wait_for_step(step, 1);
        let qpns: Vec<u32> = a
            .verbs_set_drv(1)
            .unwrap()
            .card_for(1)
            .unwrap()
            .qps()
            .iter()
            .map(|q| q.qpn)
            .collect();
        fabric.break_qps(&qpns);
        let r = set_put(a.verbs_set_drv(1).unwrap(), data.offset(), stamp(0, 0));
        if r.is_err() {
            a.put(&data, 0, &[stamp(0, 0)], 1).unwrap();
        }
        until(&mut a, "a's set failed", |c| {
            c.verbs_set_link(1).unwrap().0 == 1
        });
        fabric.heal();
        until_usable(&mut a, "a's set up again, PE 1's first RTS lost");
        assert_eq!(a.verbs_set_link(1).unwrap().2, 1);
        stream_on_set(&mut a, &data, 0, 1, 1);
        a.quiet().unwrap();
        drop(a);
        step.store(2, Ordering::SeqCst);
    } else {
        until(&mut ctx, "the set answered", |c| {
            c.verbs_sets_answered() == (1, 0)
        });
        ctx.verbs_mut().drop_set_rts = 1;
        step.store(1, Ordering::SeqCst);
        until(&mut ctx, "PE 0 done", |_| step.load(Ordering::SeqCst) == 2);
        assert_eq!(ctx.verbs_mut().drop_set_rts, 0, "the RTS was dropped");
        let mut got = [0u64; 2];
        ctx.read_local(&data, 0, &mut got).unwrap();
        assert_eq!(got, [stamp(0, 0), stamp(0, 1)]);
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn a_lost_rts_of_a_rebuilt_set_is_sent_again() {
    run_pair(
        0xB4,
        Opts::default(),
        VerbsConfig::default(),
        lost_rts_script,
    );
}
