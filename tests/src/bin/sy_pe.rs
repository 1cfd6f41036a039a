//! A PE program for the multi-process tests: `sy_pe SCENARIO [ARGS]`, run
//! under the launcher. Exits 0 when its checks pass, non-zero (with a message
//! on stderr) otherwise.
//!
//! Scenarios:
//! * `putget SEED`: every PE puts random (offset, size) chunks to its right
//!   neighbour and gets random ranges back, against a local model of the
//!   neighbour's block; at the end the whole block is compared by CRC32C.
//! * `counter N`: N fetch-adds per PE on one counter of PE 0; PE 0 checks
//!   the exact total.
//! * `oob`: PE 0 tries out-of-bounds puts into PE 1; PE 1 checks its block
//!   is untouched.
//! * `fail RANK CODE`: after a barrier, RANK exits with CODE (or kills itself
//!   with SIGKILL when CODE is `kill`); the others wait on a flag that never
//!   comes (bounded by the op timeout).
//! * `waitdead`: after a barrier, PE 1 kills itself with SIGKILL while PE 0
//!   waits on a flag (with a 60 s deadline, SIGTERM ignored); PE 0 writes
//!   how its wait ended (`PeerDead 1` when the death ended it) to the file
//!   `$SY_MARK`.
//! * `init`: init and finalize only (bad-environment checks).
//! * `lazy-pairs` (an even number of PEs, run with `SWITCHYARD_CARDS=lazy`
//!   and every pair over TCP): PE 2k puts a stamp to PE 2k+1, fetch-adds a
//!   counter there and gets the stamp back; PE 2k+1 waits for the stamp
//!   (at most 30 s) and puts its answer back, which PE 2k waits for. Before
//!   any barrier, each checks it talked to exactly one peer: the initiator
//!   fetched exactly one card since init, the responder at most one (its
//!   partner's, for its locality, when it was not sent at init: off its
//!   node under the own root; it answers over the connection its partner
//!   made), the initiator connected to
//!   exactly one peer and the responder to none. Prints `lazy-pairs PE p:
//!   fetched F, connected C, tcp peers T`.
//! * `lazy-fan-in` (2 to 8 PEs, run with `SWITCHYARD_CARDS=lazy` and every
//!   pair over TCP): every PE but 0 connects on first use to PE 0 at once
//!   (several strangers to one responder): it puts a stamp into its own
//!   slot there, fetch-adds `1 << 8 * me` to PE 0's counter and gets its
//!   stamp back; PE 0 waits (at most 30 s) for the counter to hold every
//!   add exactly once, checks every stamp, and answers each PE over the
//!   connection it made (PE 0 connected to no one; it fetched no card, or,
//!   under the own root's node-only localities, each PE's for its class), which
//!   each waits for. Each initiator fetched one card and connected to one
//!   peer. After a barrier PE 0's counter still holds each add once (no
//!   late duplicate). Prints `lazy-fan-in PE p: fetched F, connected C,
//!   tcp peers T, root ADDR`; with `SY_ROOT_OFF_LOOPBACK` set, fails when
//!   `SWITCHYARD_ROOT` is a loopback address.
//! * `classes [TOPOLOGY PPN]`: every PE does put, get and fetch-add with
//!   every other PE, checks the values, and checks from its route trace ring
//!   that each peer was reached over the transport its class calls for (shm
//!   on the node, TCP otherwise); with a topology file and PEs per node, also
//!   that each class is the one the file gives (with `SWITCHYARD_TRANSPORTS`
//!   leaving shm out, same-node peers too are expected over TCP). Prints
//!   `classes PE p: q=CLASS/TRANSPORT ...`.
//! * `stream TARGET MILLIS`: PE 0 streams sequence-stamped 8-byte puts (each
//!   to its own slot) and non-fetching atomic adds to TARGET for MILLIS ms,
//!   printing `streaming`; once its first 64 puts and adds are complete at
//!   TARGET it creates the file `$SY_MARK` (when set: the test cuts a link
//!   then). With `$SY_CUT` set, MILLIS does not count: PE 0 streams until
//!   the file `$SY_CUT` appears (the test is done cutting), then until it
//!   has seen a link transition, then 4096 puts and adds more, so the stream
//!   spans the cut and its detection whatever the timing (the last 4096
//!   slots are kept for after both: when only they are left, it waits for
//!   the file, at most 60 s, and stops waiting for a transition). Then
//!   TARGET checks every slot holds its stamp
//!   and every counter its exact count (a put or add applied twice or lost
//!   fails). Prints the reroutes and link transitions seen. With
//!   `$SY_DETECT` set, PE 0 writes there the wall-clock time (µs since the
//!   epoch) at which it first saw a link go down.
//! * `compute MILLIS K`: PE 1 computes (sleeps) for MILLIS ms without calling
//!   the library while PE 0 does K fetch-adds and K gets on it; each
//!   returns, so PE 1's progress thread served them. PE 0 then puts a done
//!   flag to PE 1, which keeps computing until it reads the flag locally
//!   (plain reads of its own memory, no progress of its own: only the
//!   progress thread can have applied it), however slow PE 0 was. PE 1 then
//!   checks its counter holds K, and that its progress thread ran. No PE saw
//!   a link go down, although PE 1 called nothing that makes progress for
//!   longer than the heartbeat window.
//! * `globals`: the context is made with the executable's global variables
//!   symmetric (as the C API does). Every PE puts its stamp into a slot of a
//!   global array of its right neighbour, gets a value its left neighbour set
//!   before init, and fetch-adds a global counter of PE 0, which checks the
//!   exact total; then every PE checks its slots by plain loads.
//! * `trace-puts K` (2 PEs, run with `SWITCHYARD_TRACE=all` and
//!   `SWITCHYARD_JOB_DIR`): PE 0 puts K blocks of 1001, 1002, ... 1000 + K
//!   bytes to PE 1, and checks that `Stats::downgrades` grew by exactly the
//!   selections whose route said `downgraded` (its `route()` probe and the
//!   puts). After a barrier each PE dumps its route trace to
//!   `$SWITCHYARD_JOB_DIR/trace-pe<ME>.sytrace`. With `$SY_HOLD` set, each
//!   then writes its trace object's path to `$SY_HOLD.<ME>` and waits (at
//!   most 60 s) for the file `$SY_HOLD` before it finalizes, so a test can
//!   read the live rings.

