//! `switchyard perf --transport verbs`: the verbs driver measured on its own,
//! two drivers in this process on one RDMA device (PE 0 issues, PE 1's heap
//! is the target), through the NIC's loopback or soft-RoCE. The operations
//! are one-sided, but every put also consumes a receive of PE 1's shared
//! receive queue (its receipt), so a thread progresses PE 1's driver while
//! PE 0 measures (as a target PE's own polling would), re-posting them.
//!
//! Tests: `put-lat` (put, then quiet: the round trip of the write's ack,
//! halved), `get-lat` (a blocking get), `atomic-lat` (a fetch-add), `put-bw`
//! (a window of puts, then quiet) and, with `--qd-sweep`, the queue-depth
//! sweep: `QD` operations in flight (1, 2, 4 ... 64) and the latency of each
//! from its start to its completion, which must stay flat while the path
//! is fully offloaded.
//!
//! Without a usable device the command fails with the probe's reason
//! (non-zero exit), before anything else.

use std::time::Instant;

use switchyard_core::{
    route::ContextId,
    transport::{AtomicOp, AtomicWidth, Transport},
    wire::AtomicKind,
};
use switchyard_verbs::{VerbsDriver, params::VerbsConfig};

use super::{
    Options, Test,
    report::table,
    stats::{Bandwidth, Measurement},
};

/// Queue depths of the sweep.
pub const QD_SWEEP: [u32; 7] = [1, 2, 4, 8, 16, 32, 64];

const CTX: ContextId = ContextId { pe: 0, seq: 1 };

/// Why verbs perf cannot run here, if it cannot (the probe's reason).
pub fn unavailable() -> Option<String> {
    switchyard_verbs::probe::probe()
        .unavailable
        .map(|u| format!("transport verbs is not available: {u}"))
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The tests (all four when the user named none).
    pub tests: Vec<Test>,
    /// Message sizes.
    pub sizes: Vec<u64>,
    /// Measured iterations per size (and per queue depth).
    pub iters: u64,
    /// Unmeasured iterations first.
    pub warmup: u64,
    /// Puts per quiet in put-bw.
    pub window: u64,
    /// Also sweep queue depths 1 to 64 for the latency tests.
    pub qd_sweep: bool,
}

/// `switchyard perf --transport verbs`: the probe's reason without a device.
pub(super) fn drive(o: &Options) -> Result<(), String> {
    if let Some(why) = unavailable() {
        return Err(why);
    }
    if o.sim.is_some() || o.standalone.is_some() {
        return Err(
            "--transport verbs runs on this machine's device: no --sim, no tcp baselines".into(),
        );
    }
    let tests = o.test.map_or_else(
        || vec![Test::PutLat, Test::GetLat, Test::AtomicLat, Test::PutBw],
        |t| vec![t],
    );
    let bw = tests == [Test::PutBw];
    let sizes = o
        .sizes
        .clone()
        .unwrap_or_else(|| if bw { vec![64, 4096, 65536] } else { vec![8] });
    let iters = o.iters.unwrap_or(if bw { 256 } else { 10_000 });
    let plan = Plan {
        tests,
        sizes,
        iters,
        warmup: o.warmup.unwrap_or(iters / 10),
        window: o.window,
        qd_sweep: o.qd_sweep,
    };
    let mut rows: Vec<(Measurement, Option<Measurement>)> =
        run(&plan)?.into_iter().map(|m| (m, None)).collect();
    let title = "switchyard perf: transport verbs, two drivers on one device (NIC loopback); put-lat = (put + quiet) / 2";
    super::plot::finish(o, &mut rows, title)?;
    if o.json {
        let v: Vec<&Measurement> = rows.iter().map(|r| &r.0).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", table(&rows, title));
    }
    Ok(())
}

fn err(what: &str, e: impl std::fmt::Display) -> String {
    format!("verbs perf: {what}: {e}")
}

/// Runs the plan; returns the measurements (test names carry `@qdN` in the
/// sweep).
///
/// # Errors
///
/// The probe's reason without a device; a driver error naming the step.
pub fn run(plan: &Plan) -> Result<Vec<Measurement>, String> {
    if let Some(why) = unavailable() {
        return Err(why);
    }
    let max = plan.sizes.iter().copied().max().unwrap_or(8).max(4096);
    let heap = (max * plan.window.max(64)).clamp(1 << 20, 1 << 30);
    // The job's configuration picks the device and the GID, as for PEs.
    let job = switchyard::config::Config::from_env().map_err(|e| e.to_string())?;
    let cfg = VerbsConfig {
        device: job.verbs_device.clone(),
        gid_index: job.verbs_gid_index.map(u32::from),
        ..VerbsConfig::default()
    };
    let mut a = VerbsDriver::with_owned_heap(cfg.clone(), 0, 2, 0x9E7F, heap)
        .map_err(|e| err("PE 0", e))?;
    let mut b =
        VerbsDriver::with_owned_heap(cfg, 1, 2, 0x9E7F, heap).map_err(|e| err("PE 1", e))?;
    a.set_peer_card(1, b.card_for(0).map_err(|e| err("card", e))?)
        .map_err(|e| err("card", e))?;
    b.set_peer_card(0, a.card_for(1).map_err(|e| err("card", e))?)
        .map_err(|e| err("card", e))?;
    b.connect(0).map_err(|e| err("connect PE 1", e))?;
    a.connect(1).map_err(|e| err("connect PE 0", e))?;
    let out = with_target_progress(&mut b, || measure_all(&mut a, plan))?;
    a.close().map_err(|e| err("close", e))?;
    drop(b);
    Ok(out)
}

