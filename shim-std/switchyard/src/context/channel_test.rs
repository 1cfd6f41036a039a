//! The channels (`crate::channel`) between two PEs: over shared memory (the
//! producer writes the consumer's slots itself) and over TCP only (puts and
//! signals, credits back), with sequence-stamped records checked in order,
//! full rings, wrap-around, `Select`, typed creation errors, and no
//! allocation on the send and receive paths.

use std::time::Duration;

use switchyard_socket::TcpConfig;

use super::{
    Context, Error,
    shm_pair_test::run_pair,
    tcp_pair_test::{Pair, job},
};
use crate::{
    channel::{ChannelError, Consumer, Producer, Select, Spsc, TrySendError},
    test_alloc::{allocations, count_here},
};

/// A 56-byte record: with its sequence word, one cache line per slot.
type Rec = [u64; 7];

/// Record `i`: every word derived from `i`, so a torn or stale slot shows.
fn rec(i: u64) -> Rec {
    core::array::from_fn(|k| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ k as u64 ^ i << 8)
}

/// Sends `n` records from PE 0 to PE 1 (half one by one, half in slices of
/// up to 5) and checks them in order at PE 1 (half `recv`, half
/// `recv_into`); returns the two ends' counters at the end.
fn stream(ctx: &mut Context, capacity: usize, n: u64) {
    match ctx.spsc::<Rec>(0, 1, capacity).unwrap() {
        Spsc::Producer(mut tx) => {
            let mut i = 0;
            let mut batch = [rec(0); 5];
            while i < n {
                if i % 2 == 0 {
                    tx.send(ctx, rec(i)).unwrap();
                    i += 1;
                } else {
                    let k = ((i % 5) + 1).min(n - i) as usize;
                    for (j, b) in batch[..k].iter_mut().enumerate() {
                        *b = rec(i + j as u64);
                    }
                    tx.send_slice(ctx, &batch[..k]).unwrap();
                    i += k as u64;
                }
            }
            assert_eq!(tx.stats().sent, n);
        }
        Spsc::Consumer(mut rx) => {
            let mut i = 0;
            let mut out = [rec(0); 8];
            while i < n {
                if i % 3 == 0 {
                    let got = rx.recv(ctx).unwrap();
                    assert!(got == rec(i), "record {i} in order");
                    i += 1;
                } else {
                    let k = rx.recv_into(ctx, &mut out).unwrap();
                    for (j, got) in out[..k].iter().enumerate() {
                        assert!(
                            *got == rec(i + j as u64),
                            "record {} in order",
                            i + j as u64
                        );
                    }
                    i += k as u64;
                }
            }
            assert_eq!(rx.stats().received, n);
            assert!(rx.is_empty(), "nothing more than was sent");
        }
        Spsc::Bystander => unreachable!("two PEs"),
    }
    ctx.barrier_all().unwrap();
}

/// A NEAR TCP pair for the channel tests (no progress thread).
pub(super) fn tcp_pair(tag: u64) -> Pair {
    Pair::near(
        job(tag),
        TcpConfig {
            listen: vec!["127.0.0.1".parse().unwrap()],
            // No progress thread: a PE's heartbeats go out only while it
            // is in the library, and a loaded test machine may not run it
            // for 200 ms. These tests are about the stream, not detection.
            detection_window: Duration::from_secs(10),
            give_up: Duration::from_secs(20),
            ..TcpConfig::default()
        },
    )
}

#[test]
fn records_arrive_in_order_over_shm_with_wrap_around() {
    run_pair(job(0xC4A1), |mut ctx| {
        // 64 slots, 200k records: the ring wraps some 3000 times and the
        // producer waits for credit.
        stream(&mut ctx, 64, 200_000);
        ctx.finalize().unwrap();
    });
}

#[test]
fn records_arrive_in_order_over_tcp() {
    tcp_pair(0xC4A2).run(|mut ctx| {
        stream(&mut ctx, 256, 100_000);
        ctx.finalize().unwrap();
    });
}

