//! The PE side of `switchyard perf`: every PE runs this (through the
//! launcher); PEs 0 and 1 measure, the others wait at the barriers; PE 0
//! writes the results as JSON to the file the driver named.
//!
//! What each test times, on PE 0 (the baselines it is compared with are in
//! [`super::baseline`]):
//!
//! * `put-lat`: a ping-pong on flags. PE 0 puts `size` bytes and a flag to
//!   PE 1 and waits for PE 1's answering flag; one-way latency = RTT/2.
//!   Over TCP ([`WorkerPlan::tcp`]), with more than 8 bytes, data and flag go
//!   as one put of `size` bytes whose last 8 bytes are the flag: a TCP frame
//!   is applied whole by the target's progress before its wait re-reads the
//!   flag, so the flag cannot be seen before the data, and a fence (a round
//!   trip on TCP) is not needed. Over shared memory it stays data put,
//!   fence, flag put.
//! * `get-lat`: one blocking get of `size` bytes that PE 1 has just written.
//!   Each iteration PE 1 fills the block with a new stamp (plain local
//!   stores, so its lines are modified in PE 1's cache), then puts a ready
//!   flag to PE 0; PE 0 waits for it, times the get alone, checks the stamp,
//!   and puts a done flag back, after which PE 1 writes the next stamp.
//!   Over shared memory that is a read of lines another core modified (the
//!   cache-to-cache transfer the `remote-read` baseline times); over TCP a
//!   request and its reply (a full round trip).
//! * `atomic-lat`: one fetch-add on a word that PE 1 has just written, with
//!   the same hand-shake: PE 1 stores a new stamp, flags; PE 0 times the
//!   fetch-add alone and checks it returned the stamp. Over shared memory a
//!   locked read-modify-write of a line another core modified (as the
//!   `remote-rmw` baseline); over TCP a full round trip.
//!
//! The hand-shakes are not timed: each sample is one operation.
//!
//! The rate tests time a stream of operations on PE 0, from the first
//! measured one until the last returns (after warm-up rounds), and report
//! operations per second; PE 1 only waits in a barrier meanwhile. After the
//! run (untimed) the target's state is checked, and a mismatch fails the run
//! ([`WorkerError::Missed`]):
//!
//! * `put-rate`: rounds of `window` blocking puts of `size` bytes from a
//!   local buffer to the same place on PE 1, each carrying its sequence
//!   number in its first (up to) 8 bytes, then a quiet. PE 1 clears the
//!   place before the run and checks after it that it holds the last
//!   number.
//! * `get-rate`: rounds of `window` non-blocking gets of the same `size`
//!   bytes of PE 1 into PE 0's heap, then a quiet. PE 1 writes a pattern of
//!   this size first, PE 0 clears its destination, and checks it holds the
//!   pattern after the run.
//! * `atomic-rate`: blocking fetch-adds of 1 on one word of PE 1, back to
//!   back (a window of 1: the next starts when the last has returned). PE 1
//!   sets the word to a base first; PE 0 checks every old value against the
//!   count so far (in the loop: one compare), PE 1 the total after the run.
//!
//! With `--threads N`, PE 0 runs each rate test from one thread, then from
//! `N` threads at once, each on its own context (the `rate` module).

use std::time::Instant;

use switchyard::context::{Cmp, Context, Plain, Sym};

mod rate;

use super::{Rounds, Test, stats::Measurement};

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
    /// Operations per quiet (`put-bw`, `put-rate`, `get-rate`).
    pub window: u64,
    /// The PEs talk over TCP (`--transport tcp`, or a sim): `put-lat` sends
    /// data and flag as one put (see the module doc).
    pub tcp: bool,
    /// Application threads of PE 0 in a rate test, each on its own context
    /// (`--threads`; 1: PE 0's own context, as without the option).
    pub threads: u32,
}

