//! Which transport each operation takes on a fake pair, and what it costs:
//! atomics on the NIC or the target's CPU (`verbs_atomics`), ROUTED peers
//! split by size and kept in order, work requests posted before a call
//! returns, and a data path that allocates nothing.

use super::*;

/// Runs `script` on both PEs of a pair set up as `opts` on a fake HCA
/// reporting `cap`, then closes them together.
fn pair<F>(opts: Opts, cap: AtomicCap, script: F)
where
    F: Fn(&mut Context) + Send + Clone + 'static,
{
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = u64::from(NEXT.fetch_add(1, Ordering::Relaxed));
    let job = (0x90_0000_0000 + (n << 32)) ^ u64::from(std::process::id()) << 8;
    let fabric = Fabric::new();
    fabric.set_atomic_cap(cap);
    let (tx0, rx1) = channel();
    let (tx1, rx0) = channel();
    let f1 = fabric.clone();
    let done = Arc::new(AtomicU32::new(0));
    let done1 = Arc::clone(&done);
    let script1 = script.clone();
    run_pes(vec![
        Box::new(move || {
            let mut ctx = context(job, 0, &fabric, (&tx0, &rx0), opts);
            script(&mut ctx);
            close_together(&mut ctx, &done);
        }),
        Box::new(move || {
            let mut ctx = context(job, 1, &f1, (&tx1, &rx1), opts);
            script1(&mut ctx);
            close_together(&mut ctx, &done1);
        }),
    ]);
}

fn tcp_ops(ctx: &Context) -> u64 {
    ctx.stats().ops[TCP.index()]
}

fn last_trace(ctx: &Context) -> TraceRecord {
    let mut recs = [TraceRecord::default(); TRACE_RECORDS];
    let n = ctx.trace().snapshot(&mut recs);
    recs[n - 1]
}

/// Both PEs add to a word of PE 1: PE 1's adds are its own (CPU
/// atomics), PE 0's remote. With NIC atomics allowed they go over
/// verbs, else over TCP (counted as `cpu_atomics`, traced with
/// `CPU_ATOMIC`, not downgrades); puts stay on verbs either way, and
/// no update is lost.
fn atomics_script(expect_nic: bool) -> impl Fn(&mut Context) + Send + Clone + 'static {
    move |ctx: &mut Context| {
        const ADDS: u64 = 100;
        let me = ctx.my_pe();
        let sym: Sym<u64> = ctx.alloc(4).expect("alloc");
        let st = ctx.verbs_status();
        assert_eq!((st.peers_up, st.nic_atomics), (1, expect_nic), "{st:?}");
        assert!(!ctx.verbs_atomics_reason().is_empty());
        let (v0, t0, s0) = (verbs_ops(ctx), tcp_ops(ctx), ctx.stats());
        let mut olds = Vec::new();
        for _ in 0..ADDS {
            olds.push(ctx.fetch_add(&sym, 0, 1, 1).unwrap());
        }
        ctx.add(&sym, 1, 2, 1).unwrap();
        if me == 0 {
            let (dv, dt) = (verbs_ops(ctx) - v0, tcp_ops(ctx) - t0);
            let s = ctx.stats();
            let last = last_trace(ctx);
            if expect_nic {
                assert_eq!((dv, dt), (ADDS + 1, 0), "{s:?}");
                assert_eq!(s.cpu_atomics, 0, "{s:?}");
                assert_eq!(last.transport, VERBS.index() as u8);
            } else {
                assert_eq!((dv, dt), (0, ADDS + 1), "{s:?}");
                assert_eq!(s.cpu_atomics - s0.cpu_atomics, ADDS + 1, "{s:?}");
                assert_eq!(last.transport, TCP.index() as u8);
                assert_ne!(last.flags & TraceRecord::CPU_ATOMIC, 0, "{last:?}");
            }
            assert_eq!(last.flags & TraceRecord::DOWNGRADED, 0, "{last:?}");
            assert_eq!(s.downgrades, s0.downgrades, "not downgrades");
            // A put still goes over verbs.
            let v1 = verbs_ops(ctx);
            ctx.put(&sym, 3, &[7], 1).unwrap();
            assert_eq!(verbs_ops(ctx) - v1, 1);
        } else {
            assert_eq!(ctx.stats().cpu_atomics, 0, "its own atomics are local");
        }
        // Old values are increasing and distinct on each PE.
        assert!(olds.windows(2).all(|w| w[0] < w[1]), "{olds:?}");
        ctx.barrier_all().unwrap();
        if me == 1 {
            let mut v = [0u64; 4];
            ctx.read_local(&sym, 0, &mut v).unwrap();
            assert_eq!((v[0], v[1], v[3]), (2 * ADDS, 4, 7), "an update was lost");
        }
        ctx.barrier_all().unwrap();
    }
}

