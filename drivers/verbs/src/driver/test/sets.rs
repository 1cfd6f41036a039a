//! QP sets ([`VerbsDriver::open_set`]) on the fake HCA: two threads on
//! their own sets, a break of one set, a set dropped with operations in
//! flight, the PE driver dropped before its sets, the budget.

use std::{thread, time::Instant as Clock};

use super::*;
use crate::sets::SetBudget;

/// The seed both ends of set `k` agree on (the shim would derive it from
/// the job seed and the set's id).
fn set_seed(k: u64) -> u64 {
    7 ^ (k + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Opens set `k` of PE 0 toward PE 1 and the matching set of PE 1
/// toward PE 0, and connects them.
fn open_pair(
    a: &VerbsDriver,
    b: &VerbsDriver,
    k: u64,
    ba: &SetBudget,
    bb: &SetBudget,
) -> (VerbsDriver, VerbsDriver) {
    let mut sa = a.open_set(1, set_seed(k), ba).unwrap();
    let mut sb = b.open_set(0, set_seed(k), bb).unwrap();
    sa.set_peer_card(1, sb.card_for(0).unwrap()).unwrap();
    sb.set_peer_card(0, sa.card_for(1).unwrap()).unwrap();
    sb.connect(0).unwrap();
    sa.connect(1).unwrap();
    assert_eq!(
        sa.poll_event(),
        Some(Event::Link {
            peer: 1,
            state: LinkState::Up
        })
    );
    while sb.poll_event().is_some() {}
    (sa, sb)
}

fn qpns(d: &VerbsDriver, peer: u32) -> Vec<u32> {
    d.card_for(peer)
        .unwrap()
        .qps()
        .iter()
        .map(|q| q.qpn)
        .collect()
}

/// `d.put`, making progress while the queues are full (bounded).
fn put_retry(d: &mut VerbsDriver, peer: u32, off: u64, v: &[u8]) -> Result<()> {
    for _ in 0..100_000 {
        match d.put(peer, off, v, CTX) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                d.progress(Instant::default());
            }
            r => return r,
        }
    }
    panic!("the queues never drained");
}

fn word(d: &mut VerbsDriver, me: u32, off: u64) -> u64 {
    u64::from_le_bytes(get(d, me, off, 8).unwrap().try_into().unwrap())
}

#[test]
fn two_threads_post_on_their_own_sets_without_the_pe_driver() {
    let (mut a, mut b, _f) = pair(VerbsConfig::default(), 1 << 16);
    while a.poll_event().is_some() {}
    let (ba, bb) = (SetBudget::new(4), SetBudget::new(4));
    let (s0, mut t0) = open_pair(&a, &b, 0, &ba, &bb);
    let (s1, mut t1) = open_pair(&a, &b, 1, &ba, &bb);
    assert_eq!((ba.in_use(), bb.in_use()), (2, 2));
    assert_eq!(s0.set_peer(), Some(1));
    assert_eq!(a.set_peer(), None);
    // One heap registration: every set's card carries the PE's rkey.
    let rkey = a.card_for(1).unwrap().rkey;
    assert_eq!(s0.card_for(1).unwrap().rkey, rkey);
    assert_eq!(s1.card_for(1).unwrap().rkey, rkey);
    // Staging per QP as the PE driver's, not the whole `staging_bytes`.
    assert_eq!(s0.stage_per_qp, a.stage_per_qp);
    assert!(s0.stage_per_qp < u64::from(VerbsConfig::default().staging_bytes));
    // Their own QPs.
    let (q, q0, q1) = (qpns(&a, 1), qpns(&s0, 1), qpns(&s1, 1));
    assert!(q0.iter().all(|n| !q.contains(n) && !q1.contains(n)));
    // Fewer puts than the target sets' receive queues hold, so the
    // targets need no progress while the two threads run.
    let n = u64::from(t0.params().srq_depth / 4).min(1000);
    let run = |mut s: VerbsDriver, k: u64| {
        thread::spawn(move || {
            for i in 0..n {
                let v = k << 32 | i;
                put_retry(&mut s, 1, (k * n + i) * 8, &v.to_le_bytes()).unwrap();
            }
            quiet(&mut s).unwrap();
            s
        })
    };
    let (h0, h1) = (run(s0, 0), run(s1, 1));
    let (s0, s1) = (h0.join().unwrap(), h1.join().unwrap());
    for k in 0..2 {
        for i in 0..n {
            assert_eq!(
                word(&mut b, 1, (k * n + i) * 8),
                k << 32 | i,
                "set {k}, put {i}"
            );
        }
    }
    // The PE drivers carried none of it; each set carried its own.
    assert_eq!(a.stats().wrs, 0, "nothing posted on the PE's driver");
    assert!(s0.stats().wrs >= n && s1.stats().wrs >= n);
    for _ in 0..1000 {
        t0.progress(Instant::default());
        t1.progress(Instant::default());
        b.progress(Instant::default());
    }
    assert_eq!(t0.stats().receipts, n, "set 0's receipts at its own SRQ");
    assert_eq!(t1.stats().receipts, n);
    assert_eq!(b.stats().receipts, 0, "none at the PE's SRQ");
    drop((s0, s1));
    assert_eq!(ba.in_use(), 0, "closed sets give their budget back");
}

