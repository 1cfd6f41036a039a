//! Loom models of the lock-free parts: the versioned topology, the SPSC ring,
//! the trace ring, the two one-word locks, and the submission ring's stall
//! and hand-back protocol. Run with
//! `RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p switchyard-core --features std --test loom --release`.
#![cfg(loom)]

use loom::{
    cell::UnsafeCell,
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    thread,
};
use switchyard_core::{
    class::PathClass,
    lock::{EntryLock, TryLock},
    ring::Ring,
    submit::{Issue, SubmitRing},
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
                    // A hint only: no state changes (a no-op under loom).
                    p.prefetch(1);
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
                // `pop_evict` keeps `pop`'s protocol (the eviction is a
                // cache hint, not modelled).
                let got = if next % 2 == 0 {
                    c.pop()
                } else {
                    c.pop_evict()
                };
                match got {
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

/// Who holds a lock, kept in the state it guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    Application,
    Helper,
}

/// State guarded by a lock: who is inside, and how often each side was.
/// Loom's `UnsafeCell` fails the model on any access not ordered after the
/// previous one by the lock's Acquire/Release, so mutual exclusion is checked
/// twice: by loom, and by the `inside` field.
#[derive(Debug, Default)]
struct Guarded {
    inside: Option<Holder>,
    visits: [u32; 2],
}

/// A critical section: `who` enters the guarded state (nobody may be in it),
/// counts a visit, yields there (so loom can try to run the other side
/// meanwhile), and leaves.
fn critical(state: &UnsafeCell<Guarded>, who: Holder) {
    state.with_mut(|s| {
        // SAFETY: the caller holds the lock (loom checks the access).
        let s = unsafe { &mut *s };
        assert_eq!(
            s.inside, None,
            "{who:?} entered while {:?} was inside",
            s.inside
        );
        s.inside = Some(who);
        s.visits[who as usize] += 1;
    });
    thread::yield_now();
    state.with_mut(|s| {
        // SAFETY: as above.
        let s = unsafe { &mut *s };
        assert_eq!(s.inside, Some(who));
        s.inside = None;
    });
}

/// The application/progress-thread hand-off (`switchyard`'s progress.rs):
/// the application enters twice (waiting while the helper holds the lock),
/// the helper tries twice. The helper never takes the lock while the
/// application is inside and the other way round; every entry is counted in
/// the word and the helper's turns leave the count as they found it; at the
/// end the lock is free.
#[test]
fn entry_lock_excludes_the_application_and_the_helper() {
    loom::model(|| {
        let shared = Arc::new((EntryLock::new(), UnsafeCell::new(Guarded::default())));
        let app = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                let (lock, state) = &*shared;
                for k in 1..=2 {
                    let entry = loop {
                        match lock.try_enter() {
                            Some(e) => break e,
                            None => thread::yield_now(),
                        }
                    };
                    assert_eq!(lock.entries(), k, "an entry not counted once");
                    critical(state, Holder::Application);
                    lock.leave(entry);
                }
            })
        };
        let helper = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                let (lock, state) = &*shared;
                let mut turns = 0u32;
                for _ in 0..2 {
                    if let Some(t) = lock.try_take() {
                        let before = lock.entries();
                        critical(state, Holder::Helper);
                        assert_eq!(lock.entries(), before, "the count moved under the helper");
                        drop(t);
                        turns += 1;
                    }
                }
                turns
            })
        };
        app.join().unwrap();
        let turns = helper.join().unwrap();
        let (lock, state) = &*shared;
        assert_eq!(lock.entries(), 2);
        assert!(!lock.is_held());
        state.with(|s| {
            // SAFETY: both threads are joined.
            let s = unsafe { &*s };
            assert_eq!(s.inside, None);
            assert_eq!(s.visits, [2, turns]);
        });
    });
}

/// Several applications on one lock (`switchyard`'s contexts of one PE,
/// each entering the shared TCP driver through the same lock) and the
/// helper: two applications try to enter (a bounded number of times: loom
/// cannot explore two unbounded spins), the helper tries once. Nobody is
/// inside with anybody else; every entry is counted once; at the end the
/// lock is free.
#[test]
fn entry_lock_excludes_two_applications_and_the_helper() {
    loom::model(|| {
        let shared = Arc::new((EntryLock::new(), UnsafeCell::new(Guarded::default())));
        let apps: Vec<_> = (0..2)
            .map(|_| {
                let shared = Arc::clone(&shared);
                thread::spawn(move || {
                    let (lock, state) = &*shared;
                    for _ in 0..2 {
                        if let Some(entry) = lock.try_enter() {
                            critical(state, Holder::Application);
                            lock.leave(entry);
                            return 1u32;
                        }
                        thread::yield_now();
                    }
                    0
                })
            })
            .collect();
        let (lock, state) = &*shared;
        let turns = match lock.try_take() {
            Some(t) => {
                critical(state, Holder::Helper);
                drop(t);
                1
            }
            None => 0,
        };
        let entered: u32 = apps.into_iter().map(|a| a.join().unwrap()).sum();
        assert_eq!(lock.entries(), entered as usize);
        assert!(!lock.is_held());
        state.with(|s| {
            // SAFETY: every other thread is joined.
            let s = unsafe { &*s };
            assert_eq!(s.inside, None);
            assert_eq!(s.visits, [entered, turns]);
        });
    });
}

