//! Off-node peers located at their first use (`first_use.rs`): two PEs in
//! two threads, each on a node of its own, join a real rendezvous root
//! asking only for their node's localities (bootstrap protocol 5), so each
//! starts with the other unreachable. The first operation toward the
//! other fetches its card, puts its class in the topology and connects;
//! the peer that was connected to fetches the card at its own first put
//! (for the locality), connects nothing, and nothing of the provisional
//! failure is traced. A peer whose card says it has no switch stays
//! unreachable, and its card is fetched once. A context idle with a
//! sticky pin does not hold up another's locating of several peers (the
//! class goes in place, no new version). Every wait is bounded.

use std::{
    sync::mpsc::{Sender, channel},
    thread,
};

use switchyard_bootstrap::{Bootstrap, Card, JobSecret, RootServer};
use switchyard_core::{
    class::{NO_SWITCH, PathClass},
    route::PolicyConfig,
    trace::TraceRecord,
};
use switchyard_socket::{SocketDriver, TcpConfig};

use super::{
    Cmp, Context, Error, PeerInfo, Sym,
    pes_test::{PeScript, run_pes},
    tcp_pair_test::{WAIT, job, setup},
};

/// PE `me`'s context of an `n`-PE lazy job on node `2000 + me`, behind
/// `switch` (its card's, and what it thinks of its own), joined at the
/// root at `root` with the node flag: the other PEs are unknown but for
/// their ranks.
fn located_context(
    job: u64,
    (me, n): (u32, u32),
    switch: u32,
    root: std::net::SocketAddr,
    secret: &JobSecret,
) -> Context {
    let setup = super::Setup {
        n_pes: n,
        ..setup(job, me, PolicyConfig::default())
    };
    let seg = Context::create_segment(&setup).expect("segment");
    let (heap, len) = (seg.mapped().heap_ptr(), seg.mapped().heap_len());
    let tcfg = TcpConfig {
        job_id: job,
        key: switchyard_socket::JobKey(*b"located-pair-of-PEs-located-pair"),
        me,
        n_pes: n,
        detection_window: std::time::Duration::from_secs(2),
        ..TcpConfig::default()
    };
    #[allow(unsafe_code)]
    // SAFETY: the segment's heap mapping, valid for `len` bytes; the
    // segment moves into the context with the driver and outlives it.
    let tcp = unsafe { SocketDriver::new(tcfg, heap, len) }.expect("tcp driver");
    let node = 2000 + u64::from(me);
    let mut card = Card::new(job, me, node);
    card.switch_id = switch;
    card.tcp = tcp.local_addrs().to_vec();
    let (boot, locs) =
        Bootstrap::join_lazy_node(root, me, n, job, card.clone(), WAIT, secret).expect("join");
    // Only this node's locality came.
    assert!((0..n).all(|r| (r == me) == locs.get(r).is_some()));
    assert!(!locs.is_complete());
    let mine = PeerInfo {
        node,
        switch,
        tree: NO_SWITCH,
        shm: None,
        tcp: card.tcp.clone(),
    };
    let other = PeerInfo {
        node: !node,
        switch: NO_SWITCH,
        tree: NO_SWITCH,
        shm: None,
        tcp: Vec::new(),
    };
    let peers: Vec<PeerInfo> = (0..n)
        .map(|r| if r == me { mine.clone() } else { other.clone() })
        .collect();
    let mut ctx = Context::from_parts_with(setup, seg, &peers, Some(tcp), true).expect("context");
    ctx.pe
        .lazy
        .as_ref()
        .expect("lazy cards")
        .locate_on_first_use(me, (node, switch, NO_SWITCH), locs);
    ctx.attach_bootstrap(boot, None);
    ctx
}

/// Runs `script` as PEs 0 to `n - 1` of a located job behind `switch`
/// against a root of its own; the root's result.
fn run_located(
    tag: u64,
    n: u32,
    switch: u32,
    script: impl Fn(Context) + Send + Clone + 'static,
) -> Result<(), switchyard_bootstrap::BootstrapError> {
    let job = job(tag);
    let secret = JobSecret::generate().expect("secret");
    let root =
        RootServer::bind("127.0.0.1:0".parse().unwrap(), job, n, WAIT, &secret).expect("root");
    let addr = root.local_addr();
    let served = root.spawn().expect("root thread");
    let pe = |me: u32| -> PeScript {
        let (script, secret) = (script.clone(), secret.clone());
        Box::new(move || script(located_context(job, (me, n), switch, addr, &secret)))
    };
    run_pes((0..n).map(pe).collect());
    served.join().expect("the root's thread")
}

/// Two words near the heap's end (not `alloc`: its barrier would talk
/// first).
fn words(ctx: &Context) -> Sym<u64> {
    let (_, len) = ctx.local_heap();
    ctx.sym_at::<u64>(len - 64, 2).unwrap()
}

/// Error records toward `pe` in `ctx`'s trace ring that say it is
/// unreachable (not those of the wait for the first link, which has the
/// peer's class).
fn unreachable_to(ctx: &Context, pe: u32) -> usize {
    let mut recs = vec![TraceRecord::default(); 4096];
    let k = ctx.trace().snapshot(&mut recs);
    recs[..k]
        .iter()
        .filter(|r| {
            r.dst == pe
                && r.flags & TraceRecord::ERROR != 0
                && r.class == PathClass::Unreachable.to_wire()
        })
        .count()
}

