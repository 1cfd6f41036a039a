//! The backlog report on the fake HCA ([`VerbsDriver::backlog`]): it rises
//! with puts and gets while nothing is progressed, falls to 0 after quiet,
//! reaches the capacity when the target stops taking puts, is 0 after a
//! failure (the puts in doubt wait in the replays, not in a send queue),
//! and always equals what the send queues hold.

use switchyard_core::route::LoadWatermark;

use super::*;

/// What the data QPs' send queues of `peer` hold, recounted from the
/// records (the slow way the backlog's counters stand for).
fn recount(d: &VerbsDriver, peer: u32) -> (u32, u64) {
    let pe = d.peers.get(peer).unwrap();
    let (mut wrs, mut bytes) = (0u32, 0u64);
    for q in pe.qps.iter().skip(1) {
        let depth = q.records.len() as u64;
        let first = q.sq.posted() - q.sq.outstanding();
        for i in first..q.sq.posted() {
            wrs += 1;
            bytes += u64::from(q.records[(i % depth) as usize].what.bytes());
        }
    }
    (wrs, bytes)
}

/// The backlog, checked against the recount.
fn backlog(d: &VerbsDriver, peer: u32) -> Backlog {
    let b = d.backlog(peer).unwrap();
    assert_eq!((b.wrs, b.bytes), recount(d, peer), "counters in step");
    b
}

fn shallow() -> VerbsConfig {
    VerbsConfig {
        data_qps: Some(2),
        sq_depth: Some(16),
        signal_every: Some(4),
        cq_depth: Some(256),
        srq_depth: Some(crate::params::MIN_SRQ_DEPTH),
        ..VerbsConfig::default()
    }
}

#[test]
fn the_backlog_rises_with_puts_and_gets_and_is_zero_after_quiet() {
    let (mut a, _b, _f) = pair(shallow(), 1 << 20);
    let empty = Backlog {
        wrs: 0,
        bytes: 0,
        capacity_wrs: 2 * 15,
    };
    assert_eq!(backlog(&a, 1), empty);
    assert_eq!(a.backlog(0), None, "this PE");
    assert_eq!(a.backlog(2), None, "outside the job");
    // Batched, then posted: counted until a completion is polled.
    for i in 0..5u64 {
        a.put(1, i * 8, &[1; 100], CTX).unwrap();
        assert_eq!(backlog(&a, 1).wrs, i as u32 + 1);
    }
    assert_eq!(backlog(&a, 1).bytes, 500);
    a.post_batches();
    assert_eq!((backlog(&a, 1).wrs, backlog(&a, 1).bytes), (5, 500));
    // A put over two blocks is two WRs on two data QPs; gets count too.
    a.put(1, BLOCK - 10, &[2; 30], CTX).unwrap();
    a.get_into_heap(1, 0, 4096, 64, CTX).unwrap();
    assert_eq!((backlog(&a, 1).wrs, backlog(&a, 1).bytes), (8, 594));
    // Atomics use the control QP: not counted.
    let before = backlog(&a, 1);
    let op = AtomicOp {
        kind: AtomicKind::Set,
        width: AtomicWidth::W64,
        operand: 1,
        compare: 0,
        fetch: true,
    };
    a.atomic_start(1, 800_000, op, CTX).unwrap();
    assert_eq!(backlog(&a, 1), before);
    quiet(&mut a).unwrap();
    assert_eq!(backlog(&a, 1), empty);
    // A get into a ticket: its READ is counted until polled done.
    let t = a.get_start(1, 0, 8, CTX).unwrap();
    assert_eq!((backlog(&a, 1).wrs, backlog(&a, 1).bytes), (1, 8));
    let mut out = [0u8; 8];
    while !a.get_poll(&t, &mut out).unwrap() {}
    assert_eq!(out, [1; 8]);
    assert_eq!(backlog(&a, 1), empty);
    a.close().unwrap();
    assert_eq!(a.backlog(1), None, "closed");
}

/// The target stops re-posting receives (it never progresses): the puts
/// after its shared receive queue ran dry wait (RNR), no completion comes,
/// and the puts block when the backlog reaches the capacity. Once the
/// target progresses, quiet brings it back to 0.
#[test]
fn the_backlog_reaches_the_capacity_when_the_target_stops() {
    let (mut a, mut b, f) = pair(shallow(), 1 << 20);
    let cap = backlog(&a, 1).capacity_wrs;
    let mut blocked = [false; 2];
    let mut i = 0u64;
    while blocked != [true, true] {
        let off = (i % 2) * BLOCK + (i / 2) * 8;
        i += 1;
        match a.put(1, off, &i.to_le_bytes(), CTX) {
            Ok(()) => {}
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e}");
                blocked[(off / BLOCK) as usize] = true;
            }
        }
        let now = backlog(&a, 1);
        assert!(now.wrs <= cap + 2, "at most a marker per QP over: {now:?}");
        assert!(i < 10_000, "the puts never blocked: {now:?}");
    }
    assert!(f.rnr_waiting() > 0, "the target's receives ran dry");
    let full = backlog(&a, 1);
    assert!(full.wrs >= cap, "blocked at the capacity: {full:?}");
    assert!(full.exceeded(LoadWatermark { per_mille: 750 }));
    assert!(full.exceeded(LoadWatermark { per_mille: 999 }));
    // The target progresses: its receives come back, the puts run.
    for _ in 0..100 {
        b.progress(Instant::default());
        a.progress(Instant::default());
        if a.quiet_poll().unwrap() {
            break;
        }
    }
    quiet(&mut a).unwrap();
    let after = backlog(&a, 1);
    assert_eq!((after.wrs, after.bytes), (0, 0));
    assert!(!after.exceeded(LoadWatermark { per_mille: 1 }));
    assert_eq!(a.stats().completion_errors, 0);
}

