//! The load-bit rule on synthetic backlogs, and end to end: two contexts in
//! two threads, ROUTED to each other (short puts take TCP rail 0 first,
//! rail 1 next), with two TCP rails over loopback (127.0.0.1, 127.0.0.2),
//! a 64 KiB window, and no progress thread: PE 1 is stalled simply by not
//! calling the library, so nothing PE 0 sends is acknowledged meanwhile.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    time::{Duration, Instant},
};

use switchyard_core::{class::PathClass, route::PolicyConfig};
use switchyard_socket::{Backlog, TcpConfig};

use super::*;
use crate::{
    context::{
        Sym, TCP, TRACE_RECORDS, progress,
        tcp_pair_test::{Pair, job, wait_for},
        tcp_rail,
    },
    test_alloc::{allocations, count_here},
};

const WM: LoadWatermark = LoadWatermark { per_mille: 750 };

#[test]
fn the_rule_sets_over_the_watermark_and_clears_at_half_of_it() {
    let rule = Rule::new(WM).expect("on at 75%");
    assert_eq!(rule.clear.per_mille, 375);
    assert_eq!(
        Rule::new(LoadWatermark { per_mille: 1000 }),
        None,
        "100%: off"
    );
    // TCP: 1000 frames of 100 bytes capacity (frames or bytes count).
    let cap = Backlog {
        frames: 1000,
        bytes: 100_000,
    };
    let tcp = |frames: u32, bytes: u64| move |l| Backlog { frames, bytes }.exceeds(l, cap);
    // Clear: stays clear up to the watermark, set just over it.
    assert!(!rule.next(false, tcp(750, 0)));
    assert!(rule.next(false, tcp(751, 0)));
    assert!(rule.next(false, tcp(0, 75_001)), "bytes alone");
    // Set: stays set down to half the watermark, clears at it.
    assert!(
        rule.next(true, tcp(600, 0)),
        "between half and the watermark"
    );
    assert!(rule.next(true, tcp(376, 0)));
    assert!(rule.next(true, tcp(0, 37_501)), "bytes alone keep it");
    assert!(!rule.next(true, tcp(375, 37_500)));
    assert!(!rule.next(true, tcp(0, 0)));
    // Verbs: work requests against the send-queue slots.
    #[cfg(feature = "verbs")]
    {
        use switchyard_verbs::Backlog as VBacklog;
        let verbs = |wrs: u32| {
            move |l| {
                VBacklog {
                    wrs,
                    bytes: 0,
                    capacity_wrs: 30,
                }
                .exceeded(l)
            }
        };
        // 75% of 30 is 22.5: set at 23; half is 11.25: kept at 12.
        assert!(!rule.next(false, verbs(22)));
        assert!(rule.next(false, verbs(23)));
        assert!(rule.next(true, verbs(12)));
        assert!(!rule.next(true, verbs(11)));
    }
    // A watermark too small to halve: only an empty backlog clears it.
    let one = Rule::new(LoadWatermark { per_mille: 1 }).unwrap();
    assert_eq!(one.clear.per_mille, 0);
    assert!(!one.next(false, tcp(1, 0)) && one.next(false, tcp(2, 0)));
    assert!(one.next(true, tcp(1, 0)) && !one.next(true, tcp(0, 0)));
}

/// Bytes each put carries.
const PUT: usize = 1024;
/// Elements of a put.
const ELEMS: usize = PUT / 8;
/// The peer's TCP window (replay ring and credit), shared by both rails.
const WINDOW: u32 = 64 << 10;
/// What a put holds on its rail: header and payload.
const FRAME: u64 = 64 + PUT as u64;
/// Puts of the stream while PE 1 is stalled: they fit in the window
/// (nothing blocks), and take rail 0 beyond 75% of it.
const STREAM: usize = 56;
/// Puts after PE 1 resumed.
const AFTER: usize = 8;
const _: () = assert!(STREAM as u64 * FRAME + FRAME <= WINDOW as u64);

