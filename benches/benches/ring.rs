//! switchyard's SPSC `Ring<u64, 4096>` beside two queues of the same
//! capacity, in the same run and on the same workloads: rtrb's `RingBuffer`
//! (the SPSC anchor: split handles, cached indices, like ours) and
//! crossbeam's `ArrayQueue` (an MPMC queue: what a general-purpose bounded
//! queue costs).
//!
//! | id | what |
//! |---|---|
//! | `ring/<q>/push_pop` | one thread: one push, then one pop |
//! | `ring/<q>/spsc` | two threads: a producer pushes, a consumer pops, one message at a time |
//! | `ring/<q>/spsc_batch32` | two threads, slices of up to 32 (`push_slice` / `pop_slice`; rtrb's `push_partial_slice` / `pop_partial_slice`; not for `ArrayQueue`, which has no slice API) |
//! | `ring/<q>/round_trip` | two threads, two queues: one message there and back (latency) |
//!
//! `<q>` is `switchyard`, `rtrb` or `crossbeam_arrayqueue`. One iteration is
//! one message (`Throughput::Elements(1)`), a round trip for `round_trip`.
//! The two-thread benches spawn both threads for every measurement, line
//! them up on a `Barrier`, and time one side from the barrier to its last
//! message (docs/ARCHITECTURE.md, "Code rules"); the receiving side checks it got exactly
//! `0..N` in order before the time is reported, and a correctness run of
//! every variant precedes all timing. A side that finds its queue full or
//! empty spins, yielding its core after 1024 spins in a row (`Wait`), the
//! same for every queue; still, on a two-core machine anything else running
//! skews the two-thread numbers.

use std::{
    hint::{black_box, spin_loop},
    sync::Barrier,
    thread,
    time::{Duration, Instant},
};

use criterion::{
    BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main, measurement::WallTime,
};
use crossbeam_queue::ArrayQueue;
use switchyard_core::ring::Ring;

/// Capacity of every queue.
const CAP: usize = 4096;
/// Slice length of the batch variant.
const BURST: usize = 32;

/// Runs `a` and `b` on two threads lined up on a barrier; returns `a`'s time
/// from the barrier to its end, once `check` accepted `b`'s result.
fn two_threads<R: Send>(
    a: impl FnOnce() + Send,
    b: impl FnOnce() -> R + Send,
    check: impl FnOnce(R) -> bool,
    timed_side_is_b: bool,
) -> Duration {
    let barrier = Barrier::new(2);
    let barrier = &barrier;
    let (ta, (tb, r)) = thread::scope(|s| {
        let a = s.spawn(move || {
            barrier.wait();
            let t = Instant::now();
            a();
            t.elapsed()
        });
        let b = s.spawn(move || {
            barrier.wait();
            let t = Instant::now();
            let r = b();
            (t.elapsed(), r)
        });
        (a.join().expect("thread a"), b.join().expect("thread b"))
    });
    assert!(check(r), "a queue lost, duplicated or reordered a message");
    if timed_side_is_b { tb } else { ta }
}

/// How a side waits while its queue is full or empty: it spins, and yields
/// its core after [`Wait::YIELD_EVERY`] spins in a row (the other side may
/// be descheduled: on a machine with more busy threads than cores, pure
/// spinning would time the scheduler's slices, not the queue). Same for
/// every queue.
struct Wait(u32);

impl Wait {
    const YIELD_EVERY: u32 = 1024;

    #[inline]
    fn spin(&mut self) {
        self.0 = self.0.wrapping_add(1);
        if self.0.is_multiple_of(Self::YIELD_EVERY) {
            thread::yield_now();
        } else {
            spin_loop();
        }
    }
}

/// Pops `n` messages with `pop`, waiting while empty; whether they were
/// exactly `0..n` in order.
fn pop_in_order(n: u64, mut pop: impl FnMut() -> Option<u64>) -> bool {
    let mut ok = true;
    let mut expect = 0;
    let mut wait = Wait(0);
    while expect < n {
        match pop() {
            Some(v) => {
                ok &= v == expect;
                expect += 1;
            }
            None => wait.spin(),
        }
    }
    ok
}

/// Pushes `v` with `push`, waiting while full.
#[inline]
fn push_spin(push: &mut impl FnMut(u64) -> bool, v: u64) {
    let mut wait = Wait(0);
    while !push(v) {
        wait.spin();
    }
}

/// Pops one message with `pop`, waiting while empty.
#[inline]
fn pop_spin(pop: &mut impl FnMut() -> Option<u64>) -> u64 {
    let mut wait = Wait(0);
    loop {
        match pop() {
            Some(v) => return v,
            None => wait.spin(),
        }
    }
}