/// A full ring gives the message back and counts it; a receive frees a
/// slot. `direct` says which path the pair should take.
fn full_ring(ctx: &mut Context, direct: bool) {
    let ch = ctx.spsc::<u64>(0, 1, 4).unwrap();
    ctx.barrier_all().unwrap();
    match ch {
        Spsc::Producer(mut tx) => {
            assert_eq!(tx.is_direct(), direct);
            assert_eq!(tx.capacity(), 4);
            for i in 0..4 {
                tx.try_send(ctx, i).unwrap();
            }
            match tx.try_send(ctx, 99) {
                Err(TrySendError::Full(v)) => assert_eq!(v, 99, "the value comes back"),
                other => panic!("a full ring: {other:?}"),
            }
            assert_eq!(tx.stats().full, 1);
            ctx.quiet().unwrap();
            ctx.barrier_all().unwrap(); // the consumer takes two
            ctx.barrier_all().unwrap();
            tx.send(ctx, 4).unwrap();
            tx.send(ctx, 5).unwrap();
            assert_eq!(tx.stats().sent, 6);
            ctx.quiet().unwrap();
            ctx.barrier_all().unwrap();
        }
        Spsc::Consumer(mut rx) => {
            ctx.barrier_all().unwrap();
            assert_eq!(rx.len(), 4);
            assert_eq!(rx.try_recv(ctx).unwrap(), Some(0));
            assert_eq!(rx.recv(ctx).unwrap(), 1);
            // Credit goes back every capacity/4 = 1 message (routed).
            ctx.quiet().unwrap();
            ctx.barrier_all().unwrap();
            ctx.barrier_all().unwrap();
            let mut out = [0u64; 8];
            let mut got = Vec::new();
            while got.len() < 4 {
                let k = rx.recv_into(ctx, &mut out).unwrap();
                got.extend_from_slice(&out[..k]);
            }
            assert_eq!(got, [2, 3, 4, 5]);
            assert_eq!(rx.try_recv(ctx).unwrap(), None);
        }
        Spsc::Bystander => unreachable!(),
    }
}

#[test]
fn a_full_ring_gives_the_message_back_over_shm() {
    run_pair(job(0xC4A3), |mut ctx| {
        full_ring(&mut ctx, true);
        ctx.finalize().unwrap();
    });
}

#[test]
fn a_full_ring_gives_the_message_back_over_tcp() {
    tcp_pair(0xC4A4).run(|mut ctx| {
        full_ring(&mut ctx, false);
        ctx.finalize().unwrap();
    });
}

#[test]
fn bad_channels_are_refused_with_typed_errors() {
    run_pair(job(0xC4A5), |mut ctx| {
        let cap = ctx.spsc::<u64>(0, 1, 3).unwrap_err();
        assert!(matches!(
            cap,
            Error::Channel(ChannelError::Capacity { capacity: 3 })
        ));
        let same = ctx.spsc::<u64>(1, 1, 4).unwrap_err();
        assert!(matches!(
            same,
            Error::Channel(ChannelError::SamePe { pe: 1 })
        ));
        let far = ctx.spsc::<u64>(0, 2, 4).unwrap_err();
        assert!(matches!(
            far,
            Error::Channel(ChannelError::NoSuchPe { pe: 2, n_pes: 2 })
        ));
        // The two ends disagree on the message type: both are told.
        let r = if ctx.my_pe() == 0 {
            ctx.spsc::<u64>(0, 1, 8).map(|_| ())
        } else {
            ctx.spsc::<u32>(0, 1, 8).map(|_| ())
        };
        match r {
            Err(Error::Channel(ChannelError::Mismatch {
                producer_size: 8,
                producer_capacity: 8,
                consumer_size: 4,
                consumer_capacity: 8,
            })) => {}
            other => panic!("a mismatch: {other:?}"),
        }
        // The heap is still symmetric: a good channel after it works.
        stream(&mut ctx, 8, 100);
        ctx.finalize().unwrap();
    });
}

