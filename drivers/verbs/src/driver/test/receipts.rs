//! The receipts of puts in doubt: which puts landed decides what is
//! replayed; the shared receive queue keeping up; the bounded and withheld
//! collections at the target.

use super::*;

/// Replays drained, as (offset, bytes).
type Replayed = Vec<(u64, Vec<u8>)>;

/// Data, fence, flag, with the link failing as `fail` sets up; the
/// target rewrites the data if the flag landed; then the receipts
/// handshake and the replays (applied by hand, in order). Returns (puts
/// known landed, the replays, the target's data afterwards).
fn data_fence_flag(fail: impl FnOnce(&Fabric)) -> (u64, Replayed, Vec<u8>) {
    let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 17);
    while a.poll_event().is_some() {}
    fail(&f);
    a.put(1, 0, b"data", CTX).unwrap();
    a.fence().unwrap();
    a.put(1, 70_000, b"F", CTX).unwrap();
    assert_eq!(quiet(&mut a).unwrap_err().kind(), ErrorKind::PeerDown);
    assert_eq!(a.state(1), LinkState::Error);
    a.drain_replays(|r| panic!("replayed before the receipts: {r:?}"));
    // The target acts on what landed: it sees the flag, rewrites the
    // data (as a program waiting on the flag would).
    let landed_flag = get(&mut b, 1, 70_000, 1).unwrap() == b"F";
    if landed_flag {
        b.put(1, 0, b"next", CTX).unwrap();
    }
    let landed = handshake(&mut a, &mut b, 0, 1);
    let mut replays = Vec::new();
    a.drain_replays(|r| match r {
        Replay::Put { offset, bytes, .. } => replays.push((offset, bytes.to_vec())),
        r => panic!("unexpected {r:?}"),
    });
    a.drain_replays(|r| panic!("replayed twice: {r:?}"));
    // Replays go over TCP in the shim; here by hand, in order.
    for (offset, bytes) in &replays {
        b.put(1, *offset, bytes, CTX).unwrap();
    }
    (landed, replays, get(&mut b, 1, 0, 4).unwrap())
}

#[test]
fn an_ack_lost_after_the_flag_landed_replays_nothing() {
    // The data and the flag land; the flag's ack is lost.
    let (landed, replays, data) = data_fence_flag(|f| f.lose_ack_after(1));
    assert_eq!(landed, 2, "both puts are known landed");
    assert!(replays.is_empty(), "nothing replayed: {replays:?}");
    assert_eq!(data, b"next", "the target's newer data is not overwritten");
}

#[test]
fn an_ack_lost_after_the_data_landed_replays_the_flag_only() {
    let (landed, replays, data) = data_fence_flag(|f| f.lose_ack_after(0));
    assert_eq!(landed, 1);
    assert_eq!(replays, [(70_000, b"F".to_vec())]);
    assert_eq!(data, b"data");
}

#[test]
fn a_cut_before_landing_replays_everything_once_in_order() {
    let (landed, replays, data) = data_fence_flag(Fabric::break_links);
    assert_eq!(landed, 0);
    assert_eq!(
        replays,
        [(0, b"data".to_vec()), (70_000, b"F".to_vec())],
        "once each, data before flag"
    );
    assert_eq!(data, b"data");
}