use std::{
    process::ExitCode,
    sync::atomic::{AtomicU64, Ordering},
};

use switchyard::{
    config::Config,
    context::{Cmp, Context, Error, InitOptions},
};
use switchyard_tests::conformance::Rng;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sy_pe: {e}");
            ExitCode::from(1)
        }
    }
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> T {
    args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let scenario = args.first().map(String::as_str).unwrap_or("init");
    let mut ctx = if scenario == "globals" {
        // Set before init: it must survive the move into the segment.
        GLOBALS[1].store(0xC0FFEE, Ordering::Relaxed);
        let mut opts = InitOptions::default();
        // SAFETY: no other thread runs yet.
        if let Some(a) = unsafe { switchyard_shmem::globals::alias() } {
            opts = opts.symmetric_data(a);
        }
        Context::with_options(&Config::from_env()?, opts)?
    } else {
        Context::from_env()?
    };
    let (me, n) = (ctx.my_pe(), ctx.n_pes());
    match scenario {
        "init" => {}
        "putget" => {
            const LEN: usize = 256 * 1024;
            let seed: u64 = arg(args, 1, 1);
            let block = ctx.alloc::<u8>(LEN)?;
            let right = (me + 1) % n;
            let mut model = vec![0u8; LEN];
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (u64::from(me) + 1));
            let mut buf = vec![0u8; LEN];
            for round in 0..2000 {
                let max = if round % 50 == 0 { LEN as u64 } else { 300 };
                let len = 1 + rng.below(max) as usize;
                let off = rng.below((LEN - len) as u64 + 1) as usize;
                for b in &mut buf[..len] {
                    *b = rng.next_u64() as u8;
                }
                ctx.put(&block, off, &buf[..len], right)?;
                model[off..off + len].copy_from_slice(&buf[..len]);
                if round % 10 == 0 {
                    ctx.quiet()?;
                    let glen = 1 + rng.below(4096) as usize;
                    let goff = rng.below((LEN - glen) as u64 + 1) as usize;
                    ctx.get(&block, goff, &mut buf[..glen], right)?;
                    if buf[..glen] != model[goff..goff + glen] {
                        return Err(format!("PE {me}: get [{goff}, +{glen}) from PE {right} differs at round {round}").into());
                    }
                }
            }
            ctx.barrier_all()?;
            ctx.get(&block, 0, &mut buf, right)?;
            let (got, want) = (
                switchyard_core::crc::crc32c(&buf),
                switchyard_core::crc::crc32c(&model),
            );
            if got != want {
                return Err(format!(
                    "PE {me}: PE {right}'s block has CRC {got:08x}, expected {want:08x}"
                )
                .into());
            }
            println!("putget ok: PE {me} -> PE {right}, crc {got:08x}");
        }
        "counter" => {
            let iters: u64 = arg(args, 1, 10_000);
            let c = ctx.alloc::<u64>(1)?;
            let c32 = ctx.alloc::<i32>(1)?;
            for _ in 0..iters {
                ctx.fetch_add(&c, 0, 1, 0)?;
                ctx.fetch_add(&c32, 0, -1i32, 0)?;
            }
            ctx.barrier_all()?;
            if me == 0 {
                let total = ctx.fetch(&c, 0, 0)?;
                let t32 = ctx.fetch(&c32, 0, 0)?;
                let want = iters * u64::from(n);
                if total != want || i64::from(t32) != -(want as i64) {
                    return Err(
                        format!("counter: {total} and {t32}, expected {want} and -{want}").into(),
                    );
                }
                println!("counter ok: {total}");
            }
        }
        "oob" => {
            let block = ctx.alloc::<u64>(16)?;
            if me == 0 {
                for (at, count) in [(16usize, 1usize), (15, 2), (usize::MAX, 2)] {
                    match ctx.put(&block, at, &vec![u64::MAX; count], 1) {
                        Err(Error::OutOfBounds { .. }) => {}
                        other => return Err(format!("put at {at}+{count}: {other:?}").into()),
                    }
                }
                let mut two = [0u64; 2];
                if !matches!(
                    ctx.get(&block, 15, &mut two, 1),
                    Err(Error::OutOfBounds { .. })
                ) {
                    return Err("out-of-bounds get was not refused".into());
                }
                ctx.put(&block, 15, &[7], 1)?; // the last element is fine
            }
            ctx.barrier_all()?;
            if me == 1 {
                let mut all = [0u64; 16];
                ctx.read_local(&block, 0, &mut all)?;
                if all[..15].iter().any(|&v| v != 0) || all[15] != 7 {
                    return Err(format!("PE 1's block changed: {all:?}").into());
                }
                println!("oob ok");
            }
        }
        "fail" => {
            let rank: u32 = arg(args, 1, 1);
            let how = args.get(2).cloned().unwrap_or_else(|| "3".into());
            let flag = ctx.alloc::<u64>(1)?;
            ctx.barrier_all()?;
            if me == rank {
                if how == "kill" {
                    // SAFETY-free: a signal to ourselves through the shell's kill.
                    let _ = std::process::Command::new("kill")
                        .args(["-KILL", &std::process::id().to_string()])
                        .status();
                    std::thread::sleep(std::time::Duration::from_secs(5));
                }
                std::process::exit(how.parse().unwrap_or(3));
            }
            // Never set: the launcher stops us, or the wait fails on its own.
            ctx.wait_until(&flag, 0, Cmp::Ne, 0)?;
            return Err("the flag was set by nobody".into());
        }
        "waitdead" => {
            // PE 0 records how its wait ended: SIGTERM from the launcher
            // (once PE 1 is found killed) must not cut it short.
            if me == 0 {
                // SAFETY: ignoring a signal installs no handler code.
                unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
            }
            let flag = ctx.alloc::<u64>(1)?;
            ctx.barrier_all()?;
            if me == 1 {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &std::process::id().to_string()])
                    .status();
                std::thread::sleep(std::time::Duration::from_secs(5));
                return Err("not killed".into());
            }
            if me == 0 {
                // A deadline far past the detection window: only a broken
                // build reaches it.
                let r =
                    ctx.wait_until_for(&flag, 0, Cmp::Ne, 0, std::time::Duration::from_secs(60));
                let what = match r {
                    Err(Error::PeerDead { pe, .. }) => format!("PeerDead {pe}"),
                    other => format!("{other:?}"),
                };
                let mark = std::env::var("SY_MARK")?;
                std::fs::write(mark, what)?;
            }
            return Ok(());
        }
        "lazy-pairs" => lazy_pairs(&mut ctx)?,
        "lazy-fan-in" => lazy_fan_in(&mut ctx)?,
        "classes" => {
            let block = ctx.alloc::<u64>(n as usize)?;
            let counter = ctx.alloc::<u64>(1)?;
            for pe in (0..n).filter(|&p| p != me) {
                ctx.put(
                    &block,
                    me as usize,
                    &[u64::from(me) << 32 | u64::from(pe)],
                    pe,
                )?;
                ctx.fetch_add(&counter, 0, 1, pe)?;
            }
            ctx.barrier_all()?;
            let spec = match args.get(1) {
                Some(path) => Some(switchyard_launch::sim::read_topology(
                    std::path::Path::new(path),
                )?),
                None => None,
            };
            let ppn: u32 = arg(args, 2, 1);
            let mut line = format!("classes PE {me}:");
            for pe in (0..n).filter(|&p| p != me) {
                let mut got = [0u64];
                ctx.get(&block, me as usize, &mut got, pe)?;
                if got[0] != u64::from(me) << 32 | u64::from(pe) {
                    return Err(format!("PE {me}: slot of PE {pe} holds {:#x}", got[0]).into());
                }
                let class = ctx.class(pe).ok_or("no class")?;
                if let Some(spec) = &spec {
                    let want = spec.class_of(ppn, me, pe);
                    if class != want {
                        return Err(format!(
                            "PE {me}: PE {pe} is {class:?}, the topology says {want:?}"
                        )
                        .into());
                    }
                }
                // Same-node peers use TCP too when shared memory is off.
                let shm_on =
                    std::env::var("SWITCHYARD_TRANSPORTS").map_or(true, |v| v.contains("shm"));
                let want_t = match class {
                    switchyard_core::class::PathClass::Shm if shm_on => "shm",
                    _ => "tcp",
                };
                let t = ctx
                    .route(pe, 8, switchyard_core::route::Op::Put)?
                    .transport
                    .index();
                let tname = if t == 0 {
                    "shm".to_string()
                } else {
                    format!("tcp{}", t - 2)
                };
                if !tname.starts_with(want_t) {
                    return Err(
                        format!("PE {me}: PE {pe} ({class:?}) is routed over {tname}").into(),
                    );
                }
                line.push_str(&format!(" {pe}={class:?}/{tname}"));
                // The trace ring agrees: every record to `pe` went that way.
                let mut recs = vec![switchyard_core::trace::TraceRecord::default(); 4096];
                let k = ctx.trace().snapshot(&mut recs);
                let to_pe: Vec<_> = recs[..k]
                    .iter()
                    .filter(|r| {
                        r.dst == pe && r.flags & switchyard_core::trace::TraceRecord::ERROR == 0
                    })
                    .collect();
                if to_pe.is_empty() || to_pe.iter().any(|r| usize::from(r.transport) != t) {
                    let seen: Vec<(u8, u8, u32)> =
                        to_pe.iter().map(|r| (r.transport, r.op, r.len)).collect();
                    return Err(format!(
                        "PE {me}: trace records to PE {pe} do not all use transport {t}: {seen:?}"
                    )
                    .into());
                }
            }
            let total = ctx.fetch(&counter, 0, me)?;
            if total != u64::from(n - 1) {
                return Err(format!("PE {me}: counter {total}, expected {}", n - 1).into());
            }
            println!("{line}");
        }
        "compute" => {
            let millis: u64 = arg(args, 1, 1500);
            let k: u64 = arg(args, 2, 50);
            // [0]: the counter, [1]: a word to get, [2]: PE 0's done flag.
            let counter = ctx.alloc::<u64>(3)?;
            ctx.write_local(&counter, 1, &[0x5EED + u64::from(me)])?;
            ctx.barrier_all()?;
            if me == 1 {
                std::thread::sleep(std::time::Duration::from_millis(millis));
                // Still computing until PE 0 says it is done: its flag comes
                // after its last fetch-add returned, so the counter is final.
                let t0 = std::time::Instant::now();
                let mut done = [0u64];
                loop {
                    ctx.read_local(&counter, 2, &mut done)?;
                    if done[0] != 0 {
                        break;
                    }
                    if t0.elapsed() > std::time::Duration::from_secs(60) {
                        return Err("PE 0 never said it was done (60 s)".into());
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                let mut v = [0u64];
                ctx.read_local(&counter, 0, &mut v)?;
                let st = ctx.stats();
                println!(
                    "compute PE 1: counter {} after {millis} ms, progress thread {} ({} bursts)",
                    v[0], st.progress_thread, st.progress_bursts
                );
                if v[0] != k {
                    return Err(format!("counter {} while computing, want {k}", v[0]).into());
                }
                if !st.progress_thread || st.progress_bursts == 0 {
                    return Err("the progress thread did not run".into());
                }
            } else if me == 0 {
                let t0 = std::time::Instant::now();
                for i in 0..k {
                    let old = ctx.fetch_add(&counter, 0, 1u64, 1)?;
                    if old != i {
                        return Err(format!("fetch-add {i} saw {old}").into());
                    }
                    let mut v = [0u64];
                    ctx.get(&counter, 1, &mut v, 1)?;
                    if v[0] != 0x5EED + 1 {
                        return Err(format!("get saw {:#x}", v[0]).into());
                    }
                }
                println!(
                    "compute PE 0: {k} fetch-adds and gets in {:?}",
                    t0.elapsed()
                );
                ctx.put(&counter, 2, &[1], 1)?;
                ctx.quiet()?;
            }
            ctx.barrier_all()?;
            // PE 0 waited in the barrier for the rest of PE 1's computing.
            let lost = ctx.stats().links_lost;
            if lost != 0 {
                return Err(format!("{lost} links went down while PE 1 computed").into());
            }
        }
        "trace-puts" => trace_puts(&mut ctx, arg(args, 1, 16))?,
        "globals" => {
            let me64 = u64::from(me);
            let right = (me + 1) % n;
            let left = (me + n - 1) % n;
            let bytes = core::mem::size_of_val(&GLOBALS);
            let off =
                switchyard_shmem::state::offset_of(&ctx, GLOBALS.as_ptr() as usize, Some(bytes))
                    .ok_or("the global array is not symmetric")?;
            let g = ctx.sym_at::<u64>(off, GLOBALS.len())?;
            if GLOBALS[1].load(Ordering::Relaxed) != 0xC0FFEE {
                return Err("a global lost its value at init".into());
            }
            // Slot 1 differs per PE once set here; slot 0 gets the put.
            GLOBALS[1].store(0xC0FFEE + me64, Ordering::Relaxed);
            ctx.barrier_all()?;
            ctx.put(&g, 0, &[0xABC0 + me64], right)?;
            let mut got = [0u64];
            ctx.get(&g, 1, &mut got, left)?;
            if got[0] != 0xC0FFEE + u64::from(left) {
                return Err(format!("got {:#x} from PE {left}'s global", got[0]).into());
            }
            for _ in 0..100 {
                ctx.fetch_add(&g, 2, 1u64, 0)?;
                ctx.add(&g, 3, 1u64, 0)?;
            }
            ctx.barrier_all()?;
            let want = 0xABC0 + u64::from(left);
            if GLOBALS[0].load(Ordering::Acquire) != want {
                return Err(format!(
                    "my global slot 0 holds {:#x}, not {want:#x}",
                    GLOBALS[0].load(Ordering::Relaxed)
                )
                .into());
            }
            if me == 0 {
                // Local atomics on the same words are atomic with the remote ones.
                GLOBALS[2].fetch_add(1, Ordering::AcqRel);
                let total = GLOBALS[2].load(Ordering::Acquire);
                let adds = GLOBALS[3].load(Ordering::Acquire);
                if total != 100 * u64::from(n) + 1 || adds != 100 * u64::from(n) {
                    return Err(format!("global counters {total} and {adds}").into());
                }
            }
            println!("globals PE {me}: ok");
        }
        "stream" => {
            const SLOTS: usize = 1 << 16;
            let target: u32 = arg(args, 1, 1);
            let millis: u64 = arg(args, 2, 2000);
            let stamps = ctx.alloc::<u64>(SLOTS)?;
            let counts = ctx.alloc::<u64>(64)?;
            let sent = ctx.alloc::<u64>(1)?;
            if me == 0 {
                /// Puts and adds after the cut was seen.
                const AFTER: usize = 4096;
                println!("streaming");
                let mark = std::env::var("SY_MARK").ok();
                let t0 = std::time::Instant::now();
                let detect = std::env::var("SY_DETECT").ok();
                let mut seen = false;
                let mut i = 0usize;
                let mut phase = match std::env::var_os("SY_CUT") {
                    Some(file) => Stream::UntilCut(file.into()),
                    None => Stream::Timed,
                };
                while i < SLOTS {
                    let last = i == SLOTS - AFTER;
                    match &phase {
                        Stream::Timed => {
                            if t0.elapsed() >= std::time::Duration::from_millis(millis) {
                                break;
                            }
                        }
                        Stream::UntilCut(file) => {
                            if last {
                                wait_for_file(file, std::time::Duration::from_secs(60))?;
                                phase = Stream::UntilSeen;
                            } else if i.is_multiple_of(64) && file.exists() {
                                phase = Stream::UntilSeen;
                            }
                        }
                        Stream::UntilSeen => {
                            if last || ctx.stats().link_transitions > 0 {
                                phase = Stream::Until(i + AFTER);
                            }
                        }
                        Stream::Until(end) => {
                            if i >= *end {
                                break;
                            }
                        }
                    }
                    ctx.put(&stamps, i, &[i as u64 + 1], target)?;
                    ctx.add(&counts, i % 64, 1u64, target)?;
                    i += 1;
                    // When the first lost link is seen (wall clock, for the
                    // test to measure the detection time of a cut).
                    if !seen && ctx.stats().links_lost > 0 {
                        seen = true;
                        if let Some(path) = &detect {
                            let now = std::time::SystemTime::now()
                                .duration_since(std::time::UNIX_EPOCH)?
                                .as_micros();
                            std::fs::write(path, now.to_string())?;
                        }
                    }
                    if i == 64
                        && let Some(mark) = &mark
                    {
                        // Traffic is flowing: the test may cut now.
                        ctx.quiet()?;
                        std::fs::write(mark, b"streaming")?;
                    }
                    if i.is_multiple_of(64) {
                        // Pace the stream (fewer slots used per second).
                        std::thread::sleep(std::time::Duration::from_micros(200));
                    }
                }
                ctx.quiet()?;
                ctx.put(&sent, 0, &[i as u64], target)?;
                let s = ctx.stats();
                println!(
                    "streamed {i} puts and adds; reroutes {}, link transitions {}",
                    s.reroutes, s.link_transitions
                );
            }
            ctx.barrier_all()?;
            if me == target {
                let mut total = [0u64];
                ctx.read_local(&sent, 0, &mut total)?;
                let total = total[0] as usize;
                let mut all = vec![0u64; SLOTS];
                ctx.read_local(&stamps, 0, &mut all)?;
                for (i, &v) in all.iter().enumerate() {
                    let want = if i < total { i as u64 + 1 } else { 0 };
                    if v != want {
                        return Err(format!("slot {i}: {v}, expected {want} ({total} sent)").into());
                    }
                }
                let mut c = [0u64; 64];
                ctx.read_local(&counts, 0, &mut c)?;
                for (j, &v) in c.iter().enumerate() {
                    let want = (total / 64 + usize::from(j < total % 64)) as u64;
                    if v != want {
                        return Err(format!(
                            "counter {j}: {v}, expected {want}: an add was lost or applied twice"
                        )
                        .into());
                    }
                }
                println!("stream ok: {total} puts and adds, each applied exactly once");
            }
        }
        other => return Err(format!("unknown scenario {other}").into()),
    }
    ctx.finalize()?;
    Ok(())
}