/// Runs `f` while a thread progresses the target's driver `b` (the
/// receipts of the puts, receives re-posted; without it the puts stall on
/// RNR once `b`'s shared receive queue is used up).
fn with_target_progress<R>(b: &mut VerbsDriver, f: impl FnOnce() -> R) -> R {
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let (stop_ref, b) = (&stop, b);
        let h = s.spawn(move || {
            while !stop_ref.load(std::sync::atomic::Ordering::Relaxed) {
                if b.progress(switchyard_core::transport::Instant::default())
                    == switchyard_core::transport::PollResult::Idle
                {
                    std::thread::yield_now();
                }
            }
        });
        let r = f();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = h.join();
        r
    })
}

/// Runs every test of `plan` from PE 0's driver `a` toward PE 1.
fn measure_all(a: &mut VerbsDriver, plan: &Plan) -> Result<Vec<Measurement>, String> {
    let max_get = u64::from(a.max_get_len());
    let mut out = Vec::new();
    for &test in &plan.tests {
        for &size in &plan.sizes {
            if test == Test::GetLat && size > max_get {
                continue;
            }
            let size = if test == Test::AtomicLat { 8 } else { size };
            let depths: &[u32] = if plan.qd_sweep && test != Test::PutBw {
                &QD_SWEEP
            } else {
                &[1]
            };
            for &qd in depths {
                let m = measure(a, test, size, qd, plan)?;
                let name = if plan.qd_sweep && test != Test::PutBw {
                    format!("{}@qd{qd}", test.name())
                } else {
                    test.name().to_string()
                };
                out.push(Measurement { test: name, ..m });
            }
            if test == Test::AtomicLat {
                break;
            }
        }
    }
    Ok(out)
}

/// Waits for quiet, with a bound (a dead link is an error completion well
/// within it).
fn quiet(a: &mut VerbsDriver) -> Result<(), String> {
    let t0 = Instant::now();
    while !a.quiet_poll().map_err(|e| err("quiet", e))? {
        if t0.elapsed().as_secs() > 10 {
            return Err(err("quiet", "not complete within 10 s"));
        }
    }
    Ok(())
}

