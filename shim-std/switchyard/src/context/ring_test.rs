//! The submission rings of a `dedicated` progress thread (`submit.rs`):
//! small puts over TCP go through each context's ring, from several threads
//! at once, and arrive once, in order, visible to a get that follows; a rail
//! cut under a stream of them, or of non-fetching atomics, loses and doubles
//! nothing; the ring put and add path allocates nothing; an entry (a put,
//! or an atomic) taken back after a stall is counted once, applied once; a
//! ring the progress thread does not drain fails the next operation with
//! a timeout naming the peer instead of hanging it.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use switchyard_core::{topology::LinkState, transport::Transport};
use switchyard_socket::TcpConfig;

use super::{
    Cmp, Context, Error, Signal, Sym, progress,
    progress::ThreadMode,
    tcp_pair_test::{Pair, WAIT, job, wait_for},
};
use crate::test_alloc::{allocations, count_here};

/// Threads of PE 0, each on a context of its own.
const THREADS: usize = 2;
/// Puts per thread.
const OPS: usize = 400;

/// The value thread `t` puts as its `i`-th.
fn stamp(t: usize, i: usize) -> u64 {
    ((t as u64 + 1) << 32) | (i as u64 + 1)
}

/// Starts PE 0's progress thread `dedicated` (unpinned: the tests share the
/// machine's cores; PE 1 makes progress in its own waits, so that two
/// spinning threads do not starve the PEs on a 2-core machine).
fn dedicated(ctx: &mut Context) {
    let (me, clock) = (ctx.my_pe(), ctx.clock);
    if me != 0 {
        return;
    }
    ctx.tcp
        .as_mut()
        .expect("a TCP driver")
        .start(ThreadMode::Dedicated, clock, None, me)
        .unwrap();
}

/// The default TCP configuration with a detection window long enough that
/// the test's own load on a 2-core machine (a spinning progress thread, the
/// PEs, the other tests) does not take a link down: a failover would run its
/// own (allocating, tracing) path.
fn steady() -> TcpConfig {
    TcpConfig {
        detection_window: Duration::from_secs(2),
        ..TcpConfig::default()
    }
}