/// Where the `stream` scenario is.
enum Stream {
    /// Streaming for MILLIS ms (no `$SY_CUT`).
    Timed,
    /// Until the test says it has cut (the file appears).
    UntilCut(std::path::PathBuf),
    /// Until this PE has seen a link go down or up.
    UntilSeen,
    /// Up to this slot.
    Until(usize),
}

/// Waits until `file` exists (the test's signal), looking every millisecond,
/// for at most `limit`.
fn lazy_pairs(ctx: &mut Context) -> Result<(), Box<dyn std::error::Error>> {
    let me = ctx.my_pe();
    if !ctx.n_pes().is_multiple_of(2) {
        return Err("lazy-pairs needs an even number of PEs".into());
    }
    // Not `alloc`: it ends with a barrier, which talks to more peers. The
    // heap's last words are zero and symmetric on every PE.
    let (_, heap_len) = ctx.local_heap();
    let slots = ctx.sym_at::<u64>(heap_len - 64, 4)?;
    let limit = std::time::Duration::from_secs(30);
    let stamp = 0x5A00_0000 | u64::from(me);
    // (fetched, connected): the initiator fetches its partner's card and
    // connects; the responder connects to nobody (it answers over its
    // partner's connection), and fetches its partner's card only when it
    // was not told its partner's locality at init (off its node under the
    // own root: the card brings it, at its first put).
    let (want_fetched, want_connects) = if me.is_multiple_of(2) {
        let partner = me + 1;
        ctx.put(&slots, 0, &[stamp], partner)?;
        ctx.fetch_add(&slots, 1, 7, partner)?;
        let mut got = [0u64];
        ctx.get(&slots, 0, &mut got, partner)?;
        if got[0] != stamp {
            return Err(format!("PE {me}: got {:#x} back from PE {partner}", got[0]).into());
        }
        let answer = ctx.wait_until_for(&slots, 2, Cmp::Ne, 0, limit)?;
        if answer != 0x0B00_0000 | u64::from(partner) {
            return Err(format!("PE {me}: answer {answer:#x} from PE {partner}").into());
        }
        (1..=1, 1)
    } else {
        let partner = me - 1;
        let got = ctx.wait_until_for(&slots, 0, Cmp::Ne, 0, limit)?;
        if got != 0x5A00_0000 | u64::from(partner) {
            return Err(format!("PE {me}: stamp {got:#x} from PE {partner}").into());
        }
        ctx.put(&slots, 2, &[0x0B00_0000 | u64::from(me)], partner)?;
        ctx.quiet()?;
        let count = ctx.wait_until_for(&slots, 1, Cmp::Eq, 7, limit)?;
        if count != 7 {
            return Err(format!("PE {me}: counter {count}").into());
        }
        (0..=1, 0)
    };
    // Other pairs may be in the barrier below already, connecting to this
    // PE: what this PE fetched and connected itself is exact, the peers
    // its driver holds are at least its partner.
    let fetched = ctx.lazy_cards_fetched();
    let connects = ctx.tcp_stats().map_or(0, |s| s.first_use_connects);
    let peers = ctx.tcp_peer_count();
    println!("lazy-pairs PE {me}: fetched {fetched:?}, connected {connects}, tcp peers {peers}");
    if !fetched.is_some_and(|f| want_fetched.contains(&f))
        || connects != want_connects
        || peers == 0
    {
        return Err(format!(
            "PE {me}: fetched {fetched:?} cards, connected to {connects} peers, holds {peers} TCP peers; expected {want_fetched:?}, {want_connects}, at least 1"
        )
        .into());
    }
    // The barrier (and finalize's) connects whatever else it needs.
    ctx.barrier_all()?;
    Ok(())
}

