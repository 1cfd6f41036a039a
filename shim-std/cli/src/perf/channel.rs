//! `switchyard perf channel-lat`, `channel-bw` and `broadcast-bw`: the typed channels of
//! `switchyard::channel` between PEs 0 and 1, each beside a baseline run
//! right before and right after it.
//!
//! * `channel-lat`: a ping-pong over two [`Spsc`] channels of `size`-byte
//!   messages (`[u8; size]`, 1024 slots), 0 → 1 and 1 → 0: PE 0 sends a
//!   message stamped with its number and waits for PE 1 to send it back;
//!   one-way latency = RTT/2. Baseline over shared memory, `raw-ring`: the
//!   same ping-pong over two rings of the channel's layout (slots of
//!   `8 + size` bytes rounded up to 64, a sequence word first, the
//!   consumer's head on a line of its own, the producer's cached limit) in
//!   an anonymous mapping shared by a thread and a forked process, with no
//!   library in it; over TCP `tcp-pingpong`.
//! * `channel-bw`: PE 0 sends `iters` stamped messages one `send` at a time,
//!   PE 1 receives them with `recv_into` (checking each stamp) and sends one
//!   message back after the last; PE 0's clock runs from the first send to
//!   that answer (messages per second). Baseline over shared memory,
//!   `raw-ring`: the same stream over one such ring, the other process
//!   storing a count PE 0's side waits for; over TCP `tcp-stream`.
//! * `broadcast-bw`: the publisher's rate over a broadcast stream to
//!   `--subscribers` PEs, beside `channel-bw` in the same launch
//!   (`channel/broadcast.rs`).
//!
//! Sizes: multiples of 8 from 8 to 1024 bytes that the message type is
//! built for ([`SIZES`]); default 64.

use std::{
    ffi::OsString,
    hint::spin_loop,
    sync::atomic::{AtomicU64, Ordering},
    time::Instant,
};

use switchyard::{
    channel::{Consumer, Producer, Spsc},
    config::format_size,
    context::Context,
};
use switchyard_launch::{self as launch, Bind, LaunchOptions};

use super::{
    Options, TRANSPORTS_VAR, baseline,
    job::{Place, place},
    merge_baselines,
    peer::{self, ABORT, READY, STALL, SharedMap},
    plan::WORKER_TIMEOUT,
    stats::Measurement,
};
use crate::Output;

mod broadcast;
use broadcast::measure as broadcast_measure;

/// A channel test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Which {
    /// `channel-lat`.
    Lat,
    /// `channel-bw`.
    Bw,
    /// `broadcast-bw` (`channel/broadcast.rs`).
    Broadcast,
}

impl Which {
    /// The test's name.
    pub(super) const fn name(self) -> &'static str {
        match self {
            Which::Lat => "channel-lat",
            Which::Bw => "channel-bw",
            Which::Broadcast => "broadcast-bw",
        }
    }

    /// The test named `s`.
    pub(super) fn parse(s: &str) -> Option<Which> {
        match s {
            "channel-lat" => Some(Which::Lat),
            "channel-bw" => Some(Which::Bw),
            "broadcast-bw" => Some(Which::Broadcast),
            _ => None,
        }
    }
}

/// Slots of every channel and raw ring measured.
const CAPACITY: usize = 1024;

/// The message sizes the tests are built for.
pub(super) const SIZES: [u64; 11] = [8, 16, 24, 32, 48, 56, 64, 128, 256, 512, 1024];

/// Runs `f::<N>(args)` for the message size `$size` (one of [`SIZES`]).
macro_rules! by_size {
    ($size:expr, $f:ident ( $($arg:expr),* )) => {
        match $size {
            8 => $f::<8>($($arg),*),
            16 => $f::<16>($($arg),*),
            24 => $f::<24>($($arg),*),
            32 => $f::<32>($($arg),*),
            48 => $f::<48>($($arg),*),
            56 => $f::<56>($($arg),*),
            64 => $f::<64>($($arg),*),
            128 => $f::<128>($($arg),*),
            256 => $f::<256>($($arg),*),
            512 => $f::<512>($($arg),*),
            1024 => $f::<1024>($($arg),*),
            s => Err(format!("{s}: channel tests take sizes {SIZES:?}")),
        }
    };
}