/// What one holder writes, the next one sees, both ways: the helper tries
/// once while the application enters, writes and leaves; whichever order they
/// took, the application's next entry sees both writes (or only its own when
/// the helper found the lock held or the word changed under its reading).
#[test]
fn entry_lock_hands_the_state_over_both_ways() {
    loom::model(|| {
        let shared = Arc::new((EntryLock::new(), UnsafeCell::new(0u32)));
        let helper = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                let (lock, state) = &*shared;
                if let Some(_t) = lock.try_take() {
                    // SAFETY: the helper holds the lock.
                    state.with_mut(|v| unsafe { *v += 10 });
                }
            })
        };
        let (lock, state) = &*shared;
        let entry = loop {
            match lock.try_enter() {
                Some(e) => break e,
                None => thread::yield_now(),
            }
        };
        // SAFETY: the application holds the lock.
        state.with_mut(|v| unsafe { *v += 1 });
        lock.leave(entry);
        helper.join().unwrap();
        let entry = lock.try_enter().expect("free after the join");
        // SAFETY: the application holds the lock; the helper is joined.
        let v = state.with(|v| unsafe { *v });
        assert!(v == 1 || v == 11, "{v}");
        lock.leave(entry);
        assert_eq!(lock.entries(), 2);
    });
}

/// The verbs receive side's try-lock (`switchyard-verbs`'s recv.rs): the
/// progress thread polls only when it gets the lock (never waits), the
/// application spins until it gets it (its exact paths: drain, reset,
/// release); both never hold it together, and every hold is seen.
#[test]
fn try_lock_excludes_a_poller_and_a_spinner() {
    loom::model(|| {
        let shared = Arc::new((TryLock::new(), UnsafeCell::new(Guarded::default())));
        let poller = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                let (lock, state) = &*shared;
                let mut polls = 0u32;
                for _ in 0..2 {
                    if let Some(_g) = lock.try_lock() {
                        critical(state, Holder::Helper);
                        polls += 1;
                    }
                }
                polls
            })
        };
        let (lock, state) = &*shared;
        {
            let _g = loop {
                match lock.try_lock() {
                    Some(g) => break g,
                    None => thread::yield_now(),
                }
            };
            critical(state, Holder::Application);
        }
        let polls = poller.join().unwrap();
        assert!(!lock.is_locked());
        state.with(|s| {
            // SAFETY: the poller is joined and nobody holds the lock.
            let s = unsafe { &*s };
            assert_eq!(s.visits, [1, polls]);
        });
    });
}

/// A submission ring of the models: entries are their index, errors a code.
type Sub = SubmitRing<u64, u32, 4>;

/// Takes a stalled ring back to empty: each entry it returns counted in
/// `taken`, the one with the error in `failed`.
fn hand_back(r: &Sub, taken: &mut [u32; 3], failed: &mut Option<u64>) {
    while let Some((e, err)) = r.take_stalled() {
        let e = *e.first();
        // The context re-issues each entry taken back (the consumer may
        // run meanwhile).
        thread::yield_now();
        taken[e as usize] += 1;
        if let Some(code) = err {
            assert_eq!(code, 7);
            assert!(failed.replace(e).is_none(), "two errors");
        }
    }
}

#[test]
fn submit_ring_hand_back_takes_each_entry_once_while_the_consumer_drains() {
    // The consumer (the progress thread) drains twice while the producer
    // (the context) pushes its third entry and takes the ring back when it
    // sees it stalled; entry 1 always fails. Every entry ends issued once
    // or taken back once, never both, never by two consumers at a time
    // (loom's cell checks the stall's error).
    loom::model(|| {
        let r = Arc::new(Sub::new());
        let issued = Arc::new([AtomicU32::new(0), AtomicU32::new(0), AtomicU32::new(0)]);
        let issue = |issued: &[AtomicU32; 3], e: u64| {
            if e == 1 {
                Issue::Failed(7)
            } else {
                issued[e as usize].fetch_add(1, Ordering::Relaxed);
                Issue::Done
            }
        };
        // SAFETY: the one producer end.
        let mut p = unsafe { r.producer() };
        assert!(p.push(0).is_ok() && p.push(1).is_ok());
        let consumer = {
            let (r, issued) = (Arc::clone(&r), Arc::clone(&issued));
            thread::spawn(move || {
                for _ in 0..2 {
                    r.drain(|e| issue(&issued, e[0]));
                }
            })
        };
        let (mut taken, mut failed) = ([0u32; 3], None);
        // Pushed while the consumer may be stalling the ring.
        assert!(p.push(2).is_ok());
        if r.stalled() {
            hand_back(&r, &mut taken, &mut failed);
        }
        consumer.join().unwrap();
        // The thread gone: what is left is drained here, then taken back.
        r.drain(|e| issue(&issued, e[0]));
        if r.stalled() {
            hand_back(&r, &mut taken, &mut failed);
        }
        assert!(r.is_empty() && !r.stalled());
        assert_eq!(failed, Some(1));
        for e in 0..3 {
            let n = issued[e].load(Ordering::Relaxed) + taken[e];
            assert_eq!(n, 1, "entry {e}: issued or taken back {n} times");
        }
        // Nothing after the failed entry was issued.
        assert_eq!(issued[2].load(Ordering::Relaxed), 0);
    });
}

