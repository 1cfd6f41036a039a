//! SPSC throughput between two threads: switchyard's `Ring<u64, 4096>` beside
//! crossbeam's `ArrayQueue<u64>` of the same capacity.
//!
//! | id | what |
//! |---|---|
//! | `ring/switchyard/spsc` | `push` / `pop`, one message at a time |
//! | `ring/switchyard/spsc_batch32` | `push_slice` / `pop_slice` of up to 32 |
//! | `ring/crossbeam_arrayqueue/spsc` | `ArrayQueue::push` / `pop` (baseline) |
//!
//! One iteration is one message (`Throughput::Elements(1)`). Every measurement
//! spawns a producer and a consumer, lines them up on a `Barrier`, and times the
//! consumer from the barrier to its last message (docs/ARCHITECTURE.md, "Code rules"); the
//! consumer checks it received exactly `0..N` in order before the time is
//! reported. Both sides busy-spin with `spin_loop` when full or empty, so on a
//! two-core machine anything else running skews the numbers.

use std::{
    hint::spin_loop,
    sync::Barrier,
    thread,
    time::{Duration, Instant},
};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use crossbeam_queue::ArrayQueue;
use switchyard_core::ring::Ring;

/// Capacity of both queues.
const CAP: usize = 4096;
/// Slice length of the batch variant.
const BURST: usize = 32;

/// Runs producer and consumer over `n` messages; returns the consumer's time
/// from the barrier to the last message, after checking the sequence.
fn two_threads(
    n: u64,
    produce: impl FnOnce(u64) + Send,
    consume: impl FnOnce(u64) -> bool + Send,
) -> Duration {
    let barrier = Barrier::new(2);
    let barrier = &barrier;
    thread::scope(|s| {
        s.spawn(move || {
            barrier.wait();
            produce(n);
        });
        let consumer = s.spawn(move || {
            barrier.wait();
            let t = Instant::now();
            let in_order = consume(n);
            let elapsed = t.elapsed();
            assert!(in_order, "consumer did not receive exactly 0..{n} in order");
            elapsed
        });
        consumer.join().expect("consumer thread")
    })
}

fn switchyard_spsc(ring: &mut Ring<u64, CAP>, n: u64) -> Duration {
    let (mut p, mut c) = ring.split();
    two_threads(
        n,
        move |n| {
            for i in 0..n {
                let mut v = i;
                while let Err(e) = p.push(v) {
                    v = e.into_inner();
                    spin_loop();
                }
            }
        },
        move |n| {
            let mut ok = true;
            let mut expect = 0;
            while expect < n {
                match c.pop() {
                    Ok(v) => {
                        ok &= v == expect;
                        expect += 1;
                    }
                    Err(_) => spin_loop(),
                }
            }
            ok
        },
    )
}

fn switchyard_spsc_batch(ring: &mut Ring<u64, CAP>, n: u64) -> Duration {
    let (mut p, mut c) = ring.split();
    two_threads(
        n,
        move |n| {
            let mut buf = [0u64; BURST];
            let mut i = 0;
            while i < n {
                let m = (n - i).min(BURST as u64) as usize;
                for (k, b) in buf[..m].iter_mut().enumerate() {
                    *b = i + k as u64;
                }
                let pushed = p.push_slice(&buf[..m]);
                if pushed == 0 {
                    spin_loop();
                }
                i += pushed as u64;
            }
        },
        move |n| {
            let mut ok = true;
            let mut expect = 0;
            let mut buf = [0u64; BURST];
            while expect < n {
                let got = c.pop_slice(&mut buf);
                if got == 0 {
                    spin_loop();
                }
                for &v in &buf[..got] {
                    ok &= v == expect;
                    expect += 1;
                }
            }
            ok
        },
    )
}

fn arrayqueue_spsc(q: &ArrayQueue<u64>, n: u64) -> Duration {
    two_threads(
        n,
        move |n| {
            for i in 0..n {
                let mut v = i;
                while let Err(back) = q.push(v) {
                    v = back;
                    spin_loop();
                }
            }
        },
        move |n| {
            let mut ok = true;
            let mut expect = 0;
            while expect < n {
                match q.pop() {
                    Some(v) => {
                        ok &= v == expect;
                        expect += 1;
                    }
                    None => spin_loop(),
                }
            }
            ok
        },
    )
}

fn ring(c: &mut Criterion) {
    let mut ring = Box::new(Ring::<u64, CAP>::new());
    let queue = ArrayQueue::<u64>::new(CAP);
    // Correctness before timing: a run long enough to wrap the rings many times.
    const CHECK: u64 = 100_000;
    switchyard_spsc(&mut ring, CHECK);
    switchyard_spsc_batch(&mut ring, CHECK + 7);
    arrayqueue_spsc(&queue, CHECK);
    assert!(ring.is_empty() && queue.is_empty());

    let mut g = c.benchmark_group("ring");
    g.throughput(Throughput::Elements(1));
    g.sample_size(20);
    g.bench_function("switchyard/spsc", |b| {
        b.iter_custom(|iters| switchyard_spsc(&mut ring, iters))
    });
    g.bench_function("switchyard/spsc_batch32", |b| {
        b.iter_custom(|iters| switchyard_spsc_batch(&mut ring, iters))
    });
    g.bench_function("crossbeam_arrayqueue/spsc", |b| {
        b.iter_custom(|iters| arrayqueue_spsc(&queue, iters))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = switchyard_benches::criterion_config();
    targets = ring
}
criterion_main!(benches);