/// Two rails (on 127.0.0.1 and 127.0.0.2), for the tests that cut one.
fn two_rails() -> TcpConfig {
    TcpConfig {
        listen: vec!["127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()],
        ..TcpConfig::default()
    }
}

fn uses_ring(ctx: &Context) -> bool {
    ctx.tcp.as_ref().is_some_and(progress::Tcp::has_ring)
}

#[test]
fn threads_put_through_their_rings_in_order() {
    let pair = Pair::near(job(0x5B01), steady());
    pair.run(|mut ctx| {
        dedicated(&mut ctx);
        let me = ctx.my_pe();
        // Per thread: OPS stamps, then one word every put overwrites.
        let data: Sym<u64> = ctx.alloc(THREADS * (OPS + 1)).unwrap();
        let done: Sym<u64> = ctx.alloc(1).unwrap();
        ctx.barrier_all().unwrap();
        if me == 0 {
            let pe = ctx.pe();
            thread::scope(|s| {
                for t in 0..THREADS {
                    let pe = pe.clone();
                    s.spawn(move || {
                        let mut c = pe.context().expect("a context per thread");
                        let last = THREADS * OPS + t;
                        for i in 0..OPS {
                            c.put(&data, t * OPS + i, &[stamp(t, i)], 1).unwrap();
                            c.put(&data, last, &[stamp(t, i)], 1).unwrap();
                            if i % 50 == 49 {
                                // A get after ring puts sees them.
                                let mut got = [0u64];
                                c.get(&data, last, &mut got, 1).unwrap();
                                assert_eq!(got, [stamp(t, i)], "thread {t}, put {i}");
                            }
                        }
                        assert!(uses_ring(&c), "thread {t} never used its ring");
                        c.quiet().unwrap();
                        c.add(&done, 0, 1, 1).unwrap();
                        c.quiet().unwrap();
                    });
                }
            });
        } else {
            let n = THREADS as u64;
            assert_eq!(ctx.wait_until(&done, 0, super::Cmp::Eq, n).unwrap(), n);
            let mut got = vec![0u64; THREADS * (OPS + 1)];
            ctx.read_local(&data, 0, &mut got).unwrap();
            for t in 0..THREADS {
                for i in 0..OPS {
                    assert_eq!(got[t * OPS + i], stamp(t, i), "thread {t}, put {i}");
                }
                assert_eq!(got[THREADS * OPS + t], stamp(t, OPS - 1), "thread {t}");
            }
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

/// Progress until rail 0 to `peer` is up again, then quiet.
fn rail_0_back(ctx: &mut Context, peer: u32) {
    let start = Instant::now();
    loop {
        let up = ctx
            .tcp
            .as_mut()
            .map(progress::Tcp::get)
            .is_some_and(|t| t.rail(0).state(peer) == LinkState::Up);
        ctx.leave();
        if up {
            break;
        }
        assert!(start.elapsed() < WAIT, "rail 0 never came back");
        ctx.poll_once();
        thread::sleep(Duration::from_micros(100));
    }
    ctx.quiet().unwrap();
}

#[test]
fn a_rail_cut_under_ring_puts_loses_and_doubles_nothing() {
    /// Puts per round; rounds, each with a cut in its middle.
    const PUTS: usize = 256;
    const ROUNDS: usize = 3;
    let pair = Pair::near(job(0x5B02), two_rails());
    let step = Arc::new(AtomicU32::new(0));
    pair.run(move |mut ctx| {
        dedicated(&mut ctx);
        let me = ctx.my_pe();
        let other = 1 - me;
        // Each round's stamps, and one word every put overwrites (a doubled
        // older put arriving late would leave an older stamp there).
        let data: Sym<u64> = ctx.alloc(ROUNDS * PUTS + 1).unwrap();
        let last = ROUNDS * PUTS;
        ctx.barrier_all().unwrap();
        if me == 1 {
            wait_for(&mut ctx, &step, 1, true);
            rail_0_back(&mut ctx, other);
        } else {
            for r in 0..ROUNDS {
                for i in 0..PUTS {
                    if i == PUTS / 2 {
                        ctx.tcp
                            .as_mut()
                            .map(progress::Tcp::get)
                            .expect("a TCP driver")
                            .debug_cut(1, 0);
                        ctx.leave();
                    }
                    let v = stamp(r, i);
                    ctx.put(&data, r * PUTS + i, &[v], 1).unwrap();
                    ctx.put(&data, last, &[v], 1).unwrap();
                }
                ctx.quiet().unwrap();
                let mut got = vec![0u64; PUTS + 1];
                ctx.get(&data, r * PUTS, &mut got[..PUTS], 1).unwrap();
                ctx.get(&data, last, &mut got[PUTS..], 1).unwrap();
                for (i, g) in got[..PUTS].iter().enumerate() {
                    assert_eq!(*g, stamp(r, i), "round {r}, put {i}");
                }
                assert_eq!(got[PUTS], stamp(r, PUTS - 1), "round {r}: the last word");
                rail_0_back(&mut ctx, other);
            }
            assert!(uses_ring(&ctx), "the ring was never used");
            step.store(1, Ordering::SeqCst);
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

#[test]
fn ring_puts_and_adds_allocate_nothing() {
    const ROUNDS: u64 = 200;
    let pair = Pair::near(job(0x5B03), steady());
    pair.run(|mut ctx| {
        dedicated(&mut ctx);
        let me = ctx.my_pe();
        let a: Sym<u64> = ctx.alloc(8).unwrap();
        // Word 0 of `c` counts a ring add per round, over both passes.
        let c: Sym<u64> = ctx.alloc(1).unwrap();
        for pass in 0..2 {
            ctx.barrier_all().unwrap();
            let before = allocations();
            if pass == 1 {
                count_here(true);
            }
            if me == 0 {
                for i in 0..ROUNDS {
                    for k in 0..8 {
                        ctx.put(&a, k, &[i], 1).unwrap();
                    }
                    ctx.add(&c, 0, 1, 1).unwrap();
                    if i % 16 == 15 {
                        ctx.quiet().unwrap();
                    }
                }
                ctx.quiet().unwrap();
            }
            if pass == 1 {
                count_here(false);
                let n = allocations() - before;
                assert_eq!(
                    n, 0,
                    "PE {me}: {n} allocations on the ring put and add path"
                );
            }
            ctx.barrier_all().unwrap();
        }
        if me == 0 {
            assert!(uses_ring(&ctx), "the ring was never used");
        } else {
            let mut v = [0u64; 8];
            ctx.read_local(&a, 0, &mut v).unwrap();
            assert!(v.iter().all(|&x| x == ROUNDS - 1), "{v:?}");
            let mut n = [0u64];
            ctx.read_local(&c, 0, &mut n).unwrap();
            assert_eq!(n, [2 * ROUNDS], "ring adds lost or applied twice");
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

/// Operations counted so far, every transport.
fn ops(ctx: &Context) -> u64 {
    ctx.stats().ops.iter().sum()
}

/// Holds PE 0's progress thread off its bursts (`on`) or lets it go.
fn pause(ctx: &Context, on: bool) {
    ctx.tcp.as_ref().expect("a TCP driver").debug_pause(on);
}

#[test]
fn a_ring_put_taken_back_after_a_stall_is_counted_once() {
    const N: usize = 16;
    let pair = Pair::near(job(0x5B04), steady());
    pair.run(|mut ctx| {
        dedicated(&mut ctx);
        let me = ctx.my_pe();
        let data: Sym<u64> = ctx.alloc(N + 2).unwrap();
        let done: Sym<u64> = ctx.alloc(1).unwrap();
        ctx.barrier_all().unwrap();
        if me == 0 {
            // The thread takes nothing: the puts stay in the ring, which is
            // then stalled as an error at its head would, and taken back by
            // the quiet (each entry re-issued through the routed loop).
            pause(&ctx, true);
            let before = ops(&ctx);
            for i in 0..N {
                ctx.put(&data, i, &[i as u64 + 1], 1).unwrap();
            }
            // And a put_signal: one entry too, taken back as one.
            ctx.put_signal(&data, N, &[99], Signal::add(&data, N + 1, 5), 1)
                .unwrap();
            assert_eq!(ops(&ctx) - before, N as u64 + 1, "counted when submitted");
            let ring = ctx
                .tcp
                .as_ref()
                .and_then(progress::Tcp::debug_ring)
                .expect("the puts went through a ring");
            assert_eq!(ring.head_pe(), Some(1));
            ring.debug_stall(None);
            pause(&ctx, false);
            ctx.quiet().unwrap();
            assert!(ring.is_empty() && !ring.stalled(), "not taken back");
            assert_eq!(
                ops(&ctx) - before,
                N as u64 + 1,
                "a put taken back was counted again when re-issued"
            );
            ctx.put(&done, 0, &[1], 1).unwrap();
            ctx.quiet().unwrap();
        } else {
            assert_eq!(ctx.wait_until(&done, 0, Cmp::Eq, 1).unwrap(), 1);
            let mut got = [0u64; N + 2];
            ctx.read_local(&data, 0, &mut got).unwrap();
            for (i, g) in got[..N].iter().enumerate() {
                assert_eq!(*g, i as u64 + 1, "put {i}");
            }
            assert_eq!(got[N..], [99, 5], "the put_signal, once");
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

#[test]
fn a_ring_the_thread_does_not_drain_times_out_naming_the_peer() {
    /// PE 0's op timeout in this test.
    const OP: Duration = Duration::from_millis(300);
    let pair = Pair::near(job(0x5B05), steady());
    pair.run(|mut ctx| {
        dedicated(&mut ctx);
        let me = ctx.my_pe();
        let data: Sym<u64> = ctx.alloc(2).unwrap();
        let done: Sym<u64> = ctx.alloc(1).unwrap();
        ctx.barrier_all().unwrap();
        if me == 0 {
            ctx.op_timeout = OP;
            ctx.tcp.as_mut().expect("a TCP driver").set_op_timeout(OP);
            pause(&ctx, true);
            ctx.put(&data, 0, &[7], 1).unwrap();
            assert!(uses_ring(&ctx), "the put did not go through the ring");
            // A get waits for the ring first: a timeout naming the peer.
            let start = Instant::now();
            let mut got = [0u64];
            let r = ctx.get(&data, 0, &mut got, 1);
            let took = start.elapsed();
            assert!(
                matches!(r, Err(Error::Timeout { pe: Some(1), .. })),
                "{r:?}"
            );
            assert!(took >= OP && took < WAIT, "{took:?}");
            // A driver use outside an operation (a wait's progress step)
            // waits at most the op timeout too; its timeout is returned
            // once, by the next operation, without waiting again.
            let _ = ctx.tcp.as_mut().map(progress::Tcp::get);
            ctx.leave();
            let start = Instant::now();
            let r = ctx.fence();
            assert!(
                matches!(r, Err(Error::Timeout { pe: Some(1), .. })),
                "{r:?}"
            );
            assert!(start.elapsed() < OP, "{:?}", start.elapsed());
            // Once: the next one waits again.
            let start = Instant::now();
            assert!(matches!(ctx.fence(), Err(Error::Timeout { .. })));
            assert!(start.elapsed() >= OP, "{:?}", start.elapsed());
            // The thread back: the ring drains, the put arrives once.
            pause(&ctx, false);
            ctx.get(&data, 0, &mut got, 1).unwrap();
            assert_eq!(got, [7]);
            ctx.put(&done, 0, &[1], 1).unwrap();
            ctx.quiet().unwrap();
        } else {
            assert_eq!(ctx.wait_until(&done, 0, Cmp::Eq, 1).unwrap(), 1);
            let mut got = [0u64];
            ctx.read_local(&data, 0, &mut got).unwrap();
            assert_eq!(got, [7]);
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

#[test]
fn threads_put_signal_through_their_rings_in_order() {
    /// Messages per thread; words per message (with the put before it and
    /// the signal word, in one placement block).
    const MSGS: usize = 300;
    const WORDS: usize = 2;
    let pair = Pair::near(job(0x5B06), steady());
    pair.run(|mut ctx| {
        dedicated(&mut ctx);
        let me = ctx.my_pe();
        // Per thread: MSGS messages, MSGS plain puts, one signal word.
        let msg: Sym<u64> = ctx.alloc(THREADS * MSGS * WORDS).unwrap();
        let plain: Sym<u64> = ctx.alloc(THREADS * MSGS).unwrap();
        let sig: Sym<u64> = ctx.alloc(THREADS).unwrap();
        let done: Sym<u64> = ctx.alloc(1).unwrap();
        ctx.barrier_all().unwrap();
        if me == 0 {
            // A small put_signal is one ring entry: held in the ring while
            // the thread is paused, issued when it runs.
            pause(&ctx, true);
            ctx.put_signal(&done, 0, &[0], Signal::add(&done, 0, 0), 1)
                .unwrap();
            let ring = ctx
                .tcp
                .as_ref()
                .and_then(progress::Tcp::debug_ring)
                .expect("the put_signal went through a ring");
            assert_eq!(ring.head_pe(), Some(1), "not in the ring");
            pause(&ctx, false);
            ctx.quiet().unwrap();
            let pe = ctx.pe();
            thread::scope(|s| {
                for t in 0..THREADS {
                    let pe = pe.clone();
                    let (msg, plain, sig) = (&msg, &plain, &sig);
                    s.spawn(move || {
                        let mut c = pe.context().expect("a context per thread");
                        for i in 0..MSGS {
                            let v = stamp(t, i);
                            c.put(plain, t * MSGS + i, &[v], 1).unwrap();
                            let s = Signal::set(sig, t, i as u64 + 1);
                            c.put_signal(msg, (t * MSGS + i) * WORDS, &[v; WORDS], s, 1)
                                .unwrap();
                        }
                        assert!(uses_ring(&c), "thread {t} never used its ring");
                        c.quiet().unwrap();
                        c.add(&done, 0, 1, 1).unwrap();
                        c.quiet().unwrap();
                    });
                }
            });
        } else {
            // Whoever sees a signal sees its message.
            for t in 0..THREADS {
                let mut i = 0;
                while i < MSGS {
                    let seen = ctx.wait_until(&sig, t, Cmp::Ge, i as u64 + 1).unwrap() as usize;
                    assert!(seen > i && seen <= MSGS, "thread {t}: {seen}");
                    let mut m = [0u64; WORDS];
                    ctx.read_local(&msg, (t * MSGS + seen - 1) * WORDS, &mut m)
                        .unwrap();
                    assert_eq!(m, [stamp(t, seen - 1); WORDS], "thread {t}, message {seen}");
                    i = seen + 37;
                }
            }
            let n = THREADS as u64;
            assert_eq!(ctx.wait_until(&done, 0, Cmp::Eq, n).unwrap(), n);
            let mut m = vec![0u64; THREADS * MSGS * WORDS];
            ctx.read_local(&msg, 0, &mut m).unwrap();
            let mut p = vec![0u64; THREADS * MSGS];
            ctx.read_local(&plain, 0, &mut p).unwrap();
            let mut s = [0u64; THREADS];
            ctx.read_local(&sig, 0, &mut s).unwrap();
            for t in 0..THREADS {
                for i in 0..MSGS {
                    let v = stamp(t, i);
                    assert_eq!(p[t * MSGS + i], v, "thread {t}, put {i}");
                    let at = (t * MSGS + i) * WORDS;
                    assert_eq!(m[at..at + WORDS], [v; WORDS], "thread {t}, message {i}");
                }
                assert_eq!(s[t], MSGS as u64, "thread {t}: its last signal");
            }
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

#[test]
fn a_context_dropped_with_an_undrained_ring_issues_it_itself() {
    /// The dropped context's op timeout.
    const OP: Duration = Duration::from_millis(200);
    const N: usize = 4;
    let pair = Pair::near(job(0x5B07), steady());
    pair.run(|mut ctx| {
        dedicated(&mut ctx);
        let me = ctx.my_pe();
        let data: Sym<u64> = ctx.alloc(N).unwrap();
        let done: Sym<u64> = ctx.alloc(1).unwrap();
        ctx.barrier_all().unwrap();
        if me == 0 {
            pause(&ctx, true);
            {
                let mut c = ctx.pe().context().expect("a second context");
                c.op_timeout = OP;
                c.tcp.as_mut().expect("a TCP driver").set_op_timeout(OP);
                for i in 0..N {
                    c.put(&data, i, &[i as u64 + 1], 1).unwrap();
                }
                assert!(uses_ring(&c), "the puts did not go through a ring");
                // Dropped with its ring full of entries the thread does
                // not take: past the op timeout it issues them itself.
            }
            pause(&ctx, false);
            ctx.quiet().unwrap();
            ctx.put(&done, 0, &[1], 1).unwrap();
            ctx.quiet().unwrap();
        } else {
            assert_eq!(ctx.wait_until(&done, 0, Cmp::Eq, 1).unwrap(), 1);
            let mut got = [0u64; N];
            ctx.read_local(&data, 0, &mut got).unwrap();
            assert_eq!(got, core::array::from_fn(|i| i as u64 + 1));
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

/// Non-fetching atomics (`add`, `bitwise`, `set`, 64- and 32-bit) go
/// through the ring as puts do: with the thread held off they wait in it
/// (the ring's head names the peer: no put precedes them), counted when
/// submitted; stalled and taken back by the quiet, each is re-issued
/// through the routed loop once, counted once, applied once.
#[test]
fn ring_atomics_taken_back_after_a_stall_apply_once() {
    const N: usize = 16;
    let pair = Pair::near(job(0x5B08), steady());
    pair.run(|mut ctx| {
        dedicated(&mut ctx);
        let me = ctx.my_pe();
        let w: Sym<u64> = ctx.alloc(3).unwrap();
        let h: Sym<u32> = ctx.alloc(2).unwrap();
        let done: Sym<u64> = ctx.alloc(1).unwrap();
        ctx.barrier_all().unwrap();
        let (mut sum, mut bits, mut sum32) = (0u64, 0u64, 0u32);
        for i in 0..N as u64 {
            sum += i + 1;
            bits ^= 1 << (3 * i % 64);
            sum32 = sum32.wrapping_add(0xFFFF_0001);
        }
        if me == 0 {
            pause(&ctx, true);
            let before = ops(&ctx);
            for i in 0..N as u64 {
                ctx.add(&w, 0, i + 1, 1).unwrap();
                ctx.bitwise(&w, 1, super::Bitwise::Xor, 1 << (3 * i % 64), 1)
                    .unwrap();
                ctx.add(&h, 1, 0xFFFF_0001, 1).unwrap();
            }
            ctx.set(&w, 2, 42, 1).unwrap();
            assert_eq!(
                ops(&ctx) - before,
                3 * N as u64 + 1,
                "counted when submitted"
            );
            let ring = ctx
                .tcp
                .as_ref()
                .and_then(progress::Tcp::debug_ring)
                .expect("the atomics went through a ring");
            assert_eq!(ring.head_pe(), Some(1));
            ring.debug_stall(None);
            pause(&ctx, false);
            ctx.quiet().unwrap();
            assert!(ring.is_empty() && !ring.stalled(), "not taken back");
            assert_eq!(
                ops(&ctx) - before,
                3 * N as u64 + 1,
                "an atomic taken back was counted again when re-issued"
            );
            assert_eq!(ctx.fetch(&w, 0, 1).unwrap(), sum);
            ctx.put(&done, 0, &[1], 1).unwrap();
            ctx.quiet().unwrap();
        } else {
            assert_eq!(ctx.wait_until(&done, 0, Cmp::Eq, 1).unwrap(), 1);
            let mut got = [0u64; 3];
            ctx.read_local(&w, 0, &mut got).unwrap();
            assert_eq!(got, [sum, bits, 42], "lost or applied twice");
            let mut got32 = [0u32; 2];
            ctx.read_local(&h, 0, &mut got32).unwrap();
            assert_eq!(got32, [0, sum32], "32-bit: lost or applied twice");
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

/// Adds and XORs through the ring across rail cuts (two rails, rail 0 cut
/// in the middle of each round): after each round's quiet the sum and the
/// XOR are exact (an add replayed twice, or lost, shows), and the ring was
/// used.
#[test]
fn a_rail_cut_under_ring_adds_loses_and_doubles_nothing() {
    const ADDS: u64 = 256;
    const ROUNDS: u64 = 3;
    let pair = Pair::near(job(0x5B09), two_rails());
    let step = Arc::new(AtomicU32::new(0));
    pair.run(move |mut ctx| {
        dedicated(&mut ctx);
        let me = ctx.my_pe();
        let other = 1 - me;
        let w: Sym<u64> = ctx.alloc(2).unwrap();
        ctx.barrier_all().unwrap();
        if me == 1 {
            wait_for(&mut ctx, &step, 1, true);
            rail_0_back(&mut ctx, other);
        } else {
            let (mut sum, mut bits) = (0u64, 0u64);
            for r in 0..ROUNDS {
                for i in 0..ADDS {
                    if i == ADDS / 2 {
                        ctx.tcp
                            .as_mut()
                            .map(progress::Tcp::get)
                            .expect("a TCP driver")
                            .debug_cut(1, 0);
                        ctx.leave();
                    }
                    ctx.add(&w, 0, r + i + 1, 1).unwrap();
                    ctx.bitwise(&w, 1, super::Bitwise::Xor, 1 << (i % 64), 1)
                        .unwrap();
                    sum += r + i + 1;
                    bits ^= 1 << (i % 64);
                }
                ctx.quiet().unwrap();
                assert_eq!(ctx.fetch(&w, 0, 1).unwrap(), sum, "round {r}: the sum");
                assert_eq!(ctx.fetch(&w, 1, 1).unwrap(), bits, "round {r}: the XOR");
                rail_0_back(&mut ctx, other);
            }
            assert!(uses_ring(&ctx), "the ring was never used");
            step.store(1, Ordering::SeqCst);
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}