/// An HCA-only device with `verbs_atomics = auto`: atomics to the NEAR
/// peer go over TCP (the target's CPU), coherent with its own.
#[test]
fn hca_only_atomics_go_over_tcp_with_auto() {
    pair(Opts::default(), AtomicCap::Hca, atomics_script(false));
}

/// `verbs_atomics = nic` forces NIC atomics on an HCA-only device.
#[test]
fn nic_forces_atomics_over_verbs() {
    let o = Opts {
        atomics: VerbsAtomics::Nic,
        ..Opts::default()
    };
    pair(o, AtomicCap::Hca, atomics_script(true));
}

/// A peer whose device does no RDMA atomics: even `nic` sends atomics
/// over TCP (the driver would refuse them).
#[test]
fn a_peer_without_rdma_atomics_gets_them_over_tcp() {
    let o = Opts {
        atomics: VerbsAtomics::Nic,
        peer_without_atomics: true,
        ..Opts::default()
    };
    pair(o, AtomicCap::Global, atomics_script(false));
}

/// A device with global atomics uses them with `auto`; `cpu` never.
#[test]
fn global_atomics_with_auto_and_cpu_forced() {
    pair(Opts::default(), AtomicCap::Global, atomics_script(true));
    let o = Opts {
        atomics: VerbsAtomics::Cpu,
        ..Opts::default()
    };
    pair(o, AtomicCap::Global, atomics_script(false));
}

/// Non-fetching atomics on the NIC (`verbs_atomics = nic`): PE 0 adds and
/// XORs into words of PE 1 many times between quiets, more at once than the
/// driver has tickets (each is freed by its completion, nobody polls it),
/// all over verbs. After each quiet a fetch sees exactly the sum and the
/// XOR: none lost, none applied twice; the 32-bit add runs the driver's
/// compare-swap emulation.
#[test]
fn non_fetching_atomics_on_the_nic_complete_by_quiet() {
    let o = Opts {
        atomics: VerbsAtomics::Nic,
        ..Opts::default()
    };
    pair(o, AtomicCap::Hca, |ctx: &mut Context| {
        const ROUNDS: u64 = 3;
        const OPS: u64 = 300;
        let me = ctx.my_pe();
        let w: Sym<u64> = ctx.alloc(2).expect("alloc");
        let h: Sym<u32> = ctx.alloc(2).expect("alloc");
        ctx.barrier_all().unwrap();
        let (mut sum, mut bits, mut sum32) = (0u64, 0u64, 0u32);
        for r in 0..ROUNDS {
            if me == 0 {
                let v0 = verbs_ops(ctx);
                for i in 0..OPS {
                    ctx.add(&w, 0, i % 3 + 1, 1).unwrap();
                    ctx.bitwise(&w, 1, Bitwise::Xor, 1 << (i % 64), 1).unwrap();
                    ctx.add(&h, 1, 2, 1).unwrap();
                    sum += i % 3 + 1;
                    bits ^= 1 << (i % 64);
                    sum32 += 2;
                }
                let s = ctx.stats();
                assert_eq!(verbs_ops(ctx) - v0, 3 * OPS, "{s:?}");
                ctx.quiet().unwrap();
                assert_eq!(ctx.fetch(&w, 0, 1).unwrap(), sum, "round {r}");
                assert_eq!(ctx.fetch(&w, 1, 1).unwrap(), bits, "round {r}");
                assert_eq!(ctx.fetch(&h, 1, 1).unwrap(), sum32, "round {r}");
            }
            ctx.barrier_all().unwrap();
        }
        if me == 1 {
            let mut got = [0u64; 2];
            ctx.read_local(&w, 0, &mut got).unwrap();
            let mut got32 = [0u32; 2];
            ctx.read_local(&h, 0, &mut got32).unwrap();
            let n = ROUNDS * OPS;
            let want_sum = (0..n).map(|i| i % OPS % 3 + 1).sum::<u64>();
            assert_eq!(got[0], want_sum, "an add lost or applied twice");
            assert_eq!(
                got32,
                [0, 2 * n as u32],
                "a 32-bit add lost or applied twice"
            );
        }
        ctx.barrier_all().unwrap();
    });
}

