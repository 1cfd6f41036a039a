//! Verbs with lazy cards under the own root, end to end on the fake HCA:
//! a job of three PEs on three nodes under one switch (NEAR), joined at a
//! real rendezvous root with the node flag (bootstrap protocol 5), so each
//! PE knows at init only its own locality. Two run (PE 2 joins the root
//! and its barriers, and is never used). At init no PE holds an off-node
//! card, every other PE is `Unreachable` and the lazy verbs drivers have
//! no QPs. The first put toward a peer locates it (one card fetched from
//! the root: its class, its addresses, its verbs PE card), connects TCP and
//! pairs verbs with it; the responder pairs through the control records
//! without fetching the initiator's card (it has not located it: its class
//! is still `Unreachable` there), and fetches it only at its own first put
//! toward the initiator, which then goes over verbs at once. Also: both
//! PEs first-using each other at once. Every wait is bounded.

use std::net::SocketAddr;

use switchyard_bootstrap::{Bootstrap, Card, JobSecret, RootServer};

use super::*;
use crate::context::first_use::LazyCards;

/// The PEs of the job (PE 2 only joins the root).
const PES: u32 = 3;

/// The lazy peers' budget of these tests' drivers: every other PE.
const K: u32 = PES - 1;

/// Every PE's leaf switch (one switch: NEAR to each other).
const SWITCH: u32 = 5;

/// PE `pe`'s node id.
fn node_of(pe: u32) -> u64 {
    4000 + u64::from(pe)
}

/// PE `me`'s bootstrap card: its node, the one switch, and (for a PE that
/// runs) its TCP addresses and verbs PE card.
fn card_of(job: u64, me: u32, tcp: Vec<SocketAddr>, verbs: Option<Vec<u8>>) -> Card {
    let mut card = Card::new(job, me, node_of(me));
    card.switch_id = SWITCH;
    card.tcp = tcp;
    card.verbs = verbs;
    card
}

/// PE `me` (0 or 1), set up as init does with `cards = lazy` and a verbs
/// driver under the own root: a lazy verbs driver (no QPs) whose PE card
/// goes in the bootstrap card, the node's localities only (every other PE
/// unreachable until its first use), checked to hold nothing of another PE
/// before the bootstrap barrier (no other PE can talk to it before), then
/// the barrier (every PE attached before any talks).
fn located_verbs_context(
    job: u64,
    me: u32,
    root: SocketAddr,
    secret: &JobSecret,
    fabric: &Fabric,
) -> Context {
    let policy = PolicyConfig {
        downgrade: [Downgrade::AllowAndCount; 5],
        ..PolicyConfig::default()
    };
    let setup = Setup {
        n_pes: PES,
        ..tcp_pair_test::setup(job, me, policy)
    };
    let seg = Context::create_segment(&setup).expect("segment");
    let (heap, len) = (seg.mapped().heap_ptr(), seg.mapped().heap_len());
    let tcfg = TcpConfig {
        job_id: job,
        key: switchyard_socket::JobKey(*b"verbs-located-PEs-verbs-located!"),
        me,
        n_pes: PES,
        listen: vec!["127.0.0.1".parse().expect("ip")],
        detection_window: Duration::from_secs(10),
        give_up: Duration::from_secs(20),
        ..TcpConfig::default()
    };
    #[allow(unsafe_code)]
    // SAFETY: the segment's heap mapping, valid for `len` bytes; the
    // segment moves into the context with the driver and outlives it.
    let tcp = unsafe { SocketDriver::new(tcfg, heap, len) }.expect("tcp driver");
    let vcfg = VerbsConfig {
        lazy_peers: Some(K),
        staging_bytes: 1 << 20,
        ..VerbsConfig::default()
    };
    #[allow(unsafe_code)]
    // SAFETY: the segment's heap mapping, valid for `len` bytes (the
    // mapping does not move with the segment); the driver moves into the
    // context, which drops it before the segment.
    let drv = unsafe { VerbsDriver::new_fake(vcfg, me, PES, job, heap, len, fabric) }
        .expect("fake verbs driver");
    let own = pe_card_bytes(Some(&drv));
    assert!(own.is_some(), "a verbs PE card");
    let card = card_of(job, me, tcp.local_addrs().to_vec(), own.clone());
    let (mut boot, locs) =
        Bootstrap::join_lazy_node(root, me, PES, job, card.clone(), WAIT, secret).expect("join");
    // Only this node's locality came (the others are on nodes of their own).
    assert!((0..PES).all(|r| (r == me) == locs.get(r).is_some()));
    let mine = PeerInfo {
        node: node_of(me),
        switch: SWITCH,
        tree: NO_SWITCH,
        shm: None,
        tcp: card.tcp.clone(),
    };
    // As init's `lazy_rendezvous`: not located, another node, no switch.
    let other = PeerInfo {
        node: !node_of(me),
        switch: NO_SWITCH,
        tree: NO_SWITCH,
        shm: None,
        tcp: Vec::new(),
    };
    let peers: Vec<PeerInfo> = (0..PES)
        .map(|r| if r == me { mine.clone() } else { other.clone() })
        .collect();
    let mut ctx = Context::from_parts_with(setup, seg, &peers, Some(tcp), true).expect("context");
    assert_eq!(ctx.local_heap(), (heap, len), "the driver's heap");
    lazy_of(&ctx).locate_on_first_use(me, (node_of(me), SWITCH, NO_SWITCH), locs);
    let mut cards = vec![None; PES as usize];
    cards[me as usize] = own;
    ctx.attach_verbs(drv, job, &cards);
    assert_eq!(ctx.verbs_connect(WAIT), 0, "no verbs peer at init");
    assert_nothing_held(&mut ctx);
    boot.barrier(WAIT).expect("init's bootstrap barrier");
    ctx.attach_bootstrap(boot, None);
    ctx
}

