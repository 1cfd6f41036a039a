//! Failures on the fake HCA: a cut link, error completions, refused posts,
//! a dead device; what is replayed, failed or reported lost; rebuilds.

use super::*;

#[test]
fn a_cut_link_fails_over_settles_once_and_rebuilds() {
    let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 16);
    while a.poll_event().is_some() {}
    a.put(1, 0, b"before", CTX).unwrap();
    quiet(&mut a).unwrap();
    f.break_links();
    // Queued, then posted into a dead link by quiet.
    a.put(1, 100, b"lost in flight", CTX).unwrap();
    a.put(1, 200, b"second", CTX).unwrap();
    let e = quiet(&mut a).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PeerDown);
    assert_eq!(a.state(1), LinkState::Error);
    assert_eq!(
        a.poll_event(),
        Some(Event::Link {
            peer: 1,
            state: LinkState::Error
        })
    );
    assert_eq!(
        a.poll_event(),
        Some(Event::RebuildNeeded {
            peer: 1,
            generation: 1
        })
    );
    // New operations are refused at once (select moves to TCP).
    assert_eq!(
        a.put(1, 0, b"x", CTX).unwrap_err().kind(),
        ErrorKind::PeerDown
    );
    // Nothing is replayed before the target's receipts are in.
    a.drain_replays(|r| panic!("replayed before the receipts: {r:?}"));
    assert_eq!(handshake(&mut a, &mut b, 0, 1), 0, "nothing landed");
    // Each in-doubt put is offered for replay exactly once.
    let mut replays = Vec::new();
    a.drain_replays(|r| {
        if let Replay::Put {
            offset, bytes, seq, ..
        } = r
        {
            replays.push((seq, offset, bytes.to_vec()));
        }
    });
    assert_eq!(
        replays
            .iter()
            .map(|r| (r.1, r.2.clone()))
            .collect::<Vec<_>>(),
        [(100, b"lost in flight".to_vec()), (200, b"second".to_vec())]
    );
    assert!(replays[0].0 < replays[1].0, "in sequence order");
    a.drain_replays(|_| panic!("replayed twice"));
    assert_eq!(a.stats().replays, 2);
    // Rebuild both sides to generation 1, same QPNs, new PSNs.
    f.heal();
    let qpn = a.card_for(1).unwrap().qps()[0].qpn;
    assert_eq!(b.state(0), LinkState::Error, "b was told");
    a.rebuild(1, 1).unwrap();
    assert!(
        matches!(
            a.poll_event(),
            Some(Event::Receipts {
                peer: 1,
                generation: 1,
                ..
            })
        ),
        "a collected its receipts of b's puts first"
    );
    assert_eq!(
        a.poll_event(),
        Some(Event::Rebuilt {
            peer: 1,
            generation: 1
        })
    );
    assert_eq!(
        a.put(1, 0, b"x", CTX).unwrap_err().kind(),
        ErrorKind::PeerDown,
        "until the peer confirms"
    );
    b.drain_replays(|_| {});
    b.rebuild(0, 1).unwrap();
    a.peer_rebuilt(1, 1).unwrap();
    b.peer_rebuilt(0, 1).unwrap();
    assert_eq!(
        a.card_for(1).unwrap().qps()[0].qpn,
        qpn,
        "rebuilt, not re-created"
    );
    a.put(1, 300, b"after", CTX).unwrap();
    quiet(&mut a).unwrap();
    assert_eq!(get(&mut a, 1, 300, 5).unwrap(), b"after");
    assert_eq!(get(&mut a, 1, 0, 6).unwrap(), b"before");
    assert_eq!(a.stats().rebuilds, 1);
    assert!(a.rebuild(1, 1).is_err(), "generations only go up");
    assert!(a.rebuild(1, 2).is_err(), "a working link is not reset");
}

/// A remote access error (a wrong rkey in the card) is an error
/// completion like any other: the peer goes to Error, the put is
/// offered for replay, nothing is written.
#[test]
fn a_remote_access_error_fails_the_link_over() {
    let f = Fabric::new();
    let cfg = VerbsConfig::default;
    let mut a = VerbsDriver::fake_with_owned_heap(cfg(), 0, 2, 7, 4096, &f).unwrap();
    let mut b = VerbsDriver::fake_with_owned_heap(cfg(), 1, 2, 7, 4096, &f).unwrap();
    let mut card = b.card_for(0).unwrap();
    card.rkey ^= 0x40;
    a.set_peer_card(1, card).unwrap();
    b.set_peer_card(0, a.card_for(1).unwrap()).unwrap();
    b.connect(0).unwrap();
    a.connect(1).unwrap();
    a.put(1, 8, b"denied", CTX).unwrap();
    assert_eq!(quiet(&mut a).unwrap_err().kind(), ErrorKind::PeerDown);
    assert_eq!(a.state(1), LinkState::Error);
    assert_eq!(a.stats().completion_errors, 1);
    assert_eq!(handshake(&mut a, &mut b, 0, 1), 0, "nothing landed");
    let mut n = 0;
    a.drain_replays(|r| {
        assert!(matches!(
            r,
            Replay::Put {
                offset: 8,
                bytes: b"denied",
                ..
            }
        ));
        n += 1;
    });
    assert_eq!(n, 1);
    assert_eq!(get(&mut b, 1, 8, 6).unwrap(), [0; 6], "nothing written");
}

