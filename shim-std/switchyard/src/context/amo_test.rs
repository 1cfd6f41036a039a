//! Non-fetching atomics over TCP (`add`, `bitwise`, `set`): they return
//! without waiting for the target (they wait for no reply), are complete at
//! the target after a quiet, and apply exactly once, many in flight.

use std::{
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use switchyard_socket::TcpConfig;

use super::{
    Bitwise, Setup,
    tcp_pair_test::{Pair, job, wait_for},
};

fn one_s_op_timeout(s: &mut Setup) {
    s.op_timeout = Duration::from_secs(1);
}

/// PE 1 stops calling the library (no progress step: its TCP driver
/// reads nothing, applies nothing, answers nothing) while PE 0 adds, ANDs,
/// ORs, XORs and sets words of PE 1's, 64- and 32-bit: every call returns
/// (a call that waited for PE 1's answer would end in a timeout after the
/// 1 s op timeout), and none is applied yet. Then PE 1 makes progress
/// again, PE 0's quiet completes, and every word holds exactly what the
/// operations make of it.
#[test]
fn non_fetching_atomics_return_while_the_target_runs_no_progress_over_tcp() {
    static PARKED: AtomicU32 = AtomicU32::new(0);
    static ISSUED: AtomicU32 = AtomicU32::new(0);
    const OPS: u64 = 8;
    let pair = Pair::near(job(0xA3A1), TcpConfig::default());
    pair.run_with(one_s_op_timeout, |mut ctx| {
        let me = ctx.my_pe();
        let w = ctx.alloc::<u64>(4).unwrap();
        let h = ctx.alloc::<u32>(2).unwrap();
        ctx.write_local(&w, 0, &[0, u64::MAX, 0, 0]).unwrap();
        ctx.barrier_all().unwrap();
        let mut want = [0u64, u64::MAX, 0, 0];
        let mut want32 = [0u32; 2];
        for i in 0..OPS {
            want[0] += i + 1;
            want[1] &= !(1 << i);
            want[2] ^= 0b11 << i;
            want32[0] = want32[0].wrapping_add(u32::MAX);
            want32[1] |= 1 << (31 - i);
        }
        want[3] = 77;
        if me == 1 {
            PARKED.store(1, Ordering::SeqCst);
            // Nothing of the library runs on this thread meanwhile.
            wait_for(&mut ctx, &ISSUED, 1, false);
            let mut got = [0u64; 4];
            ctx.read_local(&w, 0, &mut got).unwrap();
            assert_eq!(got, [0, u64::MAX, 0, 0], "applied without progress");
        } else {
            wait_for(&mut ctx, &PARKED, 1, false);
            for i in 0..OPS {
                ctx.add(&w, 0, i + 1, 1).unwrap();
                ctx.bitwise(&w, 1, Bitwise::And, !(1 << i), 1).unwrap();
                ctx.bitwise(&w, 2, Bitwise::Xor, 0b11 << i, 1).unwrap();
                ctx.add(&h, 0, u32::MAX, 1).unwrap();
                ctx.bitwise(&h, 1, Bitwise::Or, 1 << (31 - i), 1).unwrap();
            }
            ctx.set(&w, 3, 77, 1).unwrap();
            ISSUED.store(1, Ordering::SeqCst);
            // Complete once PE 1 makes progress again (in its barrier).
            ctx.quiet().unwrap();
            let mut got = [0u64; 4];
            ctx.get(&w, 0, &mut got, 1).unwrap();
            assert_eq!(got, want);
        }
        ctx.barrier_all().unwrap();
        if me == 1 {
            let mut got = [0u64; 4];
            ctx.read_local(&w, 0, &mut got).unwrap();
            assert_eq!(got, want, "lost or applied twice");
            let mut got32 = [0u32; 2];
            ctx.read_local(&h, 0, &mut got32).unwrap();
            assert_eq!(got32, want32, "lost or applied twice (32-bit)");
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

/// Both PEs add to one word of each PE, many times between quiets, more
/// adds in flight than the driver has slots for fetching atomics; a
/// fetch-add now and then observes exactly the adds before it (a read
/// observes this PE's earlier writes), and after each quiet and barrier
/// every word holds exactly the sum of both PEs' adds: none lost, none
/// applied twice, nothing left holding a slot (the fetch-adds still find
/// one).
#[test]
fn many_adds_between_quiets_apply_exactly_once_over_tcp() {
    const ROUNDS: u64 = 4;
    const ADDS: u64 = 1_500;
    let pair = Pair::near(job(0xA3A2), TcpConfig::default());
    pair.run(|mut ctx| {
        let me = ctx.my_pe();
        let other = 1 - me;
        // Word `pe` is added to by PE `pe` alone; word 2 by both.
        let w = ctx.alloc::<u64>(3).unwrap();
        ctx.barrier_all().unwrap();
        let mut mine = 0u64;
        for r in 0..ROUNDS {
            for i in 0..ADDS {
                let v = (i + r) % 5 + 1;
                if i % 97 == 0 {
                    let old = ctx.fetch_add(&w, me as usize, v, other).unwrap();
                    assert_eq!(old, mine, "round {r}, add {i}");
                } else {
                    ctx.add(&w, me as usize, v, other).unwrap();
                }
                ctx.add(&w, 2, 1, other).unwrap();
                mine += v;
            }
            ctx.quiet().unwrap();
            assert_eq!(ctx.fetch(&w, me as usize, other).unwrap(), mine);
            ctx.barrier_all().unwrap();
            let mut got = [0u64; 3];
            ctx.read_local(&w, 0, &mut got).unwrap();
            // The other PE's sums are the same as this one's.
            assert_eq!(got[other as usize], mine, "round {r}");
            assert_eq!(got[2], (r + 1) * ADDS, "round {r}");
            ctx.barrier_all().unwrap();
        }
        ctx.finalize().unwrap();
    });
}