fn backlog(ctx: &mut Context, rail: usize) -> Backlog {
    let t = ctx.tcp.as_mut().map(progress::Tcp::get).expect("tcp");
    t.backlog(1, rail)
}

/// The routes of the newest `n` records of the trace: (transport, flags).
fn last_routes(ctx: &Context, n: usize) -> Vec<(u8, u8)> {
    let mut recs = vec![TraceRecord::default(); TRACE_RECORDS];
    let got = ctx.trace().snapshot(&mut recs);
    recs[got - n..got]
        .iter()
        .map(|r| {
            assert_eq!((r.dst, r.len), (1, PUT as u32), "{r:?}");
            (r.transport, r.flags)
        })
        .collect()
}

fn last_record(ctx: &Context) -> TraceRecord {
    let mut recs = vec![TraceRecord::default(); TRACE_RECORDS];
    let n = ctx.trace().snapshot(&mut recs);
    recs[n - 1]
}

/// The value put in slot `i`.
fn fill(i: usize) -> [u64; ELEMS] {
    [i as u64 + 1; ELEMS]
}

/// What a pair shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Load watermark 75%: the stream moves to rail 1 and comes back.
    Move,
    /// As `Move`, and a get right after PE 1 resumed.
    ReadAfter,
    /// Load watermark 100%: every put takes rail 0.
    Stay,
    /// A second context streams and sets the bit ([`other_context`]).
    OtherContext,
}