/// The decision table of [`nic_atomics`].
#[test]
fn nic_atomics_rule() {
    use VerbsAtomics::{Auto, Cpu, Nic};
    for (set, cap, want) in [
        (Auto, AtomicCap::Global, true),
        (Auto, AtomicCap::Hca, false),
        (Auto, AtomicCap::None, false),
        (Nic, AtomicCap::Global, true),
        (Nic, AtomicCap::Hca, true),
        (Nic, AtomicCap::None, false),
        (Cpu, AtomicCap::Global, false),
        (Cpu, AtomicCap::Hca, false),
    ] {
        let (nic, why) = nic_atomics(set, cap);
        assert_eq!(nic, want, "{set:?} {cap:?}");
        assert!(!why.is_empty());
    }
}

const LONG: usize = 16 << 10;

/// ROUTED peers over verbs: long messages take verbs, short ones TCP,
/// and the ordering rules hold across the two.
fn routed_script(ctx: &mut Context) {
    let me = ctx.my_pe();
    let data: Sym<u8> = ctx.alloc(LONG).expect("alloc");
    let flag: Sym<u64> = ctx.alloc(1).expect("alloc");
    let st = ctx.verbs_status();
    assert_eq!(st.peers_up, 1, "a verbs link to the ROUTED peer: {st:?}");
    // 1. Split by size: short over TCP, long over verbs.
    if me == 0 {
        let (v0, t0) = (verbs_ops(ctx), tcp_ops(ctx));
        ctx.put(&data, 0, &[1u8; 64], 1).unwrap();
        assert_eq!((verbs_ops(ctx) - v0, tcp_ops(ctx) - t0), (0, 1));
        assert_eq!(last_trace(ctx).class, PathClass::Routed.to_wire());
        ctx.put(&data, 0, &[2u8; LONG], 1).unwrap();
        assert_eq!((verbs_ops(ctx) - v0, tcp_ops(ctx) - t0), (1, 1));
        let last = last_trace(ctx);
        assert_eq!(last.transport, VERBS.index() as u8);
        assert_eq!(last.flags & TraceRecord::DOWNGRADED, 0, "{last:?}");
        ctx.quiet().unwrap();
    }
    ctx.barrier_all().unwrap();
    // 2. put long (verbs) + fence + flag (TCP): the target sees the
    //    flag only after the data. PE 0 then sleeps without progress:
    //    whatever it left unposted stays so.
    //    Odd rounds start clean: the fence is the verbs driver's own and
    //    the flag put waits for the data (traced ORDERED). Even rounds
    //    start with the barrier's flag put (TCP) pending: the data makes
    //    the peer's writes mixed and the fence is a quiet.
    for round in 1..=4u8 {
        if me == 0 {
            if round % 2 == 1 {
                ctx.quiet().unwrap();
            }
            let w0 = ctx.stats().ordering_waits;
            ctx.put(&data, 0, &[round; LONG], 1).unwrap();
            ctx.fence().unwrap();
            ctx.put(&flag, 0, &[u64::from(round)], 1).unwrap();
            assert!(ctx.stats().ordering_waits > w0, "{:?}", ctx.stats());
            let ordered = last_trace(ctx).flags & TraceRecord::ORDERED != 0;
            assert_eq!(ordered, round % 2 == 1, "round {round}");
            std::thread::sleep(Duration::from_millis(30));
            ctx.quiet().unwrap();
        } else {
            ctx.wait_until(&flag, 0, crate::context::Cmp::Eq, u64::from(round))
                .unwrap();
            let mut v = vec![0u8; LONG];
            ctx.read_local(&data, 0, &mut v).unwrap();
            let stale = v.iter().filter(|&&b| b != round).count();
            assert_eq!(stale, 0, "round {round}: the flag overtook the data");
        }
        ctx.barrier_all().unwrap();
    }
    // 3. A get after a long put returns the new bytes, over TCP (short)
    //    and over verbs (long).
    if me == 0 {
        ctx.put(&data, 0, &[7u8; LONG], 1).unwrap();
        let mut g = [0u8; 64];
        ctx.get(&data, 100, &mut g, 1).unwrap();
        assert_eq!(g, [7u8; 64], "a short get (TCP) missed the long put");
    }
    ctx.barrier_all().unwrap();
    // 4. A long get (verbs) after a short put (TCP) while the target
    //    does not progress: it must wait for the put's ack.
    if me == 1 {
        std::thread::sleep(Duration::from_millis(100));
    } else {
        let w0 = ctx.stats().ordering_waits;
        ctx.put(&data, 200, &[9u8; 64], 1).unwrap();
        let mut g = vec![0u8; LONG];
        ctx.get(&data, 0, &mut g, 1).unwrap();
        assert_eq!(
            &g[200..264],
            &[9u8; 64],
            "a long get (verbs) missed the short put"
        );
        assert_eq!(g[0], 7);
        assert!(ctx.stats().ordering_waits > w0);
    }
    ctx.barrier_all().unwrap();
    // 5. A fetching atomic (over TCP: the fake is HCA-only) observes a
    //    long put (verbs) of the word.
    if me == 0 {
        let mut bytes = [0u8; LONG];
        bytes[..8].copy_from_slice(&1000u64.to_le_bytes());
        ctx.put(&data, 0, &bytes, 1).unwrap();
        // The first 8 bytes of `data`, as a word: a Sym<u64> over them.
        let word = Sym::<u64>::new(data.offset, 1, data.owner);
        assert_eq!(ctx.fetch_add(&word, 0, 1, 1).unwrap(), 1000);
    }
    ctx.barrier_all().unwrap();
}