/// `spsc`: a producer pushes `0..n`, a consumer pops them (timed).
fn spsc(
    n: u64,
    mut push: impl FnMut(u64) -> bool + Send,
    pop: impl FnMut() -> Option<u64> + Send,
) -> Duration {
    two_threads(
        move || (0..n).for_each(|i| push_spin(&mut push, i)),
        move || pop_in_order(n, pop),
        |ok| ok,
        true,
    )
}

/// `spsc_batch32`: as [`spsc`], in slices of up to [`BURST`]; `push` and
/// `pop` return how many they moved.
fn spsc_batch(
    n: u64,
    mut push: impl FnMut(&[u64]) -> usize + Send,
    mut pop: impl FnMut(&mut [u64]) -> usize + Send,
) -> Duration {
    two_threads(
        move || {
            let mut buf = [0u64; BURST];
            let mut i = 0;
            let mut wait = Wait(0);
            while i < n {
                let m = (n - i).min(BURST as u64) as usize;
                for (k, b) in buf[..m].iter_mut().enumerate() {
                    *b = i + k as u64;
                }
                let pushed = push(&buf[..m]);
                if pushed == 0 {
                    wait.spin();
                }
                i += pushed as u64;
            }
        },
        move || {
            let mut ok = true;
            let mut expect = 0;
            let mut buf = [0u64; BURST];
            let mut wait = Wait(0);
            while expect < n {
                let got = pop(&mut buf);
                if got == 0 {
                    wait.spin();
                }
                for &v in &buf[..got] {
                    ok &= v == expect;
                    expect += 1;
                }
            }
            ok
        },
        |ok| ok,
        true,
    )
}

/// `round_trip`: the timed side sends `0..n` one at a time over `there` and
/// waits for each to come back over `back`; the echo side pops each and
/// pushes it back.
fn round_trip<P1, C1, P2, C2>(n: u64, there: (P1, C1), back: (P2, C2)) -> Duration
where
    P1: FnMut(u64) -> bool + Send,
    C1: FnMut() -> Option<u64> + Send,
    P2: FnMut(u64) -> bool + Send,
    C2: FnMut() -> Option<u64> + Send,
{
    let (mut send, mut echo_pop) = there;
    let (mut echo_push, mut recv) = back;
    let mut ok = true;
    let ok_ref = &mut ok;
    let t = two_threads(
        move || {
            for i in 0..n {
                push_spin(&mut send, i);
                *ok_ref &= pop_spin(&mut recv) == i;
            }
        },
        move || {
            for _ in 0..n {
                let v = pop_spin(&mut echo_pop);
                push_spin(&mut echo_push, v);
            }
        },
        |()| true,
        false,
    );
    assert!(ok, "a round trip came back with another message");
    t
}

/// `push_pop`: one push and one pop per iteration, on this thread.
fn push_pop(
    g: &mut BenchmarkGroup<'_, WallTime>,
    id: &str,
    mut push: impl FnMut(u64) -> bool,
    mut pop: impl FnMut() -> Option<u64>,
) {
    // Correctness first: a run long enough to wrap the queue many times.
    for i in 0..3 * CAP as u64 {
        assert!(push(i) && pop() == Some(i), "{id}: push then pop");
    }
    assert_eq!(pop(), None, "{id}: empty after the check");
    g.bench_function(id, |b| {
        let mut i = 0u64;
        b.iter(|| {
            push(black_box(i));
            i = i.wrapping_add(1);
            black_box(pop())
        })
    });
}