fn lazy_of(ctx: &Context) -> &LazyCards {
    ctx.pe.lazy.as_ref().expect("lazy cards")
}

/// Nothing of another PE is held after init: no card, no class, no verbs
/// QP, no TCP connection.
fn assert_nothing_held(ctx: &mut Context) {
    let me = ctx.my_pe();
    for pe in (0..PES).filter(|&pe| pe != me) {
        assert_eq!(ctx.class(pe), Some(PathClass::Unreachable), "PE {pe}");
        assert!(!lazy_of(ctx).holds(pe), "PE {me} holds PE {pe}'s card");
    }
    assert_eq!(ctx.lazy_cards_fetched(), Some(0));
    assert_eq!(ctx.tcp_peer_count(), 0);
    let v = ctx.verbs_mut();
    assert_eq!(v.drv.peer_count(), (0, K), "no QPs toward anyone");
    assert!(v.peers.is_empty(), "no per-peer verbs state");
    ctx.leave();
    assert_eq!(ctx.verbs_status().peers_up, 0);
}

/// What PE `me` holds after pairing with the other running PE only.
fn assert_paired_with_the_other_only(ctx: &mut Context) {
    let me = ctx.my_pe();
    let v = ctx.verbs_mut();
    assert_eq!(v.drv.peer_count(), (1, K));
    assert!(v.drv.has_peer(1 - me) && !v.drv.has_peer(2));
    assert_eq!(v.drv.stats().peers_added, 1, "one pairing");
    assert!(v.peer(1 - me).is_some_and(|p| p.card.is_some() && p.wanted));
    assert_eq!(v.peers.len(), 1, "per-peer verbs state for the other only");
    ctx.leave();
    assert_eq!(ctx.class(2), Some(PathClass::Unreachable), "PE 2 unused");
    assert!(!lazy_of(ctx).holds(2));
    assert_eq!(ctx.tcp_peer_count(), 1, "TCP to the other PE only");
}

/// `n` words near the heap's end (not `alloc`: its barrier needs PE 2).
fn words(ctx: &Context, n: usize) -> Sym<u64> {
    let (_, len) = ctx.local_heap();
    ctx.sym_at::<u64>(len - 8 * n as u64 - 64, n).unwrap()
}

