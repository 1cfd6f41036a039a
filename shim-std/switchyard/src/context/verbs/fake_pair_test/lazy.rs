//! Lazy cards with verbs, end to end on the fake HCA: a job of three PEs
//! on three nodes under one switch (NEAR), of which two run (PE 2 exists
//! only as its locality, never used). At init no PE holds an off-node
//! card and the lazy verbs drivers have no QPs; the first put toward a
//! peer connects TCP (its card as the root would serve it, preloaded) and
//! pairs verbs with it through the control records (the responder gets
//! the initiator's card in them: it holds no card of it), after which puts
//! go over verbs. Also: both PEs first-using each other at once, the
//! budget of lazy peers spent, and a link failure after a lazy pairing.

use std::{
    net::SocketAddr,
    sync::mpsc::{Receiver, Sender, channel},
};

use super::*;
use crate::context::first_use::LazyCards;

/// The lazy peers' budget of these tests' drivers: every other PE of the
/// job (a budget is at most that).
const K: u32 = 2;

fn lazy_cfg(k: u32) -> VerbsConfig {
    VerbsConfig {
        lazy_peers: Some(k),
        staging_bytes: 1 << 20,
        ..VerbsConfig::default()
    }
}

type Chan = (
    Sender<(Vec<SocketAddr>, Option<Vec<u8>>)>,
    Receiver<(Vec<SocketAddr>, Option<Vec<u8>>)>,
);

/// PE `me` (0 or 1) of the 3-PE job; `preload`: whether its first use of
/// the other PE finds that PE's card (addresses and verbs PE card), as the
/// root would serve it.
fn lazy_context(
    job: u64,
    me: u32,
    fabric: &Fabric,
    (tx, rx): &Chan,
    vcfg: VerbsConfig,
    preload: bool,
) -> Context {
    let policy = PolicyConfig {
        downgrade: [Downgrade::AllowAndCount; 5],
        ..PolicyConfig::default()
    };
    let setup = Setup {
        n_pes: 3,
        ..tcp_pair_test::setup(job, me, policy)
    };
    let seg = Context::create_segment(&setup).expect("segment");
    let (heap, len) = (seg.mapped().heap_ptr(), seg.mapped().heap_len());
    let tcfg = TcpConfig {
        job_id: job,
        key: switchyard_socket::JobKey(*b"verbs-lazy-cards-verbs-lazy-card"),
        me,
        n_pes: 3,
        listen: vec!["127.0.0.1".parse().expect("ip")],
        detection_window: Duration::from_secs(10),
        give_up: Duration::from_secs(20),
        ..TcpConfig::default()
    };
    #[allow(unsafe_code)]
    // SAFETY: the segment's heap mapping, valid for `len` bytes; the
    // segment moves into the context with the driver and outlives it.
    let tcp = unsafe { SocketDriver::new(tcfg, heap, len) }.expect("tcp driver");
    let mine = tcp.local_addrs().to_vec();
    let info = |pe: u32, tcp: Vec<SocketAddr>| PeerInfo {
        node: 3000 + u64::from(pe),
        switch: 5,
        tree: NO_SWITCH,
        shm: None,
        tcp,
    };
    // The others are known by their locality alone.
    let peers: Vec<PeerInfo> = (0..3)
        .map(|pe| info(pe, if pe == me { mine.clone() } else { Vec::new() }))
        .collect();
    let mut ctx = Context::from_parts_with(setup, seg, &peers, Some(tcp), true).expect("context");
    assert_eq!(ctx.class(1 - me), Some(PathClass::Near));
    assert_eq!(ctx.class(2), Some(PathClass::Near));
    let (h, l) = ctx.shm.local_heap();
    #[allow(unsafe_code)]
    // SAFETY: the context's own heap; the driver is dropped with the
    // context, before its segment.
    let drv = unsafe { VerbsDriver::new_fake(vcfg, me, 3, job, h, l, fabric) }
        .expect("fake verbs driver");
    let own = pe_card_bytes(Some(&drv));
    tx.send((mine, own.clone())).unwrap();
    let (other, card) = rx.recv_timeout(WAIT).expect("the other PE's card");
    if preload {
        lazy_of(&ctx).preload_verbs(1 - me, other, card);
    }
    let mut cards = vec![None, None, None];
    cards[me as usize] = own;
    ctx.attach_verbs(drv, job, &cards);
    assert_eq!(ctx.verbs_connect(WAIT), 0, "no verbs peer at init");
    ctx
}