/// Where put `i` of set `k` goes, and what it writes.
fn off(k: u64, i: u64) -> u64 {
    (k * 1024 + i) * 8
}
fn stamp(k: u64, i: u64) -> u64 {
    (k + 1) << 32 | i
}

/// Streams `n` stamped puts of set `k` on `s` toward PE 1; with `cut`, its
/// QPs break before put `n / 3`, and the set fails over as the shim
/// would: the receipts of PE 1's matching set `t`, its replays exactly
/// once (each checked not landed before), then everything newer over
/// the fallback (a write into PE 1's heap, through `t`'s own-heap put).
/// Returns (the put at which the failure was seen, the replays).
fn stream(
    s: &mut VerbsDriver,
    t: &mut VerbsDriver,
    k: u64,
    n: u64,
    cut: Option<&Fabric>,
) -> (Option<u64>, u64) {
    stream_with(s, t, k, n, cut, &mut |s, t| {
        handshake(s, t, 0, 1);
    })
}

/// [`stream`] with the receipts handshake `hs`.
fn stream_with(
    s: &mut VerbsDriver,
    t: &mut VerbsDriver,
    k: u64,
    n: u64,
    cut: Option<&Fabric>,
    hs: &mut dyn FnMut(&mut VerbsDriver, &mut VerbsDriver),
) -> (Option<u64>, u64) {
    let mut failed_at = None;
    let mut replayed = 0u64;
    let fallback = |t: &mut VerbsDriver, i: u64| {
        t.put(1, off(k, i), &stamp(k, i).to_le_bytes(), CTX)
            .unwrap();
    };
    for i in 0..n {
        if i == n / 3
            && let Some(f) = cut
        {
            f.break_qps(&qpns(s, 1));
        }
        if failed_at.is_some() {
            fallback(t, i);
            continue;
        }
        match put_retry(s, 1, off(k, i), &stamp(k, i).to_le_bytes()) {
            Ok(()) => {
                // Progress now and then: puts before and after the break
                // are in doubt together.
                if i % 16 == 15 {
                    s.progress(Instant::default());
                }
                if s.state(1) != LinkState::Error {
                    continue;
                }
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::PeerDown),
        }
        failed_at = Some(i);
        hs(s, t);
        let mut again = Vec::new();
        s.drain_replays(|r| {
            if let Replay::Put { offset, bytes, .. } = r {
                again.push((offset, bytes.to_vec()));
            }
        });
        for (offset, bytes) in again {
            assert_eq!(
                word(t, 1, offset),
                0,
                "a put the receipts say did not land had not landed"
            );
            t.put(1, offset, &bytes, CTX).unwrap();
            replayed += 1;
        }
        s.drain_replays(|r| panic!("replayed twice: {r:?}"));
        // The refused put, if it was refused (one taken was in doubt,
        // and settled above).
        if word(t, 1, off(k, i)) == 0 {
            fallback(t, i);
        }
    }
    if failed_at.is_none() {
        quiet(s).unwrap();
    }
    (failed_at, replayed)
}