/// `lazy-fan-in` (module docs).
fn lazy_fan_in(ctx: &mut Context) -> Result<(), Box<dyn std::error::Error>> {
    let me = ctx.my_pe();
    let n = ctx.n_pes();
    if !(2..=8).contains(&n) {
        return Err("lazy-fan-in needs 2 to 8 PEs".into());
    }
    // Not `alloc` (it ends with a barrier, which talks to more peers): the
    // heap's last words, zero and symmetric on every PE. Slot p (1..n) is
    // PE p's stamp at PE 0, then PE 0's counter, then each PE's answer.
    let (_, heap_len) = ctx.local_heap();
    let slots = ctx.sym_at::<u64>(heap_len - 128, 16)?;
    let (counter, answer) = (8, 9);
    let limit = std::time::Duration::from_secs(30);
    let stamp = |p: u32| 0x5F00_0000 | u64::from(p);
    let reply = |p: u32| 0x0A00_0000 | u64::from(p);
    let all: u64 = (1..n).map(|p| 1u64 << (8 * p)).sum();
    let want = if me == 0 {
        let got = ctx.wait_until_for(&slots, counter, Cmp::Eq, all, limit)?;
        if got != all {
            return Err(format!("PE 0: counter {got:#x}, expected {all:#x}").into());
        }
        for p in 1..n {
            let mut v = [0u64];
            ctx.get(&slots, p as usize, &mut v, 0)?;
            if v[0] != stamp(p) {
                return Err(format!("PE 0: slot of PE {p} holds {:#x}", v[0]).into());
            }
            ctx.put(&slots, answer, &[reply(p)], p)?;
        }
        ctx.quiet()?;
        // Connected by every other PE; under the own root (node-only
        // localities) it fetched their cards for their class when it
        // answered them, else none.
        (vec![0, u64::from(n - 1)], 0)
    } else {
        ctx.put(&slots, me as usize, &[stamp(me)], 0)?;
        ctx.fetch_add(&slots, counter, 1u64 << (8 * me), 0)?;
        let mut got = [0u64];
        ctx.get(&slots, me as usize, &mut got, 0)?;
        if got[0] != stamp(me) {
            return Err(format!("PE {me}: got {:#x} back from PE 0", got[0]).into());
        }
        let a = ctx.wait_until_for(&slots, answer, Cmp::Ne, 0, limit)?;
        if a != reply(me) {
            return Err(format!("PE {me}: answer {a:#x} from PE 0").into());
        }
        (vec![1u64], 1)
    };
    let (want_fetched, want_connects) = want;
    let fetched = ctx.lazy_cards_fetched();
    let connects = ctx.tcp_stats().map_or(0, |s| s.first_use_connects);
    let peers = ctx.tcp_peer_count();
    let root = std::env::var("SWITCHYARD_ROOT").unwrap_or_default();
    println!(
        "lazy-fan-in PE {me}: fetched {fetched:?}, connected {connects}, tcp peers {peers}, root {root}"
    );
    if std::env::var_os("SY_ROOT_OFF_LOOPBACK").is_some()
        && root
            .parse::<std::net::SocketAddr>()
            .map_or(true, |a| a.ip().is_loopback())
    {
        return Err(format!("PE {me}: the root is at {root:?}, expected off loopback").into());
    }
    let min_peers = if me == 0 { n as usize - 1 } else { 1 };
    if !fetched.is_some_and(|f| want_fetched.contains(&f))
        || connects != want_connects
        || peers < min_peers
    {
        return Err(format!(
            "PE {me}: fetched {fetched:?} cards, connected to {connects} peers, holds {peers} TCP peers; expected one of {want_fetched:?}, {want_connects}, at least {min_peers}"
        )
        .into());
    }
    ctx.barrier_all()?;
    if me == 0 {
        let mut v = [0u64];
        ctx.get(&slots, counter, &mut v, 0)?;
        if v[0] != all {
            return Err(format!("PE 0: counter {:#x} after the barrier", v[0]).into());
        }
    }
    Ok(())
}

