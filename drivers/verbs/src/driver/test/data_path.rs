//! The data path on the fake HCA: batching and doorbells, staging, blocks
//! and data QPs, back pressure, selective signaling, fences, close.

use super::*;

#[test]
fn data_path_on_the_fake_hca() {
    let (mut a, _b, f) = pair(VerbsConfig::default(), 1 << 20);
    // Small puts are batched (one doorbell for many), then signaled.
    let before = f.posts();
    for i in 0..10u64 {
        a.put(1, i * 8, &i.to_le_bytes(), CTX).unwrap();
    }
    assert_eq!(f.posts(), before, "batched until progress or quiet");
    quiet(&mut a).unwrap();
    assert_eq!(
        f.posts(),
        before + 1,
        "one doorbell for the batch (and its marker)"
    );
    let s = a.stats();
    assert_eq!(s.inline_wrs, 10);
    assert_eq!(s.markers, 1);
    for i in 0..10u64 {
        assert_eq!(get(&mut a, 1, i * 8, 8).unwrap(), i.to_le_bytes());
    }
    // A put across three 64 KiB blocks, from staging; then from the heap.
    let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    a.put(1, 1000, &big, CTX).unwrap();
    quiet(&mut a).unwrap();
    let mut back = Vec::new();
    let mut off = 1000u64;
    while back.len() < big.len() {
        let n = (big.len() - back.len()).min(a.max_get_len() as usize) as u32;
        back.extend(get(&mut a, 1, off, n).unwrap());
        off += u64::from(n);
    }
    assert_eq!(back, big);
    a.put(0, 500_000, b"from my heap", CTX).unwrap();
    a.put_from_heap(1, 600_000, 500_000, 12, CTX).unwrap();
    a.get_into_heap(1, 600_000, 700_000, 12, CTX).unwrap();
    quiet(&mut a).unwrap();
    assert_eq!(get(&mut a, 0, 700_000, 12).unwrap(), b"from my heap");
    // Atomics: native fetch-add, emulated swap and 32-bit ops.
    assert_eq!(fadd(&mut a, 800_000, 5).unwrap(), 0);
    assert_eq!(fadd(&mut a, 800_000, 5).unwrap(), 5);
    let swap = AtomicOp {
        kind: AtomicKind::Swap,
        width: AtomicWidth::W32,
        operand: 9,
        compare: 0,
        fetch: true,
    };
    let t = a.atomic_start(1, 800_004, swap, CTX).unwrap();
    while a.atomic_poll(&t).unwrap().is_none() {}
    assert_eq!(
        get(&mut a, 1, 800_000, 8).unwrap(),
        (10u64 | 9 << 32).to_le_bytes()
    );
    // Bounds, alignment, unknown PE.
    let e = a.put(1, (1 << 20) - 4, &[0; 8], CTX).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfBounds);
    assert_eq!(
        fadd(&mut a, 4, 1).unwrap_err().kind(),
        ErrorKind::Misaligned
    );
    assert_eq!(
        a.put(5, 0, &[1], CTX).unwrap_err().kind(),
        ErrorKind::InvalidPe
    );
    assert_eq!(a.stats().completion_errors, 0);
}

/// Non-fetching atomics of fetching kinds (`fetch: false`: a native 64-bit
/// add, an emulated 32-bit XOR), far more than the driver has tickets, never
/// polled: each ticket is freed by the op's completion, `quiet` waits for
/// them, every one applied once, and every ticket is free afterwards.
#[test]
fn non_fetching_atomics_free_their_tickets_by_completion() {
    let (mut a, _b, _f) = pair(VerbsConfig::default(), 1 << 20);
    let tickets = a.tickets.len();
    let n = 4 * tickets as u64 + 3;
    let add = AtomicOp {
        kind: AtomicKind::FetchAdd,
        width: AtomicWidth::W64,
        operand: 3,
        compare: 0,
        fetch: false,
    };
    let xor = |i: u64| AtomicOp {
        kind: AtomicKind::FetchXor,
        width: AtomicWidth::W32,
        operand: 1 << (i % 32),
        compare: 0,
        fetch: false,
    };
    let mut bits = 0u64;
    for i in 0..2 * n {
        let (off, op) = if i % 2 == 0 {
            (800_000, add)
        } else {
            bits ^= 1 << (i / 2 % 32);
            (800_012, xor(i / 2))
        };
        let mut tries = 0;
        loop {
            match a.atomic_start(1, off, op, CTX) {
                Ok(_) => break,
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::WouldBlock, "{e}");
                    tries += 1;
                    assert!(tries < 100_000, "no ticket came back");
                    a.progress(Instant::default());
                }
            }
        }
    }
    quiet(&mut a).unwrap();
    assert_eq!(a.free_list.n, tickets, "a ticket was kept");
    assert_eq!(fadd(&mut a, 800_000, 0).unwrap(), 3 * n);
    assert_eq!(
        get(&mut a, 1, 800_008, 8).unwrap(),
        (bits << 32).to_le_bytes(),
        "an XOR lost or applied twice (or its word's other half touched)"
    );
    assert_eq!(a.stats().completion_errors, 0);
}