fn ring(c: &mut Criterion) {
    let mut ours = Box::new(Ring::<u64, CAP>::new());
    let mut back = Box::new(Ring::<u64, CAP>::new());
    let (mut rt_p, mut rt_c) = rtrb::RingBuffer::<u64>::new(CAP);
    let (mut rt_back_p, mut rt_back_c) = rtrb::RingBuffer::<u64>::new(CAP);
    let queue = ArrayQueue::<u64>::new(CAP);
    let queue_back = ArrayQueue::<u64>::new(CAP);

    // The variants, each as (push, pop) closures over borrowed handles, so
    // that the correctness run and the timing run the same code.
    let sy_spsc = |ring: &mut Ring<u64, CAP>, n| {
        let (mut p, mut c) = ring.split();
        spsc(n, move |v| p.push(v).is_ok(), move || c.pop().ok())
    };
    let sy_batch = |ring: &mut Ring<u64, CAP>, n| {
        let (mut p, mut c) = ring.split();
        spsc_batch(n, move |s| p.push_slice(s), move |b| c.pop_slice(b))
    };
    let sy_round_trip = |a: &mut Ring<u64, CAP>, b: &mut Ring<u64, CAP>, n| {
        let ((mut p1, mut c1), (mut p2, mut c2)) = (a.split(), b.split());
        round_trip(
            n,
            (move |v| p1.push(v).is_ok(), move || c1.pop().ok()),
            (move |v| p2.push(v).is_ok(), move || c2.pop().ok()),
        )
    };
    let rt_spsc = |p: &mut rtrb::Producer<u64>, c: &mut rtrb::Consumer<u64>, n| {
        spsc(n, move |v| p.push(v).is_ok(), move || c.pop().ok())
    };
    let rt_batch = |p: &mut rtrb::Producer<u64>, c: &mut rtrb::Consumer<u64>, n| {
        spsc_batch(
            n,
            move |s| p.push_partial_slice(s).0.len(),
            move |b| c.pop_partial_slice(b).0.len(),
        )
    };
    type RtPair<'a> = (&'a mut rtrb::Producer<u64>, &'a mut rtrb::Consumer<u64>);
    let rt_round_trip = |(p1, c1): RtPair<'_>, (p2, c2): RtPair<'_>, n| {
        round_trip(
            n,
            (move |v| p1.push(v).is_ok(), move || c1.pop().ok()),
            (move |v| p2.push(v).is_ok(), move || c2.pop().ok()),
        )
    };
    let aq_spsc = |q: &ArrayQueue<u64>, n| spsc(n, move |v| q.push(v).is_ok(), move || q.pop());
    let aq_round_trip = |a: &ArrayQueue<u64>, b: &ArrayQueue<u64>, n| {
        round_trip(
            n,
            (move |v| a.push(v).is_ok(), move || a.pop()),
            (move |v| b.push(v).is_ok(), move || b.pop()),
        )
    };

    // Correctness before timing: runs long enough to wrap the rings many times.
    const CHECK: u64 = 100_000;
    sy_spsc(&mut ours, CHECK);
    sy_batch(&mut ours, CHECK + 7);
    sy_round_trip(&mut ours, &mut back, CAP as u64 * 3);
    rt_spsc(&mut rt_p, &mut rt_c, CHECK);
    rt_batch(&mut rt_p, &mut rt_c, CHECK + 7);
    rt_round_trip(
        (&mut rt_p, &mut rt_c),
        (&mut rt_back_p, &mut rt_back_c),
        CAP as u64 * 3,
    );
    aq_spsc(&queue, CHECK);
    aq_round_trip(&queue, &queue_back, CAP as u64 * 3);
    assert!(ours.is_empty() && back.is_empty());
    assert!(rt_c.is_empty() && rt_back_c.is_empty());
    assert!(queue.is_empty() && queue_back.is_empty());

    let mut g = c.benchmark_group("ring");
    g.throughput(Throughput::Elements(1));
    g.sample_size(20);
    {
        let (mut p, mut c) = ours.split();
        push_pop(
            &mut g,
            "switchyard/push_pop",
            |v| p.push(v).is_ok(),
            || c.pop().ok(),
        );
    }
    push_pop(
        &mut g,
        "rtrb/push_pop",
        |v| rt_p.push(v).is_ok(),
        || rt_c.pop().ok(),
    );
    push_pop(
        &mut g,
        "crossbeam_arrayqueue/push_pop",
        |v| queue.push(v).is_ok(),
        || queue.pop(),
    );

    g.bench_function("switchyard/spsc", |b| {
        b.iter_custom(|iters| sy_spsc(&mut ours, iters))
    });
    g.bench_function("rtrb/spsc", |b| {
        b.iter_custom(|iters| rt_spsc(&mut rt_p, &mut rt_c, iters))
    });
    g.bench_function("crossbeam_arrayqueue/spsc", |b| {
        b.iter_custom(|iters| aq_spsc(&queue, iters))
    });
    g.bench_function("switchyard/spsc_batch32", |b| {
        b.iter_custom(|iters| sy_batch(&mut ours, iters))
    });
    g.bench_function("rtrb/spsc_batch32", |b| {
        b.iter_custom(|iters| rt_batch(&mut rt_p, &mut rt_c, iters))
    });
    g.bench_function("switchyard/round_trip", |b| {
        b.iter_custom(|iters| sy_round_trip(&mut ours, &mut back, iters))
    });
    g.bench_function("rtrb/round_trip", |b| {
        b.iter_custom(|iters| {
            rt_round_trip(
                (&mut rt_p, &mut rt_c),
                (&mut rt_back_p, &mut rt_back_c),
                iters,
            )
        })
    });
    g.bench_function("crossbeam_arrayqueue/round_trip", |b| {
        b.iter_custom(|iters| aq_round_trip(&queue, &queue_back, iters))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = switchyard_benches::criterion_config();
    targets = ring
}
criterion_main!(benches);