/// PE 0 streams puts to PE 1 while PE 1 is stalled, then again after it
/// resumed. With load bits on, the stream moves to rail 1 once rail 0's
/// backlog is over the watermark and returns once it drained; else every
/// put takes rail 0.
fn script(mut ctx: Context, step: &AtomicU32, mode: Mode) {
    let moves = mode != Mode::Stay;
    assert_eq!(ctx.tcp.as_ref().map(|t| t.has_thread()), Some(false));
    let (me, r0, r1) = (ctx.my_pe(), TCP, tcp_rail(1));
    assert_eq!(ctx.class(1 - me), Some(PathClass::Routed));
    let sym: Sym<u64> = ctx.alloc((STREAM + AFTER) * ELEMS).expect("alloc");
    let count: Sym<u64> = ctx.alloc(1).expect("alloc");
    ctx.barrier_all().unwrap();
    if me == 1 {
        stall(&mut ctx, step);
    } else {
        ctx.quiet().unwrap();
        assert_eq!(
            (backlog(&mut ctx, 0), backlog(&mut ctx, 1)),
            (Backlog::default(), Backlog::default())
        );
        assert!(!ctx.topo.is_overloaded(r0, 1) && !ctx.topo.is_overloaded(r1, 1));
        step.store(1, Ordering::SeqCst);
        wait_for(&mut ctx, step, 2, false);
        let s0 = ctx.stats();
        // Setting the bit and yielding allocate nothing.
        let a0 = allocations();
        count_here(true);
        for i in 0..STREAM {
            ctx.put(&sym, i * ELEMS, &fill(i), 1).unwrap();
        }
        count_here(false);
        assert_eq!(allocations(), a0, "allocations while streaming");
        let s = ctx.stats();
        let (on0, on1) = (
            s.ops[r0.index()] - s0.ops[r0.index()],
            s.ops[r1.index()] - s0.ops[r1.index()],
        );
        // Rail 0 holds every put it took (nothing is acknowledged): the
        // first over 75% of the window sets its bit.
        let crossing = (WINDOW as u64 * 750 / 1000 / FRAME + 1) as usize;
        let routes = last_routes(&ctx, STREAM);
        if moves {
            assert_eq!(
                (on0, on1),
                (crossing as u64, (STREAM - crossing) as u64),
                "{s:?}"
            );
            assert_eq!(backlog(&mut ctx, 0).frames as usize, crossing);
            assert_eq!(backlog(&mut ctx, 1).frames as usize, STREAM - crossing);
            assert!(ctx.topo.is_overloaded(r0, 1), "rail 0 is loaded");
            assert!(!ctx.topo.is_overloaded(r1, 1), "rail 1 is not");
            assert_eq!(ctx.load.loaded(), &[(r0, 1)]);
            assert_eq!(s.load_transitions - s0.load_transitions, 1, "{s:?}");
            assert_eq!(s.load_yields - s0.load_yields, (STREAM - crossing) as u64);
            // In the trace: a prefix on rail 0 as first choice, the rest on
            // rail 1, each a load yield.
            for (i, &(t, flags)) in routes.iter().enumerate() {
                if i < crossing {
                    assert_eq!((t, flags), (r0.index() as u8, 0), "put {i}");
                } else {
                    let yielded = TraceRecord::LOAD | TraceRecord::DOWNGRADED;
                    assert_eq!((t, flags), (r1.index() as u8, yielded), "put {i}");
                }
            }
        } else {
            assert_eq!((on0, on1), (STREAM as u64, 0), "{s:?}");
            assert!(routes.iter().all(|&r| r == (r0.index() as u8, 0)));
            assert!(!ctx.topo.is_overloaded(r0, 1));
            assert_eq!((s.load_transitions, s.load_yields), (0, 0), "{s:?}");
        }
        // An atomic does not yield: rail 0, loaded or not (a set: it
        // waits for no answer).
        let y = ctx.stats().load_yields;
        ctx.set(&count, 0, 7, 1).unwrap();
        assert_eq!(last_record(&ctx).transport, r0.index() as u8);
        assert_eq!(last_record(&ctx).flags & TraceRecord::LOAD, 0);
        assert_eq!(ctx.stats().load_yields, y);
        // PE 1 resumes: acks come back; rail 0's bit clears in a progress
        // step, at half the watermark or below.
        step.store(3, Ordering::SeqCst);
        if mode == Mode::ReadAfter {
            // A get now takes rail 1 (rail 0 is still loaded: nothing was
            // progressed yet) and first waits until rail 0's puts are
            // complete: it reads what they wrote. The wait's progress
            // steps clear rail 0's bit.
            let w = ctx.stats().ordering_waits;
            let mut got = [0u64; ELEMS];
            ctx.get(&sym, 0, &mut got, 1).unwrap();
            assert_eq!(got, fill(0));
            let r = last_record(&ctx);
            let flags = TraceRecord::LOAD | TraceRecord::DOWNGRADED | TraceRecord::ORDERED;
            assert_eq!((r.transport, r.flags), (r1.index() as u8, flags), "{r:?}");
            assert_eq!(ctx.stats().ordering_waits, w + 1);
            assert!(!ctx.topo.is_overloaded(r0, 1));
        }
        let start = Instant::now();
        let a0 = allocations();
        count_here(true);
        while ctx.topo.is_overloaded(r0, 1) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "rail 0 never drained"
            );
            ctx.poll_once();
            std::thread::sleep(Duration::from_micros(50));
        }
        count_here(false);
        assert_eq!(allocations(), a0, "allocations while draining");
        if moves {
            let cap = backlog_capacity(&mut ctx);
            let half = LoadWatermark { per_mille: 375 };
            assert!(!backlog(&mut ctx, 0).exceeds(half, cap), "cleared at half");
        }
        assert!(ctx.load.loaded().is_empty());
        ctx.quiet().unwrap();
        // Traffic returns to rail 0.
        let s1 = ctx.stats();
        assert_eq!(s1.load_transitions, if moves { 2 } else { 0 }, "{s1:?}");
        for i in STREAM..STREAM + AFTER {
            ctx.put(&sym, i * ELEMS, &fill(i), 1).unwrap();
        }
        ctx.quiet().unwrap();
        let s = ctx.stats();
        assert_eq!(
            s.ops[r0.index()] - s1.ops[r0.index()],
            AFTER as u64,
            "{s:?}"
        );
        assert_eq!(s.ops[r1.index()], s1.ops[r1.index()], "{s:?}");
        assert_eq!(s.load_yields, s1.load_yields);
        assert!(
            last_routes(&ctx, AFTER)
                .iter()
                .all(|&r| r == (r0.index() as u8, 0))
        );
        let t = ctx.tcp.as_mut().map(progress::Tcp::get).unwrap();
        assert_eq!(t.stats().replayed, 0, "nothing was sent twice");
        step.store(4, Ordering::SeqCst);
    }
    ctx.barrier_all().unwrap();
    if me == 1 {
        // Every put landed, once.
        let mut v = [0u64; ELEMS];
        for i in 0..STREAM + AFTER {
            ctx.read_local(&sym, i * ELEMS, &mut v).unwrap();
            assert_eq!(v, fill(i), "slot {i}");
        }
        let mut c = [0u64];
        ctx.read_local(&count, 0, &mut c).unwrap();
        assert_eq!(c[0], 7, "the atomic set");
        let t = ctx.tcp.as_mut().map(progress::Tcp::get).unwrap();
        assert_eq!(t.stats().duplicates_dropped, 0);
    }
    ctx.barrier_all().unwrap();
    close(&mut ctx, step);
}