/// Sizes, measured and warm-up messages of a run.
#[derive(Debug, Clone)]
struct Plan {
    sizes: Vec<u64>,
    iters: u64,
    warmup: u64,
}

fn plan(o: &Options, w: Which) -> Plan {
    let iters = o.iters.unwrap_or(match (w, o.over_tcp()) {
        (Which::Lat, _) => 20_000,
        (Which::Bw | Which::Broadcast, true) => 50_000,
        (Which::Bw | Which::Broadcast, false) => 1_000_000,
    });
    Plan {
        sizes: o.sizes.clone().unwrap_or_else(|| vec![64]),
        iters,
        warmup: o.warmup.unwrap_or(iters / 10),
    }
}

/// `switchyard perf channel-lat|channel-bw` (or, as a worker, one PE's part).
pub(super) fn run(worker: bool, o: &Options, w: Which) -> Output {
    if worker {
        return Output::status(worker_main(o, w));
    }
    match drive(o, w) {
        Ok(()) => Output::status(0),
        Err(e) => Output {
            code: 1,
            stdout: String::new(),
            stderr: format!("switchyard perf: error: {e}\n"),
        },
    }
}

fn drive(o: &Options, w: Which) -> Result<(), String> {
    if o.transport == "verbs" {
        return Err(format!("{} runs over shm or tcp", w.name()));
    }
    let plan = plan(o, w);
    if let Some(s) = plan.sizes.iter().find(|s| !SIZES.contains(s)) {
        return Err(format!("{} --size {s}: sizes are {SIZES:?}", w.name()));
    }
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpus = (0, 1 % ncpus);
    let place = place(o)?;
    let pinned = (o.n as usize) <= ncpus;
    let tcp = o.over_tcp();
    let baselines = || -> Result<Vec<Measurement>, String> {
        plan.sizes
            .iter()
            .map(|&s| {
                let (size, it, wu) = (s as usize, plan.iters, plan.warmup);
                match (w, tcp) {
                    (Which::Lat, false) => raw_lat(size, it, wu, cpus),
                    (Which::Bw | Which::Broadcast, false) => raw_bw(size, it, wu, cpus),
                    (Which::Lat, true) => baseline::tcp_pingpong(size, it, wu, &place.tcp, cpus),
                    (Which::Bw | Which::Broadcast, true) => {
                        baseline::tcp_stream(size, it, wu, &place.tcp, cpus)
                    }
                }
            })
            .collect()
    };
    let before = baselines()?;
    let ms = launch_workers(o, w, &plan, &place, pinned)?;
    let after = baselines()?;
    let mut drift = Vec::new();
    let base: Vec<Measurement> = before
        .into_iter()
        .zip(after)
        .filter_map(|(b, a)| merge_baselines(Some(b), Some(a), &mut drift))
        .collect();
    // A broadcast row's baseline is the SPSC channel-bw of its size, from
    // the same launch; channel-bw's is the raw ring.
    let spsc: Vec<Measurement> = ms
        .iter()
        .filter(|m| m.test == Which::Bw.name())
        .cloned()
        .collect();
    let mut rows: Vec<_> = ms
        .into_iter()
        .map(|m| {
            let from = if m.test.starts_with("broadcast") {
                &spsc
            } else {
                &base
            };
            let b = from.iter().find(|b| b.size == m.size).cloned();
            (m, b)
        })
        .collect();
    let header = format!(
        "switchyard perf: {}{} over {}, {} PEs, {}, {CAPACITY} slots; baselines{}: mean of a run right before and right after",
        w.name(),
        if w == Which::Broadcast {
            format!(
                " (PE 0 to {} subscribers; beside channel-bw, PE 0 to PE 1, in the same launch)",
                o.subscribers
            )
        } else {
            String::new()
        },
        if o.transport == "tcp" {
            format!("tcp only ({TRANSPORTS_VAR}=tcp)")
        } else {
            "the route's transport".into()
        },
        o.n,
        if pinned { "one per core" } else { "not pinned" },
        if tcp {
            format!(" (tcp over {})", place.tcp_desc)
        } else {
            " (raw-ring: a thread and a forked process, shared anonymous mapping)".into()
        }
    );
    super::report::emit(o, &place, (pinned, ncpus), &mut rows, &header, &drift)
}