/// Set 1's QPs break a third of the way in: set 1 fails over (receipts,
/// replays exactly once, the rest over the fallback), set 0 and the PE's
/// driver never notice.
#[test]
fn a_break_of_one_set_fails_over_that_set_only() {
    let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 16);
    while a.poll_event().is_some() {}
    let (ba, bb) = (SetBudget::new(2), SetBudget::new(2));
    let (mut s0, mut t0) = open_pair(&a, &b, 0, &ba, &bb);
    let (mut s1, mut t1) = open_pair(&a, &b, 1, &ba, &bb);
    const N: u64 = 300;
    assert_eq!(stream(&mut s0, &mut t0, 0, N / 3, None), (None, 0));
    let (failed_at, replayed) = stream(&mut s1, &mut t1, 1, N, Some(&f));
    let failed_at = failed_at.expect("set 1 noticed its break");
    assert!(failed_at >= N / 3, "not before the break");
    assert!(replayed > 0, "the puts after the break were replayed");
    // Set 0 carries on after set 1's failure.
    for i in N / 3..N {
        put_retry(&mut s0, 1, off(0, i), &stamp(0, i).to_le_bytes()).unwrap();
    }
    quiet(&mut s0).unwrap();
    for k in 0..2 {
        for i in 0..N {
            assert_eq!(word(&mut b, 1, off(k, i)), stamp(k, i), "set {k}, put {i}");
        }
    }
    assert_eq!(s1.stats().replays, replayed);
    assert_eq!(s1.stats().peer_failures, 1);
    assert_eq!(s0.stats().peer_failures, 0, "set 0 is untouched");
    assert_eq!(s0.state(1), LinkState::Up);
    assert_eq!(a.state(1), LinkState::Up, "the PE's driver is untouched");
    assert_eq!(a.stats().peer_failures, 0);
    // The PE's driver still carries operations to PE 1.
    a.put(1, 4096 * 8, b"shared", CTX).unwrap();
    quiet(&mut a).unwrap();
    assert_eq!(get(&mut a, 1, 4096 * 8, 6).unwrap(), b"shared");
}

/// The same with two threads at once, each on its own set (and failing
/// over its own): set 1 breaks a third of the way in while set 0 streams.
#[test]
fn two_threads_one_set_broken_mid_stream() {
    let (a, mut b, f) = pair(VerbsConfig::default(), 1 << 16);
    let (ba, bb) = (SetBudget::new(2), SetBudget::new(2));
    let p0 = open_pair(&a, &b, 0, &ba, &bb);
    let p1 = open_pair(&a, &b, 1, &ba, &bb);
    let n = u64::from(p0.1.params().srq_depth / 4).min(1000);
    let h0 = thread::spawn(move || {
        let (mut s, mut t) = p0;
        let r = stream(&mut s, &mut t, 0, n, None);
        (r, s)
    });
    let h1 = thread::spawn(move || {
        let (mut s, mut t) = p1;
        let r = stream(&mut s, &mut t, 1, n, Some(&f));
        (r, s)
    });
    let ((r0, s0), (r1, s1)) = (h0.join().unwrap(), h1.join().unwrap());
    assert_eq!(r0, (None, 0), "set 0 never failed");
    assert!(r1.0.is_some_and(|i| i >= n / 3) && r1.1 > 0, "{r1:?}");
    for k in 0..2 {
        for i in 0..n {
            assert_eq!(word(&mut b, 1, off(k, i)), stamp(k, i), "set {k}, put {i}");
        }
    }
    assert_eq!(s0.stats().peer_failures, 0);
    assert_eq!(s1.stats().peer_failures, 1);
    assert_eq!(a.stats().wrs, 0, "nothing on the PE's driver");
}