/// A failure resets the send queues: the backlog is 0 while the puts in
/// doubt wait in the replays for the receipts, stays 0 through the
/// handshake and the rebuild, and counts again from 0 afterwards; the
/// flush completions of the failed incarnation take nothing off.
#[test]
fn the_backlog_is_zero_after_a_failure_and_counts_again_after_the_rebuild() {
    let (mut a, mut b, f) = pair(VerbsConfig::default(), 1 << 16);
    while a.poll_event().is_some() {}
    a.put(1, 0, b"landed", CTX).unwrap();
    quiet(&mut a).unwrap();
    // The next message lands but its ack is lost: an error completion
    // and flushes; the put is in doubt.
    f.lose_ack_after(0);
    a.put(1, 100, b"in doubt", CTX).unwrap();
    a.put(1, 200, b"behind it", CTX).unwrap();
    assert_eq!(backlog(&a, 1).wrs, 2);
    assert_eq!(quiet(&mut a).unwrap_err().kind(), ErrorKind::PeerDown);
    assert!(a.awaits_receipts(1), "puts in doubt are held");
    let zero = backlog(&a, 1);
    assert_eq!((zero.wrs, zero.bytes), (0, 0), "not send-queue backlog");
    // Stale completions of the failed incarnation: nothing underflows.
    for _ in 0..10 {
        a.progress(Instant::default());
    }
    assert_eq!(backlog(&a, 1), zero);
    let landed = handshake(&mut a, &mut b, 0, 1);
    assert_eq!(landed, 1, "the put whose ack was lost had landed");
    let mut replays = 0;
    a.drain_replays(|_| replays += 1);
    assert_eq!(replays, 1);
    assert_eq!(backlog(&a, 1), zero);
    a.rebuild(1, 1).unwrap();
    b.drain_replays(|_| {});
    b.rebuild(0, 1).unwrap();
    a.peer_rebuilt(1, 1).unwrap();
    b.peer_rebuilt(0, 1).unwrap();
    assert_eq!(backlog(&a, 1), zero);
    a.put(1, 300, b"after", CTX).unwrap();
    assert_eq!((backlog(&a, 1).wrs, backlog(&a, 1).bytes), (1, 5));
    quiet(&mut a).unwrap();
    assert_eq!(backlog(&a, 1), zero);
    assert_eq!(get(&mut a, 1, 300, 5).unwrap(), b"after");
}

/// Random puts, gets, doorbells and progress steps of both sides, the
/// target pausing every other 200 steps (its receives run dry, the puts
/// block): after every step the counters equal the send queues' contents
/// (so they never wrapped below zero).
#[test]
fn the_backlog_stays_in_step_with_the_send_queues() {
    let (mut a, mut b, f) = pair(shallow(), 1 << 20);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let cap = backlog(&a, 1).capacity_wrs;
    let mut peak = 0;
    for step in 0..1600 {
        let r = rand();
        let off = (r >> 8) % ((1 << 20) - 200);
        let r2 = rand();
        let len = (r2 % 200) as usize;
        let res = match r % 8 {
            0..=2 => a.put(1, off, &vec![r as u8; len], CTX),
            3 => a.put_from_heap(1, off, 0, len as u32, CTX),
            4 => a.get_into_heap(1, off, 0, len as u32, CTX),
            5 => {
                a.post_batches();
                Ok(())
            }
            6 => {
                a.progress(Instant::default());
                Ok(())
            }
            _ => {
                if (step / 200) % 2 == 0 {
                    b.progress(Instant::default());
                }
                Ok(())
            }
        };
        if let Err(e) = res {
            assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e}");
        }
        let now = backlog(&a, 1);
        assert!(now.wrs <= cap + 2, "{now:?}");
        peak = peak.max(now.wrs);
    }
    assert!(peak >= cap, "the test filled the link: {peak}");
    assert!(f.rnr_naks() > 0, "and the target's receives ran dry");
    for _ in 0..100 {
        b.progress(Instant::default());
        if a.quiet_poll().unwrap() {
            break;
        }
    }
    quiet(&mut a).unwrap();
    assert_eq!(backlog(&a, 1).wrs, 0);
}
