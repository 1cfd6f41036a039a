//! A channel soak: PE 0 streams `RECORDS` sequence-stamped records to PE 1
//! over an SPSC channel and, in the same job, to every other PE over a
//! broadcast stream with backpressure; each receiver checks that record `i`
//! arrives exactly once, in order and untorn (word 0 is `i`, the middle
//! words are derived from it, the last is a checksum of the others) and
//! prints what it got. Made to run across nodes while a rail is cut (the
//! `switchyard sim` test `channel_stream_survives_a_rail_cut` in
//! `shim-std/cli/tests/sim.rs`):
//!
//! ```text
//! cargo build -p switchyard --example channel_soak
//! switchyard sim up --name sy --rails 2
//! switchyard run --sim sy --pes-per-node 1 -n 3 -- \
//!     target/debug/examples/channel_soak [RECORDS] [CAPACITY]
//! switchyard sim link down 0 0; sleep 1; switchyard sim link up 0 0   # meanwhile
//! ```
//!
//! With `SOAK_MARK=FILE`, PE 0 creates `FILE` once a quarter of the records
//! are sent; with `SOAK_CUT=FILE` too, it waits at half of them (at most
//! 60 s) until `FILE` exists, so a harness can cut a rail between the two
//! and know the stream spans the cut. Every PE prints one line: the
//! receivers `soak PE p: spsc R/N ok, broadcast R/N ok` (or exit 1 naming
//! the first bad record), and each its context's failover counters; PE 0
//! also `soak PE 0: broadcast to R remote nodes (S remote subscribers), T
//! tcp operations`: the operations it issued over TCP while streaming (with
//! PE 1 on its node, one put and signal per record per remote node).

use std::{
    path::Path,
    time::{Duration, Instant},
};

use switchyard::{
    channel::{Broadcast, SlowSubscriber, Spsc},
    context::{Context, TCP},
};

/// A record: `[i, a(i), b(i), c(i), d(i), e(i), checksum]`.
type Record = [u64; 7];

fn record(i: u64) -> Record {
    let mut r = [0u64; 7];
    r[0] = i;
    for (k, w) in r.iter_mut().enumerate().take(6).skip(1) {
        *w = i
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(k as u32 * 11)
            ^ k as u64;
    }
    r[6] = checksum(&r);
    r
}

fn checksum(r: &Record) -> u64 {
    r[..6].iter().fold(0xCBF2_9CE4_8422_2325u64, |h, &w| {
        (h ^ w).wrapping_mul(0x0100_0000_01B3)
    })
}

/// Checks record `got` is record `want`, whole.
fn check(me: u32, what: &str, want: u64, got: &Record) -> Result<(), String> {
    if got[0] != want {
        return Err(format!(
            "PE {me}: {what} record {want} arrived as {} (lost, doubled or reordered)",
            got[0]
        ));
    }
    if *got != record(want) || checksum(got) != got[6] {
        return Err(format!("PE {me}: {what} record {want} is torn: {got:x?}"));
    }
    Ok(())
}

/// Waits (at most `limit`) for `path` to exist.
fn wait_for(path: &Path, limit: Duration) -> Result<(), String> {
    let t0 = Instant::now();
    while !path.exists() {
        if t0.elapsed() > limit {
            return Err(format!("{} never appeared", path.display()));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(Ok(200_000), |s| s.parse())?;
    let capacity: usize = args.next().map_or(Ok(1024), |s| s.parse())?;
    let mark = std::env::var_os("SOAK_MARK");
    let cut = std::env::var_os("SOAK_CUT");
    let mut ctx = Context::from_env()?;
    let (me, pes) = (ctx.my_pe(), ctx.n_pes());
    if pes < 2 {
        eprintln!("channel_soak needs at least 2 PEs: switchyard run -n 3 -- ...");
        std::process::exit(2);
    }
    // Collective, in the same order on every PE.
    let spsc = ctx.spsc::<Record>(0, 1, capacity)?;
    let bcast = ctx.broadcast::<Record, _>(0, 1..pes, capacity, SlowSubscriber::Backpressure)?;
    ctx.barrier_all()?;
    let t0 = Instant::now();
    match (spsc, bcast) {
        (Spsc::Producer(mut tx), Broadcast::Publisher(mut pb)) => {
            let tcp0 = ctx.stats().ops[TCP.index()];
            for i in 0..n {
                if i == n / 4
                    && let Some(m) = &mark
                {
                    std::fs::write(m, b"streaming")?;
                }
                if i == n / 2
                    && let Some(c) = &cut
                {
                    wait_for(Path::new(c), Duration::from_secs(60))?;
                }
                let r = record(i);
                tx.send(&mut ctx, r)?;
                pb.send(&mut ctx, r)?;
            }
            println!(
                "soak PE {me}: sent {n} records on each stream in {:?} (spsc full {}, broadcast full {})",
                t0.elapsed(),
                tx.stats().full,
                pb.stats().full
            );
            println!(
                "soak PE {me}: broadcast to {} remote nodes ({} remote subscribers), {} tcp operations",
                pb.remote_nodes(),
                pb.remote_subscribers(),
                ctx.stats().ops[TCP.index()] - tcp0
            );
        }
        (spsc, Broadcast::Subscriber(mut sb)) => {
            let mut rx = match spsc {
                Spsc::Consumer(rx) => Some(rx),
                _ => None,
            };
            for i in 0..n {
                if let Some(rx) = rx.as_mut() {
                    check(me, "spsc", i, &rx.recv(&mut ctx)?)?;
                }
                check(me, "broadcast", i, &sb.recv(&mut ctx)?)?;
            }
            let spsc_got = rx.as_ref().map_or(0, |rx| rx.stats().received);
            let spsc_want = if rx.is_some() { n } else { 0 };
            let bc = sb.stats();
            // Nothing more may arrive than was sent.
            let extra = match rx.as_mut() {
                Some(rx) => rx.try_recv(&mut ctx)?.is_some(),
                None => false,
            } || sb.try_recv(&mut ctx)?.is_some();
            if extra || bc.lost != 0 {
                return Err(format!(
                    "PE {me}: more than {n} records, or broadcast lost {}",
                    bc.lost
                )
                .into());
            }
            println!(
                "soak PE {me}: spsc {spsc_got}/{spsc_want} ok, broadcast {}/{n} ok in {:?}",
                bc.received,
                t0.elapsed()
            );
        }
        _ => {}
    }
    ctx.barrier_all()?;
    let s = ctx.stats();
    println!(
        "soak PE {me}: links_lost {} link_transitions {} reroutes {} dead_peers {}",
        s.links_lost, s.link_transitions, s.reroutes, s.dead_peers
    );
    ctx.finalize()?;
    Ok(())
}
