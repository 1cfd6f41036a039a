//! `progress = dedicated`: each PE's progress thread, pinned to one CPU,
//! serves a peer's puts, gets, atomics and quiet over TCP while the PE's
//! application sleeps outside the library, and the kernel says the thread
//! runs on that CPU only.

use std::sync::atomic::{AtomicU32, Ordering};

use switchyard_core::route::PolicyConfig;
use switchyard_socket::TcpConfig;

use super::{
    progress::ThreadMode,
    tcp_pair_test::{Pair, job, wait_for},
};

/// Operations of each kind PE 1 runs against the sleeping PE 0 (few: on a
/// 2-core machine the two spinning threads share their CPU).
const OPS: u64 = 16;

/// The CPUs thread `tid` may run on, as `/proc/self/task/<tid>/status` lists
/// them.
fn cpus_of(tid: i32) -> String {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list")
        .trim()
        .to_string()
}

#[test]
fn a_pinned_dedicated_thread_serves_a_sleeping_pe_over_tcp() {
    static ASLEEP: AtomicU32 = AtomicU32::new(0);
    static DONE: AtomicU32 = AtomicU32::new(0);
    // Both PEs' threads on the last CPU this process may use: the
    // application threads keep the others (on a 2-core machine, one).
    let cpu = *crate::cpus::allowed().last().expect("a CPU");
    let pair = Pair {
        job: job(0x3A1D),
        routed: false,
        policy: PolicyConfig::default(),
        tcp: TcpConfig::default(),
    };
    pair.run(move |mut ctx| {
        let (me, clock) = (ctx.my_pe(), ctx.clock);
        let t = ctx.tcp.as_mut().expect("a TCP driver");
        let placed = t
            .start(ThreadMode::Dedicated, clock, Some(cpu), me)
            .unwrap();
        assert_eq!(placed.cpu, Some(cpu), "{placed:?}");
        assert_eq!(crate::sys::affinity(placed.tid).unwrap(), [cpu]);
        assert_eq!(cpus_of(placed.tid), cpu.to_string());
        let w = ctx.alloc::<u64>(OPS as usize + 1).unwrap();
        ctx.barrier_all().unwrap();
        if me == 0 {
            let before = ctx.tcp.as_ref().unwrap().thread_bursts();
            ASLEEP.store(1, Ordering::SeqCst);
            // Outside the library until PE 1 is done: only the dedicated
            // thread serves PE 1's operations.
            wait_for(&mut ctx, &DONE, 1, false);
            assert!(ctx.tcp.as_ref().unwrap().thread_bursts() > before);
        } else {
            wait_for(&mut ctx, &ASLEEP, 1, false);
            for i in 0..OPS {
                ctx.put(&w, i as usize, &[i + 100], 0).unwrap();
                let mut got = [0u64];
                ctx.get(&w, i as usize, &mut got, 0).unwrap();
                assert_eq!(got, [i + 100]);
                ctx.add(&w, OPS as usize, 1, 0).unwrap();
            }
            assert_eq!(ctx.fetch_add(&w, OPS as usize, 1, 0).unwrap(), OPS);
            ctx.quiet().unwrap();
            DONE.store(1, Ordering::SeqCst);
        }
        ctx.barrier_all().unwrap();
        if me == 0 {
            let mut got = [0u64; OPS as usize + 1];
            ctx.get(&w, 0, &mut got, 0).unwrap();
            let want: Vec<u64> = (0..OPS).map(|i| i + 100).chain([OPS + 1]).collect();
            assert_eq!(got.as_slice(), want.as_slice());
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}