#[test]
fn receipts_advance_and_the_srq_keeps_up_with_more_puts_than_it_holds() {
    let cfg = VerbsConfig {
        data_qps: Some(2),
        srq_depth: Some(16),
        ..VerbsConfig::default()
    };
    let (mut a, mut b, f) = pair(cfg, 1 << 20);
    // More puts than the SRQ holds, the target progressing only now
    // and then: senders wait on RNR, nothing fails.
    const PUTS: u64 = 200;
    let at = |i: u64| (i * 4096) % (4 * BLOCK);
    let mut dry = 0;
    for i in 0..PUTS {
        loop {
            match a.put(1, at(i), &i.to_le_bytes(), CTX) {
                Ok(()) => break,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    b.progress(Instant::default());
                }
                Err(e) => panic!("{e}"),
            }
        }
        a.progress(Instant::default());
        if i % 40 == 39 {
            dry += usize::from(f.rnr_waiting() > 0);
            b.progress(Instant::default());
        }
    }
    assert!(dry > 0, "the SRQ ran dry at times: puts waited");
    for _ in 0..10_000 {
        b.progress(Instant::default());
        if a.quiet_poll().unwrap() {
            break;
        }
    }
    assert!(a.quiet_poll().unwrap(), "quiet once the target re-posted");
    assert_eq!(a.state(1), LinkState::Up);
    assert!(f.rnr_naks() > 0);
    let s = b.stats();
    assert_eq!(s.receipts, PUTS, "one receipt per put: {s:?}");
    assert!(s.recv_reposts >= PUTS - 16, "{s:?}");
    for i in PUTS - 16..PUTS {
        assert_eq!(get(&mut a, 1, at(i), 8).unwrap(), i.to_le_bytes());
    }
    // The receipts, as reported after a failure: per data QP, the
    // count of puts on it (blocks alternate between the two).
    f.break_links();
    a.put(1, 0, b"x", CTX).unwrap();
    let _ = quiet(&mut a);
    b.peer_failed(0).unwrap();
    let mut got = None;
    for _ in 0..100 {
        b.progress(Instant::default());
        got = b.receipts(0);
        if got.is_some() {
            break;
        }
    }
    let (generation, r) = got.expect("receipts");
    assert_eq!(generation, 1);
    assert_eq!(r.as_slice().iter().sum::<u64>(), PUTS);
    assert_eq!(r.as_slice().len(), 2);
    // Bad receipts are refused, naming why; nothing is settled.
    for (g, applied) in [(2, vec![0, 0]), (1, vec![0]), (1, vec![0, 1 << 20])] {
        assert!(matches!(
            a.settle_receipts(1, g, &applied),
            Err(VerbsError::BadReceipts { peer: 1, .. })
        ));
    }
    assert!(a.awaits_receipts(1));
    assert_eq!(a.settle_receipts(1, 1, r.as_slice()).unwrap(), 0);
    let mut n = 0;
    a.drain_replays(|_| n += 1);
    assert_eq!(n, 1, "the put after the cut");
}

/// The target's owner never progresses; a second thread polls its
/// receive side: the puts (far more than the SRQ holds) complete.
#[test]
fn another_thread_can_keep_the_receive_side_going() {
    let cfg = VerbsConfig {
        srq_depth: Some(16),
        ..VerbsConfig::default()
    };
    let (mut a, b, f) = pair(cfg, 1 << 16);
    let r = b.recv_side().expect("open");
    let stop = switchyard_core::sync::atomic::AtomicBool::new(false);
    /// Stops the poller also when the test panics (else the scope
    /// would wait for it forever).
    struct Stop<'a>(&'a switchyard_core::sync::atomic::AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0
                .store(true, switchyard_core::sync::atomic::Ordering::Relaxed);
        }
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(switchyard_core::sync::atomic::Ordering::Relaxed) {
                if r.poll() == PollResult::Idle {
                    std::thread::yield_now();
                }
            }
        });
        let _stop = Stop(&stop);
        let t0 = std::time::Instant::now();
        let bound = std::time::Duration::from_secs(60);
        for i in 0..500u64 {
            loop {
                match a.put(1, (i % 512) * 8, &i.to_le_bytes(), CTX) {
                    Ok(()) => break,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        assert!(t0.elapsed() < bound, "put {i} never had room");
                        std::thread::yield_now();
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        while !a.quiet_poll().unwrap() {
            assert!(t0.elapsed() < bound, "quiet");
            std::thread::yield_now();
        }
    });
    assert!(f.rnr_naks() > 0, "the SRQ ran dry at times");
    while r.poll() == PollResult::Busy {}
    assert_eq!(b.stats().receipts, 500);
    assert_eq!(r.receipts(), 500);
    assert_eq!(get(&mut a, 1, 499 * 8, 8).unwrap(), 499u64.to_le_bytes());
    drop(b);
    assert_eq!(
        r.poll(),
        PollResult::Idle,
        "a closed driver's receive side is empty"
    );
}

