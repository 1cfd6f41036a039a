//! Waits: a wait on a live peer outlasts the op timeout (shm and TCP pairs),
//! a deadline is the caller's (`wait_until_for`), a peer that dies ends a
//! wait with `PeerDead`, the multi-word tests and waits with their status
//! masks and fair `_any`, `put_signal`, and a quiet toward a peer asleep
//! outside the library (its progress thread acks).

use std::{
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use switchyard_core::route::PolicyConfig;
use switchyard_socket::TcpConfig;

use super::{
    Cmp, Context, Error, Setup, Signal, WaitSet,
    progress::{MAX_TICK, ThreadMode},
    shm_pair_test::run_pair_with,
    tcp_pair_test::{Pair, job, wait_for},
};

/// The op timeout of these pairs.
const OP: Duration = Duration::from_secs(1);
/// How late the quiet PE is: well past [`OP`].
const LATE: Duration = Duration::from_secs(3);

fn short_op_timeout(s: &mut Setup) {
    s.op_timeout = OP;
}

/// Stays idle for `d`, making progress now and then (a PE computing, its
/// progress thread serving the peers).
fn idle(ctx: &mut Context, d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        ctx.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// PE 1 stays quiet for [`LATE`], then puts four words with a signal; PE 0
/// waits on the signal meanwhile (no error), sees the data, and then waits
/// in a barrier PE 1 reaches [`LATE`] / 2 later.
fn late_signal(mut ctx: Context) {
    let me = ctx.my_pe();
    let data = ctx.alloc::<u64>(4).unwrap();
    let sig = ctx.alloc::<u64>(1).unwrap();
    ctx.barrier_all().unwrap();
    if me == 1 {
        idle(&mut ctx, LATE);
        ctx.put_signal(&data, 0, &[1, 2, 3, 4], Signal::set(&sig, 0, 9), 0)
            .unwrap();
        idle(&mut ctx, LATE / 2);
    } else {
        assert_eq!(ctx.wait_until(&sig, 0, Cmp::Eq, 9).unwrap(), 9);
        let mut got = [0u64; 4];
        ctx.get(&data, 0, &mut got, me).unwrap();
        assert_eq!(got, [1, 2, 3, 4], "the data came before the signal");
    }
    ctx.barrier_all().unwrap();
    ctx.finalize().unwrap();
}

#[test]
fn a_flag_3_s_late_wakes_the_waiter_with_a_1_s_op_timeout_over_shm() {
    run_pair_with(job(0x3A17), short_op_timeout, late_signal);
}

#[test]
fn a_flag_3_s_late_wakes_the_waiter_with_a_1_s_op_timeout_over_tcp() {
    let pair = Pair {
        job: job(0x3A18),
        routed: false,
        policy: PolicyConfig::default(),
        tcp: TcpConfig::default(),
    };
    pair.run_with(short_op_timeout, late_signal);
}

/// PE 0 sleeps outside the library for [`LATE`], its progress thread serving
/// PE 1; PE 1 puts and atomically sets words on PE 0 and quiets, then sets
/// again and opens a barrier: both quiets complete within the 1 s op
/// timeout, acknowledged by PE 0's progress thread (adaptive: parked on the
/// sockets) while PE 0 sleeps.
#[test]
fn a_quiet_toward_a_peer_sleeping_outside_the_library_completes_over_tcp() {
    static ASLEEP: AtomicU32 = AtomicU32::new(0);
    let pair = Pair {
        job: job(0x3A1C),
        routed: false,
        policy: PolicyConfig::default(),
        tcp: TcpConfig::default(),
    };
    pair.run_with(short_op_timeout, |mut ctx| {
        let (me, clock) = (ctx.my_pe(), ctx.clock);
        ctx.tcp
            .as_mut()
            .expect("a TCP driver")
            .start(ThreadMode::Adaptive { tick: MAX_TICK }, clock, None, me)
            .unwrap();
        let w = ctx.alloc::<u64>(2).unwrap();
        ctx.barrier_all().unwrap();
        if me == 0 {
            // The calls before the sleep give the driver back (a progress
            // step used to keep it, locking the progress thread out).
            ctx.progress();
            ctx.wait_for("nothing", |c| {
                c.progress();
                Ok(true)
            })
            .unwrap();
            ASLEEP.store(1, Ordering::SeqCst);
            // Asleep in application code: nothing of the library runs on
            // this thread.
            std::thread::sleep(LATE);
        } else {
            // PE 0's application is asleep when the frames arrive.
            wait_for(&mut ctx, &ASLEEP, 1, false);
            ctx.put(&w, 0, &[5], 0).unwrap();
            ctx.set(&w, 1, 7, 0).unwrap();
            ctx.quiet().unwrap();
            ctx.set(&w, 1, 8, 0).unwrap();
        }
        // PE 1's barrier opens with a quiet toward the sleeping PE 0.
        ctx.barrier_all().unwrap();
        if me == 0 {
            let mut got = [0u64; 2];
            ctx.get(&w, 0, &mut got, 0).unwrap();
            assert_eq!(got, [5, 8]);
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

#[test]
fn wait_until_for_ends_at_its_deadline_and_test_does_not_wait() {
    run_pair_with(job(0x3A19), short_op_timeout, |mut ctx| {
        let flag = ctx.alloc::<u64>(1).unwrap();
        ctx.barrier_all().unwrap();
        let e = ctx
            .wait_until_for(&flag, 0, Cmp::Ne, 0, Duration::from_millis(20))
            .unwrap_err();
        assert!(matches!(e, Error::Timeout { pe: None, .. }), "{e}");
        assert!(!ctx.test(&flag, 0, Cmp::Ne, 0).unwrap());
        ctx.barrier_all().unwrap();
        ctx.put(&flag, 0, &[5], 1 - ctx.my_pe()).unwrap();
        assert_eq!(
            ctx.wait_until_for(&flag, 0, Cmp::Ne, 0, Duration::from_secs(60))
                .unwrap(),
            5
        );
        assert!(ctx.test(&flag, 0, Cmp::Eq, 5).unwrap());
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

#[test]
fn a_peer_gone_during_a_wait_ends_it_with_peer_dead() {
    let pair = Pair {
        job: job(0x3A1A),
        routed: false,
        policy: PolicyConfig::default(),
        tcp: TcpConfig {
            give_up: Duration::from_millis(300),
            ..TcpConfig::default()
        },
    };
    pair.run(|mut ctx| {
        let flag = ctx.alloc::<u64>(2).unwrap();
        ctx.barrier_all().unwrap();
        if ctx.my_pe() == 1 {
            // Not before PE 0 is out of the barrier (a peer gone while
            // PE 0 still waits for its barrier message is dead there, and
            // its close may reset the connection under that message): PE
            // 0's word 1, put and quieted once it is out.
            ctx.wait_until_for(&flag, 1, Cmp::Ne, 0, Duration::from_secs(60))
                .unwrap();
            // Gone without a word: sockets and listener closed.
            drop(ctx);
            return;
        }
        ctx.put(&flag, 1, &[1], 1).unwrap();
        ctx.quiet().unwrap();
        // The deadline only keeps a broken build from hanging the test: the
        // wait must end by the peer's death, long before it.
        let e = ctx
            .wait_until_for(&flag, 0, Cmp::Ne, 0, Duration::from_secs(120))
            .unwrap_err();
        assert!(matches!(e, Error::PeerDead { pe: 1, .. }), "{e}");
    });
}

/// Sets word `i` of this PE's own `sym` to `v`.
fn set_own(ctx: &mut Context, sym: &super::Sym<u64>, i: usize, v: u64) {
    let me = ctx.my_pe();
    ctx.put(sym, i, &[v], me).unwrap();
    ctx.quiet().unwrap();
}

#[test]
fn multi_word_tests_and_waits_honour_masks_and_are_fair() {
    run_pair_with(job(0x3A1B), short_op_timeout, |mut ctx| {
        let w = ctx.alloc::<u64>(8).unwrap();
        ctx.barrier_all().unwrap();
        // Words 2..7 of the array: none set yet.
        let set = WaitSet::new(&w, 2, 5, Cmp::Ne, 0);
        assert_eq!(set.len(), 5);
        assert!(!ctx.test_all(&set).unwrap());
        assert_eq!(ctx.test_any(&set).unwrap(), None);
        let mut out = [usize::MAX; 5];
        assert_eq!(ctx.test_some(&set, &mut out).unwrap(), 0);
        for i in [3, 4, 6] {
            set_own(&mut ctx, &w, i, 10 + i as u64);
        }
        // Fair: each satisfied index in turn, wrapping, not the lowest.
        let got: Vec<_> = (0..4).map(|_| ctx.test_any(&set).unwrap()).collect();
        assert_eq!(got, [Some(1), Some(2), Some(4), Some(1)]);
        assert_eq!(ctx.wait_until_any(&set).unwrap(), Some(2));
        assert_eq!(ctx.wait_until_some(&set, &mut out).unwrap(), 3);
        assert_eq!(out[..3], [1, 2, 4]);
        // A mask: the unset words are left out, so all holds.
        let mask = [true, false, false, true, false];
        let masked = WaitSet::new(&w, 2, 5, Cmp::Ne, 0).status(&mask);
        assert!(ctx.test_all(&masked).unwrap());
        ctx.wait_until_all(&masked).unwrap();
        assert_eq!(ctx.test_any(&masked).unwrap(), Some(1));
        // Per-element values (the `_vector` forms).
        let want = [13, 14, 0, 16];
        let each = WaitSet::each(&w, 3, Cmp::Eq, &want);
        ctx.wait_until_all(&each).unwrap();
        assert_eq!(ctx.test_some(&each, &mut out).unwrap(), 4);
        // Everything masked: nothing to wait for.
        let all_out = [true; 5];
        let none = WaitSet::new(&w, 2, 5, Cmp::Eq, 99).status(&all_out);
        assert_eq!(ctx.wait_until_any(&none).unwrap(), None);
        assert_eq!(ctx.wait_until_some(&none, &mut out).unwrap(), 0);
        // Bad arguments are typed errors.
        let short = [false; 2];
        let e = ctx
            .test_all(&WaitSet::new(&w, 2, 5, Cmp::Eq, 0).status(&short))
            .unwrap_err();
        assert!(matches!(
            e,
            Error::Length {
                what: "status",
                want: 5,
                got: 2
            }
        ));
        let e = ctx.test_some(&set, &mut out[..2]).unwrap_err();
        assert!(matches!(e, Error::Length { what: "out", .. }));
        let e = ctx
            .test_any(&WaitSet::new(&w, 6, 5, Cmp::Eq, 0))
            .unwrap_err();
        assert!(matches!(e, Error::OutOfBounds { .. }));
        // A word set by the other PE wakes a waiter on it.
        ctx.barrier_all().unwrap();
        let other = 1 - ctx.my_pe();
        ctx.put_signal(&w, 0, &[7], Signal::add(&w, 1, 2), other)
            .unwrap();
        ctx.wait_until_all(&WaitSet::each(&w, 0, Cmp::Eq, &[7, 2]))
            .unwrap();
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}
