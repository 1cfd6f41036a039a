//! Lazy peers ([`VerbsConfig::lazy_peers`], [`VerbsDriver::add_peer`]) on
//! the fake HCA: no QPs at creation, peers added on demand (each side on
//! its own, once), puts and gets through each added peer's own staging,
//! the budget, a failure after a lazy pairing, and the memory a driver
//! holds for a large job.

use super::*;
use crate::test_alloc::held_bytes;

fn lazy(k: u32) -> VerbsConfig {
    VerbsConfig {
        lazy_peers: Some(k),
        staging_bytes: 1 << 20,
        ..VerbsConfig::default()
    }
}

/// `a` (PE `ap`) and `b` (PE `bp`) add each other and connect.
fn pair_up(a: &mut VerbsDriver, ap: u32, b: &mut VerbsDriver, bp: u32) {
    a.add_peer(bp).unwrap();
    b.add_peer(ap).unwrap();
    a.set_peer_card(bp, b.card_for(ap).unwrap()).unwrap();
    b.set_peer_card(ap, a.card_for(bp).unwrap()).unwrap();
    b.connect(ap).unwrap();
    a.connect(bp).unwrap();
    assert_eq!(a.state(bp), LinkState::Up);
    assert_eq!(b.state(ap), LinkState::Up);
}

fn put_all(a: &mut VerbsDriver, pe: u32, off: u64, v: &[u8]) {
    for _ in 0..100_000 {
        match a.put(pe, off, v, CTX) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                a.progress(Instant::default());
            }
            r => return r.unwrap(),
        }
    }
    panic!("put never found room");
}

#[test]
fn peers_are_added_on_demand_each_with_its_own_qps_and_staging() {
    let f = Fabric::new();
    let heap = 1 << 18;
    let mut d: Vec<VerbsDriver> = (0..4)
        .map(|pe| VerbsDriver::fake_with_owned_heap(lazy(2), pe, 4, 7, heap, &f).unwrap())
        .collect();
    for x in &d {
        assert_eq!(x.peer_count(), (0, 2), "no QPs at creation");
        assert!(!x.has_peer(1) && !x.has_peer(2));
    }
    assert!(matches!(
        d[0].card_for(1),
        Err(VerbsError::InvalidPe { peer: 1, .. })
    ));
    let (a, rest) = d.split_at_mut(1);
    let (b, rest) = rest.split_at_mut(1);
    let (c, _) = rest.split_at_mut(1);
    let (a, b, c) = (&mut a[0], &mut b[0], &mut c[0]);
    pair_up(a, 0, b, 1);
    // Adding again changes nothing (both sides may add at once).
    let qpns = a.card_for(1).unwrap();
    a.add_peer(1).unwrap();
    assert_eq!(a.card_for(1).unwrap(), qpns);
    assert_eq!(a.peer_count(), (1, 2));
    pair_up(a, 0, c, 2);
    assert_eq!(a.peer_count(), (2, 2));
    // Puts larger than a staging block to both peers at once: each peer's
    // QPs have their own part of the staging pool.
    let big_b: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let big_c: Vec<u8> = (0..100_000u32).map(|i| (i % 241) as u8 ^ 0x5a).collect();
    put_all(a, 1, 64, &big_b);
    put_all(a, 2, 64, &big_c);
    put_all(a, 1, 200_000, b"to b");
    quiet(a).unwrap();
    for _ in 0..100 {
        b.progress(Instant::default());
        c.progress(Instant::default());
    }
    assert_eq!(get(a, 1, 64, 60_000).unwrap(), big_b[..60_000]);
    assert_eq!(get(a, 2, 64, 60_000).unwrap(), big_c[..60_000]);
    assert_eq!(get(a, 1, 200_000, 4).unwrap(), b"to b");
    assert!(b.stats().receipts >= 2, "{:?}", b.stats());
    assert!(c.stats().receipts >= 2, "{:?}", c.stats());
    assert_eq!(a.stats().peers_added, 2);
    // The budget is spent: a third peer is refused, typed and counted.
    assert!(matches!(
        a.add_peer(3),
        Err(VerbsError::NoPeerLeft { peer: 3, max: 2 })
    ));
    assert_eq!(a.stats().peers_refused, 1);
    assert!(!a.has_peer(3));
    assert!(matches!(
        a.add_peer(0),
        Err(VerbsError::InvalidPe { peer: 0, .. })
    ));
    assert!(matches!(
        a.add_peer(4),
        Err(VerbsError::InvalidPe { peer: 4, .. })
    ));
    // b never added c: no QPs, no card.
    assert!(!b.has_peer(2));
    assert!(a.put(3, 0, b"x", CTX).is_err());
}

#[test]
fn a_cut_link_after_a_lazy_pairing_settles_once() {
    let f = Fabric::new();
    let mut a = VerbsDriver::fake_with_owned_heap(lazy(4), 0, 3, 7, 1 << 16, &f).unwrap();
    let mut b = VerbsDriver::fake_with_owned_heap(lazy(4), 2, 3, 7, 1 << 16, &f).unwrap();
    pair_up(&mut a, 0, &mut b, 2);
    while a.poll_event().is_some() {}
    a.put(2, 0, b"before", CTX).unwrap();
    quiet(&mut a).unwrap();
    f.break_links();
    a.put(2, 100, b"in doubt", CTX).unwrap();
    assert_eq!(quiet(&mut a).unwrap_err().kind(), ErrorKind::PeerDown);
    assert_eq!(a.state(2), LinkState::Error);
    a.drain_replays(|r| panic!("replayed before the receipts: {r:?}"));
    assert_eq!(handshake(&mut a, &mut b, 0, 2), 0, "nothing landed");
    let mut replays = Vec::new();
    a.drain_replays(|r| replays.push(r.to_owned_kind()));
    assert_eq!(replays, ["put"]);
    a.drain_replays(|_| panic!("replayed twice"));
    assert_eq!(a.stats().peer_failures, 1);
}