/// Without the peer's receipts (dead, or no answer in time) the puts
/// in doubt are counted and dropped, never replayed blindly; a get in
/// the same failure is still replayed, and the link rebuilds.
#[test]
fn abandoned_receipts_drop_the_puts_in_doubt_and_count_them() {
    let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 16);
    while a.poll_event().is_some() {}
    f.break_links();
    a.put(1, 0, b"one", CTX).unwrap();
    a.put(1, 8, b"two", CTX).unwrap();
    a.get_into_heap(1, 0, 100, 3, CTX).unwrap();
    assert_eq!(quiet(&mut a).unwrap_err().kind(), ErrorKind::PeerDown);
    assert!(a.awaits_receipts(1));
    assert_eq!(
        a.rebuild(1, 1).unwrap_err().kind(),
        ErrorKind::PeerDown,
        "not while the receipts are pending"
    );
    assert_eq!(a.abandon_receipts(1), 2);
    assert_eq!(a.abandon_receipts(1), 0, "once");
    assert!(!a.awaits_receipts(1));
    assert_eq!(
        a.settle_receipts(1, 1, &[0]).unwrap(),
        0,
        "late receipts find nothing waiting"
    );
    let mut got = Vec::new();
    a.drain_replays(|r| got.push(r.to_owned_kind()));
    assert_eq!(got, ["get"]);
    assert_eq!(a.stats().receipts_abandoned, 2);
    f.heal();
    b.peer_failed(0).unwrap();
    a.rebuild(1, 1).unwrap();
    b.rebuild(0, 1).unwrap();
    a.peer_rebuilt(1, 1).unwrap();
    b.peer_rebuilt(0, 1).unwrap();
    a.put(1, 16, b"after", CTX).unwrap();
    quiet(&mut a).unwrap();
    for _ in 0..100 {
        b.progress(Instant::default());
    }
    assert_eq!(get(&mut a, 1, 16, 5).unwrap(), b"after");
    assert_eq!(b.stats().receipts, 1, "receipts count from 1 again");
}

/// Other peers keep the receive CQ full while a failed link's
/// receipts are collected: the drain stops after as many completions
/// as the CQ holds (all of the failed link's are among them), and the
/// answer is still right.
#[test]
fn the_receipts_drain_is_bounded_when_other_peers_keep_sending() {
    let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 20);
    a.put(1, 0, &[1; 64], CTX).unwrap();
    quiet(&mut a).unwrap();
    b.progress(Instant::default());
    let srq = b.params().srq_depth as u64;
    f.flood_receives(1 << 20);
    b.peer_failed(0).unwrap();
    for _ in 0..3 {
        b.progress(Instant::default());
    }
    let (g, r) = b.receipts(0).expect("answered");
    assert_eq!((g, r.as_slice()), (1, &[1u64][..]));
    assert!(
        f.flooded() <= srq + 4 * POLL_BATCH as u64,
        "the drain took {} completions (CQ of {srq})",
        f.flooded()
    );
    f.flood_receives(0);
}

/// A collection given up leaves old completions in the receive CQ; the
/// rebuild takes them before the receipts count from 0 again, so they
/// never count against the new generation.
#[test]
fn a_rebuild_after_a_withheld_collection_starts_the_receipts_from_zero() {
    let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 20);
    for i in 0..100u64 {
        a.put(1, i * 64, &[1; 64], CTX).unwrap();
    }
    quiet(&mut a).unwrap();
    f.suppress_last_wqe(true);
    b.peer_failed(0).unwrap();
    b.progress(ms(0));
    b.progress(ms(1000));
    assert_eq!(b.stats().receipts_withheld, 1);
    f.suppress_last_wqe(false);
    b.rebuild(0, 1).unwrap();
    for _ in 0..10 {
        b.progress(ms(1001));
    }
    let mut seen = [0u64; 1];
    let range = b.seen_range(0);
    b.recv.as_ref().unwrap().drain_and_read(range, &mut seen);
    assert_eq!(seen, [0], "old receipts counted in the new generation");
}

