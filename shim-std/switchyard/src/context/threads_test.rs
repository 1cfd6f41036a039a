//! Threads of one PE, each on its own context ([`Pe::context`]): puts of
//! sequence-stamped values, atomic additions and quiets at once, from both
//! PEs of a pair toward the other, checked at the target; over shared
//! memory and over TCP.

use std::thread;

use switchyard_core::route::PolicyConfig;
use switchyard_socket::TcpConfig;

use super::{Cmp, Context, Error, MAX_CONTEXTS, Sym, shm_pair_test::run_pair, tcp_pair_test};

/// Threads per PE.
const THREADS: usize = 3;
/// Puts (and additions) per thread over shared memory.
const OPS: usize = 2000;
/// Over TCP (each fetch-add a round trip).
const TCP_OPS: usize = 100;

/// The value thread `t` puts as its `i`-th.
fn stamp(t: usize, i: usize) -> u64 {
    ((t as u64 + 1) << 32) | i as u64
}

/// One PE's part: `THREADS` threads, each on a context of its own, put
/// their stamps into their own words of `data` at the other PE, add 1 (and
/// their thread number) to its counters, quiet now and then, and announce
/// themselves done with an atomic after a final quiet. Meanwhile this PE's
/// first context waits until the other PE's threads are done, then checks
/// every stamp and the totals in its own heap.
fn both_ways(mut ctx: Context, ops: usize) {
    let other = 1 - ctx.my_pe();
    let data = ctx.alloc::<u64>(THREADS * ops).unwrap();
    let counters = ctx.alloc::<u64>(2).unwrap();
    let done = ctx.alloc::<u64>(1).unwrap();
    let pe = ctx.pe();
    thread::scope(|s| {
        for t in 0..THREADS {
            let pe = pe.clone();
            s.spawn(move || {
                let mut c = pe.context().expect("a context per thread");
                for i in 0..ops {
                    c.put(&data, t * ops + i, &[stamp(t, i)], other).unwrap();
                    c.fetch_add(&counters, 0, 1, other).unwrap();
                    c.add(&counters, 1, t as u64, other).unwrap();
                    if i % 97 == 0 {
                        c.quiet().unwrap();
                    }
                }
                // This context's quiet completes its own puts before the
                // announcement.
                c.quiet().unwrap();
                c.add(&done, 0, 1, other).unwrap();
                c.quiet().unwrap();
                assert!(c.stats().ops.iter().sum::<u64>() >= 3 * ops as u64);
            });
        }
        let n = THREADS as u64;
        assert_eq!(ctx.wait_until(&done, 0, Cmp::Eq, n).unwrap(), n);
        check(&mut ctx, &data, &counters, ops);
    });
    ctx.barrier_all().unwrap();
    ctx.finalize().unwrap();
}

/// Every stamp where it belongs, and the counters' totals.
fn check(ctx: &mut Context, data: &Sym<u64>, counters: &Sym<u64>, ops: usize) {
    let mut got = vec![0u64; THREADS * ops];
    ctx.read_local(data, 0, &mut got).unwrap();
    for t in 0..THREADS {
        for i in 0..ops {
            assert_eq!(got[t * ops + i], stamp(t, i), "thread {t}, put {i}");
        }
    }
    let mut totals = [0u64; 2];
    ctx.read_local(counters, 0, &mut totals).unwrap();
    let per_thread: u64 = (0..THREADS as u64).sum();
    assert_eq!(totals, [(THREADS * ops) as u64, per_thread * ops as u64]);
}

const _: () = {
    const fn send<T: Send>() {}
    send::<Context>();
};

#[test]
fn threads_on_their_own_contexts_over_shm() {
    run_pair(tcp_pair_test::job(0x7E1), |ctx| both_ways(ctx, OPS));
}

#[test]
fn threads_on_their_own_contexts_over_tcp() {
    let pair = tcp_pair_test::Pair {
        job: tcp_pair_test::job(0x7E2),
        routed: false,
        policy: PolicyConfig::default(),
        tcp: TcpConfig {
            listen: vec!["127.0.0.1".parse().unwrap()],
            ..TcpConfig::default()
        },
    };
    pair.run(|ctx| both_ways(ctx, TCP_OPS));
}

/// A PE has at most `MAX_CONTEXTS` contexts at once (a typed error after);
/// a dropped one's place, and its trace ring, go to the next.
#[test]
fn contexts_are_bounded_and_reused() {
    let mut cfg = crate::config::Config::default();
    cfg.set(
        crate::config::Key::HeapSize,
        "1M",
        crate::config::Source::Default,
    )
    .unwrap();
    let mut first = Context::with_config(&cfg).unwrap();
    let sym = first.alloc::<u64>(1).unwrap();
    let pe = first.pe();
    let mut more: Vec<Context> = (1..MAX_CONTEXTS).map(|_| pe.context().unwrap()).collect();
    assert!(matches!(pe.context(), Err(Error::NoContext { .. })));
    // Handles of one context are valid in the others; they see one heap.
    more[5].put(&sym, 0, &[41], 0).unwrap();
    assert_eq!(more[9].fetch_add(&sym, 0, 1, 0).unwrap(), 41);
    let rings: Vec<*const _> = more[1..]
        .iter()
        .map(|c| core::ptr::from_ref(c.trace()))
        .collect();
    more.truncate(1);
    let again = pe.context().unwrap();
    assert!(
        rings.contains(&core::ptr::from_ref(again.trace())),
        "a dropped context's ring is reused"
    );
    let mut v = [0u64];
    first.read_local(&sym, 0, &mut v).unwrap();
    assert_eq!(v, [42]);
    drop((more, again));
    first.finalize().unwrap();
}

/// A context's `Stats::ops` are its own operations only, exactly, on the
/// PE's first context and on one that takes over the slot a dropped
/// context left (which keeps its counts in the segment).
#[test]
fn a_contexts_op_count_is_its_own_after_its_slot_was_used() {
    run_pair(tcp_pair_test::job(0x5107), |mut ctx| {
        let other = 1 - ctx.my_pe();
        let sym = ctx.alloc::<u64>(4).unwrap();
        let shm = super::SHM.index();
        // The collective alloc's own operations first.
        let before = ctx.stats().ops[shm];
        for i in 0..5 {
            ctx.put(&sym, 0, &[i], other).unwrap();
        }
        assert_eq!(ctx.stats().ops[shm], before + 5);
        let pe = ctx.pe();
        let mut first = pe.context().unwrap();
        for i in 0..7 {
            first.put(&sym, 1, &[i], other).unwrap();
        }
        assert_eq!(first.stats().ops[shm], 7);
        drop(first);
        let mut second = pe.context().unwrap();
        second.fetch_add(&sym, 2, 1u64, other).unwrap();
        second.put(&sym, 3, &[1], other).unwrap();
        assert_eq!(second.stats().ops[shm], 2, "{:?}", second.stats());
        drop(second);
        assert_eq!(ctx.stats().ops[shm], before + 5);
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}
