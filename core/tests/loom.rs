//! Loom models of the lock-free parts: the versioned topology, the SPSC ring and
//! the trace ring. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p switchyard-core --features std --test loom --release`.
#![cfg(loom)]

use loom::thread;
use switchyard_core::{
    class::PathClass,
    ring::Ring,
    topology::{Shape, Topology, TopologyBox},
    trace::{TraceRecord, TraceRing},
};

/// Two class words per row (32 peers per word on 64-bit), so a torn read would
/// show two versions' patterns at once.
const N_PES: u32 = 64;

/// A distinct row content for each version a model can reach.
fn pattern(version: u32) -> PathClass {
    [
        PathClass::Shm,
        PathClass::Near,
        PathClass::Routed,
        PathClass::Unreachable,
    ][version as usize % 4]
}

#[test]
fn readers_see_whole_versions_and_writer_never_overwrites_a_read_slot() {
    loom::model(|| {
        let shape = Shape {
            me: 0,
            n_pes: N_PES,
            n_transports: 1,
            load_hints: false,
        };
        let store = Box::leak(Box::new(TopologyBox::new(shape, 1)));
        let topo = Topology::new(store.mem(), shape, |_| pattern(1)).unwrap();

        let writer = thread::spawn(move || {
            let mut w = topo.writer().unwrap();
            let mut published = 1;
            for _ in 0..2 {
                // A reader may still be on the old slot: then the update waits
                // (here: is skipped), it never overwrites that slot.
                if let Ok(mut u) = w.try_update() {
                    let v = published + 1;
                    u.fill(|_| pattern(v));
                    published = u.publish();
                    assert_eq!(published, v);
                }
            }
        });

        let reader = thread::spawn(move || {
            let mut reader = topo.reader().unwrap();
            for _ in 0..2 {
                let g = reader.pin();
                let want = pattern(g.version());
                for peer in 1..N_PES {
                    assert_eq!(
                        g.class(peer),
                        Some(want),
                        "torn row at version {}",
                        g.version()
                    );
                }
            }
        });
        writer.join().unwrap();
        reader.join().unwrap();
    });
}

#[test]
fn sticky_readers_see_whole_versions() {
    // As above, but the reader keeps its announcement between pins
    // (`pin_sticky`) and leaves only at the end: it must still never see a
    // torn row, and the writer must never write the slot it holds.
    loom::model(|| {
        let shape = Shape {
            me: 0,
            n_pes: N_PES,
            n_transports: 1,
            load_hints: false,
        };
        let store = Box::leak(Box::new(TopologyBox::new(shape, 1)));
        let topo = Topology::new(store.mem(), shape, |_| pattern(1)).unwrap();

        let writer = thread::spawn(move || {
            let mut w = topo.writer().unwrap();
            let mut published = 1;
            for _ in 0..2 {
                if let Ok(mut u) = w.try_update() {
                    let v = published + 1;
                    u.fill(|_| pattern(v));
                    published = u.publish();
                }
            }
        });

        let reader = thread::spawn(move || {
            let mut reader = topo.reader().unwrap();
            for _ in 0..3 {
                let g = reader.pin_sticky();
                let want = pattern(g.version());
                for peer in 1..N_PES {
                    assert_eq!(
                        g.class(peer),
                        Some(want),
                        "torn row at version {}",
                        g.version()
                    );
                }
            }
            reader.unpin();
        });
        writer.join().unwrap();
        reader.join().unwrap();
    });
}

#[test]
fn ring_delivers_in_order_through_a_full_ring() {
    loom::model(|| {
        let ring: &'static Ring<u32, 2> = Box::leak(Box::new(Ring::new()));
        // SAFETY: exactly one producer (moved to the thread) and one consumer.
        let (mut p, mut c) = unsafe { (ring.producer(), ring.consumer()) };
        let producer = thread::spawn(move || {
            for v in 0..3 {
                let mut v = v;
                loop {
                    match p.push(v) {
                        Ok(()) => break,
                        Err(e) => {
                            v = e.into_inner();
                            thread::yield_now();
                        }
                    }
                }
            }
        });
        let consumer = thread::spawn(move || {
            let mut next = 0;
            while next < 3 {
                match c.pop() {
                    Ok(v) => {
                        assert_eq!(v, next);
                        next += 1;
                    }
                    Err(_) => thread::yield_now(),
                }
            }
        });
        producer.join().unwrap();
        consumer.join().unwrap();
    });
}

#[test]
fn ring_batches_in_order() {
    loom::model(|| {
        let ring: &'static Ring<u32, 4> = Box::leak(Box::new(Ring::new()));
        // SAFETY: one producer, one consumer.
        let (mut p, mut c) = unsafe { (ring.producer(), ring.consumer()) };
        let producer = thread::spawn(move || {
            let src = [10, 11, 12];
            let mut sent = 0;
            while sent < src.len() {
                let n = p.push_slice(&src[sent..]);
                sent += n;
                if n == 0 {
                    thread::yield_now();
                }
            }
        });
        let consumer = thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = [0u32; 4];
            while got.len() < 3 {
                let n = c.pop_slice(&mut buf);
                got.extend_from_slice(&buf[..n]);
                if n == 0 {
                    thread::yield_now();
                }
            }
            assert_eq!(got, [10, 11, 12]);
        });
        producer.join().unwrap();
        consumer.join().unwrap();
    });
}

#[test]
fn trace_snapshots_are_never_torn() {
    fn rec(i: u64) -> TraceRecord {
        TraceRecord {
            seq: i,
            src: i as u32,
            dst: !(i as u32),
            timestamp: i << 40,
            ..TraceRecord::default()
        }
    }
    loom::model(|| {
        let ring: &'static TraceRing<2> = Box::leak(Box::new(TraceRing::new()));
        let writer = thread::spawn(move || {
            let mut w = ring.writer().unwrap();
            for i in 0..3 {
                w.record(&rec(i));
            }
        });
        let reader = thread::spawn(move || {
            let mut out = [TraceRecord::default(); 2];
            let n = ring.snapshot(&mut out);
            for r in &out[..n] {
                assert_eq!(*r, rec(r.seq), "torn trace record");
            }
            n
        });
        writer.join().unwrap();
        let _ = reader.join().unwrap();
    });
}