/// The old link's `LAST_WQE_REACHED` arrives late, after the rebuild
/// (its collection was given up): it is ignored, so the next failure
/// still waits for its own event (here withheld too) instead of
/// answering at once with receipts that may be too low.
#[test]
fn a_late_last_wqe_of_the_old_link_does_not_end_the_next_collection() {
    let (_a, mut b, f) = pair(VerbsConfig::default(), 1 << 20);
    f.suppress_last_wqe(true);
    b.peer_failed(0).unwrap();
    b.progress(ms(0));
    b.progress(ms(1000));
    assert_eq!(b.stats().receipts_withheld, 1);
    b.rebuild(0, 1).unwrap();
    f.release_last_wqe();
    for _ in 0..2 * ASYNC_EVERY {
        b.progress(ms(1001));
    }
    b.peer_failed(0).unwrap();
    b.progress(ms(2000));
    assert!(
        b.receipts(0).is_none(),
        "answered on the old link's event, before its own"
    );
    b.progress(ms(3000));
    assert_eq!(b.stats().receipts_withheld, 2);
    assert!(b.receipts(0).is_none());
    assert!(b.stats().stale_async_events >= 1);
}

/// The target never hears `LAST_WQE_REACHED` (a provider without it, a
/// dead device): it keeps collecting until the deadline on the
/// `progress` clock, then gives up *without answering*, counts it,
/// reports `ReceiptsWithheld`, stops reading async events on every
/// step, and lets the rebuild go ahead.
#[test]
fn a_missing_last_wqe_ends_the_collection_at_its_deadline_unanswered() {
    let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 20);
    a.put(1, 0, &[1; 64], CTX).unwrap();
    quiet(&mut a).unwrap();
    b.progress(ms(0));
    f.suppress_last_wqe(true);
    b.peer_failed(0).unwrap();
    let _ = events(&mut b);
    for t in 1..300 {
        b.progress(ms(t));
    }
    assert!(b.receipts(0).is_none());
    assert!(
        matches!(b.rebuild(0, 1), Err(VerbsError::PeerDown { peer: 0 })),
        "still collecting before the deadline"
    );
    b.progress(ms(301));
    assert!(b.receipts(0).is_none(), "an answer without the event");
    assert_eq!(
        events(&mut b),
        vec![Event::ReceiptsWithheld {
            peer: 0,
            generation: 1,
            reason: Withheld::NoLastWqe { qp: 1 },
        }]
    );
    assert_eq!(b.stats().receipts_withheld, 1);
    assert_eq!(b.collecting, 0, "async events read on every step");
    f.suppress_last_wqe(false);
    b.rebuild(0, 1).expect("the rebuild goes ahead");
}

/// A data QP that cannot be moved to ERROR may still take the peer's
/// puts: the target does not collect (nor answer) at all.
#[test]
fn a_refused_modify_to_error_withholds_the_receipts() {
    let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 20);
    a.put(1, 0, &[1; 64], CTX).unwrap();
    quiet(&mut a).unwrap();
    b.progress(ms(0));
    f.refuse_error_state(true);
    b.peer_failed(0).unwrap();
    f.refuse_error_state(false);
    for t in 0..10 {
        b.progress(ms(t));
    }
    assert!(b.receipts(0).is_none(), "an answer it cannot trust");
    let ev = events(&mut b);
    assert!(
        ev.contains(&Event::ReceiptsWithheld {
            peer: 0,
            generation: 1,
            reason: Withheld::ModifyFailed { qp: 1 },
        }),
        "{ev:?}"
    );
    assert!(!ev.iter().any(|e| matches!(e, Event::Receipts { .. })));
    assert_eq!(b.stats().receipts_withheld, 1);
    assert_eq!(b.collecting, 0);
    b.rebuild(0, 1).expect("the rebuild goes ahead");
}