/// Why a worker run failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The context failed (init, routes, timeouts).
    #[error(transparent)]
    Context(#[from] switchyard::context::Error),
    /// PE 0 read something else than PE 1 had just written.
    #[error("{test}: iteration {iter} read {found:#x} where PE 1 had written {wrote:#x}")]
    Stale {
        /// The test.
        test: &'static str,
        /// The iteration (from 1).
        iter: u64,
        /// What PE 0 read.
        found: u64,
        /// What PE 1 wrote.
        wrote: u64,
    },
    /// After (or during) a rate test, the target's state is not what the
    /// operations left there: one was lost or applied twice.
    #[error("{test}: after {ops} operations {what} is {found:#x}, expected {expected:#x}")]
    Missed {
        /// The test.
        test: &'static str,
        /// Operations done so far (warm-up included).
        ops: u64,
        /// What was checked.
        what: &'static str,
        /// What it is.
        found: u64,
        /// What it should be.
        expected: u64,
    },
}

/// `atomic-rate`'s word starts here (PE 1 stores it), so a fetch-add on a
/// word nobody initialised shows.
const ATOMIC_BASE: u64 = 0xA70_0000_0000;

/// Runs the plan on this PE; PE 0 returns the measurements.
///
/// # Errors
///
/// [`WorkerError`]: context errors, or a stale read.
pub fn run(ctx: &mut Context, plan: &WorkerPlan) -> Result<Vec<Measurement>, WorkerError> {
    let max = plan.sizes.iter().copied().max().unwrap_or(8).max(8) as usize;
    let me = ctx.my_pe();
    let ping = ctx.alloc::<u64>(1)?;
    let pong = ctx.alloc::<u64>(1)?;
    let counter = ctx.alloc::<u64>(rate::words_needed(plan))?;
    let data = ctx.alloc::<u8>(rate::bytes_needed(plan, max))?;
    let src = ctx.alloc::<u8>(rate::bytes_needed(plan, max))?;
    // One put carrying data and flag (TCP put-lat): whole 8-byte words, the
    // flag in the last one. Every PE allocates the same (collective).
    let one_put = plan.tcp && plan.test == Test::PutLat && max > 8;
    let msg_words = if one_put { max.div_ceil(8) } else { 1 };
    let msg = ctx.alloc::<u64>(msg_words)?;
    let mut msg_src = vec![0x3C3C_3C3C_3C3C_3C3Cu64; msg_words];
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
                // Over TCP, data and flag go as one put of `size` bytes
                // (rounded up to whole words), the flag last.
                let words = size_us.div_ceil(8);
                let mut t0 = Instant::now();
                for i in 1..=total {
                    if one_put && size > 8 {
                        if me == 0 {
                            msg_src[words - 1] = i;
                            ctx.put(&msg, 0, &msg_src[..words], 1)?;
                            ctx.wait_until(&pong, 0, Cmp::Ge, i)?;
                            let t1 = Instant::now();
                            if i > plan.warmup {
                                samples.push((t1 - t0).as_nanos() as u64);
                            }
                            t0 = t1;
                        } else if me == 1 {
                            ctx.wait_until(&msg, words - 1, Cmp::Ge, i)?;
                            ctx.put(&pong, 0, &[i], 0)?;
                        }
                    } else if me == 0 {
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
                reset_flags(ctx, &ping, &pong)?;
                // The next size's flag word may hold this size's data.
                ctx.write_local(&msg, 0, &vec![0u64; msg_words])?;
                if me == 0 {
                    out.push(lat("put-lat", size, plan.iters, &mut samples, 0.5));
                }
            }
            Test::GetLat => {
                let mut block = vec![0u8; size_us];
                for i in 1..=total {
                    let stamp = i as u8;
                    if me == 1 {
                        block.fill(stamp);
                        modify_then_flag(ctx, plan, &data, &block, (&ping, &pong), i)?;
                    } else if me == 0 {
                        ctx.wait_until(&ping, 0, Cmp::Ge, i)?;
                        let t0 = Instant::now();
                        ctx.get(&data, 0, &mut block, 1)?;
                        let dt = t0.elapsed().as_nanos() as u64;
                        let found = [block.first(), block.last()];
                        if let Some(&b) = found.into_iter().flatten().find(|&&b| b != stamp) {
                            return Err(WorkerError::Stale {
                                test: "get-lat",
                                iter: i,
                                found: b.into(),
                                wrote: stamp.into(),
                            });
                        }
                        ctx.put(&pong, 0, &[i], 1)?;
                        if i > plan.warmup {
                            samples.push(dt);
                        }
                    }
                }
                reset_flags(ctx, &ping, &pong)?;
                if me == 0 {
                    out.push(lat("get-lat", size, plan.iters, &mut samples, 1.0));
                }
            }
            Test::AtomicLat => {
                for i in 1..=total {
                    let stamp = 2 * i;
                    if me == 1 {
                        modify_then_flag(ctx, plan, &counter, &[stamp], (&ping, &pong), i)?;
                    } else if me == 0 {
                        ctx.wait_until(&ping, 0, Cmp::Ge, i)?;
                        let t0 = Instant::now();
                        let old = ctx.fetch_add(&counter, 0, 1u64, 1)?;
                        let dt = t0.elapsed().as_nanos() as u64;
                        if old != stamp {
                            return Err(WorkerError::Stale {
                                test: "atomic-lat",
                                iter: i,
                                found: old,
                                wrote: stamp,
                            });
                        }
                        ctx.put(&pong, 0, &[i], 1)?;
                        if i > plan.warmup {
                            samples.push(dt);
                        }
                    }
                }
                reset_flags(ctx, &ping, &pong)?;
                if me == 0 {
                    out.push(lat("atomic-lat", 8, plan.iters, &mut samples, 1.0));
                }
            }
            Test::PutBw => {
                if me == 0 {
                    let r = Rounds::new(plan.iters, plan.warmup, plan.window);
                    let secs = r.time(|_| {
                        for _ in 0..r.window {
                            ctx.put_nbi(&data, 0, &src, 0, size_us, 1)?;
                        }
                        ctx.quiet()
                    })?;
                    out.push(Measurement::throughput("put-bw", size, r.ops(), secs));
                }
            }
            Test::PutRate | Test::GetRate | Test::AtomicRate => {
                let syms = rate::RateSyms {
                    data: &data,
                    src: &src,
                    counter: &counter,
                };
                rate::run(ctx, plan, &syms, size_us, &mut out)?;
            }
        }
    }
    ctx.barrier_all()?;
    Ok(out)
}