#[test]
fn submit_ring_drain_wait_sees_the_issue() {
    // The producer waits for its ring to drain, then reads what the
    // consumer's issue wrote (the driver's state, here a plain cell): the
    // ring's head hands it over.
    loom::model(|| {
        let r = Arc::new(Sub::new());
        let written = Arc::new(UnsafeCell::new(0u64));
        let consumer = {
            let (r, written) = (Arc::clone(&r), Arc::clone(&written));
            thread::spawn(move || {
                let mut done = 0;
                while done < 2 {
                    done += r.drain(|e| {
                        // SAFETY: loom checks this write against the read.
                        written.with_mut(|p| unsafe { *p += e[0] + 1 });
                        Issue::Done
                    });
                    if done < 2 {
                        thread::yield_now();
                    }
                }
            })
        };
        {
            // SAFETY: the one producer end.
            let mut p = unsafe { r.producer() };
            assert!(p.push(0).is_ok());
            assert!(p.push(1).is_ok());
        }
        while !r.is_empty() {
            thread::yield_now();
        }
        // SAFETY: loom checks this read against the consumer's writes.
        let v = written.with(|p| unsafe { *p });
        assert_eq!(v, 3);
        consumer.join().unwrap();
    });
}

#[test]
fn submit_ring_stall_and_hint_share_the_word() {
    // The consumer publishes hints while it stalls the ring; the producer's
    // view of the stall and the hand-back's error survive the hint's
    // updates.
    loom::model(|| {
        let r = Arc::new(Sub::new());
        {
            // SAFETY: the one producer end.
            let mut p = unsafe { r.producer() };
            assert!(p.push(0).is_ok());
        }
        let consumer = {
            let r = Arc::clone(&r);
            thread::spawn(move || {
                r.set_hint(1);
                r.drain(|_| Issue::Failed(7));
                r.set_hint(2);
            })
        };
        let mut got = None;
        while got.is_none() {
            if r.stalled() {
                got = r.take_stalled().map(|(e, err)| (*e.first(), err));
            } else {
                thread::yield_now();
            }
        }
        assert_eq!(got, Some((0, Some(7))));
        assert!(r.take_stalled().is_none());
        consumer.join().unwrap();
        assert!(!r.stalled());
        assert_eq!(r.hint(), 2);
    });
}

#[test]
fn submit_ring_entries_of_two_slots_are_issued_and_taken_back_whole() {
    // Entries of two slots (odd first slots) pushed with one publish while
    // the consumer drains: a drain never issues half of one (it sees both
    // slots or waits), and the hand-back after a failure returns both.
    loom::model(|| {
        let r = Arc::new(SubmitRing::<u64, u32, 4>::with_span(|v| {
            if v % 2 == 1 { 2 } else { 1 }
        }));
        let consumer = {
            let r = Arc::clone(&r);
            thread::spawn(move || {
                let mut seen = Vec::new();
                for _ in 0..2 {
                    r.drain(|e| {
                        seen.push(e.to_vec());
                        if e[0] == 3 {
                            Issue::Failed(7)
                        } else {
                            Issue::Done
                        }
                    });
                }
                seen
            })
        };
        // SAFETY: the one producer end.
        let mut p = unsafe { r.producer() };
        assert!(p.push_all(&[1, 10]).is_ok());
        let mut second = false;
        for _ in 0..3 {
            if p.push_all(&[3, 30]).is_ok() {
                second = true;
                break;
            }
            thread::yield_now();
        }
        let seen = consumer.join().unwrap();
        for e in &seen {
            assert!(e == &[1, 10] || e == &[3, 30], "a drain issued {e:?}");
        }
        if r.stalled() {
            let (e, err) = r.take_stalled().expect("the failed entry");
            assert_eq!((e.slots(), err), (&[3, 30][..], Some(7)));
            assert!(r.take_stalled().is_none());
        }
        r.drain(|e| {
            assert!(e == [1, 10] || e == [3, 30]);
            Issue::Done
        });
        assert!(r.is_empty() || !second);
        assert!(!r.stalled());
    });
}