/// With the device's async events read by the PE's driver only (as on
/// hardware), a broken set still gets its receipts: the PE driver of the
/// target leaves the last-WQE events of its set's QPs in the set's
/// mailbox, and reads them every step while the set collects.
#[test]
fn device_events_reach_a_set_through_its_mailbox() {
    let (a, mut b, f) = pair(VerbsConfig::default(), 1 << 16);
    f.device_events(true);
    let (ba, bb) = (SetBudget::new(1), SetBudget::new(1));
    let (mut s, mut t) = open_pair(&a, &b, 0, &ba, &bb);
    let mut receipts_came = false;
    let (failed_at, replayed) = stream_with(&mut s, &mut t, 0, 300, Some(&f), &mut |s, t| {
        t.peer_failed(0).unwrap();
        for _ in 0..1000 {
            // The PE's driver reads the device's events (the set cannot).
            b.progress(Instant::default());
            t.progress(Instant::default());
            if let Some((generation, r)) = t.receipts(0) {
                s.settle_receipts(1, generation, r.as_slice()).unwrap();
                receipts_came = true;
                return;
            }
        }
    });
    assert!(failed_at.is_some() && replayed > 0);
    assert!(receipts_came, "the set collected its receipts");
    assert_eq!(t.stats().receipts_withheld, 0);
    assert!(t.stats().async_events > 0, "events through the mailbox");
    assert!(b.stats().async_events > 0, "read by the PE's driver");
    assert_eq!(b.stats().stale_async_events, 0, "none taken for its own");
    assert_eq!(b.state(0), LinkState::Up, "the PE's link untouched");
    for i in 0..300 {
        assert_eq!(word(&mut b, 1, off(0, i)), stamp(0, i), "put {i}");
    }
    // A dead device fails the PE's driver and, through the mailbox,
    // every set.
    b.fake_device_fatal();
    for _ in 0..2 * ASYNC_EVERY {
        b.progress(Instant::default());
        t.progress(Instant::default());
    }
    let mut seen = (false, false);
    while let Some(e) = b.poll_event() {
        seen.0 |= e == Event::DeviceFatal;
    }
    while let Some(e) = t.poll_event() {
        seen.1 |= e == Event::DeviceFatal;
    }
    assert_eq!(seen, (true, true), "the PE's driver and its set");
    assert_eq!(t.state(0), LinkState::Error);
}

/// A loss is the failed set's own: when the target's PE driver does not
/// progress while its set collects (device events on), the set withholds
/// its receipts at the deadline and the initiator's set alone counts its
/// puts in doubt as lost; the other set's quiet and its abandon find
/// nothing.
#[test]
fn a_loss_is_counted_by_the_failed_set_only() {
    let (a, b, f) = pair(VerbsConfig::default(), 1 << 16);
    f.device_events(true);
    let (ba, bb) = (SetBudget::new(2), SetBudget::new(2));
    let (mut s0, _t0) = open_pair(&a, &b, 0, &ba, &bb);
    let (mut s1, mut t1) = open_pair(&a, &b, 1, &ba, &bb);
    s0.put(1, 0, b"kept", CTX).unwrap();
    f.break_qps(&qpns(&s1, 1));
    s1.put(1, 64, b"one", CTX).unwrap();
    s1.put(1, 72, b"two", CTX).unwrap();
    assert_eq!(quiet(&mut s1).unwrap_err().kind(), ErrorKind::PeerDown);
    assert!(s1.awaits_receipts(1));
    t1.peer_failed(0).unwrap();
    // Only the set progresses (not PE 1's driver): no last-WQE events.
    let deadline = u64::from(VerbsConfig::default().collect_timeout_ms) * 1_000_000;
    let mut withheld = false;
    for step in 0..=10u64 {
        t1.progress(Instant::from_nanos(step * deadline / 5));
        while let Some(e) = t1.poll_event() {
            withheld |= matches!(e, Event::ReceiptsWithheld { peer: 0, .. });
        }
    }
    assert!(withheld, "withheld at the deadline, never guessed");
    assert_eq!(t1.receipts(0), None);
    assert_eq!(s1.abandon_receipts(1), 2, "the failed set's puts");
    quiet(&mut s0).unwrap();
    assert_eq!(s0.abandon_receipts(1), 0, "nothing of the other set");
    assert_eq!(s0.stats().receipts_abandoned, 0);
    assert_eq!(get(&mut s0, 1, 0, 4).unwrap(), b"kept");
}