/// The driver's heap bytes for a job of `n_pes` with 2 peers added.
fn held_with_two_peers(n_pes: u32) -> (i64, usize) {
    let f = Fabric::new();
    let (d, bytes) = held_bytes(|| {
        let mut d = VerbsDriver::fake_with_owned_heap(lazy(32), 0, n_pes, 7, 4096, &f).unwrap();
        d.add_peer(1).unwrap();
        d.add_peer(n_pes - 1).unwrap();
        d
    });
    let table = d.peer_table_bytes();
    drop(d);
    (bytes, table)
}

/// What a lazy driver holds does not depend on the job's size: the same
/// bytes for 1,000 and 1,000,000 PEs (2 peers added, room for 32).
#[test]
fn a_lazy_driver_holds_the_same_bytes_for_any_job_size() {
    let (small, t_small) = held_with_two_peers(1_000);
    let (large, t_large) = held_with_two_peers(1_000_000);
    let (mid, _) = held_with_two_peers(100_000);
    println!(
        "lazy driver, 2 peers added, room for 32: {small} B held at n_pes = 1,000; \
         {mid} B at 100,000; {large} B at 1,000,000; peer table {t_large} B"
    );
    assert_eq!(small, large, "O(peers), not O(n_pes)");
    assert_eq!(mid, large);
    assert_eq!(t_small, t_large);
    // An eager driver for 1,000 PEs holds per-peer state for 999.
    let f = Fabric::new();
    let (eager, bytes) = held_bytes(|| {
        VerbsDriver::fake_with_owned_heap(VerbsConfig::default(), 0, 1_000, 7, 4096, &f).unwrap()
    });
    println!(
        "eager driver at n_pes = 1,000: {bytes} B held; peer table {} B",
        eager.peer_table_bytes()
    );
    assert!(bytes > 20 * small, "eager {bytes} B vs lazy {small} B");
}

/// An eager driver keeps every other PE in PE order, this PE skipped, so
/// the lookup is arithmetic: each peer's slot, none for this PE or one
/// past the job, no index held; a QP set's driver has its one peer in
/// slot 0; a lazy one's slots follow the order peers were added.
#[test]
fn each_layout_finds_its_peers_and_no_other() {
    /// A slot's bytes: the peer's state and its PE.
    const SLOT: usize = size_of::<Peer>() + 4;
    let f = Fabric::new();
    let n_pes = 5;
    for me in [0, 2, 4] {
        let d = VerbsDriver::fake_with_owned_heap(VerbsConfig::default(), me, n_pes, 7, 4096, &f)
            .unwrap();
        assert!(!d.lazy());
        assert_eq!(d.peer_count(), (4, 4));
        let slots: Vec<Option<usize>> = (0..n_pes + 1)
            .chain([u32::MAX])
            .map(|pe| d.peer_slot(pe))
            .collect();
        let mut want: Vec<Option<usize>> = (0..n_pes)
            .filter(|&pe| pe != me)
            .enumerate()
            .map(|(s, _)| Some(s))
            .collect();
        want.insert(me as usize, None);
        want.extend([None, None]);
        assert_eq!(slots, want, "me = {me}");
        assert!(!d.has_peer(me) && d.has_peer((me + 1) % n_pes));
        assert!(matches!(
            d.card_for(me),
            Err(VerbsError::InvalidPe { peer, .. }) if peer == me
        ));
        // Each peer's own QPs behind its slot: the cards' QPNs are distinct.
        let mut qpns: Vec<u32> = (0..n_pes)
            .filter(|&pe| pe != me)
            .flat_map(|pe| {
                d.card_for(pe)
                    .unwrap()
                    .qps()
                    .iter()
                    .map(|q| q.qpn)
                    .collect::<Vec<_>>()
            })
            .collect();
        let n = qpns.len();
        qpns.sort_unstable();
        qpns.dedup();
        assert_eq!(qpns.len(), n);
        // Slots and their PEs, no index.
        assert_eq!(d.peer_table_bytes(), 4 * SLOT);
    }
    let a =
        VerbsDriver::fake_with_owned_heap(VerbsConfig::default(), 0, n_pes, 7, 4096, &f).unwrap();
    let set = a.open_set(3, 11, &crate::sets::SetBudget::new(1)).unwrap();
    assert_eq!(set.peer_count(), (1, 1));
    assert_eq!(
        (0..n_pes).map(|pe| set.peer_slot(pe)).collect::<Vec<_>>(),
        [None, None, None, Some(0), None]
    );
    let mut l = VerbsDriver::fake_with_owned_heap(lazy(3), 2, n_pes, 7, 4096, &f).unwrap();
    for pe in [4, 0, 3] {
        l.add_peer(pe).unwrap();
    }
    assert_eq!(
        (0..n_pes).map(|pe| l.peer_slot(pe)).collect::<Vec<_>>(),
        [Some(1), None, None, Some(2), Some(0)]
    );
    // Slots, their PEs and an index of 8 entries (at most half full).
    assert_eq!(l.peer_table_bytes(), 3 * SLOT + 8 * 8);
}
