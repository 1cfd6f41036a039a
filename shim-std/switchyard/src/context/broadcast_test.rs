//! Broadcast streams (`crate::channel::Broadcast`) among three PEs, a
//! publisher and two subscribers: on one node over shared memory (both
//! subscribers read the publisher's one ring), and each on a node of its own
//! over TCP (a put and a signal per subscriber); four PEs on two nodes, two
//! subscribers on the publisher's other node, one relaying for the other (a
//! put and a signal per node); under backpressure every
//! record arrives in order at both, under drop a slow subscriber gets an
//! in-order subsequence and counts the rest lost; typed creation errors; no
//! allocation on the send and receive paths.

use std::{
    sync::{
        Arc, Barrier, Mutex,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use switchyard_core::{class::NO_SWITCH, route::PolicyConfig};
use switchyard_socket::{SocketDriver, TcpConfig};

use super::{
    Context, Error, PeerInfo,
    pes_test::{PeScript, exit_barrier, run_pes},
    tcp_pair_test::{job, setup, wait_for},
};
use crate::{
    channel::{Broadcast, ChannelError, Select, SlowSubscriber, Spsc, Subscriber},
    test_alloc::{allocations, count_here},
};

/// A 56-byte record: with its sequence word, one cache line per slot.
type Rec = [u64; 7];

/// Record `i`: its index in word 0, every other word derived from it, so
/// a torn or stale slot shows.
fn rec(i: u64) -> Rec {
    core::array::from_fn(|k| {
        if k == 0 {
            i
        } else {
            i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ k as u64 ^ i << 8
        }
    })
}

/// Three PEs in three threads of this process; PE `p` on node
/// `nodes[p]`: PEs of one node share memory, every PE has a TCP driver
/// when the nodes differ (no progress thread).
pub(super) fn run_trio(
    job: u64,
    nodes: [u64; 3],
    script: impl Fn(Context) + Send + Clone + 'static,
) {
    run_trio_with(job, nodes, Duration::from_secs(20), script);
}

/// [`run_trio`] with the TCP driver's `give_up` (how long a silent peer
/// lives).
fn run_trio_with(
    job: u64,
    nodes: [u64; 3],
    give_up: Duration,
    script: impl Fn(Context) + Send + Clone + 'static,
) {
    run_on(job, &nodes, give_up, script);
}

/// [`run_trio_with`] for `nodes.len()` PEs.
fn run_on(
    job: u64,
    nodes: &[u64],
    give_up: Duration,
    script: impl Fn(Context) + Send + Clone + 'static,
) {
    let n = nodes.len() as u32;
    let nodes = nodes.to_vec();
    let tcp = nodes.iter().any(|&n| n != nodes[0]);
    let board: Arc<Mutex<Vec<Option<PeerInfo>>>> = Arc::new(Mutex::new(vec![None; n as usize]));
    let gate = Arc::new(Barrier::new(n as usize));
    let leave = exit_barrier(n);
    let pe = move |me: u32| {
        let mut s = setup(job, me, PolicyConfig::default());
        s.n_pes = n;
        let seg = Context::create_segment(&s).expect("segment");
        let drv = tcp.then(|| {
            let cfg = TcpConfig {
                listen: vec!["127.0.0.1".parse().unwrap()],
                // No progress thread: a PE's heartbeats go out only while
                // it is in the library (see the channel tests).
                detection_window: Duration::from_secs(10).min(give_up),
                give_up,
                job_id: job,
                key: switchyard_socket::JobKey(*b"three-PEs-broadcasting-by-tcp!!!"),
                me,
                n_pes: n,
                ..TcpConfig::default()
            };
            let (heap, len) = (seg.mapped().heap_ptr(), seg.mapped().heap_len());
            #[allow(unsafe_code)]
            // SAFETY: the segment's heap mapping, valid for `len` bytes; the
            // segment moves into the context with the driver and outlives it.
            unsafe { SocketDriver::new(cfg, heap, len) }.expect("tcp driver")
        });
        board.lock().unwrap()[me as usize] = Some(PeerInfo {
            node: nodes[me as usize],
            switch: 5,
            tree: NO_SWITCH,
            shm: Some(seg.path().to_path_buf()),
            tcp: drv
                .as_ref()
                .map_or(Vec::new(), |d| d.local_addrs().to_vec()),
        });
        gate.wait();
        let peers: Vec<PeerInfo> = board
            .lock()
            .unwrap()
            .iter()
            .map(|p| {
                let mut p = p.clone().expect("every PE posted");
                if p.node != nodes[me as usize] {
                    p.shm = None;
                }
                p
            })
            .collect();
        let mut ctx = Context::from_parts(s, seg, &peers, drv).expect("context");
        leave(&mut ctx);
        ctx
    };
    run_pes(
        (0..n)
            .map(|me| -> PeScript {
                let (pe, script) = (pe.clone(), script.clone());
                Box::new(move || script(pe(me)))
            })
            .collect(),
    );
}

/// Ends a PE of a job with TCP links. Not `finalize`: without a
/// bootstrap (these contexts are made from parts) its last barrier's acks
/// can be lost when a PE closes its connections first. Every PE quiesces,
/// then all leave together, making progress until the last is done.
fn leave(mut ctx: Context, left: &AtomicU32) {
    ctx.quiet().unwrap();
    left.fetch_add(1, Ordering::SeqCst);
    let n = ctx.n_pes();
    wait_for(&mut ctx, left, n, true);
}

/// Checks that `got` is record `i`.
fn check(got: &Rec, i: u64) {
    assert!(*got == rec(i), "record {i} in order, whole");
}

/// PE 0 publishes `n` records to PEs 1 and 2 under backpressure (a third
/// one by one with `try_send`, a third with `send`, a third in slices);
/// both check every one in order (`recv` and `recv_into`). The last
/// `remote` subscribers are on other nodes than the publisher.
fn backpressured(ctx: &mut Context, capacity: usize, n: u64, remote: usize) {
    match ctx
        .broadcast::<Rec, _>(0, [1, 2], capacity, SlowSubscriber::Backpressure)
        .unwrap()
    {
        Broadcast::Publisher(mut tx) => {
            assert_eq!(tx.remote_subscribers(), remote);
            assert_eq!(tx.policy(), SlowSubscriber::Backpressure);
            let mut i = 0;
            let mut batch = [rec(0); 5];
            while i < n {
                match i % 3 {
                    0 => match tx.try_send(ctx, rec(i)) {
                        Ok(()) => i += 1,
                        Err(crate::channel::TrySendError::Full(v)) => check(&v, i),
                        Err(e) => panic!("{e:?}"),
                    },
                    1 => {
                        tx.send(ctx, rec(i)).unwrap();
                        i += 1;
                    }
                    _ => {
                        let k = ((i % 5) + 1).min(n - i) as usize;
                        for (j, b) in batch[..k].iter_mut().enumerate() {
                            *b = rec(i + j as u64);
                        }
                        tx.send_slice(ctx, &batch[..k]).unwrap();
                        i += k as u64;
                    }
                }
            }
            assert_eq!(tx.stats().sent, n);
        }
        Broadcast::Subscriber(mut rx) => {
            // The remote subscribers are the last PEs.
            assert_eq!(rx.is_direct(), ctx.my_pe() as usize <= 2 - remote);
            let mut i = 0;
            let mut out = [rec(0); 8];
            while i < n {
                if i % 2 == 0 {
                    check(&rx.recv(ctx).unwrap(), i);
                    i += 1;
                } else {
                    let k = rx.recv_into(ctx, &mut out).unwrap();
                    for (j, got) in out[..k].iter().enumerate() {
                        check(got, i + j as u64);
                    }
                    i += k as u64;
                }
            }
            let st = rx.stats();
            assert_eq!((st.received, st.lost), (n, 0));
            assert_eq!(Select::new().poll(ctx, &[&rx]), None, "nothing more");
        }
        Broadcast::Bystander => unreachable!("three PEs"),
    }
    ctx.barrier_all().unwrap();
}

#[test]
fn broadcast_under_backpressure_delivers_every_record_to_both_over_shm() {
    run_trio(job(0xB0C1), [1, 1, 1], |mut ctx| {
        // 64 slots, 120k records: the ring wraps ~1900 times and the
        // publisher waits for the slower subscriber.
        backpressured(&mut ctx, 64, 120_000, 0);
        ctx.finalize().unwrap();
    });
}

#[test]
fn broadcast_under_backpressure_delivers_every_record_to_both_over_tcp() {
    run_trio(job(0xB0C2), [1, 2, 3], |mut ctx| {
        backpressured(&mut ctx, 256, 30_000, 2);
        static LEFT: AtomicU32 = AtomicU32::new(0);
        leave(ctx, &LEFT);
    });
}

#[test]
fn broadcast_under_backpressure_delivers_every_record_on_shm_and_tcp_at_once() {
    // PE 1 reads the publisher's ring, PE 2 gets puts on another node.
    run_trio(job(0xB0C7), [1, 1, 2], |mut ctx| {
        backpressured(&mut ctx, 128, 30_000, 1);
        static LEFT: AtomicU32 = AtomicU32::new(0);
        leave(ctx, &LEFT);
    });
}

/// Receives from `rx` until `received + lost` reaches `n`, checking that
/// what arrives is whole and in increasing order; after each message,
/// `slow` spins.
fn drain_checked(ctx: &mut Context, rx: &mut Subscriber<Rec>, n: u64, slow: u32) {
    let mut last = None;
    while rx.stats().received + rx.stats().lost < n {
        let got = rx.recv(ctx).unwrap();
        let i = got[0];
        check(&got, i);
        assert!(last.is_none_or(|l| i > l), "{i} after {last:?}: in order");
        last = Some(i);
        for _ in 0..slow {
            core::hint::spin_loop();
        }
    }
    assert_eq!(last, Some(n - 1), "the last record is never lapped");
}

/// PE 0 publishes `n` records under drop to PE 1 (fast: it acknowledges
/// every 16 on an SPSC channel, and the publisher stays within a ring of
/// its acknowledgements, so it is never lapped) and PE 2 (slow: after the
/// first record it waits until the publisher is 1000 records on, then
/// reads with a pause after each).
fn dropping(ctx: &mut Context, n: u64) {
    const CAP: u64 = 64;
    let stream = ctx
        .broadcast::<Rec, _>(0, 1..3, CAP as usize, SlowSubscriber::Drop)
        .unwrap();
    let acks = ctx.spsc::<u64>(1, 0, 1024).unwrap();
    let go = ctx.spsc::<u64>(0, 2, 2).unwrap();
    // The slow subscriber has record 0 before the publisher may lap it (a
    // PE scheduled late would otherwise lose it, as the policy allows).
    let ready = ctx.spsc::<u64>(2, 0, 2).unwrap();
    match (stream, acks, go, ready) {
        (
            Broadcast::Publisher(mut tx),
            Spsc::Consumer(mut acks),
            Spsc::Producer(mut go),
            Spsc::Consumer(mut ready),
        ) => {
            let mut acked = 0;
            for i in 0..n {
                while i - acked >= CAP {
                    acked = acks.recv(ctx).unwrap();
                }
                if i == CAP {
                    assert_eq!(ready.recv(ctx).unwrap(), 0);
                }
                tx.send(ctx, rec(i)).unwrap();
                if i == 1000 {
                    go.send(ctx, i).unwrap();
                }
            }
            let st = tx.stats();
            assert_eq!((st.sent, st.full), (n, 0), "never full under drop");
        }
        (
            Broadcast::Subscriber(mut rx),
            Spsc::Producer(mut acks),
            Spsc::Bystander,
            Spsc::Bystander,
        ) => {
            for i in 0..n {
                check(&rx.recv(ctx).unwrap(), i);
                if (i + 1) % 16 == 0 {
                    acks.send(ctx, i + 1).unwrap();
                }
            }
            assert_eq!((rx.stats().received, rx.stats().lost), (n, 0));
        }
        (
            Broadcast::Subscriber(mut rx),
            Spsc::Bystander,
            Spsc::Consumer(mut go),
            Spsc::Producer(mut ready),
        ) => {
            check(&rx.recv(ctx).unwrap(), 0);
            ready.send(ctx, 0).unwrap();
            assert_eq!(go.recv(ctx).unwrap(), 1000);
            drain_checked(ctx, &mut rx, n, 2000);
            let st = rx.stats();
            assert_eq!(st.received + st.lost, n);
            // At the go, record 1000 is out: record 1's slot holds 961 or
            // later, so the skip lands at 898 or later.
            assert!(st.lost >= 1000 - 2 * CAP, "lapped: {st:?}");
        }
        _ => unreachable!("three PEs"),
    }
    ctx.barrier_all().unwrap();
}

#[test]
fn broadcast_under_drop_laps_only_the_slow_subscriber_over_shm() {
    run_trio(job(0xB0C3), [1, 1, 1], |mut ctx| {
        dropping(&mut ctx, 100_000);
        ctx.finalize().unwrap();
    });
}

#[test]
fn broadcast_under_drop_laps_only_the_slow_subscriber_on_another_node() {
    // PEs 0 and 1 on one node (shared memory), PE 2, the slow one, on
    // another (a set, a fence and a put-and-signal per record over TCP).
    run_trio(job(0xB0C6), [1, 1, 2], |mut ctx| {
        dropping(&mut ctx, 20_000);
        static LEFT: AtomicU32 = AtomicU32::new(0);
        leave(ctx, &LEFT);
    });
}

/// PE 0 publishes `n` records to PE 1 (its node) and PEs 2 and 3 (another
/// node: PE 2 leads it, PE 3 reads PE 2's ring) under `policy`.
/// Backpressure: every record arrives at each, in order (PE 3 pausing after
/// each), and the publisher's TCP operations are one put-and-signal per
/// record (one per remote node, not one per remote subscriber). Drop: each
/// gets an in-order subsequence ending with the last record, `received +
/// lost` being `n`; PE 3 takes one record, then waits until PE 2 has all,
/// and finds itself lapped in PE 2's ring: it gets the ring's last
/// `capacity` records and counts the rest lost.
fn relayed(ctx: &mut Context, policy: SlowSubscriber, capacity: usize, n: u64) {
    let tcp = super::TCP.index();
    let stream = ctx
        .broadcast::<Rec, _>(0, [1, 2, 3], capacity, policy)
        .unwrap();
    let go = ctx.spsc::<u64>(2, 3, 2).unwrap();
    let drop = policy == SlowSubscriber::Drop;
    // The stream's entry in the stats segment: a subscriber reading a ring
    // through its mapping (PE 1 the publisher's, PE 3 PE 2's) is direct.
    let seg = crate::statseg::Reader::open(ctx.stats_segment().expect("a stats segment"))
        .expect("readable")
        .snapshot();
    let row = seg
        .channels
        .iter()
        .find(|r| r.kind == "broadcast")
        .expect("an entry");
    assert_eq!(
        (row.direct, row.drop),
        ([false, true, false, true][ctx.my_pe() as usize], drop)
    );
    match stream {
        Broadcast::Publisher(mut tx) => {
            assert_eq!((tx.remote_subscribers(), tx.remote_nodes()), (2, 1));
            let before = ctx.stats().ops[tcp];
            for i in 0..n {
                tx.send(ctx, rec(i)).unwrap();
            }
            let puts = ctx.stats().ops[tcp] - before;
            if policy == SlowSubscriber::Backpressure {
                assert_eq!(puts, n, "one put and signal per record to node 2");
            }
            assert_eq!(tx.stats().sent, n);
        }
        Broadcast::Subscriber(mut rx) => {
            let me = ctx.my_pe();
            let (direct, lead) = [(true, None), (false, None), (true, Some(2))][me as usize - 1];
            assert_eq!((rx.is_direct(), rx.lead()), (direct, lead), "PE {me}");
            match (drop, me, go) {
                (false, _, _) => {
                    for i in 0..n {
                        check(&rx.recv(ctx).unwrap(), i);
                        for _ in 0..if me == 3 { 200 } else { 0 } {
                            core::hint::spin_loop();
                        }
                    }
                    assert_eq!((rx.stats().received, rx.stats().lost), (n, 0));
                }
                (true, 3, Spsc::Consumer(mut go)) => {
                    let first = rx.recv(ctx).unwrap();
                    check(&first, first[0]);
                    assert_eq!(go.recv(ctx).unwrap(), n);
                    drain_checked(ctx, &mut rx, n, 0);
                    let st = rx.stats();
                    let cap = capacity as u64;
                    assert_eq!((st.received, st.lost), (cap + 1, n - cap - 1), "lapped");
                }
                (true, _, go) => {
                    drain_checked(ctx, &mut rx, n, 0);
                    assert_eq!(rx.stats().received + rx.stats().lost, n, "PE {me}");
                    if let Spsc::Producer(mut go) = go {
                        go.send(ctx, n).unwrap();
                    }
                }
            }
        }
        Broadcast::Bystander => unreachable!("four PEs"),
    }
    ctx.barrier_all().unwrap();
}

#[test]
fn broadcast_relays_through_a_lead_under_backpressure_on_two_nodes() {
    // PEs 0 and 1 on node 1, PEs 2 and 3 on node 2: one put and signal per
    // record into PE 2's ring, which PE 3 (slow) reads through its mapping.
    run_on(
        job(0xB0CA),
        &[1, 1, 2, 2],
        Duration::from_secs(20),
        |mut ctx| {
            relayed(&mut ctx, SlowSubscriber::Backpressure, 64, 20_000);
            static LEFT: AtomicU32 = AtomicU32::new(0);
            leave(ctx, &LEFT);
        },
    );
}

#[test]
fn broadcast_relays_through_a_lead_under_drop_on_two_nodes() {
    // As above under drop: PE 3, held back, is lapped in PE 2's ring.
    run_on(
        job(0xB0CB),
        &[1, 1, 2, 2],
        Duration::from_secs(20),
        |mut ctx| {
            relayed(&mut ctx, SlowSubscriber::Drop, 64, 20_000);
            static LEFT: AtomicU32 = AtomicU32::new(0);
            leave(ctx, &LEFT);
        },
    );
}

#[test]
fn bad_broadcasts_are_refused_with_typed_errors() {
    run_trio(job(0xB0C4), [1, 1, 1], |mut ctx| {
        let bp = SlowSubscriber::Backpressure;
        let e = |r: crate::context::Result<Broadcast<u64>>| match r.unwrap_err() {
            Error::Channel(c) => c,
            other => panic!("a channel error: {other}"),
        };
        assert_eq!(
            e(ctx.broadcast(0, [1, 2], 3, bp)),
            ChannelError::Capacity { capacity: 3 }
        );
        let none: [u32; 0] = [];
        assert_eq!(
            e(ctx.broadcast(0, none, 4, bp)),
            ChannelError::NoSubscribers
        );
        assert_eq!(
            e(ctx.broadcast(1, [1, 2], 4, bp)),
            ChannelError::SamePe { pe: 1 }
        );
        assert_eq!(
            e(ctx.broadcast(0, [2, 1, 2], 4, bp)),
            ChannelError::Repeated { pe: 2 }
        );
        assert_eq!(
            e(ctx.broadcast(0, [1, 3], 4, bp)),
            ChannelError::NoSuchPe { pe: 3, n_pes: 3 }
        );
        assert_eq!(
            e(ctx.broadcast(7, [1], 4, bp)),
            ChannelError::NoSuchPe { pe: 7, n_pes: 3 }
        );
        // PE 2 has another type: every PE is told.
        let r = if ctx.my_pe() == 2 {
            ctx.broadcast::<u32, _>(0, [1, 2], 8, bp).map(|_| ())
        } else {
            ctx.broadcast::<u64, _>(0, [1, 2], 8, bp).map(|_| ())
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
        // PE 1 has another policy: refused as well.
        let policy = if ctx.my_pe() == 1 {
            SlowSubscriber::Drop
        } else {
            bp
        };
        assert!(matches!(
            e(ctx.broadcast(0, [1, 2], 8, policy)),
            ChannelError::Mismatch { .. }
        ));
        // The heap is still symmetric: a good stream after them works.
        backpressured(&mut ctx, 8, 100, 0);
        ctx.finalize().unwrap();
    });
}

#[test]
fn broadcast_send_and_receive_allocate_nothing_over_shm() {
    run_trio(job(0xB0C5), [1, 1, 1], |mut ctx| {
        const N: u64 = 20_000;
        match ctx
            .broadcast::<Rec, _>(0, [1, 2], 64, SlowSubscriber::Backpressure)
            .unwrap()
        {
            Broadcast::Publisher(mut tx) => {
                tx.send(&mut ctx, rec(0)).unwrap();
                let a0 = allocations();
                count_here(true);
                for i in 1..N {
                    tx.send(&mut ctx, rec(i)).unwrap();
                }
                count_here(false);
                assert_eq!(allocations(), a0, "allocations publishing");
            }
            Broadcast::Subscriber(mut rx) => {
                check(&rx.recv(&mut ctx).unwrap(), 0);
                let a0 = allocations();
                count_here(true);
                for i in 1..N {
                    let got = rx.recv(&mut ctx).unwrap();
                    assert!(got == rec(i), "in order");
                }
                count_here(false);
                assert_eq!(allocations(), a0, "allocations receiving");
            }
            Broadcast::Bystander => unreachable!(),
        }
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}

#[test]
fn a_dead_publisher_ends_recv_with_peer_dead_after_the_drain() {
    run_trio_with(
        job(0xB0C8),
        [1, 2, 3],
        Duration::from_millis(300),
        |mut ctx| match ctx
            .broadcast::<u64, _>(0, [1, 2], 16, SlowSubscriber::Backpressure)
            .unwrap()
        {
            Broadcast::Publisher(mut tx) => {
                tx.send_slice(&mut ctx, &[10, 11, 12]).unwrap();
                ctx.quiet().unwrap();
                // Gone without a word: the end and the context.
                drop(tx);
                drop(ctx);
            }
            Broadcast::Subscriber(mut rx) => {
                for want in 10..13 {
                    assert_eq!(rx.recv(&mut ctx).unwrap(), want, "drained first");
                }
                let e = rx.recv(&mut ctx).unwrap_err();
                assert!(matches!(e, Error::PeerDead { pe: 0, .. }), "{e}");
            }
            Broadcast::Bystander => unreachable!(),
        },
    );
}