/// Launches the PEs, each running [`worker_main`]; PE 0's measurements.
fn launch_workers(
    o: &Options,
    w: Which,
    plan: &Plan,
    place: &Place,
    pinned: bool,
) -> Result<Vec<Measurement>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find my own executable: {e}"))?;
    let out = std::env::temp_dir().join(format!(
        "switchyard-perf-{}-{}.json",
        std::process::id(),
        w.name()
    ));
    let _ = std::fs::remove_file(&out);
    let list: Vec<String> = plan.sizes.iter().map(u64::to_string).collect();
    let mut args: Vec<OsString> = vec![
        "perf".into(),
        "--worker".into(),
        w.name().into(),
        "--iters".into(),
        plan.iters.to_string().into(),
        "--warmup".into(),
        plan.warmup.to_string().into(),
        "--worker-out".into(),
        out.clone().into(),
        "--sizes".into(),
        list.join(",").into(),
    ];
    if o.over_tcp() {
        args.extend(["--transport".into(), "tcp".into()]);
    }
    // A broadcast run: its subscribers, PEs 1 to N, and two streams' rings
    // (backpressure, drop) beside the SPSC pair, for every size.
    let rings = if w == Which::Broadcast {
        args.extend(["--subscribers".into(), o.subscribers.to_string().into()]);
        4 * plan.sizes.len() as u64
    } else {
        2
    };
    let mut lo = LaunchOptions::new(o.n, exe);
    lo.args = args;
    lo.bind = if pinned { Bind::Core } else { Bind::None };
    lo.timeout = Some(WORKER_TIMEOUT);
    lo.sim = place.sim.clone();
    let max = plan.sizes.iter().copied().max().unwrap_or(8);
    let ring = CAPACITY as u64 * (8 + max).next_multiple_of(64);
    lo.env.push((
        "SWITCHYARD_HEAP_SIZE".into(),
        format_size((rings * ring + (1 << 20)).next_power_of_two().max(4 << 20)),
    ));
    if o.transport == "tcp" {
        lo.env.push((TRANSPORTS_VAR.into(), "tcp".into()));
    }
    let outcome = launch::launch(&lo).map_err(|e| e.to_string())?;
    if !outcome.success() {
        return Err(format!("{} failed: {:?}", w.name(), outcome.end));
    }
    let text = std::fs::read_to_string(&out)
        .map_err(|e| format!("no results from {} ({}): {e}", w.name(), out.display()))?;
    let _ = std::fs::remove_file(&out);
    serde_json::from_str(&text).map_err(|e| format!("bad results file: {e}"))
}

/// One PE's part: every size in turn, PE 0 writes the results.
fn worker_main(o: &Options, w: Which) -> u8 {
    let plan = plan(o, w);
    let result = Context::from_env()
        .map_err(|e| e.to_string())
        .and_then(|mut ctx| {
            let mut ms = Vec::new();
            for &s in &plan.sizes {
                let (it, wu) = (plan.iters, plan.warmup);
                if w == Which::Broadcast {
                    let subs = o.subscribers;
                    ms.extend(by_size!(s, broadcast_measure(&mut ctx, subs, it, wu))?);
                } else {
                    ms.extend(by_size!(s, measure(&mut ctx, w, it, wu))?);
                }
            }
            let me = ctx.my_pe();
            ctx.finalize().map_err(|e| e.to_string())?;
            Ok((me, ms))
        });
    match result {
        Ok((0, ms)) => {
            let json = serde_json::to_string(&ms).unwrap_or_default();
            match o.worker_out.as_ref().map(|p| std::fs::write(p, json)) {
                Some(Err(e)) => {
                    eprintln!("cannot write results: {e}");
                    1
                }
                _ => 0,
            }
        }
        Ok(_) => 0,
        Err(e) => {
            eprintln!("switchyard perf worker: {e}");
            1
        }
    }
}