/// Words `half * N ..` of [`words`]`(2 * N)`.
fn half(ctx: &Context, half: u32) -> Sym<u64> {
    let w = words(ctx, 2 * N as usize);
    let off = w.offset() + 8 * N * u64::from(half);
    ctx.sym_at::<u64>(off, N as usize).unwrap()
}

/// Waits (bounded, progressing) until this PE's verbs driver counted
/// `want` receipts (the other PE's puts applied here), and checks none
/// more came: each put landed once.
fn expect_receipts(ctx: &mut Context, want: u64) {
    let start = Instant::now();
    while ctx.verbs_mut().drv.stats().receipts < want {
        assert!(start.elapsed() < WAIT, "receipts of the other PE's puts");
        ctx.poll_once();
        std::thread::sleep(Duration::from_micros(100));
    }
    for _ in 0..20 {
        ctx.poll_once();
    }
    assert_eq!(ctx.verbs_mut().drv.stats().receipts, want, "each put once");
    ctx.leave();
}

/// Waits (bounded, progressing) until `step` reaches `want`.
fn wait_for_step_polling(ctx: &mut Context, step: &AtomicU32, want: u32) {
    let start = Instant::now();
    while step.load(Ordering::SeqCst) < want {
        assert!(start.elapsed() < WAIT, "step {want}");
        ctx.poll_once();
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// What PE 0 and PE 1 run, given their context and the pair's `step`
/// counter (to hand off between them).
type LocatedScript = fn(&mut Context, &AtomicU32);

/// Runs `script` as PEs 0 and 1 of a 3-PE job against a root of its own
/// (PE 2 joins it, and its barriers, from a thread of its own), then
/// closes as `finalize` does without PE 2's data path: quiet at both,
/// the bootstrap's barrier and goodbye. Checks the root ended well.
fn run_located(tag: u64, script: LocatedScript) {
    let job = tag << 32 ^ u64::from(std::process::id()) << 8;
    let secret = JobSecret::generate().expect("secret");
    let root =
        RootServer::bind("127.0.0.1:0".parse().unwrap(), job, PES, WAIT, &secret).expect("root");
    let addr = root.local_addr();
    let served = root.spawn().expect("root thread");
    let fabric = Fabric::new();
    let done = Arc::new(AtomicU32::new(0));
    let step = Arc::new(AtomicU32::new(0));
    let pe = |me: u32| -> PeScript {
        let (done, step, f, secret) = (done.clone(), step.clone(), fabric.clone(), secret.clone());
        Box::new(move || {
            let mut ctx = located_verbs_context(job, me, addr, &secret, &f);
            script(&mut ctx, &step);
            close_together(&mut ctx, &done);
            let mut boot = lazy_of(&ctx).take_boot().expect("the bootstrap");
            boot.barrier(WAIT).expect("the last barrier");
            boot.finish().expect("goodbye");
        })
    };
    let unused: PeScript = {
        let secret = secret.clone();
        Box::new(move || {
            let card = card_of(job, 2, Vec::new(), None);
            let (mut boot, locs) =
                Bootstrap::join_lazy_node(addr, 2, PES, job, card, WAIT, &secret).expect("join");
            assert!(locs.get(0).is_none() && locs.get(1).is_none());
            boot.barrier(WAIT).expect("init's bootstrap barrier");
            boot.barrier(WAIT).expect("the last barrier");
            boot.finish().expect("goodbye");
        })
    };
    run_pes(vec![pe(0), pe(1), unused]);
    served.join().expect("the root's thread").expect("the root");
}

/// PE 0 puts to PE 1 first (locating it, connecting TCP, pairing verbs);
/// PE 1 pairs as the responder without PE 0's card, and later puts back.
fn first_put_locates_and_pairs(ctx: &mut Context, step: &AtomicU32) {
    let me = ctx.my_pe();
    let w = words(ctx, N as usize);
    if me == 0 {
        // The first put: located (one card), then over TCP (connect on
        // first use), and verbs pairs.
        ctx.put(&w, 0, &[7], 1).unwrap();
        ctx.quiet().unwrap();
        assert_eq!(ctx.lazy_cards_fetched(), Some(1), "PE 1's card, once");
        assert_eq!(ctx.class(1), Some(PathClass::Near));
        assert!(lazy_of(ctx).holds(1));
        assert_eq!(ctx.stats().ops[VERBS.index()], 0, "the first put took TCP");
        assert_eq!(ctx.tcp_stats().unwrap().first_use_connects, 1);
        wait_up(ctx);
        puts_over_verbs(ctx, &w, 100);
        step.store(1, Ordering::SeqCst);
        // PE 1's first put toward PE 0.
        wait_for_step_polling(ctx, step, 2);
        expect_words(ctx, &w, 200);
        expect_receipts(ctx, N);
        // Located and connected once, the card never fetched again.
        assert_eq!(ctx.lazy_cards_fetched(), Some(1));
        assert_eq!(ctx.tcp_stats().unwrap().first_use_connects, 1);
    } else {
        // The responder: PE 0's card came in its records; PE 0 is not
        // located here, nor fetched.
        wait_up(ctx);
        assert_eq!(ctx.lazy_cards_fetched(), Some(0));
        assert!(!lazy_of(ctx).holds(0), "paired without PE 0's card");
        assert_eq!(ctx.class(0), Some(PathClass::Unreachable));
        wait_for_step_polling(ctx, step, 1);
        expect_words(ctx, &w, 100);
        expect_receipts(ctx, N);
        // Its first put toward PE 0 locates it (its card, for its class)
        // and goes over verbs at once: nothing connected, nothing on TCP.
        puts_over_verbs(ctx, &w, 200);
        assert_eq!(ctx.lazy_cards_fetched(), Some(1), "PE 0's card, once");
        assert_eq!(ctx.class(0), Some(PathClass::Near));
        assert!(lazy_of(ctx).holds(0));
        assert_eq!(ctx.tcp_stats().unwrap().first_use_connects, 0);
        step.store(2, Ordering::SeqCst);
    }
    assert_paired_with_the_other_only(ctx);
}

#[test]
fn an_off_node_peer_located_at_its_first_put_pairs_over_verbs() {
    run_located(0x1b01, first_put_locates_and_pairs);
}

/// Both PEs first-use each other at the same moment: each locates the
/// other (one card each), TCP converges to one connection, verbs to one
/// pairing, and each half goes over verbs.
fn both_at_once(ctx: &mut Context, step: &AtomicU32) {
    let me = ctx.my_pe();
    let w = words(ctx, 2 * N as usize);
    step.fetch_add(1, Ordering::SeqCst);
    wait_for_step(step, 2);
    ctx.put(&w, N as usize + me as usize, &[1], 1 - me).unwrap();
    ctx.quiet().unwrap();
    assert_eq!(ctx.lazy_cards_fetched(), Some(1), "the other's card, once");
    assert_eq!(ctx.class(1 - me), Some(PathClass::Near));
    wait_up(ctx);
    // Each PE writes its half of the other's words.
    let mine = half(ctx, me);
    puts_over_verbs(ctx, &mine, 1000 * (u64::from(me) + 1));
    step.fetch_add(1, Ordering::SeqCst);
    wait_for_step_polling(ctx, step, 4);
    let theirs = half(ctx, 1 - me);
    expect_words(ctx, &theirs, 1000 * (u64::from(1 - me) + 1));
    expect_receipts(ctx, N);
    assert_eq!(ctx.lazy_cards_fetched(), Some(1));
    assert!(ctx.tcp_stats().unwrap().first_use_connects <= 1);
    assert_paired_with_the_other_only(ctx);
}

#[test]
fn both_pes_locating_each_other_at_once_converge_to_one_pairing() {
    run_located(0x1b02, both_at_once);
}
