//! A market-data fan-out: PE 0 publishes 56-byte quotes (one cache line per
//! slot with the channel's sequence word) at a steady rate to every other
//! PE over one broadcast stream (`switchyard::channel::Broadcast`, with
//! backpressure: nothing is dropped); each subscriber
//! checks the quotes arrive in order and prints its one-way latency
//! percentiles (publish stamp to receipt, on the wall clock all PEs of a
//! node share). Run with:
//!
//! ```text
//! cargo build --release -p switchyard --examples
//! cargo run --release -p switchyard-cli -- run -n 3 -- \
//!     target/release/examples/fanout [QUOTES] [QUOTES_PER_SECOND]
//! ```
//!
//! On one node the publisher writes each quote once, into the ring in its
//! own heap, whatever the number of subscribers (two stores); every
//! subscriber reads that one copy. A subscriber on another node costs the
//! publisher a put and a signal per quote.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use switchyard::{
    channel::{Broadcast, SlowSubscriber},
    context::Context,
};

/// A quote: sequence number, publish time (ns since the epoch), instrument,
/// bid, ask, bid size, ask size.
type Quote = [u64; 7];

/// Slots of the stream.
const CAPACITY: usize = 4096;

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let quotes: u64 = args.next().map_or(Ok(100_000), |s| s.parse())?;
    let rate: u64 = args.next().map_or(Ok(100_000), |s| s.parse())?;
    let mut ctx = Context::from_env()?;
    let (me, n) = (ctx.my_pe(), ctx.n_pes());
    if n < 2 {
        eprintln!(
            "fanout needs a publisher and at least one subscriber: switchyard run -n 3 -- ..."
        );
        std::process::exit(2);
    }
    // Collective: one stream, PE 0 to every other PE.
    let stream = ctx.broadcast::<Quote, _>(0, 1..n, CAPACITY, SlowSubscriber::Backpressure)?;
    ctx.barrier_all()?;
    if let Broadcast::Publisher(mut tx) = stream {
        let gap_ns = 1_000_000_000 / rate.max(1);
        let start = Instant::now();
        for seq in 0..quotes {
            // Paced: quote `seq` goes out at `start + seq * gap`.
            let at = Duration::from_nanos(gap_ns.saturating_mul(seq));
            while start.elapsed() < at {
                std::hint::spin_loop();
            }
            let px = 10_000 + (seq % 97);
            let q: Quote = [seq, now_ns(), seq % 16, px, px + 1, 100, 200];
            tx.send(&mut ctx, q)?;
        }
        println!(
            "publisher: {quotes} quotes to {} subscribers ({} on other nodes) in {:?} ({} sends waited for room)",
            n - 1,
            tx.remote_subscribers(),
            start.elapsed(),
            tx.stats().full
        );
    } else if let Broadcast::Subscriber(mut rx) = stream {
        let mut lat = Vec::with_capacity(quotes as usize);
        for want in 0..quotes {
            let q = rx.recv(&mut ctx)?;
            let t = now_ns();
            if q[0] != want {
                return Err(format!("PE {me}: quote {want} arrived as {}", q[0]).into());
            }
            lat.push(t.saturating_sub(q[1]));
        }
        lat.sort_unstable();
        let pct = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize];
        if !lat.is_empty() {
            println!(
                "subscriber PE {me}: {} quotes in order; latency p50 {} ns, p99 {} ns, p99.9 {} ns, max {} ns",
                lat.len(),
                pct(0.5),
                pct(0.99),
                pct(0.999),
                lat[lat.len() - 1]
            );
        }
    }
    ctx.barrier_all()?;
    ctx.finalize()?;
    Ok(())
}
