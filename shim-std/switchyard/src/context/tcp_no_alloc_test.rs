//! No allocation on the data path of a two-PE job over TCP: two contexts in
//! two threads on two nodes, TCP over loopback their only link, no progress
//! thread. Small and long puts, blocking and non-blocking gets, every kind
//! of atomic, fence and quiet, in a loop: once to warm up, then counted on
//! both PE threads (PE 1 makes progress in its barrier wait).

use switchyard_core::route::PolicyConfig;
use switchyard_socket::TcpConfig;

use super::*;
use crate::{
    context::{
        Sym, TCP,
        tcp_pair_test::{Pair, job},
    },
    test_alloc::{allocations, count_here},
};

/// A put or get that takes several TCP frames (over 4 KiB: written at once).
const LONG: usize = 16 << 10;
const ROUNDS: u64 = 200;

fn script(mut ctx: Context) {
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
                // Small puts back to back: the later ones queue behind the
                // first's send and go out gathered.
                for k in 0..8 {
                    ctx.put(&a, 8 + k, &[i], 1).unwrap();
                }
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
            if me == 0 {
                let s = ctx.stats();
                let tcp = s.ops[TCP.index()] - s0.ops[TCP.index()];
                assert!(tcp >= 18 * ROUNDS, "{s:?}");
            }
        }
    }
    if me == 1 {
        // fetch_add and add ran twice per round; the compare-swaps matched
        // in the first pass only; the last round's puts landed.
        let mut v = [0u64; 16];
        ctx.read_local(&a, 0, &mut v).unwrap();
        assert_eq!((v[1], v[2], v[4]), (2 * ROUNDS, ROUNDS, 2 * ROUNDS));
        assert_eq!((v[3], v[5]), (ROUNDS - 1, ROUNDS - 1));
        assert!(v[8..16].iter().all(|&x| x == ROUNDS - 1), "{v:?}");
    }
    ctx.barrier_all().unwrap();
    ctx.finalize().unwrap();
}

#[test]
fn two_pes_over_tcp_allocate_nothing_on_the_data_path() {
    let pair = Pair {
        job: job(0x70A11),
        routed: false,
        policy: PolicyConfig::default(),
        tcp: TcpConfig::default(),
    };
    pair.run(script);
}