/// A ROUTED pair: verbs QPs are connected to it too, long puts go over
/// verbs and short ones over TCP, a fence between them orders them,
/// reads see earlier writes over the other transport.
#[test]
fn routed_peers_split_by_size_and_stay_ordered() {
    let o = Opts {
        routed: true,
        ..Opts::default()
    };
    pair(o, AtomicCap::Hca, routed_script);
}

/// A put's work request is posted before the call returns, not left in
/// a doorbell batch for the application's next call: PE 1 sees the
/// bytes while PE 0 makes no further call (it waits on a plain atomic,
/// as an application computing between calls would). Before the fix,
/// the put waited in PE 0's batch until PE 0 called in again.
#[test]
fn a_put_is_posted_before_the_call_returns() {
    let step = Arc::new(AtomicU32::new(0));
    pair(Opts::default(), AtomicCap::Hca, move |ctx: &mut Context| {
        let a: Sym<u64> = ctx.alloc(8).expect("alloc");
        ctx.barrier_all().unwrap();
        let wait_for = |v: u32| {
            let start = Instant::now();
            while step.load(Ordering::Acquire) < v {
                assert!(start.elapsed() < Duration::from_secs(10), "step {v}");
                std::thread::sleep(Duration::from_micros(100));
            }
        };
        if ctx.my_pe() == 0 {
            let v0 = verbs_ops(ctx);
            ctx.put(&a, 0, &[42u64], 1).unwrap();
            assert_eq!(verbs_ops(ctx) - v0, 1, "the put went over verbs");
            step.store(1, Ordering::Release);
            wait_for(2);
        } else {
            wait_for(1);
            let mut w = [0u64];
            ctx.read_local(&a, 0, &mut w).unwrap();
            step.store(2, Ordering::Release);
            assert_eq!(w[0], 42, "the put is still batched at PE 0");
        }
        ctx.barrier_all().unwrap();
    });
}

