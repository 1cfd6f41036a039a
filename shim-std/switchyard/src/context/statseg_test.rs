//! The stats segment seen from a running pair: every context of a PE
//! counts (each in its own slot, summed by the reader).

use std::{
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    thread,
    time::Instant,
};

use switchyard_core::route::PolicyConfig;
use switchyard_socket::TcpConfig;

use super::{
    Context, TCP,
    progress::{self, MAX_TICK, ThreadMode},
    shm_pair_test::run_pair,
    tcp_pair_test, trace_failover_test,
};
use crate::statseg::{PeerWord, Reader, Snapshot};

/// Puts per thread.
const PUTS: u64 = 500;

/// `ctx`'s segment, read now.
fn snapshot(ctx: &Context) -> Snapshot {
    let path = ctx.stats_segment().expect("a stats segment");
    Reader::open(path).expect("readable").snapshot()
}

/// The (peer, shm) counter `word` of `s`.
fn shm_to(s: &Snapshot, peer: u32, word: PeerWord) -> u64 {
    s.peers
        .iter()
        .filter(|p| p.peer == peer && p.transport == "shm")
        .map(|p| p.counters[word.name()])
        .sum()
}

/// Two threads, each on a context of its own, put to the other PE: the
/// segment shows both threads' puts, while they run (the contexts alive)
/// and after their contexts are gone.
#[test]
fn every_context_counts_in_the_segment() {
    run_pair(tcp_pair_test::job(0x5E6), |mut ctx| {
        let other = 1 - ctx.my_pe();
        let data = ctx.alloc::<u64>(2).unwrap();
        ctx.barrier_all().unwrap();
        let before = snapshot(&ctx);
        let pe = ctx.pe();
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let go_rx = std::sync::Mutex::new(go_rx);
        thread::scope(|s| {
            for t in 0..2 {
                let (pe, tx, go) = (pe.clone(), tx.clone(), &go_rx);
                s.spawn(move || {
                    let mut c = pe.context().expect("a context per thread");
                    for i in 0..PUTS {
                        c.put(&data, t, &[i], other).unwrap();
                    }
                    tx.send(()).unwrap();
                    // Alive until the first context has looked.
                    go.lock().unwrap().recv().unwrap();
                });
            }
            rx.recv().unwrap();
            rx.recv().unwrap();
            let live = snapshot(&ctx);
            assert!(live.contexts >= 3, "{} slots", live.contexts);
            for w in [PeerWord::Ops, PeerWord::Bytes] {
                let got = shm_to(&live, other, w) - shm_to(&before, other, w);
                let want = if w == PeerWord::Ops {
                    2 * PUTS
                } else {
                    16 * PUTS
                };
                assert_eq!(got, want, "{} while the contexts live", w.name());
            }
            go_tx.send(()).unwrap();
            go_tx.send(()).unwrap();
        });
        let after = snapshot(&ctx);
        assert_eq!(
            shm_to(&after, other, PeerWord::Ops) - shm_to(&before, other, PeerWord::Ops),
            2 * PUTS
        );
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

/// The TCP transport's state bit toward `peer`, and the socket driver's
/// frames received, in `s`.
fn tcp_view(s: &Snapshot, peer: u32) -> (bool, u64) {
    let healthy = s
        .peers
        .iter()
        .any(|p| p.peer == peer && p.transport == "tcp0" && p.healthy);
    let received = s
        .wide
        .iter()
        .find(|w| w.transport == "tcp0")
        .map_or(0, |w| w.counters["frames_received"]);
    (healthy, received)
}

/// Reads the segment at `path` until `done` holds (bounded by the pair's wait).
fn until(path: &std::path::Path, what: &str, done: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let r = Reader::open(path).expect("readable");
    let start = Instant::now();
    loop {
        let s = r.snapshot();
        if done(&s) {
            return s;
        }
        assert!(start.elapsed() < tcp_pair_test::WAIT, "{what}: {s:?}");
        thread::yield_now();
    }
}

/// While PE 0 calls nothing, its progress thread publishes: the frames PE 1
/// sent it and a health bit another thread cleared show in its segment.
#[test]
fn the_progress_thread_publishes_while_the_pe_is_idle() {
    let pair = tcp_pair_test::Pair {
        job: tcp_pair_test::job(0x5E7),
        routed: false,
        policy: PolicyConfig::default(),
        tcp: TcpConfig {
            listen: vec!["127.0.0.1".parse().unwrap()],
            ..TcpConfig::default()
        },
    };
    let step = Arc::new(AtomicU32::new(0));
    pair.run(move |mut ctx| {
        let me = ctx.my_pe();
        let data = ctx.alloc::<u64>(64).unwrap();
        if me == 0 {
            let clock = ctx.clock;
            ctx.sx_to_progress_thread();
            ctx.tcp
                .as_mut()
                .expect("a TCP driver")
                .start(ThreadMode::Adaptive { tick: MAX_TICK }, clock, None, me)
                .unwrap();
        }
        ctx.barrier_all().unwrap();
        if me == 1 {
            // PE 0 has its first snapshot before the puts.
            tcp_pair_test::wait_for(&mut ctx, &step, 1, true);
            for i in 0..64 {
                ctx.put(&data, i, &[i as u64], 0).unwrap();
            }
            ctx.quiet().unwrap();
            step.store(2, Ordering::SeqCst);
            tcp_pair_test::wait_for(&mut ctx, &step, 3, true);
        } else {
            // From here on PE 0 calls nothing until step 3. The thread's
            // first publish shows the link up (a started thread publishes
            // within its first tick, later on a loaded machine).
            let path = ctx.stats_segment().expect("a segment").to_path_buf();
            let before = until(&path, "the first publish", |s| tcp_view(s, 1).0);
            let received = tcp_view(&before, 1).1;
            step.store(1, Ordering::SeqCst);
            tcp_pair_test::wait_for(&mut ctx, &step, 2, false);
            until(&path, "frames received", |s| {
                tcp_view(s, 1).1 >= received + 64 && s.header.publishes > before.header.publishes
            });
            // Another thread of the PE clears the health bit (as a context
            // seeing the link fail would): the thread publishes it.
            let topo = ctx.topo;
            topo.set_health(TCP, 1, false);
            until(&path, "the health bit", |s| !tcp_view(s, 1).0);
            topo.set_health(TCP, 1, true);
            until(&path, "the health bit back", |s| tcp_view(s, 1).0);
            step.store(3, Ordering::SeqCst);
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

/// A rail cut under unacknowledged puts: the socket driver replays them on
/// the other rail, and PE 0's segment shows the replays under (PE 1, the
/// rail that sent them again), as the driver counted them.
#[test]
fn a_cuts_replays_show_under_the_peer_and_rail() {
    let pair = trace_failover_test::two_rails(0x5E8);
    let step = Arc::new(AtomicU32::new(0));
    pair.run(move |mut ctx| {
        let data = ctx.alloc::<u64>(PUTS as usize).unwrap();
        ctx.barrier_all().unwrap();
        let other = 1 - ctx.my_pe();
        if ctx.my_pe() == 1 {
            // No progress: PE 0's puts stay unacknowledged until the cut.
            tcp_pair_test::wait_for(&mut ctx, &step, 1, false);
            trace_failover_test::rail_0_back(&mut ctx, other);
        } else {
            for i in 0..PUTS {
                ctx.put(&data, i as usize, &[i], 1).unwrap();
            }
            let driver = |ctx: &mut Context| {
                let c = ctx
                    .tcp
                    .as_mut()
                    .map(progress::Tcp::get)
                    .expect("a TCP driver")
                    .peer_stats(1);
                ctx.leave();
                c
            };
            ctx.tcp
                .as_mut()
                .map(progress::Tcp::get)
                .expect("a TCP driver")
                .debug_cut(1, 0);
            ctx.leave();
            let start = Instant::now();
            let counted = loop {
                let c = driver(&mut ctx);
                if c.iter().any(|r| r.replayed > 0) {
                    break c;
                }
                assert!(start.elapsed() < tcp_pair_test::WAIT, "no replay: {c:?}");
                ctx.poll_once();
                thread::yield_now();
            };
            // Published (as `shmemx_stats_print` does), then read.
            ctx.call().sx_publish();
            let s = snapshot(&ctx);
            let replays = |peer: u32, t: &str| {
                s.peers
                    .iter()
                    .find(|p| p.peer == peer && p.transport == t)
                    .map_or(0, |p| p.counters["replays"])
            };
            for (r, c) in counted.iter().enumerate().take(2) {
                assert_eq!(replays(1, &format!("tcp{r}")), c.replayed, "{s:?}");
            }
            assert!(replays(1, "tcp1") > 0, "replayed on rail 1: {s:?}");
            assert_eq!(replays(0, "tcp0") + replays(0, "tcp1"), 0, "this PE");
            let wide = s.wide.iter().find(|w| w.transport == "tcp0").unwrap();
            assert_eq!(s.total_of("replays"), wide.counters["replays"]);
            step.store(1, Ordering::SeqCst);
            trace_failover_test::rail_0_back(&mut ctx, other);
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

/// Every counter of [`Stats`](super::Stats) the PE block mirrors reads back
/// from the segment under its field's name, with its own value: a word
/// left out, misplaced or named after another field fails. PE-wide ones
/// come only from the PE's first context.
#[test]
fn the_pe_block_mirrors_every_stats_counter_by_name() {
    use super::{Stats, statseg::pe_words};
    use crate::statseg::{PE_COUNTERS, PeWord, StatsSegment};
    // A distinct value per field (no `..`: a new field must be listed).
    let st = Stats {
        progress_thread: true,
        progress_bursts: 1,
        ops: [2; 8],
        reroutes: 3,
        barriers: 4,
        link_transitions: 5,
        links_lost: 6,
        link_records_sent: 7,
        link_records_applied: 8,
        dead_peers: 9,
        downgrades: [10, 11, 12, 13, 14],
        verbs_failovers: 15,
        verbs_replays: 16,
        verbs_set_ops: 17,
        verbs_sets_refused: 18,
        cpu_atomics: 19,
        ordering_waits: 20,
        load_transitions: 21,
        load_yields: 22,
        tcp_refused: [23; switchyard_socket::RefuseReason::ALL.len()],
    };
    // (name, value, PE-wide).
    let want = [
        ("progress_bursts", st.progress_bursts, true),
        ("reroutes", st.reroutes, false),
        ("barriers", st.barriers, false),
        ("link_transitions", st.link_transitions, false),
        ("links_lost", st.links_lost, false),
        ("link_records_sent", st.link_records_sent, false),
        ("link_records_applied", st.link_records_applied, false),
        ("dead_peers", st.dead_peers, false),
        ("downgrades", st.downgrades.iter().sum(), false),
        ("verbs_failovers", st.verbs_failovers, true),
        ("verbs_replays", st.verbs_replays, true),
        ("verbs_set_ops", st.verbs_set_ops, false),
        ("verbs_sets_refused", st.verbs_sets_refused, false),
        ("cpu_atomics", st.cpu_atomics, false),
        ("ordering_waits", st.ordering_waits, false),
        ("load_transitions", st.load_transitions, false),
        ("load_yields", st.load_yields, false),
    ];
    assert_eq!(want.len(), PE_COUNTERS, "a PE word without a field here");
    let id = tcp_pair_test::job(0x5E9);
    let seg = StatsSegment::create(id, 0, 2).expect("a segment");
    let (first, other) = (seg.slot().expect("a slot"), seg.slot().expect("a slot"));
    first.set_pe(&pe_words(&st, true));
    let path = seg.path().to_path_buf();
    let one = Reader::open(&path).expect("readable").snapshot();
    other.set_pe(&pe_words(&st, false));
    let both = Reader::open(&path).expect("readable").snapshot();
    for (name, v, pe_wide) in want {
        let w = PeWord::ALL
            .iter()
            .find(|w| w.name() == name)
            .unwrap_or_else(|| panic!("no PE word {name}"));
        assert_eq!(pe_words(&st, true)[*w as usize - 1], v, "{name}");
        assert_eq!(one.pe[name], v, "{name} from the first context");
        let twice = if pe_wide { v } else { 2 * v };
        assert_eq!(both.pe[name], twice, "{name} summed over two contexts");
    }
    drop((first, other));
}
