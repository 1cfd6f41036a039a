//! The verbs load bit on a fake pair: PE 1 stops progressing, so once its
//! shared receive queue (16 receives) is used up PE 0's puts wait on RNR
//! and complete no more; PE 0's verbs backlog toward it passes the
//! watermark (75% of 2 data QPs of 16 slots less one: 23 work requests, its
//! completions polled first), and the NEAR puts that follow take TCP. Once
//! PE 1 progresses again the backlog drains, the bit clears and the puts
//! take verbs again.

use super::*;
use crate::{
    context::{TCP, tcp_pair_test::wait_for, verbs::VerbsDriver},
    test_alloc::{allocations, count_here},
};

/// Puts while PE 1 is stalled: more than its receives (16) plus the
/// watermark (23), so the bit is set on the way; fewer than would fill
/// TCP's window (after the bit, they go there).
const STREAM: usize = 64;
/// Puts after PE 1 resumed.
const AFTER: usize = 8;
/// Elements of one placement block of the verbs driver (64 KiB; a block's
/// puts take data QP `block % data_qps`): puts `i` and `i + 1` go to
/// neighbouring blocks, so to the two data queue pairs in turn.
const BLOCK_ELEMS: usize = (64 << 10) / 8;

fn slot(i: usize) -> usize {
    (i % 2) * BLOCK_ELEMS + i / 2
}

fn over(ctx: &Context) -> bool {
    ctx.topo.is_overloaded(VERBS, 1)
}

fn drv(ctx: &mut Context) -> &VerbsDriver {
    &ctx.verbs_mut().drv
}

fn load_script(mut ctx: Context, _: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    let sym: Sym<u64> = ctx.alloc(2 * BLOCK_ELEMS).expect("alloc");
    ctx.barrier_all().unwrap();
    ctx.quiet().unwrap();
    if me == 1 {
        // Progress until PE 0 is quiet (its receives re-posted), then
        // stall until step 3.
        wait_for(&mut ctx, step, 1, true);
        step.store(2, Ordering::SeqCst);
        wait_for_step(step, 3);
        wait_for(&mut ctx, step, 4, true);
    } else {
        let cap = drv(&mut ctx).backlog(1).expect("backlog").capacity_wrs;
        assert_eq!(cap, 30, "2 data QPs of 16 slots, less one each");
        assert_eq!(drv(&mut ctx).backlog(1).unwrap().wrs, 0);
        step.store(1, Ordering::SeqCst);
        wait_for_step(step, 2);
        let s0 = ctx.stats();
        // Until the bit is set (the fake HCA copies each message that
        // waits on RNR: it allocates, a device would not).
        let mut i = 0;
        while !over(&ctx) && i < STREAM {
            ctx.put(&sym, slot(i), &[i as u64 + 1], 1).unwrap();
            i += 1;
        }
        // The yields, each with its completion poll, allocate nothing.
        let a0 = allocations();
        count_here(true);
        for i in i..STREAM {
            ctx.put(&sym, slot(i), &[i as u64 + 1], 1).unwrap();
        }
        count_here(false);
        assert_eq!(allocations(), a0, "allocations while yielding");
        let s = ctx.stats();
        let (on_verbs, on_tcp) = (
            s.ops[VERBS.index()] - s0.ops[VERBS.index()],
            s.ops[TCP.index()] - s0.ops[TCP.index()],
        );
        assert!(over(&ctx), "the verbs bit is set: {s:?}");
        let left = drv(&mut ctx).backlog(1).unwrap();
        assert!(left.wrs * 1000 > cap * 750, "still over: {left:?}");
        assert!(on_verbs >= 23 && on_tcp > 0, "{s:?}");
        assert_eq!(on_verbs + on_tcp, STREAM as u64);
        assert_eq!(s.load_yields - s0.load_yields, on_tcp, "{s:?}");
        assert_eq!(s.load_transitions - s0.load_transitions, 1, "{s:?}");
        assert_eq!(s.verbs_failovers, 0, "{s:?}");
        // Verbs first, then TCP only, each a load yield.
        let mut recs = [TraceRecord::default(); TRACE_RECORDS];
        let n = ctx.trace().snapshot(&mut recs);
        let routes: Vec<_> = recs[n - STREAM..n]
            .iter()
            .map(|r| (r.transport, r.flags))
            .collect();
        let split = on_verbs as usize;
        assert!(
            routes[..split]
                .iter()
                .all(|&r| r == (VERBS.index() as u8, 0)),
            "{routes:?}"
        );
        let yielded = (
            TCP.index() as u8,
            TraceRecord::LOAD | TraceRecord::DOWNGRADED,
        );
        assert!(routes[split..].iter().all(|&r| r == yielded), "{routes:?}");
        // PE 1 resumes: the puts waiting on RNR complete, the backlog
        // drains and a progress step clears the bit at half or below.
        step.store(3, Ordering::SeqCst);
        let start = Instant::now();
        while over(&ctx) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "verbs never drained"
            );
            ctx.poll_once();
            std::thread::sleep(Duration::from_micros(50));
        }
        assert!(drv(&mut ctx).backlog(1).unwrap().wrs * 1000 <= cap * 375);
        ctx.quiet().unwrap();
        let s1 = ctx.stats();
        assert_eq!(s1.load_transitions - s0.load_transitions, 2, "{s1:?}");
        for i in STREAM..STREAM + AFTER {
            ctx.put(&sym, slot(i), &[i as u64 + 1], 1).unwrap();
        }
        ctx.quiet().unwrap();
        let s = ctx.stats();
        assert_eq!(
            s.ops[VERBS.index()] - s1.ops[VERBS.index()],
            AFTER as u64,
            "{s:?}"
        );
        assert_eq!(
            (s.ops[TCP.index()], s.load_yields),
            (s1.ops[TCP.index()], s1.load_yields)
        );
        step.store(4, Ordering::SeqCst);
    }
    ctx.barrier_all().unwrap();
    if me == 1 {
        // Every put landed, over whichever transport.
        for i in 0..STREAM + AFTER {
            let mut v = [0u64];
            ctx.read_local(&sym, slot(i), &mut v).unwrap();
            assert_eq!(v[0], i as u64 + 1, "put {i}");
        }
    }
    ctx.barrier_all().unwrap();
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn near_puts_take_tcp_while_the_verbs_backlog_is_over_the_watermark() {
    let cfg = VerbsConfig {
        data_qps: Some(2),
        sq_depth: Some(16),
        signal_every: Some(4),
        srq_depth: Some(16),
        ..VerbsConfig::default()
    };
    run_pair(0x72, Opts::default(), cfg, load_script);
}