#[test]
fn back_pressure_and_signaling_on_a_shallow_queue() {
    let cfg = VerbsConfig {
        template: Template::Storage,
        data_qps: Some(3),
        sq_depth: Some(8),
        signal_every: Some(4),
        cq_depth: Some(8),
        ..VerbsConfig::default()
    };
    let (mut a, _b, _f) = pair(cfg, 1 << 20);
    // Far more puts than the queues hold: room is made by polling.
    for i in 0..2000u64 {
        a.put(1, (i * 4096) % (1 << 20), &[i as u8; 100], CTX)
            .unwrap();
    }
    quiet(&mut a).unwrap();
    let s = a.stats();
    assert!(
        s.signaled * 4 >= s.wrs - s.markers,
        "every 4th signaled: {s:?}"
    );
    assert!(s.signaled < s.wrs, "not every WR signaled: {s:?}");
    // Fence: a flag after the data, data on another QP's block.
    for i in 1..=50u8 {
        a.put(1, 0, &[i; 64], CTX).unwrap();
        a.fence().unwrap();
        a.put(1, 70_000, &[i], CTX).unwrap();
    }
    quiet(&mut a).unwrap();
    assert_eq!(get(&mut a, 1, 70_000, 1).unwrap(), [50]);
    assert_eq!(get(&mut a, 1, 0, 64).unwrap(), [50; 64]);
    assert!(a.stats().fence_waits > 0 || a.stats().markers > 0);
}

#[test]
fn a_get_straddling_two_blocks_sees_earlier_puts_to_both() {
    let cfg = VerbsConfig {
        data_qps: Some(2),
        ..VerbsConfig::default()
    };
    let (mut a, _b, _f) = pair(cfg, 1 << 20);
    // Bytes 65530..65542 straddle blocks 0 and 1 (data QPs 1 and 2).
    a.put(1, 65_530, &[1; 6], CTX).unwrap();
    a.put(1, BLOCK, &[2; 6], CTX).unwrap();
    let got = get(&mut a, 1, 65_530, 12).unwrap();
    assert_eq!(got, [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2]);
}

#[test]
fn progress_rings_the_doorbell_for_left_batches() {
    let (mut a, _b, f) = pair(VerbsConfig::default(), 1 << 16);
    let before = f.posts();
    a.put(1, 0, b"batched", CTX).unwrap();
    assert_eq!(a.progress(Instant::default()), PollResult::Busy);
    assert_eq!(f.posts(), before + 1);
    assert_eq!(a.progress(Instant::default()), PollResult::Idle);
    assert_eq!(f.posts(), before + 1, "nothing left to post");
    quiet(&mut a).unwrap();
    assert_eq!(get(&mut a, 1, 0, 7).unwrap(), b"batched");
}

#[test]
fn post_batches_posts_every_left_batch_once_and_only_those() {
    let cfg = VerbsConfig {
        data_qps: Some(2),
        ..VerbsConfig::default()
    };
    let (mut a, _b, f) = pair(cfg, 1 << 18);
    assert!(!a.post_batches(), "nothing batched");
    let before = f.posts();
    // Two blocks (two data QPs), twice each: two batches.
    for off in [0u64, 8, 1 << 16, (1 << 16) + 8] {
        a.put(1, off, b"left", CTX).unwrap();
    }
    assert_eq!(f.posts(), before, "batched, not posted yet");
    assert!(a.post_batches());
    assert_eq!(f.posts(), before + 2, "one doorbell per QP");
    assert!(!a.post_batches(), "the list is empty again");
    assert_eq!(f.posts(), before + 2);
    // A batch posted by quiet leaves a stale entry: skipped, not posted.
    a.put(1, 16, b"again", CTX).unwrap();
    quiet(&mut a).unwrap();
    let after_quiet = f.posts();
    assert!(!a.post_batches());
    assert_eq!(f.posts(), after_quiet);
    for off in [0u64, 8, 1 << 16, (1 << 16) + 8] {
        assert_eq!(get(&mut a, 1, off, 4).unwrap(), b"left");
    }
}

#[test]
fn close_releases_everything_once() {
    let (mut a, _b, _f) = pair(VerbsConfig::default(), 4096);
    a.close().unwrap();
    a.close().unwrap();
    assert_eq!(a.state(1), LinkState::Down);
    assert!(a.put(1, 0, &[1], CTX).is_err());
    assert!(a.quiet_poll().is_err());
    assert_eq!(a.progress(Instant::default()), PollResult::Idle);
}

/// A fence orders a put before every later operation, not only the first:
/// data on one QP, fence, a flag on the same QP (it carries the fence),
/// then an atomic on the control QP. The atomic must wait for the data's
/// QP to drain (its pre-fence put may still be outstanding), or it could
/// overtake the data: RC orders one QP's requests only.
#[test]
fn a_fence_orders_the_fenced_qps_earlier_puts_before_other_qps() {
    let cfg = VerbsConfig {
        data_qps: Some(2),
        ..VerbsConfig::default()
    };
    let (mut a, _b, _f) = pair(cfg, 1 << 20);
    a.put(1, 0, &[1; 64], CTX).unwrap();
    a.fence().unwrap();
    a.put(1, 64, &[2], CTX).unwrap();
    let waits = a.stats().fence_waits;
    assert_eq!(fadd(&mut a, 128, 1).unwrap(), 0);
    assert!(
        a.stats().fence_waits > waits,
        "the atomic after the fence did not wait for the data's QP"
    );
    quiet(&mut a).unwrap();
}
