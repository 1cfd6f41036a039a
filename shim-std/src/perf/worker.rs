//! The PE side of `switchyard perf`: every PE runs this (through the
//! launcher); PEs 0 and 1 measure, the others wait at the barriers; PE 0
//! writes the results as JSON to the file the driver named.

use std::time::Instant;

use super::{
    Test,
    stats::{Bandwidth, Latency, Measurement},
};
use crate::context::{Cmp, Context, Result};

/// What one worker run measures.
#[derive(Debug, Clone)]
pub struct WorkerPlan {
    /// The test.
    pub test: Test,
    /// Message sizes.
    pub sizes: Vec<u64>,
    /// Measured iterations (latency) or messages (bandwidth) per size.
    pub iters: u64,
    /// Unmeasured iterations first.
    pub warmup: u64,
    /// Non-blocking puts per quiet (bandwidth).
    pub window: u64,
}

/// Runs the plan on this PE; PE 0 returns the measurements.
///
/// # Errors
///
/// Context errors (init, routes, timeouts).
pub fn run(ctx: &mut Context, plan: &WorkerPlan) -> Result<Vec<Measurement>> {
    let max = plan.sizes.iter().copied().max().unwrap_or(8).max(8) as usize;
    let me = ctx.my_pe();
    let ping = ctx.alloc::<u64>(1)?;
    let pong = ctx.alloc::<u64>(1)?;
    let counter = ctx.alloc::<u64>(1)?;
    let data = ctx.alloc::<u8>(max)?;
    let src = ctx.alloc::<u8>(max)?;
    ctx.write_local(&src, 0, &vec![0xA5u8; max])?;
    let mut out = Vec::new();
    // Samples are allocated once, before any timing.
    let mut samples = Vec::with_capacity(plan.iters as usize);
    let payload = vec![0x3Cu8; max];
    for &size in &plan.sizes {
        let size_us = size as usize;
        ctx.barrier_all()?;
        samples.clear();
        let total = plan.iters + plan.warmup;
        match plan.test {
            Test::PutLat => {
                // Ping-pong on flags: PE 0 puts `size` bytes and the flag (the
                // flag alone for 8 bytes) to PE 1, which answers with a flag.
                let mut t0 = Instant::now();
                for i in 1..=total {
                    if me == 0 {
                        if size > 8 {
                            ctx.put(&data, 0, &payload[..size_us - 8], 1)?;
                            ctx.fence()?;
                        }
                        ctx.put(&ping, 0, &[i], 1)?;
                        ctx.wait_until(&pong, 0, Cmp::Ge, i)?;
                        let t1 = Instant::now();
                        if i > plan.warmup {
                            samples.push((t1 - t0).as_nanos() as u64);
                        }
                        t0 = t1;
                    } else if me == 1 {
                        ctx.wait_until(&ping, 0, Cmp::Ge, i)?;
                        ctx.put(&pong, 0, &[i], 0)?;
                    }
                }
                ctx.write_local(&ping, 0, &[0])?;
                ctx.write_local(&pong, 0, &[0])?;
                if me == 0 {
                    out.push(lat("put-lat", size, plan.iters, &mut samples, 0.5));
                }
            }
            Test::GetLat => {
                if me == 0 {
                    let mut buf = vec![0u8; size_us];
                    for i in 0..total {
                        let t0 = Instant::now();
                        ctx.get(&data, 0, &mut buf, 1)?;
                        let dt = t0.elapsed().as_nanos() as u64;
                        if i >= plan.warmup {
                            samples.push(dt);
                        }
                    }
                    out.push(lat("get-lat", size, plan.iters, &mut samples, 1.0));
                }
            }
            Test::AtomicLat => {
                if me == 0 {
                    for i in 0..total {
                        let t0 = Instant::now();
                        ctx.fetch_add(&counter, 0, 1u64, 1)?;
                        let dt = t0.elapsed().as_nanos() as u64;
                        if i >= plan.warmup {
                            samples.push(dt);
                        }
                    }
                    out.push(lat("atomic-lat", 8, plan.iters, &mut samples, 1.0));
                }
            }
            Test::PutBw => {
                if me == 0 {
                    let window = plan.window.max(1);
                    let rounds = plan.iters.div_ceil(window).max(1);
                    let warm = plan.warmup.div_ceil(window);
                    let mut t0 = Instant::now();
                    for r in 0..rounds + warm {
                        if r == warm {
                            t0 = Instant::now();
                        }
                        for _ in 0..window {
                            ctx.put_nbi(&data, 0, &src, 0, size_us, 1)?;
                        }
                        ctx.quiet()?;
                    }
                    let secs = t0.elapsed().as_secs_f64().max(1e-9);
                    let msgs = rounds * window;
                    out.push(Measurement {
                        test: "put-bw".into(),
                        size,
                        iters: msgs,
                        latency: None,
                        bandwidth: Some(Bandwidth {
                            gbps: size as f64 * msgs as f64 / secs / 1e9,
                            msgs_per_s: msgs as f64 / secs,
                        }),
                    });
                }
            }
        }
    }
    ctx.barrier_all()?;
    Ok(out)
}

fn lat(test: &str, size: u64, iters: u64, samples: &mut [u64], scale: f64) -> Measurement {
    Measurement {
        test: test.into(),
        size,
        iters,
        latency: Latency::from_samples(samples, scale),
        bandwidth: None,
    }
}