/// A link failure of the whole port (every QP breaks) fails every set and
/// the PE's driver alike; each settles its own puts, and each rebuilds on
/// its own.
#[test]
fn a_cut_of_every_link_fails_every_set_and_each_rebuilds() {
    let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 16);
    while a.poll_event().is_some() {}
    let (ba, bb) = (SetBudget::new(2), SetBudget::new(2));
    let (mut s0, mut t0) = open_pair(&a, &b, 0, &ba, &bb);
    f.break_links();
    a.put(1, 0, b"pe", CTX).unwrap();
    s0.put(1, 8, b"set", CTX).unwrap();
    assert_eq!(quiet(&mut a).unwrap_err().kind(), ErrorKind::PeerDown);
    assert_eq!(quiet(&mut s0).unwrap_err().kind(), ErrorKind::PeerDown);
    assert_eq!(a.state(1), LinkState::Error);
    assert_eq!(s0.state(1), LinkState::Error);
    // Each settles its own in-doubt puts with its own peer's receipts.
    assert_eq!(handshake(&mut a, &mut b, 0, 1), 0);
    assert_eq!(handshake(&mut s0, &mut t0, 0, 1), 0);
    let (mut ra, mut rs) = (Vec::new(), Vec::new());
    a.drain_replays(|r| ra.push(format!("{r:?}")));
    s0.drain_replays(|r| rs.push(format!("{r:?}")));
    assert_eq!((ra.len(), rs.len()), (1, 1), "{ra:?} {rs:?}");
    assert!(ra[0].contains("offset: 0") && rs[0].contains("offset: 8"));
    // Each rebuilds to its own generation 1, with its own PSNs.
    f.heal();
    for (x, y) in [(&mut a, &mut b), (&mut s0, &mut t0)] {
        while x.poll_event().is_some() {}
        y.drain_replays(|_| {});
        x.rebuild(1, 1).unwrap();
        y.rebuild(0, 1).unwrap();
        x.peer_rebuilt(1, 1).unwrap();
        y.peer_rebuilt(0, 1).unwrap();
    }
    s0.put(1, 16, b"set again", CTX).unwrap();
    quiet(&mut s0).unwrap();
    a.put(1, 32, b"pe again", CTX).unwrap();
    quiet(&mut a).unwrap();
    assert_eq!(get(&mut a, 1, 16, 9).unwrap(), b"set again");
    assert_eq!(get(&mut s0, 1, 32, 8).unwrap(), b"pe again");
}

#[test]
fn a_set_dropped_with_operations_in_flight_leaves_the_rest_working() {
    let (mut a, mut b, _f) = pair(VerbsConfig::default(), 1 << 16);
    while a.poll_event().is_some() {}
    let (ba, bb) = (SetBudget::new(1), SetBudget::new(1));
    let (mut s, mut t) = open_pair(&a, &b, 0, &ba, &bb);
    for i in 0..50u64 {
        put_retry(&mut s, 1, i * 8, &(i + 1).to_le_bytes()).unwrap();
    }
    // No quiet: some WRs still batched, some signaled ones not polled.
    drop(s);
    assert_eq!(ba.in_use(), 0);
    t.progress(Instant::default());
    assert!(t.stats().receipts <= 50);
    // Whatever landed landed whole and in order (one data QP per block).
    let landed = (0..50u64)
        .take_while(|&i| word(&mut b, 1, i * 8) == i + 1)
        .count() as u64;
    assert!((landed..50).all(|i| word(&mut b, 1, i * 8) == 0));
    // The PE's driver, and a new set on the freed budget, work.
    a.put(1, 1024, b"after", CTX).unwrap();
    quiet(&mut a).unwrap();
    assert_eq!(get(&mut a, 1, 1024, 5).unwrap(), b"after");
    drop(t);
    let (mut s, _t) = open_pair(&a, &b, 1, &ba, &bb);
    s.put(1, 2048, b"again", CTX).unwrap();
    quiet(&mut s).unwrap();
    assert_eq!(get(&mut s, 1, 2048, 5).unwrap(), b"again");
}