#[test]
fn an_off_node_peer_is_located_and_connected_at_its_first_use() {
    let (tx, rx) = channel::<()>();
    let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
    let script = move |mut ctx: Context| {
        let me = ctx.my_pe();
        let w = words(&ctx);
        // Unreachable until its first use: no locality, no class.
        assert_eq!(ctx.class(1 - me), Some(PathClass::Unreachable));
        assert_eq!(ctx.lazy_cards_fetched(), Some(0));
        if me == 1 {
            ctx.put(&w, 0, &[0xAB], 0).unwrap();
            ctx.quiet().unwrap();
            assert_eq!(
                ctx.wait_until_for(&w, 1, Cmp::Eq, 0xCD, WAIT).unwrap(),
                0xCD
            );
            let st = ctx.tcp_stats().unwrap();
            assert_eq!(st.first_use_connects, 1, "{st:?}");
            let _ = tx.send(());
        } else {
            assert_eq!(
                ctx.wait_until_for(&w, 0, Cmp::Eq, 0xAB, WAIT).unwrap(),
                0xAB
            );
            // PE 1 connected; PE 0 still fetches its card for the class,
            // and answers over PE 1's connection.
            assert_eq!(ctx.class(1), Some(PathClass::Unreachable));
            ctx.put(&w, 1, &[0xCD], 1).unwrap();
            ctx.quiet().unwrap();
            let st = ctx.tcp_stats().unwrap();
            assert_eq!(st.first_use_connects, 0, "{st:?}");
            rx.lock()
                .unwrap()
                .recv_timeout(WAIT)
                .expect("PE 1 got the answer");
        }
        // Both sides: one card fetched, the class from it, and the
        // provisional failure not traced.
        assert_eq!(ctx.lazy_cards_fetched(), Some(1));
        assert_eq!(ctx.class(1 - me), Some(PathClass::Near));
        assert_eq!(unreachable_to(&ctx, 1 - me), 0);
        ctx.leave();
        ctx.finalize().unwrap();
    };
    run_located(0x10C, 2, 5, script).expect("the root");
}

#[test]
fn a_peer_whose_card_has_no_switch_stays_unreachable_and_is_fetched_once() {
    let (done_tx, done_rx) = channel::<()>();
    let done: Sender<()> = done_tx;
    let done_rx = std::sync::Arc::new(std::sync::Mutex::new(done_rx));
    let script = move |mut ctx: Context| {
        let me = ctx.my_pe();
        let w = words(&ctx);
        if me == 1 {
            for _ in 0..2 {
                match ctx.put(&w, 0, &[1], 0) {
                    Err(Error::Route(switchyard_core::route::SelectError::Unreachable {
                        dst: 0,
                        class: PathClass::Unreachable,
                        ..
                    })) => {}
                    other => panic!("{other:?}"),
                }
            }
            assert_eq!(ctx.lazy_cards_fetched(), Some(1));
            assert_eq!(ctx.class(0), Some(PathClass::Unreachable));
            // The failures are traced, now that they are failures.
            assert_eq!(unreachable_to(&ctx, 0), 2);
            let _ = done.send(());
        } else {
            done_rx
                .lock()
                .unwrap()
                .recv_timeout(WAIT)
                .expect("PE 1 done");
        }
        // No data path between them: the bootstrap's barrier and goodbye
        // end the job.
        let lazy = ctx.pe.lazy.as_ref().expect("lazy cards");
        let mut boot = lazy.take_boot().expect("the bootstrap");
        boot.barrier(WAIT).unwrap();
        boot.finish().unwrap();
        drop(ctx);
    };
    run_located(0x10D, 2, NO_SWITCH, script).expect("the root");
    thread::yield_now();
}

#[test]
fn a_context_idle_with_a_pin_does_not_hold_up_locating_peers() {
    // PE 0's second context locates PE 1 and stays pinned; PE 0's first
    // then locates PEs 2 and 3 (a new version for each would need the
    // slot the idle one holds).
    let script = |mut ctx: Context| {
        let me = ctx.my_pe();
        let w = words(&ctx);
        if me == 0 {
            let mut idle = ctx.pe().context().expect("a second context");
            idle.put(&w, 0, &[0xA1], 1).unwrap();
            idle.quiet().unwrap();
            assert_eq!(idle.class(1), Some(PathClass::Near));
            for pe in [2, 3] {
                ctx.put(&w, 0, &[0xA0 | u64::from(pe)], pe).unwrap();
                ctx.quiet().unwrap();
                assert_eq!(ctx.class(pe), Some(PathClass::Near));
            }
            assert_eq!(ctx.lazy_cards_fetched(), Some(3));
            assert_eq!(idle.class(3), Some(PathClass::Near));
            drop(idle);
        } else {
            let want = if me == 1 { 0xA1 } else { 0xA0 | u64::from(me) };
            assert_eq!(
                ctx.wait_until_for(&w, 0, Cmp::Eq, want, WAIT).unwrap(),
                want
            );
        }
        ctx.leave();
        ctx.finalize().unwrap();
    };
    run_located(0x10E, 4, 5, script).expect("the root");
}