/// PE 1's side of one `get-lat` or `atomic-lat` iteration: writes `vals`
/// over the start of its own copy of `sym` (plain stores: the lines are then
/// modified in its cache), tells PE 0 (`flags.0` = `i`), and waits until PE
/// 0 has done its operation (`flags.1` >= `i`).
fn modify_then_flag<T: Plain>(
    ctx: &mut Context,
    plan: &WorkerPlan,
    sym: &Sym<T>,
    vals: &[T],
    flags: (&Sym<u64>, &Sym<u64>),
    i: u64,
) -> Result<(), WorkerError> {
    ctx.write_local(sym, 0, vals)?;
    if !plan.tcp {
        // The stores before the flag (shared memory: PE 0 reads them
        // directly). Over TCP, PE 0's request comes after the flag anyway.
        ctx.fence()?;
    }
    ctx.put(flags.0, 0, &[i], 0)?;
    ctx.wait_until(flags.1, 0, Cmp::Ge, i)?;
    Ok(())
}

/// Clears both flags (on every PE) after a test's iterations; each PE has
/// seen its last flag arrive.
fn reset_flags(ctx: &mut Context, ping: &Sym<u64>, pong: &Sym<u64>) -> Result<(), WorkerError> {
    ctx.write_local(ping, 0, &[0])?;
    ctx.write_local(pong, 0, &[0])?;
    Ok(())
}

/// Up to 8 little-endian bytes as a number.
fn le_u64(b: &[u8]) -> u64 {
    b.iter().rev().fold(0, |v, &x| v << 8 | u64::from(x))
}

fn lat(test: &str, size: u64, iters: u64, samples: &mut [u64], scale: f64) -> Measurement {
    Measurement::latency(test, size, iters, samples, scale)
}