fn wait_for_file(
    file: &std::path::Path,
    limit: std::time::Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    let t0 = std::time::Instant::now();
    while !file.exists() {
        if t0.elapsed() > limit {
            return Err(format!("{} did not appear in {limit:?}", file.display()).into());
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Ok(())
}

/// Global variables for the `globals` scenario (symmetric through the
/// executable's data segment).
static GLOBALS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];

/// The `trace-puts` scenario (module docs).
fn trace_puts(ctx: &mut Context, k: u32) -> Result<(), Box<dyn std::error::Error>> {
    use std::path::PathBuf;

    use switchyard_core::route::Op;
    let me = ctx.my_pe();
    let max = 1000 + k as usize;
    let buf = ctx.alloc::<u8>(max)?;
    if me == 0 {
        let sum = |ctx: &Context| ctx.stats().downgrades.iter().sum::<u64>();
        let before = sum(ctx);
        let r = ctx.route(1, 1001, Op::Put)?;
        let src = vec![0xA5u8; max];
        for i in 1..=k as usize {
            ctx.put(&buf, 0, &src[..1000 + i], 1)?;
        }
        let counted = sum(ctx) - before;
        let want = if r.downgraded { u64::from(k) + 1 } else { 0 };
        if counted != want {
            return Err(format!(
                "route says downgraded={} but Stats::downgrades grew by {counted}, not {want}",
                r.downgraded
            )
            .into());
        }
        println!("downgraded {} counted {counted}", r.downgraded);
        ctx.quiet()?;
    }
    ctx.barrier_all()?;
    let dir = PathBuf::from(std::env::var("SWITCHYARD_JOB_DIR")?);
    ctx.dump_trace(&dir.join(format!("trace-pe{me}.sytrace")))?;
    if let Some(hold) = std::env::var_os("SY_HOLD") {
        let hold = PathBuf::from(hold);
        let obj = ctx.trace_object().ok_or("no trace object")?.to_path_buf();
        let mut ready = hold.clone().into_os_string();
        ready.push(format!(".{me}"));
        std::fs::write(&ready, obj.to_string_lossy().as_bytes())?;
        let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !hold.exists() && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    Ok(())
}