/// `verbs_routed = off`: a ROUTED peer gets no verbs link; its long
/// messages go over TCP (its first choice then: not a downgrade).
#[test]
fn verbs_routed_off_keeps_routed_peers_on_tcp() {
    let o = Opts {
        routed: true,
        no_routed: true,
        ..Opts::default()
    };
    pair(o, AtomicCap::Hca, |ctx: &mut Context| {
        let data: Sym<u8> = ctx.alloc(LONG).expect("alloc");
        let st = ctx.verbs_status();
        assert_eq!(st.peers_up, 0, "{st:?}");
        assert!(st.why_not.is_some_and(|w| w.contains("verbs_routed = off")));
        if ctx.my_pe() == 0 {
            let (v0, t0) = (verbs_ops(ctx), tcp_ops(ctx));
            ctx.put(&data, 0, &[3u8; LONG], 1).unwrap();
            assert_eq!((verbs_ops(ctx) - v0, tcp_ops(ctx) - t0), (0, 1));
        }
        ctx.barrier_all().unwrap();
    });
}

/// After init, puts, gets and atomics over the fake verbs fabric (and
/// the TCP half of a split peer, the ordering waits, fence, quiet and
/// barriers) allocate nothing on either PE thread. Each pass is run
/// once to warm up (first-use paths, the fake's queues), then counted.
fn no_alloc_script(ctx: &mut Context) {
    use crate::test_alloc::{allocations, count_here};
    const ROUNDS: u64 = 200;
    let me = ctx.my_pe();
    let a: Sym<u64> = ctx.alloc(64).expect("alloc");
    let b: Sym<u8> = ctx.alloc(2 * LONG).expect("alloc");
    let src = vec![5u8; LONG];
    let mut dst = vec![0u8; LONG];
    let mut words = [0u64; 8];
    for pass in 0..2 {
        ctx.barrier_all().unwrap();
        let s0 = ctx.stats();
        let before = allocations();
        if pass == 1 {
            count_here(true);
        }
        if me == 0 {
            for i in 0..ROUNDS {
                ctx.put(&a, 0, &[i], 1).unwrap();
                ctx.put(&b, 0, &src, 1).unwrap();
                ctx.get(&a, 0, &mut words, 1).unwrap();
                ctx.get(&b, 0, &mut dst, 1).unwrap();
                ctx.fetch_add(&a, 1, 1, 1).unwrap();
                ctx.compare_swap(&a, 2, i, i + 1, 1).unwrap();
                ctx.swap(&a, 3, i, 1).unwrap();
                ctx.add(&a, 4, 1, 1).unwrap();
                ctx.put_nbi(&b, LONG, &b, 0, LONG, 1).unwrap();
                ctx.get_nbi(&b, 0, &b, LONG, 64, 1).unwrap();
                ctx.fence().unwrap();
                ctx.put(&a, 5, &[i], 1).unwrap();
                ctx.quiet().unwrap();
            }
        }
        ctx.barrier_all().unwrap();
        if pass == 1 {
            count_here(false);
            let n = allocations() - before;
            assert_eq!(n, 0, "PE {me}: {n} allocations on the data path");
            let s = ctx.stats();
            if me == 0 {
                // The long puts, long gets and put_nbi went over verbs.
                let dv = s.ops[VERBS.index()] - s0.ops[VERBS.index()];
                assert!(dv >= 3 * ROUNDS, "{s:?}");
            }
        }
    }
    if me == 1 {
        // fetch_add and add ran twice per round; the compare-swaps
        // matched in the first pass only.
        let mut v = [0u64; 4];
        ctx.read_local(&a, 1, &mut v).unwrap();
        assert_eq!((v[0], v[1], v[3]), (2 * ROUNDS, ROUNDS, 2 * ROUNDS));
    }
    ctx.barrier_all().unwrap();
}

/// NEAR with NIC atomics: everything over verbs.
#[test]
fn verbs_data_path_does_not_allocate() {
    let o = Opts {
        atomics: VerbsAtomics::Nic,
        ..Opts::default()
    };
    pair(o, AtomicCap::Hca, no_alloc_script);
}

/// ROUTED with atomics to the CPU: split over verbs and TCP, with the
/// ordering waits.
#[test]
fn split_data_path_does_not_allocate() {
    let o = Opts {
        routed: true,
        ..Opts::default()
    };
    pair(o, AtomicCap::Hca, no_alloc_script);
}
