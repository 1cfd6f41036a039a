//! Connect-on-first-use at the context level (`first_use.rs`): two PEs in
//! two threads, each on a node of its own, built lazily (no peer's TCP
//! address at init; the other's addresses stand in for the root's card,
//! preloaded). The higher rank talks first, so it connects; the lower one
//! answers over that connection without a card; under a `dedicated`
//! progress thread, the first small puts go through the submission ring,
//! are refused for the unknown peer and redone by the context, which
//! connects; two contexts of one PE needing the same peer at once connect
//! it once. Every wait is bounded.

use std::{
    net::SocketAddr,
    sync::mpsc::{Receiver, Sender, channel},
};

use switchyard_core::{class::NO_SWITCH, route::PolicyConfig, topology::LinkState};
use switchyard_socket::{SocketDriver, TcpConfig};

use super::{
    Cmp, Context, PeerInfo, Sym,
    pes_test::{PeScript, exit_barrier, run_pes},
    progress::ThreadMode,
    tcp_pair_test::{WAIT, job, setup},
};

/// PE `me`'s lazy context of a 2-PE job: its own addresses go out on `tx`,
/// the other's come on `rx` and are preloaded as its fetched card.
fn lazy_context(
    job: u64,
    me: u32,
    tx: &Sender<Vec<SocketAddr>>,
    rx: &Receiver<Vec<SocketAddr>>,
) -> Context {
    let setup = setup(job, me, PolicyConfig::default());
    let seg = Context::create_segment(&setup).expect("segment");
    let (heap, len) = (seg.mapped().heap_ptr(), seg.mapped().heap_len());
    let tcfg = TcpConfig {
        job_id: job,
        key: switchyard_socket::JobKey(*b"lazy-pair-of-PEs-lazy-pair-of-PE"),
        me,
        n_pes: 2,
        detection_window: std::time::Duration::from_secs(2),
        ..TcpConfig::default()
    };
    #[allow(unsafe_code)]
    // SAFETY: the segment's heap mapping, valid for `len` bytes; the
    // segment moves into the context with the driver and outlives it.
    let tcp = unsafe { SocketDriver::new(tcfg, heap, len) }.expect("tcp driver");
    tx.send(tcp.local_addrs().to_vec()).unwrap();
    let other = rx.recv_timeout(WAIT).expect("the other PE's addresses");
    let info = |pe: u32, tcp: Vec<SocketAddr>| PeerInfo {
        node: 2000 + u64::from(pe),
        switch: 5,
        tree: NO_SWITCH,
        shm: None,
        tcp,
    };
    let mine = tcp.local_addrs().to_vec();
    // The other PE is known by its locality alone.
    let peers = if me == 0 {
        [info(0, mine), info(1, Vec::new())]
    } else {
        [info(0, Vec::new()), info(1, mine)]
    };
    let ctx = Context::from_parts_with(setup, seg, &peers, Some(tcp), true).expect("context");
    ctx.pe
        .lazy
        .as_ref()
        .expect("lazy cards")
        .preload(1 - me, other);
    ctx
}

/// Runs `script` as PE 0 and PE 1 of a lazy pair; their `finalize`s meet
/// in an exit barrier.
fn run_lazy(tag: u64, script: impl Fn(Context) + Send + Clone + 'static) {
    let job = job(tag);
    let (tx0, rx1) = channel();
    let (tx1, rx0) = channel();
    let leave = exit_barrier(2);
    let pe = |me: u32, tx: Sender<_>, rx: Receiver<_>| -> PeScript {
        let (script, leave) = (script.clone(), leave.clone());
        Box::new(move || {
            let mut ctx = lazy_context(job, me, &tx, &rx);
            leave(&mut ctx);
            script(ctx);
        })
    };
    run_pes(vec![pe(0, tx0, rx0), pe(1, tx1, rx1)]);
}

/// Two words near the heap's end (not `alloc`: its barrier would talk
/// first).
fn words(ctx: &Context) -> Sym<u64> {
    let (_, len) = ctx.local_heap();
    ctx.sym_at::<u64>(len - 64, 2).unwrap()
}