/// A set holds the PE's heap registration and heap: dropping the PE's
/// driver first leaves the set working.
#[test]
fn a_set_outlives_the_pe_driver() {
    let (a, b, _f) = pair(VerbsConfig::default(), 1 << 16);
    let (ba, bb) = (SetBudget::new(1), SetBudget::new(1));
    let (mut s, _t) = open_pair(&a, &b, 0, &ba, &bb);
    drop(a);
    s.put(1, 64, b"still here", CTX).unwrap();
    quiet(&mut s).unwrap();
    assert_eq!(get(&mut s, 1, 64, 10).unwrap(), b"still here");
    // A get into this PE's own heap (its registration, kept by the set).
    s.put(0, 0, b"mine", CTX).unwrap();
    assert_eq!(get(&mut s, 0, 0, 4).unwrap(), b"mine");
}

#[test]
fn past_the_budget_a_set_is_refused_and_the_pe_driver_serves() {
    let (mut a, b, _f) = pair(VerbsConfig::default(), 1 << 16);
    while a.poll_event().is_some() {}
    let (ba, bb) = (SetBudget::new(1), SetBudget::new(4));
    let (s, _t) = open_pair(&a, &b, 0, &ba, &bb);
    let Err(e) = a.open_set(1, set_seed(1), &ba) else {
        panic!("a set past the budget");
    };
    assert!(
        matches!(e, VerbsError::NoSetLeft { peer: 1, max: 1 }),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert_eq!(ba.in_use(), 1, "a refusal takes nothing");
    // The fallback: the PE's driver.
    a.put(1, 0, b"shared", CTX).unwrap();
    quiet(&mut a).unwrap();
    assert_eq!(get(&mut a, 1, 0, 6).unwrap(), b"shared");
    // A set has QPs toward its peer only; none toward this PE.
    assert!(matches!(
        s.open_set(0, 1, &bb),
        Err(VerbsError::InvalidPe { peer: 0, .. })
    ));
    assert!(matches!(
        a.open_set(0, 1, &bb),
        Err(VerbsError::InvalidPe { peer: 0, .. })
    ));
    assert_eq!(bb.in_use(), 1, "refused opens take nothing");
    drop(s);
    assert!(
        a.open_set(1, set_seed(1), &ba).is_ok(),
        "the budget came back"
    );
}

/// A set's data path (puts inline and staged, a get, a fetch-add, fence,
/// quiet, progress on both ends) allocates nothing once warm (the first
/// pass warms the fake HCA's queues).
#[test]
fn a_sets_data_path_does_not_allocate() {
    let (a, b, _f) = pair(VerbsConfig::default(), 1 << 16);
    let (ba, bb) = (SetBudget::new(1), SetBudget::new(1));
    let (mut s, mut t) = open_pair(&a, &b, 0, &ba, &bb);
    let long = [7u8; 4096];
    let mut out = [0u8; 64];
    let mut pass = |s: &mut VerbsDriver, t: &mut VerbsDriver| {
        for i in 0..200u64 {
            put_retry(s, 1, i % 64 * 8, &i.to_le_bytes()).unwrap();
            put_retry(s, 1, 8192, &long).unwrap();
            if i % 16 == 0 {
                let g = s.get_start(1, 0, 64, CTX).unwrap();
                while !s.get_poll(&g, &mut out).unwrap() {}
                fadd(s, 4096, 1).unwrap();
                s.fence().unwrap();
            }
            t.progress(Instant::default());
        }
        for _ in 0..1000 {
            if s.quiet_poll().unwrap() {
                break;
            }
        }
        for _ in 0..100 {
            t.progress(Instant::default());
        }
    };
    pass(&mut s, &mut t);
    let ((), n) = crate::test_alloc::counting(|| pass(&mut s, &mut t));
    assert_eq!(n, 0, "{n} allocations on a set's data path");
    assert_eq!(word(&mut s, 1, 4096), 26, "both passes' fetch-adds");
}

/// Not a test: the figure for the changelog. Two threads each put
/// 8 bytes `ROUNDS * n` times toward PE 1, on the fake HCA: on the PE's
/// one driver behind a mutex (as contexts share it behind the entry
/// lock), then each on its own set. The fake HCA serialises every post
/// on one mutex of its own, so this measures the driver-side cost and
/// the lock handover, not a NIC.
/// `cargo test -p switchyard-verbs --release --lib sets::figure -- --ignored --nocapture`
#[test]
#[ignore = "a measurement, not a check"]
fn figure_two_threads_put_8_bytes_shared_vs_own_sets() {
    use std::sync::{Arc, Barrier, Mutex};
    const ROUNDS: u64 = 20;
    let (a, mut b, _f) = pair(VerbsConfig::default(), 1 << 16);
    let n = u64::from(b.params().srq_depth / 4).min(1000);
    let shared = Arc::new(Mutex::new(a));
    let mut t_shared = Vec::new();
    for _ in 0..ROUNDS {
        let bar = Arc::new(Barrier::new(2));
        let hs: Vec<_> = (0..2u64)
            .map(|k| {
                let (d, bar) = (shared.clone(), bar.clone());
                thread::spawn(move || {
                    bar.wait();
                    let t = Clock::now();
                    for i in 0..n {
                        let mut g = d.lock().unwrap();
                        put_retry(&mut g, 1, (k * n + i) * 8, &i.to_le_bytes()).unwrap();
                    }
                    quiet(&mut d.lock().unwrap()).unwrap();
                    t.elapsed()
                })
            })
            .collect();
        t_shared.push(hs.into_iter().map(|h| h.join().unwrap()).max().unwrap());
        for _ in 0..1000 {
            b.progress(Instant::default());
        }
    }
    let a = Arc::into_inner(shared).unwrap().into_inner().unwrap();
    let (ba, bb) = (SetBudget::new(2), SetBudget::new(2));
    let mut sets: Vec<_> = (0..2).map(|k| open_pair(&a, &b, k, &ba, &bb)).collect();
    let mut t_own = Vec::new();
    for _ in 0..ROUNDS {
        let bar = Arc::new(Barrier::new(2));
        let hs: Vec<_> = sets
            .drain(..)
            .enumerate()
            .map(|(k, (mut s, t))| {
                let bar = bar.clone();
                let k = k as u64;
                thread::spawn(move || {
                    bar.wait();
                    let c = Clock::now();
                    for i in 0..n {
                        put_retry(&mut s, 1, (k * n + i) * 8, &i.to_le_bytes()).unwrap();
                    }
                    quiet(&mut s).unwrap();
                    (c.elapsed(), s, t)
                })
            })
            .collect();
        let mut worst = std::time::Duration::ZERO;
        for h in hs {
            let (d, s, mut t) = h.join().unwrap();
            worst = worst.max(d);
            for _ in 0..1000 {
                t.progress(Instant::default());
            }
            sets.push((s, t));
        }
        t_own.push(worst);
    }
    // Per round: the slower thread's time over both threads' puts; the
    // median round (the machine may be shared).
    let per = |mut v: Vec<std::time::Duration>| {
        v.sort();
        v[v.len() / 2].as_nanos() as f64 / (n * 2) as f64
    };
    println!(
        "two threads, 8-byte puts, fake HCA, median of {ROUNDS} rounds of {n} puts per thread: shared driver + mutex {:.0} ns/put, own QP sets {:.0} ns/put",
        per(t_shared),
        per(t_own),
    );
}
