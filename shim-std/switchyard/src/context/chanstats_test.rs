//! Channel ends in the stats segment's channel table, read from the
//! segment's path with the real reader: an end's counts there equal its
//! `stats()` exactly (SPSC over shared memory and over TCP, a broadcast
//! stream with a full ring and lost messages); the channel numbers agree
//! across PEs; an end's entry goes when it drops; a full table and
//! `stats = off` leave ends without entries, and nothing fails.

use super::{
    Context,
    broadcast_test::run_trio,
    channel_test::tcp_pair,
    shm_pair_test::{run_pair, run_pair_with},
    tcp_pair_test::job,
};
use crate::{
    channel::{Broadcast, ChannelStats, SlowSubscriber, Spsc, TrySendError},
    statseg::{CHANNELS, ChannelRow, Reader, Snapshot},
};

/// This PE's segment, read now from its path.
fn snapshot(ctx: &Context) -> Snapshot {
    let path = ctx.stats_segment().expect("a stats segment");
    Reader::open(path).expect("readable").snapshot()
}

/// The entry of channel `number` in `s`, if it has one.
fn row(s: &Snapshot, number: u64) -> Option<&ChannelRow> {
    s.channels.iter().find(|c| c.channel == number)
}

/// Checks that the row's counters are `st`.
fn same(r: &ChannelRow, st: ChannelStats) {
    assert_eq!(
        (r.sent, r.received, r.full, r.lost),
        (st.sent, st.received, st.full, st.lost),
        "{r:?}"
    );
}

/// A channel from PE 0 to PE 1 of 4 slots: the producer fills it and
/// finds it full twice before the consumer starts, then streams `n`
/// messages; each end's entry has
/// its counts, while it lives; a second channel is numbered next on both
/// PEs; the entries go when the ends drop.
fn counted(ctx: &mut Context, n: u64, direct: bool) {
    let before = snapshot(ctx).channels.len();
    let ch = ctx.spsc::<u64>(0, 1, 4).unwrap();
    let second = ctx.spsc::<[u64; 3]>(1, 0, 8).unwrap();
    // The two channels' numbers: consecutive, and the same on both PEs.
    let s = snapshot(ctx);
    assert_eq!(s.channels.len(), before + 2);
    let (a, b) = (&s.channels[before], &s.channels[before + 1]);
    assert_eq!(b.channel, a.channel + 1);
    let me = ctx.my_pe();
    let role = |producer: bool| if producer { "producer" } else { "consumer" };
    assert_eq!(
        (a.kind.as_str(), a.role.as_str(), a.peer),
        ("spsc", role(me == 0), 1 - me)
    );
    assert_eq!((a.capacity, a.message_size, a.direct), (4, 8, direct));
    assert_eq!(
        (b.role.as_str(), b.capacity, b.message_size),
        (role(me == 1), 8, 24)
    );
    let number = a.channel;
    let numbers = ctx.alloc::<u64>(1).unwrap();
    ctx.put(&numbers, 0, &[number], 1 - me).unwrap();
    ctx.barrier_all().unwrap();
    let mut theirs = [0u64];
    ctx.get(&numbers, 0, &mut theirs, me).unwrap();
    assert_eq!(theirs[0], number, "the other PE's number");
    match ch {
        Spsc::Producer(mut tx) => {
            for i in 0..4 {
                tx.try_send(ctx, i).unwrap();
            }
            for i in 0..2 {
                assert!(matches!(tx.try_send(ctx, i), Err(TrySendError::Full(_))));
            }
            ctx.barrier_all().unwrap();
            for i in 4..n {
                tx.send(ctx, i).unwrap();
            }
            ctx.barrier_all().unwrap();
            let st = tx.stats();
            assert_eq!((st.sent, st.received), (n, 0));
            assert!(st.full >= 2);
            same(
                row(&snapshot(ctx), number).expect("the producer's entry"),
                st,
            );
            drop(tx);
        }
        Spsc::Consumer(mut rx) => {
            // Until the producer found the ring full.
            ctx.barrier_all().unwrap();
            for i in 0..n {
                assert_eq!(rx.recv(ctx).unwrap(), i);
            }
            ctx.barrier_all().unwrap();
            let st = rx.stats();
            assert_eq!(st.received, n);
            same(
                row(&snapshot(ctx), number).expect("the consumer's entry"),
                st,
            );
            drop(rx);
        }
        Spsc::Bystander => unreachable!("two PEs"),
    }
    // This end gone: its entry too, the other channel's still there.
    let s = snapshot(ctx);
    assert!(row(&s, number).is_none(), "entry after drop: {s:?}");
    assert!(row(&s, number + 1).is_some());
    drop(second);
    assert_eq!(snapshot(ctx).channels.len(), before);
    ctx.barrier_all().unwrap();
}

#[test]
fn channel_counts_in_the_segment_equal_the_ends_stats_over_shm() {
    run_pair(job(0xC5A1), |mut ctx| {
        counted(&mut ctx, 20_000, true);
        ctx.finalize().unwrap();
    });
}

#[test]
fn channel_counts_in_the_segment_equal_the_ends_stats_over_tcp() {
    let pair = tcp_pair(0xC5A2);
    pair.run(|mut ctx| {
        counted(&mut ctx, 2_000, false);
        ctx.finalize().unwrap();
    });
}