#[test]
fn the_higher_rank_connects_at_its_first_put_and_the_lower_answers_without_a_card() {
    run_lazy(0xF1, |mut ctx| {
        let me = ctx.my_pe();
        let w = words(&ctx);
        // Nothing is connected yet, and routes pick TCP all the same.
        assert_eq!(ctx.tcp_peer_count(), 0);
        let route = ctx
            .route(1 - me, 8, switchyard_core::route::Op::Put)
            .unwrap();
        assert!(super::rail_of(route.transport).is_some(), "{route:?}");
        if me == 1 {
            ctx.put(&w, 0, &[0xAB], 0).unwrap();
            ctx.quiet().unwrap();
            assert_eq!(
                ctx.wait_until_for(&w, 1, Cmp::Eq, 0xCD, WAIT).unwrap(),
                0xCD
            );
            let st = ctx.tcp_stats().unwrap();
            assert_eq!(st.first_use_connects, 1, "{st:?}");
            assert_eq!(ctx.lazy_cards_fetched(), Some(0), "preloaded, not fetched");
        } else {
            assert_eq!(
                ctx.wait_until_for(&w, 0, Cmp::Eq, 0xAB, WAIT).unwrap(),
                0xAB
            );
            // PE 1 connected: PE 0 answers over that connection.
            ctx.put(&w, 1, &[0xCD], 1).unwrap();
            ctx.quiet().unwrap();
            let st = ctx.tcp_stats().unwrap();
            assert_eq!(st.first_use_connects, 0, "{st:?}");
            assert_eq!(st.refused, 0, "{st:?}");
        }
        assert_eq!(ctx.tcp_peer_count(), 1);
        assert_eq!(
            ctx.tcp.as_mut().unwrap().get().peer_state(1 - me),
            LinkState::Up
        );
        ctx.leave();
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

#[test]
fn under_a_dedicated_thread_the_first_ring_puts_connect_and_arrive() {
    const N: u64 = 64;
    run_lazy(0xF2, |mut ctx| {
        let me = ctx.my_pe();
        let (_, len) = ctx.local_heap();
        let data = ctx.sym_at::<u64>(len - 4096, N as usize).unwrap();
        if me == 0 {
            // PE 0 only: one spinning thread on a 2-core machine.
            let clock = ctx.clock;
            ctx.tcp
                .as_mut()
                .unwrap()
                .start(ThreadMode::Dedicated, clock, None, me)
                .unwrap();
            for i in 0..N {
                ctx.put(&data, i as usize, &[i + 1], 1).unwrap();
            }
            ctx.quiet().unwrap();
            assert!(
                ctx.tcp.as_ref().unwrap().has_ring(),
                "the puts went through the ring"
            );
            let st = ctx.tcp_stats().unwrap();
            assert_eq!(st.first_use_connects, 1, "{st:?}");
        } else {
            assert_eq!(
                ctx.wait_until_for(&data, N as usize - 1, Cmp::Eq, N, WAIT)
                    .unwrap(),
                N
            );
            for i in 0..N {
                let mut v = [0u64];
                ctx.get(&data, i as usize, &mut v, 1).unwrap();
                assert_eq!(v[0], i + 1, "slot {i}");
            }
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

#[test]
fn two_contexts_needing_the_same_peer_at_once_connect_it_once() {
    const THREADS: usize = 2;
    run_lazy(0xF3, |mut ctx| {
        let me = ctx.my_pe();
        let (_, len) = ctx.local_heap();
        let data = ctx.sym_at::<u64>(len - 128, THREADS + 1).unwrap();
        if me == 0 {
            let pe = ctx.pe();
            let start = std::sync::Barrier::new(THREADS);
            std::thread::scope(|s| {
                for t in 0..THREADS {
                    let (pe, start) = (pe.clone(), &start);
                    s.spawn(move || {
                        let mut c = pe.context().expect("a context per thread");
                        start.wait();
                        c.put(&data, t, &[t as u64 + 1], 1).unwrap();
                        c.quiet().unwrap();
                        c.add(&data, THREADS, 1, 1).unwrap();
                        c.quiet().unwrap();
                    });
                }
            });
            let st = ctx.tcp_stats().unwrap();
            assert_eq!(st.first_use_connects, 1, "{st:?}");
            assert_eq!(ctx.tcp_peer_count(), 1);
        } else {
            let n = THREADS as u64;
            assert_eq!(
                ctx.wait_until_for(&data, THREADS, Cmp::Eq, n, WAIT)
                    .unwrap(),
                n
            );
            let mut got = [0u64; THREADS];
            ctx.read_local(&data, 0, &mut got).unwrap();
            for (t, v) in got.iter().enumerate() {
                assert_eq!(*v, t as u64 + 1, "thread {t}");
            }
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}