#[test]
fn atomics_in_flight_at_a_cut_are_never_retried_blindly() {
    let (mut a, _b, f) = pair(VerbsConfig::default(), 1 << 16);
    f.break_links();
    let op = AtomicOp {
        kind: AtomicKind::FetchAdd,
        width: AtomicWidth::W64,
        operand: 1,
        compare: 0,
        fetch: true,
    };
    // Posted at once (signaled): it reached the device, so its outcome
    // is unknown.
    let t = a.atomic_start(1, 64, op, CTX).unwrap();
    let e = loop {
        match a.atomic_poll(&t) {
            Ok(None) => {}
            Ok(Some(v)) => panic!("completed with {v}"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(
            e,
            VerbsError::OutcomeUnknown {
                peer: 1,
                offset: 64
            }
        ),
        "{e}"
    );
    assert_eq!(
        e.kind(),
        ErrorKind::Fatal,
        "not PeerDown: the shim must not retry it"
    );
    assert_eq!(a.stats().outcome_unknown, 1);
    // A get in flight fails with PeerDown (retrying a read is safe).
    assert_eq!(
        a.get_start(1, 0, 8, CTX).unwrap_err().kind(),
        ErrorKind::PeerDown
    );
}

/// A non-fetching add (`fetch: false`, nobody polls it) that reached the
/// device before a cut may have run: the next quiet reports it as "outcome
/// unknown", it is not offered for replay (a second add would count twice),
/// and its ticket is free.
#[test]
fn a_non_fetching_add_in_flight_at_a_cut_is_reported_never_replayed() {
    let (mut a, _b, f) = pair(VerbsConfig::default(), 1 << 16);
    f.break_links();
    let op = AtomicOp {
        kind: AtomicKind::FetchAdd,
        width: AtomicWidth::W64,
        operand: 1,
        compare: 0,
        fetch: false,
    };
    a.atomic_start(1, 64, op, CTX).unwrap();
    let mut e = None;
    for _ in 0..10_000 {
        match a.quiet_poll() {
            Ok(true) => panic!("quiet completed over a lost add"),
            Ok(false) => {
                a.progress(Instant::default());
            }
            Err(err) => {
                e = Some(err);
                break;
            }
        }
    }
    let e = e.expect("quiet never reported the add");
    assert!(
        matches!(
            e,
            VerbsError::OutcomeUnknown {
                peer: 1,
                offset: 64
            }
        ),
        "{e}"
    );
    let mut n = 0;
    a.drain_replays(|_| n += 1);
    assert_eq!(n, 0, "an add that may have run is never replayed");
    assert_eq!(a.free_list.n, a.tickets.len(), "its ticket was kept");
}

/// A post refused in the middle of a put (its pieces' batch fills and
/// the doorbell fails) fails the link; the put's later pieces must
/// not be queued on the failed QP (neither done nor replayed): every
/// piece is replayed once, and nothing stays outstanding.
#[test]
fn a_post_refused_mid_put_replays_every_piece() {
    const PIECES: u64 = BATCH as u64 + 3;
    let cfg = VerbsConfig {
        data_qps: Some(1),
        ..VerbsConfig::default()
    };
    let (mut a, _b, f) = pair(cfg, 4 << 20);
    f.fail_post_after(0);
    a.put_from_heap(1, 0, 2 << 20, (PIECES * BLOCK) as u32, CTX)
        .unwrap();
    a.progress(Instant::default());
    assert_eq!(a.state(1), LinkState::Error);
    assert!(!a.awaits_receipts(1), "no piece reached the device");
    let mut got = Vec::new();
    a.drain_replays(|r| {
        if let Replay::PutFromHeap {
            offset,
            local_offset,
            len,
            ..
        } = r
        {
            got.push((offset, local_offset, len));
        }
    });
    let want: Vec<(u64, u64, u32)> = (0..PIECES)
        .map(|i| (i * BLOCK, (2 << 20) + i * BLOCK, BLOCK as u32))
        .collect();
    assert_eq!(got, want, "every piece replayed once, in order");
    for _ in 0..100 {
        a.progress(Instant::default());
    }
    assert!(
        a.peers
            .get(1)
            .unwrap()
            .qps
            .iter()
            .all(|q| q.outstanding() == 0),
        "work left on the failed QPs"
    );
}

/// Pieces of a put that found no room in the replay list are lost:
/// the next `quiet_poll` reports them once as `ReplayLost` (not
/// `PeerDown`, which means "replays pending" and is retried); the kept
/// pieces are still replayed.
#[test]
fn operations_with_no_room_to_replay_are_reported_lost() {
    const PIECES: u64 = 5;
    let cfg = VerbsConfig {
        data_qps: Some(1),
        ..VerbsConfig::default()
    };
    let (mut a, _b, f) = pair(cfg, 4 << 20);
    a.fake_limit_replays(1, 2);
    f.fail_post_after(0);
    a.put_from_heap(1, 0, 2 << 20, (PIECES * BLOCK) as u32, CTX)
        .unwrap();
    a.progress(Instant::default());
    assert_eq!(a.state(1), LinkState::Error);
    match a.quiet_poll() {
        Err(VerbsError::ReplayLost { peer: 1, ops: 3 }) => {}
        r => panic!("three pieces lost, not reported: {r:?}"),
    }
    assert!(matches!(
        a.quiet_poll(),
        Err(VerbsError::PeerDown { peer: 1 })
    ));
    let mut kept = 0;
    a.drain_replays(|_| kept += 1);
    assert_eq!(kept, 2);
    assert!(quiet(&mut a).is_ok(), "reported once");
}

/// After the device died, operations lost at the failure are still
/// reported before `DeviceFatal`.
#[test]
fn operations_lost_at_a_device_failure_are_reported() {
    let (mut a, _b, _f) = pair(VerbsConfig::default(), 4 << 20);
    a.fake_limit_replays(1, 0);
    a.put(1, 0, &[7; 64], CTX).unwrap();
    a.fake_device_fatal();
    for _ in 0..2 * ASYNC_EVERY {
        a.progress(Instant::default());
    }
    match a.quiet_poll() {
        Err(VerbsError::ReplayLost { peer: 1, ops }) if ops >= 1 => {}
        r => panic!("the lost put was not reported: {r:?}"),
    }
    assert!(matches!(a.quiet_poll(), Err(VerbsError::DeviceFatal)));
}

/// A device failure with many peers up reports every peer's link
/// failure: the shim holds a peer's newer operations (and asks for its
/// receipts) only on that event, so none may be dropped from the
/// event ring.
#[test]
fn a_device_failure_reports_every_peer_however_many() {
    const N: u32 = 140;
    let cfg = VerbsConfig {
        data_qps: Some(1),
        sq_depth: Some(16),
        srq_depth: Some(16),
        staging_bytes: 4096,
        ..VerbsConfig::default()
    };
    let f = Fabric::new();
    let mut a = VerbsDriver::fake_with_owned_heap(cfg.clone(), 0, N, 7, 1 << 16, &f).unwrap();
    let b = VerbsDriver::fake_with_owned_heap(cfg, 1, 2, 7, 1 << 16, &f).unwrap();
    // Every peer's QPs point at b's (the fake checks nothing more for
    // a link without traffic).
    let card = b.card_for(0).unwrap();
    for peer in 1..N {
        a.set_peer_card(peer, card).unwrap();
        a.connect(peer).unwrap();
    }
    while a.poll_event().is_some() {}
    a.fake_device_fatal();
    for _ in 0..2 * ASYNC_EVERY {
        a.progress(Instant::default());
    }
    let mut failed = vec![false; N as usize];
    while let Some(e) = a.poll_event() {
        if let Event::Link {
            peer,
            state: LinkState::Error,
        } = e
        {
            failed[peer as usize] = true;
        }
    }
    let missing: Vec<u32> = (1..N).filter(|&p| !failed[p as usize]).collect();
    assert!(
        missing.is_empty(),
        "link failures not reported: {missing:?}"
    );
}

/// A QP-fatal event of the old link still queued at the rebuild is
/// read before it (the link is in Error: nothing happens), not after,
/// where it would fail the rebuilt link.
#[test]
fn a_late_qp_fatal_event_does_not_fail_the_rebuilt_link() {
    let (_a, mut b, _f) = pair(VerbsConfig::default(), 1 << 20);
    b.peer_failed(0).unwrap();
    for _ in 0..10 {
        b.progress(ms(0));
    }
    assert!(b.receipts(0).is_some());
    b.cq.as_ref()
        .unwrap()
        .fake_push_qp_event(sys::event::QP_FATAL, Some(1));
    b.rebuild(0, 1).unwrap();
    for _ in 0..2 * ASYNC_EVERY {
        b.progress(ms(1));
    }
    assert_eq!(b.state(0), LinkState::Down, "the rebuilt link failed");
    assert_eq!(b.stats().peer_failures, 1);
}
