//! The FAILOVER flag of the route trace: a TCP rail cut under a put stream
//! (two rails over loopback) moves the stream to the other rail, and the
//! first decision that left the cut rail is traced FAILOVER, in the job's
//! trace object that `switchyard trace` reads.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use switchyard_core::{topology::LinkState, trace::TraceRecord, transport::Transport};
use switchyard_shm::trace_object::{INITIATOR, TraceObject};
use switchyard_socket::TcpConfig;

use super::{
    TRACE_RECORDS, progress, tcp_pair_test,
    tcp_pair_test::{Pair, WAIT, wait_for},
    tcp_rail,
};

/// Puts between cuts.
const PUTS: usize = 64;

/// Makes progress until rail 0 to `peer` is up again (reconnected), then
/// quiets: nothing is in flight on a rail being rebuilt when the PEs close.
pub(super) fn rail_0_back(ctx: &mut super::Context, peer: u32) {
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
        std::thread::sleep(Duration::from_micros(100));
    }
    ctx.quiet().unwrap();
}

/// A NEAR pair with two TCP rails over loopback (127.0.0.1 and .2).
pub(super) fn two_rails(tag: u64) -> Pair {
    Pair::near(
        tcp_pair_test::job(tag),
        TcpConfig {
            listen: vec!["127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()],
            ..TcpConfig::default()
        },
    )
}

#[test]
fn a_rail_cut_traces_the_failover() {
    let pair = two_rails(0xFA1);
    let step = Arc::new(AtomicU32::new(0));
    pair.run(move |mut ctx| {
        let data = ctx.alloc::<u64>(PUTS).unwrap();
        ctx.barrier_all().unwrap();
        let other = 1 - ctx.my_pe();
        if ctx.my_pe() == 1 {
            // Progress (reconnects, acks) until PE 0 saw its failover.
            wait_for(&mut ctx, &step, 1, true);
            rail_0_back(&mut ctx, other);
        } else {
            let start = Instant::now();
            let flagged = loop {
                assert!(start.elapsed() < WAIT, "no FAILOVER record");
                // Cut rail 0 to PE 1 (as a link failure would), and stream.
                ctx.tcp
                    .as_mut()
                    .map(progress::Tcp::get)
                    .expect("a TCP driver")
                    .debug_cut(1, 0);
                ctx.leave();
                for i in 0..PUTS {
                    ctx.put(&data, i, &[i as u64], 1).unwrap();
                }
                ctx.quiet().unwrap();
                let mut recs = vec![TraceRecord::default(); TRACE_RECORDS];
                let n = ctx.trace().snapshot(&mut recs);
                if let Some(r) = recs[..n]
                    .iter()
                    .find(|r| r.flags & TraceRecord::FAILOVER != 0)
                {
                    break *r;
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            assert_eq!(flagged.dst, 1);
            assert_ne!(flagged.transport, tcp_rail(0).index() as u8, "{flagged:?}");
            // The job's trace object, as `switchyard trace` opens it.
            let path = ctx.trace_ring.obj.path().expect("a shared-memory trace");
            let obj = TraceObject::open(path).expect("the trace object");
            let recs = obj.snapshot(INITIATOR, usize::MAX);
            assert!(
                recs.iter()
                    .any(|r| r.flags & TraceRecord::FAILOVER != 0 && r.seq == flagged.seq),
                "not in the trace object"
            );
            rail_0_back(&mut ctx, other);
            step.store(1, Ordering::SeqCst);
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

/// Issue 16's rail-cut soak found this: the TCP driver saw rail 0 to PE 1
/// go down (its progress step, e.g. the progress thread's, read the failed
/// socket) before the context applied the event to the health bits the
/// selector reads. An atomic selected onto that rail was refused unsent
/// (`RailDown`) and, the route never retrying atomics, failed: a channel's
/// signal or credit ended the stream. It is issued on rail 1 instead.
#[test]
fn an_atomic_refused_unsent_by_a_down_rail_goes_to_the_other_rail() {
    let pair = two_rails(0xFA2);
    let step = Arc::new(AtomicU32::new(0));
    pair.run(move |mut ctx| {
        let word = ctx.alloc::<u64>(1).unwrap();
        ctx.barrier_all().unwrap();
        let other = 1 - ctx.my_pe();
        if ctx.my_pe() == 1 {
            wait_for(&mut ctx, &step, 1, true);
            rail_0_back(&mut ctx, other);
        } else {
            // The driver alone sees the cut: progress steps on it, its
            // events left for the context.
            let start = Instant::now();
            loop {
                assert!(start.elapsed() < WAIT, "rail 0 never went down");
                let now = ctx.now();
                let t = ctx
                    .tcp
                    .as_mut()
                    .map(progress::Tcp::get)
                    .expect("a TCP driver");
                t.debug_cut(1, 0);
                t.progress(now);
                let down = t.rail(0).state(1) != LinkState::Up;
                ctx.leave();
                if down {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let reroutes = ctx.stats().reroutes;
            ctx.set(&word, 0, 7u64, 1).expect("the set, on rail 1");
            assert_eq!(ctx.fetch(&word, 0, 1).unwrap(), 7);
            assert!(ctx.stats().reroutes > reroutes);
            rail_0_back(&mut ctx, other);
            step.store(1, Ordering::SeqCst);
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

/// On a PE without RDMA every NEAR operation passes over RDMA to TCP's
/// first rail: a downgrade, counted as one, but routine there, so the
/// default trace samples it (one in 64, its record still flagged
/// DOWNGRADED) instead of keeping every such decision whole.
#[test]
fn a_routine_downgrade_is_sampled_not_kept_whole() {
    const N: usize = 640;
    let pair = Pair::near(tcp_pair_test::job(0xFA3), TcpConfig::default());
    pair.run_with(
        |s| s.trace = crate::config::TraceMode::DEFAULT,
        |mut ctx| {
            let data = ctx.alloc::<u64>(N).unwrap();
            ctx.barrier_all().unwrap();
            if ctx.my_pe() == 0 {
                let before = ctx.stats().downgrades;
                for i in 0..N {
                    ctx.put(&data, i, &[i as u64], 1).unwrap();
                }
                ctx.quiet().unwrap();
                let near = switchyard_core::class::PathClass::Near.index();
                let counted = ctx.stats().downgrades[near] - before[near];
                assert!(counted >= N as u64, "still counted: {counted}");
                let mut recs = vec![TraceRecord::default(); TRACE_RECORDS];
                let n = ctx.trace().snapshot(&mut recs);
                let puts: Vec<_> = recs[..n].iter().filter(|r| r.dst == 1).collect();
                assert!(
                    !puts.is_empty() && puts.len() <= N / 64 + 2,
                    "{} records of {N} routine downgrades (sampled: about {})",
                    puts.len(),
                    N / 64
                );
                assert!(
                    puts.iter().all(|r| r.flags & TraceRecord::DOWNGRADED != 0
                        && r.transport == tcp_rail(0).index() as u8),
                    "{puts:?}"
                );
            }
            ctx.barrier_all().unwrap();
            ctx.finalize().unwrap();
        },
    );
}