/// Message `i` of `N` bytes: its number in the first 8, a fill after.
fn stamped<const N: usize>(i: u64) -> [u8; N] {
    let mut m = [0xA5u8; N];
    m[..8].copy_from_slice(&i.to_le_bytes());
    m
}

/// The number a message carries.
fn stamp_of(m: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&m[..8]);
    u64::from_le_bytes(b)
}

/// The two channels (0 → 1, 1 → 0) of a run and this PE's ends of them;
/// `None` for a PE other than 0 and 1.
type Ends<const N: usize> = Option<(Producer<[u8; N]>, Consumer<[u8; N]>)>;

fn ends<const N: usize>(ctx: &mut Context) -> Result<Ends<N>, String> {
    let e = |e: switchyard::context::Error| e.to_string();
    let out = ctx.spsc::<[u8; N]>(0, 1, CAPACITY).map_err(e)?;
    let back = ctx.spsc::<[u8; N]>(1, 0, CAPACITY).map_err(e)?;
    Ok(match (out, back) {
        (Spsc::Producer(tx), Spsc::Consumer(rx)) | (Spsc::Consumer(rx), Spsc::Producer(tx)) => {
            Some((tx, rx))
        }
        _ => None,
    })
}

/// One size of the test on this PE: PE 0's measurement.
fn measure<const N: usize>(
    ctx: &mut Context,
    w: Which,
    iters: u64,
    warmup: u64,
) -> Result<Option<Measurement>, String> {
    let e = |e: switchyard::context::Error| e.to_string();
    let me = ctx.my_pe();
    let mut m = None;
    if let Some((mut tx, mut rx)) = ends::<N>(ctx)? {
        let total = warmup + iters;
        match (w, me) {
            (Which::Lat, 0) => {
                let mut samples = Vec::with_capacity(iters as usize);
                for i in 0..total {
                    let t0 = Instant::now();
                    tx.send(ctx, stamped::<N>(i)).map_err(e)?;
                    let back = rx.recv(ctx).map_err(e)?;
                    let dt = t0.elapsed().as_nanos() as u64;
                    if stamp_of(&back) != i {
                        return Err(format!("message {i} came back as {}", stamp_of(&back)));
                    }
                    if i >= warmup {
                        samples.push(dt);
                    }
                }
                m = Some(Measurement::latency(
                    w.name(),
                    N as u64,
                    iters,
                    &mut samples,
                    0.5,
                ));
            }
            (Which::Lat, _) => {
                for _ in 0..total {
                    let v = rx.recv(ctx).map_err(e)?;
                    tx.send(ctx, v).map_err(e)?;
                }
            }
            (Which::Bw | Which::Broadcast, 0) => {
                let mut phase = |from: u64, n: u64| -> Result<(), String> {
                    for i in from..from + n {
                        tx.send(ctx, stamped::<N>(i)).map_err(e)?;
                    }
                    rx.recv(ctx).map_err(e).map(drop)
                };
                phase(0, warmup)?;
                let t0 = Instant::now();
                phase(warmup, iters)?;
                let secs = t0.elapsed().as_secs_f64();
                m = Some(Measurement::throughput(w.name(), N as u64, iters, secs));
            }
            (Which::Bw | Which::Broadcast, _) => {
                let mut buf = [[0u8; N]; 64];
                let mut next = 0u64;
                for end in [warmup, total] {
                    while next < end {
                        let k = rx.recv_into(ctx, &mut buf).map_err(e)?;
                        for got in &buf[..k] {
                            if stamp_of(got) != next {
                                return Err(format!("message {next} arrived as {}", stamp_of(got)));
                            }
                            next += 1;
                        }
                    }
                    tx.send(ctx, stamped::<N>(next)).map_err(e)?;
                }
            }
        }
    }
    ctx.barrier_all().map_err(e)?;
    Ok(m)
}

/// Control word: messages the other process has received (`raw_bw`).
const GOT: usize = 1;
/// The other process's status when a message was wrong.
const BAD_DATA: u8 = 2;
/// The other process's status when it gave up waiting.
const GAVE_UP: u8 = 3;