fn lazy_of(ctx: &Context) -> &LazyCards {
    ctx.pe.lazy.as_ref().expect("lazy cards")
}

/// Runs `script(ctx, fabric, done, step)` as PE 0 and PE 1, each set up
/// with its driver settings and whether it has the other's card.
fn run_lazy_pair(tag: u64, pes: [(VerbsConfig, bool); 2], script: Script) {
    let job = tag << 32 ^ u64::from(std::process::id()) << 8;
    let fabric = Fabric::new();
    let (tx0, rx1) = channel();
    let (tx1, rx0) = channel();
    let done = Arc::new(AtomicU32::new(0));
    let step = Arc::new(AtomicU32::new(0));
    // Both inited before either talks (init's bootstrap barrier).
    let inited = Arc::new(AtomicU32::new(0));
    let kept = Arc::new(Mutex::new(None));
    let [p0, p1] = pes;
    let pe = |me: u32, chan: Chan, (vcfg, preload): (VerbsConfig, bool)| -> PeScript {
        let (done, step, kept, f) = (done.clone(), step.clone(), kept.clone(), fabric.clone());
        let inited = inited.clone();
        Box::new(move || {
            let mut ctx = lazy_context(job, me, &f, &chan, vcfg, preload);
            // After init, before the other PE may talk to this one.
            assert_nothing_held(&mut ctx);
            inited.fetch_add(1, Ordering::SeqCst);
            wait_for_step(&inited, 2);
            let ctx = script(ctx, &f, &done, &step);
            if me == 0 {
                *kept.lock().unwrap() = Some(ctx);
            }
        })
    };
    run_pes(vec![pe(0, (tx0, rx0), p0), pe(1, (tx1, rx1), p1)]);
    drop(kept.lock().unwrap().take());
}

/// Nothing of an off-node peer is held after init: no card, no verbs QPs,
/// no TCP connection.
fn assert_nothing_held(ctx: &mut Context) {
    let me = ctx.my_pe();
    assert_eq!(ctx.tcp_peer_count(), 0);
    let v = ctx.verbs_mut();
    let (added, cap) = v.drv.peer_count();
    assert_eq!(added, 0, "no QPs toward anyone");
    assert!((1..=K).contains(&cap), "{cap}");
    assert!(v.peers.is_empty(), "no per-peer verbs state");
    // Sized for the driver's budget, not the job (O(peers), not O(PEs)).
    assert_eq!(v.losses.inflight.len(), cap as usize);
    ctx.leave();
    assert!(!lazy_of(ctx).holds(2), "PE {me} holds PE 2's card");
    assert_eq!(ctx.verbs_status().peers_up, 0);
}

/// What PE `me` holds after pairing with the other PE only.
fn assert_paired_with_the_other_only(ctx: &mut Context) {
    let me = ctx.my_pe();
    let v = ctx.verbs_mut();
    assert_eq!(v.drv.peer_count(), (1, K));
    assert!(v.drv.has_peer(1 - me) && !v.drv.has_peer(2));
    assert_eq!(v.drv.stats().peers_added, 1, "one pairing");
    assert!(v.peer(1 - me).is_some_and(|p| p.card.is_some() && p.wanted));
    assert!(v.peer(2).is_none());
    assert_eq!(
        v.peers.len(),
        1,
        "per-peer verbs state for the other PE only"
    );
    ctx.leave();
    assert!(!lazy_of(ctx).holds(2));
    assert_eq!(ctx.tcp_peer_count(), 1, "TCP to the other PE only");
}

/// Words near the heap's end (not `alloc`: its barrier needs PE 2).
fn words(ctx: &Context, n: usize) -> Sym<u64> {
    let (_, len) = ctx.local_heap();
    ctx.sym_at::<u64>(len - 8 * n as u64 - 64, n).unwrap()
}