/// Two channels PE 0 → PE 1; PE 1 selects over both.
fn selected(ctx: &mut Context) {
    let a = ctx.spsc::<u64>(0, 1, 16).unwrap();
    let b = ctx.spsc::<u64>(0, 1, 16).unwrap();
    match (a, b) {
        (Spsc::Producer(mut a), Spsc::Producer(mut b)) => {
            for i in 0..1000u64 {
                let tx: &mut Producer<u64> = if i % 3 == 0 { &mut a } else { &mut b };
                tx.send(ctx, i).unwrap();
            }
        }
        (Spsc::Consumer(mut a), Spsc::Consumer(mut b)) => {
            let mut sel = Select::new();
            let (mut next_a, mut next_b) = (0u64, 1u64);
            let mut seen = 0;
            let step = |want: &mut u64, got: u64, every_third: bool| {
                assert_eq!(got, *want);
                *want += if every_third {
                    3
                } else if *want % 3 == 1 {
                    1
                } else {
                    2
                };
            };
            while seen < 1000 {
                let first = sel.wait(ctx, &[&a, &b]).unwrap() == 0;
                let rx: &mut Consumer<u64> = if first { &mut a } else { &mut b };
                let got = rx.try_recv(ctx).unwrap().expect("select said ready");
                if first {
                    step(&mut next_a, got, true);
                } else {
                    step(&mut next_b, got, false);
                }
                seen += 1;
            }
            assert_eq!(sel.poll(ctx, &[&a, &b]), None);
            assert_eq!(a.stats().received + b.stats().received, 1000);
        }
        _ => unreachable!(),
    }
    ctx.barrier_all().unwrap();
}

#[test]
fn select_finds_each_channels_messages_over_shm() {
    run_pair(job(0xC4A6), |mut ctx| {
        selected(&mut ctx);
        ctx.finalize().unwrap();
    });
}

#[test]
fn select_finds_each_channels_messages_over_tcp() {
    tcp_pair(0xC4A7).run(|mut ctx| {
        selected(&mut ctx);
        ctx.finalize().unwrap();
    });
}

/// Send and receive, once warmed up, allocate nothing.
fn no_alloc(ctx: &mut Context) {
    const N: u64 = 20_000;
    match ctx.spsc::<Rec>(0, 1, 64).unwrap() {
        Spsc::Producer(mut tx) => {
            tx.send(ctx, rec(0)).unwrap();
            let a0 = allocations();
            count_here(true);
            for i in 1..N {
                tx.send(ctx, rec(i)).unwrap();
            }
            count_here(false);
            assert_eq!(allocations(), a0, "allocations sending");
        }
        Spsc::Consumer(mut rx) => {
            assert!(rx.recv(ctx).unwrap() == rec(0));
            let a0 = allocations();
            count_here(true);
            for i in 1..N {
                let got = rx.recv(ctx).unwrap();
                assert!(got == rec(i), "in order");
            }
            count_here(false);
            assert_eq!(allocations(), a0, "allocations receiving");
        }
        Spsc::Bystander => unreachable!(),
    }
    ctx.barrier_all().unwrap();
}

#[test]
fn send_and_receive_allocate_nothing_over_shm() {
    run_pair(job(0xC4A8), |mut ctx| {
        no_alloc(&mut ctx);
        ctx.finalize().unwrap();
    });
}

#[test]
fn send_and_receive_allocate_nothing_over_tcp() {
    tcp_pair(0xC4A9).run(|mut ctx| {
        no_alloc(&mut ctx);
        ctx.finalize().unwrap();
    });
}

#[test]
fn a_dead_producer_ends_recv_with_peer_dead_after_the_drain() {
    let pair = Pair::near(
        job(0xC4AA),
        TcpConfig {
            listen: vec!["127.0.0.1".parse().unwrap()],
            give_up: Duration::from_millis(300),
            ..TcpConfig::default()
        },
    );
    pair.run(|mut ctx| match ctx.spsc::<u64>(0, 1, 16).unwrap() {
        Spsc::Producer(mut tx) => {
            tx.send_slice(&mut ctx, &[10, 11, 12]).unwrap();
            ctx.quiet().unwrap();
            // Gone without a word: the end and the context (sockets closed).
            drop(tx);
            drop(ctx);
        }
        Spsc::Consumer(mut rx) => {
            for want in 10..13 {
                assert_eq!(rx.recv(&mut ctx).unwrap(), want, "drained first");
            }
            let e = rx.recv(&mut ctx).unwrap_err();
            assert!(matches!(e, Error::PeerDead { pe: 0, .. }), "{e}");
        }
        Spsc::Bystander => unreachable!(),
    });
}