/// One SPSC ring of the channel's layout in the data area of a
/// [`SharedMap`], as either end sees it (word indices into the data area).
struct RawRing<'a> {
    m: &'a SharedMap,
    /// First word of slot 0.
    slots: usize,
    /// The consumer's published head.
    head_word: usize,
    /// Words per slot, and message words in a slot.
    stride: usize,
    words: usize,
    /// This end's index (the producer's tail or the consumer's head).
    at: u64,
    /// The producer's cached limit.
    limit: u64,
}

impl<'a> RawRing<'a> {
    /// Words a ring of `size`-byte messages takes (its head line included).
    fn words(size: usize) -> usize {
        CAPACITY * (8 + size).next_multiple_of(64) / 8 + 16
    }

    /// The ring at word `at` of `m`'s data area.
    fn new(m: &'a SharedMap, at: usize, size: usize) -> RawRing<'a> {
        let stride = (8 + size).next_multiple_of(64) / 8;
        RawRing {
            m,
            slots: at,
            head_word: at + CAPACITY * stride,
            stride,
            words: size / 8,
            at: 0,
            limit: CAPACITY as u64,
        }
    }

    fn slot(&self, i: u64) -> usize {
        self.slots + (i as usize & (CAPACITY - 1)) * self.stride
    }

    /// Sends a message stamped `v` if there is room.
    #[inline]
    fn push(&mut self, v: u64) -> bool {
        if self.at == self.limit {
            // SYNC POINT with the consumer's Release store of its head in
            // `pop`.
            self.limit = self.m.data_word(self.head_word).load(Ordering::Acquire) + CAPACITY as u64;
            if self.at == self.limit {
                return false;
            }
        }
        let s = self.slot(self.at);
        self.m.data_word(s + 1).store(v, Ordering::Relaxed);
        for k in 1..self.words {
            self.m.data_word(s + 1 + k).store(!v, Ordering::Relaxed);
        }
        // SYNC POINT with the Acquire load of the sequence word in `pop`.
        self.m.data_word(s).store(self.at + 1, Ordering::Release);
        self.at += 1;
        true
    }

    /// Receives the next message's stamp, if it has arrived.
    #[inline]
    fn pop(&mut self) -> Option<u64> {
        let s = self.slot(self.at);
        // SYNC POINT with the Release store of the sequence word in `push`.
        if self.m.data_word(s).load(Ordering::Acquire) != self.at + 1 {
            return None;
        }
        let v = self.m.data_word(s + 1).load(Ordering::Relaxed);
        let mut fill = 0u64;
        for k in 1..self.words {
            fill |= self.m.data_word(s + 1 + k).load(Ordering::Relaxed) ^ !v;
        }
        self.at += 1;
        // SYNC POINT with the Acquire load of the head in `push`.
        self.m
            .data_word(self.head_word)
            .store(self.at, Ordering::Release);
        Some(if fill == 0 { v } else { u64::MAX })
    }
}

/// Spins on `f` until it gives something; `None` when `abort` is set or
/// nothing came for [`STALL`]. Allocation-free (a forked child calls it).
fn spin<R>(abort: &AtomicU64, mut f: impl FnMut() -> Option<R>) -> Option<R> {
    let mut spins = 0u32;
    let mut since: Option<Instant> = None;
    loop {
        if let Some(r) = f() {
            return Some(r);
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(4096) {
            if abort.load(Ordering::Relaxed) != 0 {
                return None;
            }
            let now = Instant::now();
            match since {
                Some(t) if now.saturating_duration_since(t) > STALL => return None,
                Some(_) => {}
                None => since = Some(now),
            }
            std::thread::yield_now();
        }
        spin_loop();
    }
}

/// Runs a raw-ring baseline: a mapping with two rings of `size`-byte
/// messages, `peer` in a forked process pinned to `cpus.1` (it sets `READY`
/// first), `me` on a thread pinned to `cpus.0`.
fn forked<P, M>(
    name: &str,
    size: usize,
    cpus: (usize, usize),
    peer: P,
    me: M,
) -> Result<Measurement, String>
where
    P: FnOnce(&SharedMap) -> u8 + Send + 'static,
    M: FnOnce(&SharedMap) -> Result<Measurement, String> + Send + 'static,
{
    let what = |e: String| format!("{name} {}: {e}", format_size(size as u64));
    let (r, code) = peer::forked(16 * RawRing::words(size), cpus, peer, me).map_err(what)?;
    match (r, code) {
        (r, 0) => r,
        (_, BAD_DATA) => Err("the other process got a wrong message".into()),
        (_, GAVE_UP) => Err("the other process gave up waiting".into()),
        (_, c) => Err(format!("the other process ended with status {c}")),
    }
    .map_err(what)
}

/// `raw-ring` for `channel-lat` (module doc).
fn raw_lat(
    size: usize,
    iters: u64,
    warmup: u64,
    cpus: (usize, usize),
) -> Result<Measurement, String> {
    let total = iters + warmup;
    let back_at = RawRing::words(size);
    let peer = move |m: &SharedMap| {
        let (mut inbox, mut outbox) = (RawRing::new(m, 0, size), RawRing::new(m, back_at, size));
        m.word(READY).store(1, Ordering::Release);
        for _ in 0..total {
            let Some(v) = spin(m.word(ABORT), || inbox.pop()) else {
                return GAVE_UP;
            };
            if spin(m.word(ABORT), || outbox.push(v).then_some(())).is_none() {
                return GAVE_UP;
            }
        }
        0
    };
    forked("raw-ring", size, cpus, peer, move |m| {
        let (mut outbox, mut inbox) = (RawRing::new(m, 0, size), RawRing::new(m, back_at, size));
        let mut samples = Vec::with_capacity(iters as usize);
        let stalled = || "the other process stalled".to_string();
        for i in 0..total {
            let t0 = Instant::now();
            spin(m.word(ABORT), || outbox.push(i).then_some(())).ok_or_else(stalled)?;
            let v = spin(m.word(ABORT), || inbox.pop()).ok_or_else(stalled)?;
            let dt = t0.elapsed().as_nanos() as u64;
            if v != i {
                return Err(format!("message {i} came back as {v}"));
            }
            if i >= warmup {
                samples.push(dt);
            }
        }
        Ok(Measurement::latency(
            "raw-ring",
            size as u64,
            iters,
            &mut samples,
            0.5,
        ))
    })
}

/// `raw-ring` for `channel-bw` (module doc).
fn raw_bw(
    size: usize,
    iters: u64,
    warmup: u64,
    cpus: (usize, usize),
) -> Result<Measurement, String> {
    let total = iters + warmup;
    let peer = move |m: &SharedMap| {
        let mut inbox = RawRing::new(m, 0, size);
        m.word(READY).store(1, Ordering::Release);
        for i in 0..total {
            match spin(m.word(ABORT), || inbox.pop()) {
                None => return GAVE_UP,
                Some(v) if v != i => return BAD_DATA,
                Some(_) => {}
            }
            if i + 1 == warmup || i + 1 == total {
                // SYNC POINT with the Acquire load in the timing side's
                // `spin_until`.
                m.word(GOT).store(i + 1, Ordering::Release);
            }
        }
        0
    };
    forked("raw-ring", size, cpus, peer, move |m| {
        let mut outbox = RawRing::new(m, 0, size);
        let stalled = || "the other process stalled".to_string();
        let mut phase = |from: u64, to: u64| -> Result<(), String> {
            for i in from..to {
                spin(m.word(ABORT), || outbox.push(i).then_some(())).ok_or_else(stalled)?;
            }
            if to > 0 && !peer::spin_until(m.word(GOT), to, m.word(ABORT)) {
                return Err(stalled());
            }
            Ok(())
        };
        phase(0, warmup)?;
        let t0 = Instant::now();
        phase(warmup, total)?;
        let secs = t0.elapsed().as_secs_f64();
        Ok(Measurement::throughput(
            "raw-ring",
            size as u64,
            iters,
            secs,
        ))
    })
}