/// PE 1's part of a stream: progress until PE 0 is quiet, then stall:
/// nothing of PE 0's is acknowledged until step 3; progress again until
/// step 4.
fn stall(ctx: &mut Context, step: &AtomicU32) {
    wait_for(ctx, step, 1, true);
    step.store(2, Ordering::SeqCst);
    wait_for(ctx, step, 3, false);
    wait_for(ctx, step, 4, true);
}

/// Closes together: neither side closes while the other still waits for
/// an ack from it (there is no bootstrap here for finalize's last
/// barrier).
fn close(ctx: &mut Context, step: &AtomicU32) {
    ctx.quiet().unwrap();
    step.fetch_add(1, Ordering::SeqCst);
    wait_for(ctx, step, 6, true);
}

fn backlog_capacity(ctx: &mut Context) -> Backlog {
    ctx.tcp
        .as_mut()
        .map(progress::Tcp::get)
        .unwrap()
        .backlog_capacity()
}

/// Runs [`script`] on a pair ROUTED to each other (short puts take rail
/// 0 first, rail 1 next).
fn run(tag: u64, mode: Mode) {
    let wm = match mode {
        Mode::Move | Mode::ReadAfter | Mode::OtherContext => WM,
        Mode::Stay => LoadWatermark { per_mille: 1000 },
    };
    let step = Arc::new(AtomicU32::new(0));
    let pair = Pair {
        job: job(tag),
        routed: true,
        policy: PolicyConfig {
            load_watermark: wm,
            ..PolicyConfig::default()
        },
        tcp: TcpConfig {
            listen: vec!["127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()],
            window: WINDOW,
            max_frame_payload: 16 << 10,
            // PE 1 sends no heartbeat while stalled: its rails must not be
            // taken for down meanwhile.
            detection_window: Duration::from_secs(30),
            give_up: Duration::from_secs(60),
            ..TcpConfig::default()
        },
    };
    pair.run(move |ctx| match mode {
        Mode::OtherContext => other_context(ctx, &step),
        _ => script(ctx, &step, mode),
    });
}

/// PE 0's stream comes from a second context of the PE, dropped once its
/// puts set rail 0's bit. The first context, whose own record of bits is
/// empty, clears that bit once rail 0 drained (its first put is routed
/// around the bit, re-checks and clears it), and its next puts take rail 0.
fn other_context(mut ctx: Context, step: &AtomicU32) {
    let (me, r0) = (ctx.my_pe(), TCP);
    let sym: Sym<u64> = ctx.alloc((STREAM + AFTER) * ELEMS).expect("alloc");
    ctx.barrier_all().unwrap();
    if me == 1 {
        stall(&mut ctx, step);
    } else {
        ctx.quiet().unwrap();
        step.store(1, Ordering::SeqCst);
        wait_for(&mut ctx, step, 2, false);
        {
            let mut other = ctx.pe().context().expect("a second context");
            for i in 0..STREAM {
                other.put(&sym, i * ELEMS, &fill(i), 1).unwrap();
            }
            assert!(other.topo.is_overloaded(r0, 1), "rail 0 is loaded");
            assert_eq!(other.load.loaded(), &[(r0, 1)]);
            assert_eq!(other.stats().load_transitions, 1);
        }
        // The bit is the PE's: it outlives the context that set it.
        assert!(ctx.topo.is_overloaded(r0, 1));
        assert!(ctx.load.loaded().is_empty());
        step.store(3, Ordering::SeqCst);
        // The first context's progress steps take the acks in until rail
        // 0 is at half the watermark or below.
        let (cap, half) = (backlog_capacity(&mut ctx), LoadWatermark { per_mille: 375 });
        let start = Instant::now();
        while backlog(&mut ctx, 0).exceeds(half, cap) {
            assert!(start.elapsed() < Duration::from_secs(20), "never drained");
            ctx.poll_once();
            std::thread::sleep(Duration::from_micros(50));
        }
        let s0 = ctx.stats();
        ctx.put(&sym, STREAM * ELEMS, &fill(STREAM), 1).unwrap();
        assert!(
            !ctx.topo.is_overloaded(r0, 1),
            "cleared by the other context"
        );
        let s1 = ctx.stats();
        assert_eq!(s1.load_transitions - s0.load_transitions, 1, "{s1:?}");
        assert_eq!(s1.load_yields - s0.load_yields, 1, "{s1:?}");
        for i in STREAM + 1..STREAM + AFTER {
            ctx.put(&sym, i * ELEMS, &fill(i), 1).unwrap();
        }
        ctx.quiet().unwrap();
        let s = ctx.stats();
        assert_eq!(
            s.ops[r0.index()] - s1.ops[r0.index()],
            (AFTER - 1) as u64,
            "back on rail 0: {s:?}"
        );
        assert_eq!(s.load_yields, s1.load_yields);
        step.store(4, Ordering::SeqCst);
    }
    ctx.barrier_all().unwrap();
    if me == 1 {
        let mut v = [0u64; ELEMS];
        for i in 0..STREAM + AFTER {
            ctx.read_local(&sym, i * ELEMS, &mut v).unwrap();
            assert_eq!(v, fill(i), "slot {i}");
        }
    }
    ctx.barrier_all().unwrap();
    close(&mut ctx, step);
}

/// A load bit set by one context of a PE is cleared by another once its
/// pair drained, even after the context that set it is gone.
#[test]
fn a_load_bit_set_by_one_context_is_cleared_by_another() {
    run(0x4c04, Mode::OtherContext);
}

/// A put stream to a stalled target: once rail 0's backlog is over the
/// watermark (75%) the following puts take rail 1 (counted, traced as load
/// yields); nothing is lost or sent twice; once the target resumes and the
/// acks drain rail 0 to half the watermark its bit clears and the puts
/// take rail 0 again.
#[test]
fn a_put_stream_moves_to_the_other_rail_while_the_first_is_loaded() {
    run(0x4c01, Mode::Move);
}

/// The same stream at a watermark of 100%: no load bit, every put on rail 0.
#[test]
fn at_a_watermark_of_100_the_stream_stays_on_its_rail() {
    run(0x4c02, Mode::Stay);
}

/// A get right after the target resumed takes rail 1 (rail 0 still loaded)
/// and first waits for rail 0's puts: it reads what they wrote.
#[test]
fn a_get_on_the_other_rail_waits_for_the_loaded_rails_puts() {
    run(0x4c03, Mode::ReadAfter);
}

/// Puts of the ring stream per batch (below the ring's depth, so that no
/// put finds the ring full and takes the routed loop instead).
const RING_BATCH: usize = 200;
/// Batches of the ring stream: 600 puts of 40 bytes, 104 bytes each on the
/// rail, fit the 64 KiB window and take rail 0 over 75% of it.
const RING_BATCHES: usize = 3;
/// Words of a ring put.
const RING_WORDS: usize = 5;

/// A stream of small puts through a `dedicated` thread's submission ring
/// to a stalled target: the thread's load hint sets rail 0's bit as a
/// direct put's `load_after` would; it clears once the target resumed.
#[test]
fn ring_puts_set_the_load_bit_through_the_threads_hint() {
    let step = Arc::new(AtomicU32::new(0));
    let pair = Pair {
        job: job(0x4c05),
        routed: true,
        policy: PolicyConfig {
            load_watermark: WM,
            ..PolicyConfig::default()
        },
        tcp: TcpConfig {
            listen: vec!["127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap()],
            window: WINDOW,
            max_frame_payload: 16 << 10,
            detection_window: Duration::from_secs(30),
            give_up: Duration::from_secs(60),
            ..TcpConfig::default()
        },
    };
    pair.run(move |mut ctx| {
        let (me, r0) = (ctx.my_pe(), TCP);
        let n = RING_BATCH * RING_BATCHES;
        let sym: Sym<u64> = ctx.alloc(n * RING_WORDS).expect("alloc");
        ctx.barrier_all().unwrap();
        if me == 1 {
            stall(&mut ctx, &step);
        } else {
            let clock = ctx.clock;
            ctx.tcp
                .as_mut()
                .expect("a TCP driver")
                .start(progress::ThreadMode::Dedicated, clock, None, me)
                .unwrap();
            ctx.quiet().unwrap();
            step.store(1, Ordering::SeqCst);
            wait_for(&mut ctx, &step, 2, false);
            let s0 = ctx.stats();
            for b in 0..RING_BATCHES {
                for i in b * RING_BATCH..(b + 1) * RING_BATCH {
                    ctx.put(&sym, i * RING_WORDS, &[i as u64 + 1; RING_WORDS], 1)
                        .unwrap();
                }
                // The thread takes the batch (the ring is never full).
                let ring = ctx
                    .tcp
                    .as_ref()
                    .and_then(progress::Tcp::debug_ring)
                    .expect("the puts went through a ring");
                let start = Instant::now();
                while !ring.is_empty() {
                    assert!(start.elapsed() < Duration::from_secs(20), "never drained");
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            // The thread publishes its hint right after a drain, so after
            // the ring reads empty: wait for it (bounded), then one more
            // push reads it (unless a push of the last batch already did
            // and its bit routed the rest around the ring).
            let ring = ctx
                .tcp
                .as_ref()
                .and_then(progress::Tcp::debug_ring)
                .expect("a ring");
            let start = Instant::now();
            while ring.hint() == 0 {
                assert!(start.elapsed() < Duration::from_secs(20), "no hint");
                std::thread::sleep(Duration::from_micros(100));
            }
            ctx.put(&sym, 0, &[1u64; RING_WORDS], 1).unwrap();
            assert!(ctx.topo.is_overloaded(r0, 1), "rail 0 is loaded");
            assert_eq!(ctx.load.loaded(), &[(r0, 1)]);
            let s = ctx.stats();
            assert_eq!(s.load_transitions - s0.load_transitions, 1, "{s:?}");
            // PE 1 resumes: the bit clears in a progress step.
            step.store(3, Ordering::SeqCst);
            let start = Instant::now();
            while ctx.topo.is_overloaded(r0, 1) {
                assert!(start.elapsed() < Duration::from_secs(20), "never cleared");
                ctx.poll_once();
                std::thread::sleep(Duration::from_micros(50));
            }
            ctx.quiet().unwrap();
            step.store(4, Ordering::SeqCst);
        }
        ctx.barrier_all().unwrap();
        if me == 1 {
            let mut v = [0u64; RING_WORDS];
            for i in 0..n {
                ctx.read_local(&sym, i * RING_WORDS, &mut v).unwrap();
                assert_eq!(v, [i as u64 + 1; RING_WORDS], "slot {i}");
            }
        }
        ctx.barrier_all().unwrap();
        close(&mut ctx, &step);
    });
}