fn first_put_pairs(mut ctx: Context, _: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    let w = words(&ctx, N as usize);
    if me == 0 {
        // The first put: over TCP (connect on first use), and verbs pairs.
        ctx.put(&w, 0, &[7], 1).unwrap();
        ctx.quiet().unwrap();
        assert_eq!(ctx.stats().ops[VERBS.index()], 0, "the first put took TCP");
        wait_up(&mut ctx);
        puts_over_verbs(&mut ctx, &w, 100);
        step.store(1, Ordering::SeqCst);
        assert_eq!(ctx.lazy_cards_fetched(), Some(0), "preloaded");
    } else {
        // The responder: no card of PE 0, paired through its records.
        wait_up(&mut ctx);
        let start = Instant::now();
        while step.load(Ordering::SeqCst) < 1 {
            assert!(start.elapsed() < WAIT, "PE 0's puts");
            ctx.poll_once();
            std::thread::sleep(Duration::from_micros(100));
        }
        expect_words(&mut ctx, &w, 100);
        assert!(!lazy_of(&ctx).holds(0), "served without PE 0's card");
        // They came over verbs: receipts (counted once the receive side
        // is polled, which may lag the data).
        let start = Instant::now();
        while ctx.verbs_mut().drv.stats().receipts < N {
            assert!(start.elapsed() < WAIT, "receipts of PE 0's puts");
            ctx.poll_once();
        }
        ctx.leave();
    }
    assert_paired_with_the_other_only(&mut ctx);
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn with_lazy_cards_verbs_pairs_at_the_first_put_with_that_peer_only() {
    run_lazy_pair(
        0x1a01,
        [(lazy_cfg(K), true), (lazy_cfg(K), false)],
        first_put_pairs,
    );
}

/// As [`first_put_pairs`], PE 0's QPNs reaching PE 1 before its card's
/// pieces (the pieces in reverse order too): PE 1 keeps the QPNs until
/// the card is complete.
fn reordered(mut ctx: Context, f: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    if ctx.my_pe() == 0 {
        ctx.verbs_mut().reorder = true;
        ctx.leave();
    }
    first_put_pairs(ctx, f, done, step)
}

#[test]
fn qpns_before_the_card_pieces_still_pair() {
    run_lazy_pair(
        0x1a05,
        [(lazy_cfg(K), true), (lazy_cfg(K), false)],
        reordered,
    );
}

fn both_at_once(mut ctx: Context, _: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    let w = words(&ctx, 2 * N as usize);
    // Both first-use the other at the same moment.
    step.fetch_add(1, Ordering::SeqCst);
    wait_for_step(step, 2);
    ctx.put(&w, N as usize + me as usize, &[1], 1 - me).unwrap();
    ctx.quiet().unwrap();
    wait_up(&mut ctx);
    // Both directions over verbs, each in its half.
    let half = ctx.sym_at::<u64>(w.offset() + 8 * N * u64::from(me), N as usize);
    let half = half.unwrap();
    puts_over_verbs(&mut ctx, &half, 1000 * (u64::from(me) + 1));
    step.fetch_add(1, Ordering::SeqCst);
    let start = Instant::now();
    while step.load(Ordering::SeqCst) < 4 {
        assert!(start.elapsed() < WAIT, "the other PE's puts");
        ctx.poll_once();
        std::thread::sleep(Duration::from_micros(100));
    }
    // The other PE wrote its half of this PE's words.
    let mine = ctx
        .sym_at::<u64>(w.offset() + 8 * N * u64::from(1 - me), N as usize)
        .unwrap();
    expect_words(&mut ctx, &mine, 1000 * (u64::from(1 - me) + 1));
    assert_paired_with_the_other_only(&mut ctx);
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn both_pes_first_using_each_other_at_once_converge_to_one_pairing() {
    run_lazy_pair(
        0x1a02,
        [(lazy_cfg(K), true), (lazy_cfg(K), true)],
        both_at_once,
    );
}

fn budget_spent(mut ctx: Context, _: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    let w = words(&ctx, N as usize);
    if me == 0 {
        // The one slot went to PE 2 (as if paired with it before).
        ctx.verbs_mut().drv.add_peer(2).unwrap();
        ctx.leave();
        for i in 0..N {
            ctx.put(&w, i as usize, &[100 + i], 1).unwrap();
        }
        ctx.quiet().unwrap();
        for _ in 0..50 {
            ctx.poll_once();
            ctx.quiet().unwrap();
        }
        let s = ctx.stats();
        assert_eq!(s.ops[VERBS.index()], 0, "{s:?}");
        assert!(s.ops[TCP.index()] >= N, "{s:?}");
        assert_eq!(ctx.verbs_status().peers_up, 0);
        assert!(
            ctx.warnings()
                .iter()
                .any(|w| w.contains("verbs to PE 1 not paired")
                    && w.contains("budget")
                    && w.contains("verbs_lazy_peers")),
            "{:?}",
            ctx.warnings()
        );
        let v = ctx.verbs_mut();
        assert_eq!(v.lazy_refused, 1);
        assert_eq!(v.drv.stats().peers_refused, 1);
        assert!(!v.drv.has_peer(1) && v.peer(1).is_none());
        ctx.leave();
        step.store(1, Ordering::SeqCst);
    } else {
        wait_for_step_polling(&mut ctx, step, 1);
        expect_words(&mut ctx, &w, 100);
        let v = ctx.verbs_mut();
        assert_eq!(v.drv.peer_count(), (0, K), "never asked to pair");
        ctx.leave();
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn the_lazy_peer_budget_spent_keeps_the_peer_on_tcp_with_a_warning() {
    run_lazy_pair(
        0x1a03,
        [(lazy_cfg(1), true), (lazy_cfg(K), false)],
        budget_spent,
    );
}

/// PE 0's driver settings from a configuration with `vars` set, as init
/// makes them with lazy cards (`attach::driver_config`), the staging pool
/// made smaller for the test.
fn from_config(vars: &[(&str, &str)]) -> VerbsConfig {
    let cfg = Config::load_from(|k: &str| {
        vars.iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| (*v).to_string())
    })
    .unwrap();
    VerbsConfig {
        staging_bytes: 1 << 20,
        ..crate::context::verbs::attach::driver_config(&cfg, true)
    }
}

#[test]
fn the_lazy_peer_budget_is_the_verbs_lazy_peers_setting() {
    use switchyard_verbs::params::DEFAULT_LAZY_PEERS;
    let default = Config::default();
    let drv = |cfg: &Config, lazy| crate::context::verbs::attach::driver_config(cfg, lazy);
    assert_eq!(drv(&default, true).lazy_peers, Some(DEFAULT_LAZY_PEERS));
    assert_eq!(
        drv(&default, false).lazy_peers,
        None,
        "eager with cards = all"
    );
    assert_eq!(
        from_config(&[("SWITCHYARD_VERBS_LAZY_PEERS", "7")]).lazy_peers,
        Some(7)
    );
    // A budget of 1 from the configuration: the slot goes to PE 2 (as if
    // paired first) and PE 1, the second lazily paired peer, stays on TCP
    // with the warning.
    let one = from_config(&[("SWITCHYARD_VERBS_LAZY_PEERS", "1")]);
    assert_eq!(one.lazy_peers, Some(1));
    run_lazy_pair(0x1a06, [(one, true), (lazy_cfg(K), false)], budget_spent);
}

/// PE 1's budget is spent (its one slot went to PE 2, as if paired
/// first) when PE 0 asks to pair: PE 1 answers [`Record::Refused`], and PE
/// 0 stops waiting: PE 1 is on TCP with the reason, counted, not shown as
/// connecting, not asked again.
fn refused_by_the_responder(
    mut ctx: Context,
    _: &Fabric,
    done: &AtomicU32,
    step: &AtomicU32,
) -> Context {
    let me = ctx.my_pe();
    let w = words(&ctx, N as usize);
    if me == 0 {
        wait_for_step(step, 1);
        for i in 0..N {
            ctx.put(&w, i as usize, &[300 + i], 1).unwrap();
        }
        ctx.quiet().unwrap();
        let start = Instant::now();
        while ctx.verbs_refusal(1).is_none() {
            assert!(start.elapsed() < WAIT, "PE 1's refusal");
            ctx.poll_once();
            std::thread::sleep(Duration::from_micros(100));
        }
        assert_eq!(ctx.verbs_refusal(1), Some(Refusal::Budget));
        assert_eq!(ctx.verbs_refusal(2), None);
        let st = ctx.verbs_status();
        assert_eq!((st.refused_by_peers, st.refused_here), (1, 0), "{st:?}");
        assert_eq!(st.peers_up, 0);
        let why = st.why_not.unwrap_or_default();
        assert!(
            why.contains("PE 1 refused to pair over verbs")
                && why.contains("verbs_lazy_peers")
                && !why.contains("connecting"),
            "{why}"
        );
        assert!(
            ctx.warnings()
                .iter()
                .any(|w| w.contains("verbs to PE 1 refused by that PE")),
            "{:?}",
            ctx.warnings()
        );
        // Not waited for: nothing is wanted, so a connect wait ends
        // without a peer that "did not come up".
        assert_eq!(ctx.verbs_connect(Duration::from_secs(2)), 0);
        assert!(
            !ctx.warnings().iter().any(|w| w.contains("did not come up")),
            "{:?}",
            ctx.warnings()
        );
        // Its slot is kept (QPs unconnected), marked, not asked again.
        let v = ctx.verbs_mut();
        assert!(v.drv.has_peer(1));
        assert!(
            v.peer(1)
                .is_some_and(|p| !p.wanted && p.refused == Some(Refusal::Budget))
        );
        assert_eq!(v.refused_by_peers, 1);
        ctx.leave();
        for i in 0..N {
            ctx.put(&w, i as usize, &[400 + i], 1).unwrap();
        }
        ctx.quiet().unwrap();
        for _ in 0..20 {
            ctx.poll_once();
        }
        let s = ctx.stats();
        assert_eq!(s.ops[VERBS.index()], 0, "{s:?}");
        assert!(s.ops[TCP.index()] >= 2 * N, "{s:?}");
        assert_eq!(ctx.verbs_status().refused_by_peers, 1, "counted once");
        step.store(2, Ordering::SeqCst);
    } else {
        // The one slot goes to PE 2 before PE 0 asks.
        ctx.verbs_mut().drv.add_peer(2).unwrap();
        ctx.leave();
        step.store(1, Ordering::SeqCst);
        wait_for_step_polling(&mut ctx, step, 2);
        expect_words(&mut ctx, &w, 400);
        let st = ctx.verbs_status();
        assert_eq!((st.refused_here, st.refused_by_peers), (1, 0), "{st:?}");
        assert!(
            ctx.warnings()
                .iter()
                .any(|w| w.contains("verbs to PE 0 not paired") && w.contains("verbs_lazy_peers")),
            "{:?}",
            ctx.warnings()
        );
        let v = ctx.verbs_mut();
        assert!(!v.drv.has_peer(0) && v.peer(0).is_none());
        ctx.leave();
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn a_responder_with_its_budget_spent_says_so_and_the_initiator_keeps_it_on_tcp() {
    run_lazy_pair(
        0x1a07,
        [(lazy_cfg(K), true), (lazy_cfg(1), false)],
        refused_by_the_responder,
    );
}

fn wait_for_step_polling(ctx: &mut Context, step: &AtomicU32, want: u32) {
    let start = Instant::now();
    while step.load(Ordering::SeqCst) < want {
        assert!(start.elapsed() < WAIT, "step {want}");
        ctx.poll_once();
        std::thread::sleep(Duration::from_micros(100));
    }
}

fn fails_over_once(
    mut ctx: Context,
    fabric: &Fabric,
    done: &AtomicU32,
    step: &AtomicU32,
) -> Context {
    let me = ctx.my_pe();
    let w = words(&ctx, N as usize);
    if me == 0 {
        ctx.put(&w, 0, &[1], 1).unwrap();
        ctx.quiet().unwrap();
        wait_up(&mut ctx);
        puts_over_verbs(&mut ctx, &w, 100);
        fabric.break_links();
        for i in 0..N {
            ctx.put(&w, i as usize, &[500 + i], 1).unwrap();
        }
        ctx.quiet().unwrap();
        let s = ctx.stats();
        assert_eq!(s.verbs_failovers, 1, "{s:?}");
        // In doubt (posted into the dead link), none landed: each
        // replayed over TCP once (the values below).
        assert!((1..=N).contains(&s.verbs_replays), "{s:?}");
        step.store(1, Ordering::SeqCst);
    } else {
        wait_up(&mut ctx);
        wait_for_step_polling(&mut ctx, step, 1);
        expect_words(&mut ctx, &w, 500);
    }
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn a_link_failure_after_a_lazy_pairing_fails_over_once() {
    run_lazy_pair(
        0x1a04,
        [(lazy_cfg(K), true), (lazy_cfg(K), false)],
        fails_over_once,
    );
}
