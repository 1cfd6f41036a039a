//! Baselines measured in the same run as the tests they calibrate:
//!
//! * `cacheline`: two threads pinned to two cores bounce one cache line (a
//!   store, a spin until the echo): the physical floor of any shared-memory
//!   ping-pong on this machine, timed exactly like `put-lat`.
//! * `memcpy`: one thread copying between two pre-faulted buffers, with the
//!   same sizes and message counts as `put-bw`.

use std::{
    hint::black_box,
    sync::{
        Arc, Barrier,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use switchyard_core::pad::CachePadded;

use super::stats::{Bandwidth, Latency, Measurement};

/// Bare cache-line ping-pong: one-way latency (RTT/2) percentiles. Both sides
/// run on threads of their own, so the caller's CPU affinity (which the PEs
/// launched later inherit the set of) is left alone.
pub fn cacheline(iters: u64, warmup: u64, cpus: (usize, usize)) -> Measurement {
    std::thread::spawn(move || cacheline_here(iters, warmup, cpus))
        .join()
        .unwrap_or_else(|_| Measurement {
            test: "cacheline".into(),
            size: 8,
            iters: 0,
            latency: None,
            bandwidth: None,
        })
}

fn cacheline_here(iters: u64, warmup: u64, cpus: (usize, usize)) -> Measurement {
    let ping = Arc::new(CachePadded::new(AtomicU64::new(0)));
    let pong = Arc::new(CachePadded::new(AtomicU64::new(0)));
    let total = iters + warmup;
    let start = Arc::new(Barrier::new(2));
    let echo = {
        let (ping, pong, start) = (ping.clone(), pong.clone(), start.clone());
        std::thread::spawn(move || {
            let _ = crate::sys::pin_current_thread(cpus.1);
            start.wait();
            for i in 1..=total {
                while ping.load(Ordering::Acquire) != i {
                    std::hint::spin_loop();
                }
                pong.store(i, Ordering::Release);
            }
        })
    };
    let _ = crate::sys::pin_current_thread(cpus.0);
    let mut samples = Vec::with_capacity(iters as usize);
    start.wait();
    let mut t0 = Instant::now();
    for i in 1..=total {
        ping.store(i, Ordering::Release);
        while pong.load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
        let t1 = Instant::now();
        if i > warmup {
            samples.push((t1 - t0).as_nanos() as u64);
        }
        t0 = t1;
    }
    let _ = echo.join();
    Measurement {
        test: "cacheline".into(),
        size: 8,
        iters,
        latency: Latency::from_samples(&mut samples, 0.5),
        bandwidth: None,
    }
}

/// Single-thread copy bandwidth of `size`-byte messages, `msgs` of them (on a
/// thread of its own, pinned to `cpu`).
pub fn memcpy(size: usize, msgs: u64, cpu: usize) -> Measurement {
    std::thread::spawn(move || memcpy_here(size, msgs, cpu))
        .join()
        .unwrap_or_else(|_| Measurement {
            test: "memcpy".into(),
            size: size as u64,
            iters: 0,
            latency: None,
            bandwidth: None,
        })
}

fn memcpy_here(size: usize, msgs: u64, cpu: usize) -> Measurement {
    let _ = crate::sys::pin_current_thread(cpu);
    let src = vec![0x5Au8; size.max(1)];
    let mut dst = vec![0u8; size.max(1)];
    // Warm both buffers (and the TLB) once.
    dst.copy_from_slice(&src);
    let t0 = Instant::now();
    for _ in 0..msgs {
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
    }
    let secs = t0.elapsed().as_secs_f64().max(1e-9);
    Measurement {
        test: "memcpy".into(),
        size: size as u64,
        iters: msgs,
        latency: None,
        bandwidth: Some(Bandwidth {
            gbps: (size as f64 * msgs as f64) / secs / 1e9,
            msgs_per_s: msgs as f64 / secs,
        }),
    }
}