fn measure(
    a: &mut VerbsDriver,
    test: Test,
    size: u64,
    qd: u32,
    plan: &Plan,
) -> Result<Measurement, String> {
    let buf = vec![0x5Au8; size as usize];
    let mut samples = Vec::with_capacity(plan.iters as usize * qd as usize);
    let fadd = AtomicOp {
        kind: AtomicKind::FetchAdd,
        width: AtomicWidth::W64,
        operand: 1,
        compare: 0,
        fetch: true,
    };
    let total = plan.warmup + plan.iters;
    if test == Test::PutBw {
        let t0 = Instant::now();
        let mut msgs = 0u64;
        for i in 0..total {
            if i == plan.warmup {
                msgs = 0;
            }
            let start = Instant::now();
            for w in 0..plan.window {
                put_retry(a, (w % 64) * size, &buf)?;
                msgs += 1;
            }
            quiet(a)?;
            if i >= plan.warmup {
                samples.push(start.elapsed().as_nanos() as u64);
            }
        }
        let _ = t0;
        let ns: u64 = samples.iter().sum::<u64>().max(1);
        let secs = ns as f64 / 1e9;
        return Ok(Measurement {
            test: test.name().into(),
            size,
            iters: plan.iters,
            latency: None,
            bandwidth: Some(Bandwidth {
                gbps: (msgs * size) as f64 / secs / 1e9,
                msgs_per_s: msgs as f64 / secs,
            }),
            curve: Vec::new(),
            threads: None,
            thread_ratio: None,
        });
    }
    let mut dst = vec![0u8; size as usize];
    let mut tickets = Vec::with_capacity(qd as usize);
    let mut starts = Vec::with_capacity(qd as usize);
    for i in 0..total {
        tickets.clear();
        starts.clear();
        for d in 0..u64::from(qd) {
            let off = d * size.max(8).next_multiple_of(8);
            starts.push(Instant::now());
            match test {
                Test::PutLat => put_retry(a, off, &buf)?,
                Test::GetLat => tickets.push(
                    a.get_start(1, off, size as u32, CTX)
                        .map_err(|e| err("get", e))?,
                ),
                Test::AtomicLat => tickets.push(
                    a.atomic_start(1, off, fadd, CTX)
                        .map_err(|e| err("atomic", e))?,
                ),
                // Rate tests are refused before a verbs run starts.
                Test::PutBw | Test::PutRate | Test::GetRate | Test::AtomicRate => {}
            }
        }
        match test {
            Test::PutLat => {
                quiet(a)?;
                if i >= plan.warmup {
                    for s in &starts {
                        samples.push(s.elapsed().as_nanos() as u64);
                    }
                }
            }
            _ => {
                let t0 = Instant::now();
                for (k, t) in tickets.iter().enumerate() {
                    loop {
                        let done = if test == Test::GetLat {
                            a.get_poll(t, &mut dst).map_err(|e| err("get", e))?
                        } else {
                            a.atomic_poll(t).map_err(|e| err("atomic", e))?.is_some()
                        };
                        if done {
                            break;
                        }
                        if t0.elapsed().as_secs() > 10 {
                            return Err(err(test.name(), "no completion within 10 s"));
                        }
                    }
                    if i >= plan.warmup {
                        samples.push(starts[k].elapsed().as_nanos() as u64);
                    }
                }
            }
        }
    }
    // put-lat is a round trip (write, ack): report half, as the other
    // put-lat figures do; gets and atomics are reported whole.
    let scale = if test == Test::PutLat { 0.5 } else { 1.0 };
    Ok(Measurement::latency(
        test.name(),
        size,
        plan.iters,
        &mut samples,
        scale,
    ))
}

fn put_retry(a: &mut VerbsDriver, off: u64, buf: &[u8]) -> Result<(), String> {
    use switchyard_core::transport::{ErrorKind, TransportError};
    let t0 = Instant::now();
    loop {
        match a.put(1, off, buf, CTX) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::WouldBlock && t0.elapsed().as_secs() < 10 => {
                a.progress(switchyard_core::transport::Instant::default());
            }
            Err(e) => return Err(err("put", e)),
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// Without a device (as here) the run fails at once with the probe's
    /// reason; with one, this test leaves the measuring to the command.
    #[test]
    fn without_a_device_the_reason_comes_first() {
        let Some(why) = unavailable() else { return };
        let plan = Plan {
            tests: vec![Test::PutLat],
            sizes: vec![8],
            iters: 1,
            warmup: 0,
            window: 1,
            qd_sweep: true,
        };
        assert_eq!(run(&plan).unwrap_err(), why);
        assert!(why.starts_with("transport verbs is not available: "));
    }

    /// Every test and the queue-depth sweep, on the driver's fake HCA: the
    /// measuring code runs end to end and reports every row.
    #[test]
    fn every_test_runs_on_the_fake_hca() {
        let f = switchyard_verbs::fake::Fabric::new();
        let heap = 1 << 20;
        let cfg = VerbsConfig::default;
        let mut a = VerbsDriver::fake_with_owned_heap(cfg(), 0, 2, 1, heap, &f).unwrap();
        let mut b = VerbsDriver::fake_with_owned_heap(cfg(), 1, 2, 1, heap, &f).unwrap();
        a.set_peer_card(1, b.card_for(0).unwrap()).unwrap();
        b.set_peer_card(0, a.card_for(1).unwrap()).unwrap();
        b.connect(0).unwrap();
        a.connect(1).unwrap();
        let plan = Plan {
            tests: vec![Test::PutLat, Test::GetLat, Test::AtomicLat, Test::PutBw],
            sizes: vec![8, 4096],
            iters: 20,
            warmup: 2,
            window: 8,
            qd_sweep: true,
        };
        let rows = with_target_progress(&mut b, || measure_all(&mut a, &plan)).unwrap();
        let names: Vec<&str> = rows.iter().map(|m| m.test.as_str()).collect();
        // put-lat and get-lat: 7 depths x 2 sizes; atomic-lat: 7 depths
        // (8 bytes only); put-bw: 2 sizes.
        assert_eq!(rows.len(), 14 + 14 + 7 + 2, "{names:?}");
        assert!(names.contains(&"get-lat@qd64"));
        assert!(names.contains(&"atomic-lat@qd1"));
        for m in &rows {
            if m.test == "put-bw" {
                assert!(m.bandwidth.is_some_and(|b| b.gbps > 0.0), "{m:?}");
            } else {
                assert!(m.latency.is_some(), "{m:?}");
            }
        }
    }
}