/// One message over a fresh channel from PE 0 to PE 1; this PE's end.
fn one_message(ctx: &mut Context) -> Spsc<u64> {
    let mut ch = ctx.spsc::<u64>(0, 1, 1).unwrap();
    match &mut ch {
        Spsc::Producer(tx) => tx.send(ctx, 7).unwrap(),
        Spsc::Consumer(rx) => assert_eq!(rx.recv(ctx).unwrap(), 7),
        Spsc::Bystander => unreachable!("two PEs"),
    }
    ch
}

/// The counters of `end`.
fn stats_of(end: &Spsc<u64>) -> ChannelStats {
    match end {
        Spsc::Producer(tx) => tx.stats(),
        Spsc::Consumer(rx) => rx.stats(),
        Spsc::Bystander => unreachable!("two PEs"),
    }
}

#[test]
fn a_full_table_and_stats_off_leave_ends_without_entries() {
    run_pair(job(0xC5A3), |mut ctx| {
        let ends: Vec<Spsc<u64>> = (0..CHANNELS)
            .map(|_| ctx.spsc::<u64>(0, 1, 1).unwrap())
            .collect();
        let s = snapshot(&ctx);
        assert_eq!(s.channels.len(), CHANNELS);
        let last = s.channels[CHANNELS - 1].channel;
        // The table is full: the next channel works, counts, has no entry.
        let end = one_message(&mut ctx);
        let st = stats_of(&end);
        assert_eq!(st.sent + st.received, 1);
        let s = snapshot(&ctx);
        assert_eq!(s.channels.len(), CHANNELS);
        assert!(row(&s, last + 1).is_none());
        // An entry freed: the next channel has one (numbered on).
        drop(ends);
        let end = one_message(&mut ctx);
        same(
            row(&snapshot(&ctx), last + 2).expect("an entry again"),
            stats_of(&end),
        );
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
    run_pair_with(
        job(0xC5A4),
        |s| s.stats = false,
        |mut ctx| {
            assert!(ctx.stats_segment().is_none());
            let st = stats_of(&one_message(&mut ctx));
            assert_eq!(st.sent + st.received, 1);
            ctx.barrier_all().unwrap();
            ctx.finalize().unwrap();
        },
    );
}

#[test]
fn a_broadcast_streams_counts_are_in_the_segment() {
    run_trio(job(0xC5A5), [1, 1, 1], |mut ctx| {
        const CAP: u64 = 8;
        const N: u64 = 5 * CAP;
        let held = ctx
            .broadcast::<u64, _>(0, [1, 2], CAP as usize, SlowSubscriber::Backpressure)
            .unwrap();
        let dropping = ctx
            .broadcast::<u64, _>(0, [2, 1], CAP as usize, SlowSubscriber::Drop)
            .unwrap();
        let me = ctx.my_pe();
        let s = snapshot(&ctx);
        let (h, d) = (s.channels[0].channel, s.channels[1].channel);
        assert_eq!(d, h + 1);
        for r in &s.channels {
            let (role, peer) = if me == 0 {
                ("publisher", 2)
            } else {
                ("subscriber", 0)
            };
            assert_eq!(
                (r.kind.as_str(), r.role.as_str(), r.peer),
                ("broadcast", role, peer)
            );
            assert!(r.direct);
            assert_eq!(r.drop, r.channel == d);
        }
        match (held, dropping) {
            (Broadcast::Publisher(mut held), Broadcast::Publisher(mut dropping)) => {
                // The subscribers wait at the barrier: the held stream is
                // full after CAP, the dropping one laps them.
                for i in 0..CAP {
                    held.send(&mut ctx, i).unwrap();
                }
                assert!(matches!(
                    held.try_send(&mut ctx, 0),
                    Err(TrySendError::Full(_))
                ));
                for i in 0..N {
                    dropping.send(&mut ctx, i).unwrap();
                }
                ctx.barrier_all().unwrap();
                for i in CAP..N {
                    held.send(&mut ctx, i).unwrap();
                }
                ctx.barrier_all().unwrap();
                let s = snapshot(&ctx);
                same(row(&s, h).unwrap(), held.stats());
                same(row(&s, d).unwrap(), dropping.stats());
                assert!(held.stats().full >= 1);
                assert_eq!(dropping.stats().sent, N);
            }
            (Broadcast::Subscriber(mut held), Broadcast::Subscriber(mut dropping)) => {
                ctx.barrier_all().unwrap();
                for i in 0..N {
                    assert_eq!(held.recv(&mut ctx).unwrap(), i);
                }
                while dropping.recv(&mut ctx).unwrap() != N - 1 {}
                ctx.barrier_all().unwrap();
                let s = snapshot(&ctx);
                same(row(&s, h).unwrap(), held.stats());
                let st = dropping.stats();
                same(row(&s, d).unwrap(), st);
                assert!(st.lost > 0 && st.received + st.lost == N, "{st:?}");
            }
            _ => unreachable!("three PEs"),
        }
        assert!(snapshot(&ctx).channels.is_empty(), "the ends dropped");
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}
