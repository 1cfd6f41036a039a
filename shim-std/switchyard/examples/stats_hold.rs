//! A job that holds still between its phases, for `switchyard stat` to read
//! its counters from outside (the stat tests use it). Run with:
//!
//! ```text
//! SY_GO=/tmp/go SY_END=/tmp/end switchyard run -n 2 -- target/debug/examples/stats_hold [K] [G] [C]
//! ```
//!
//! Every PE initialises, allocates, makes channel 0 (an SPSC channel of
//! `u64` from PE 0 to PE 1, 64 slots) and meets the others in a barrier,
//! then prints `phase1 job JOB` and waits for the file `$SY_GO`. PE 0 then
//! does K blocking 8-byte puts and G blocking 16-byte gets on PE 1, and a
//! quiet, and sends C messages on the channel, which PE 1 receives (C is 0
//! by default); every PE prints `phase2` and waits for the file `$SY_END`,
//! then finalizes. Nothing else runs between the two prints, so the
//! counters of PE 0 toward PE 1 grow by exactly K + G operations and
//! 8K + 16G bytes (on one node the channel's messages are not operations:
//! the producer writes the consumer's ring itself), and the channel's ends
//! count C sent and C received. Each wait is bounded (60 s; the PE then
//! exits 1).

use std::{
    io::Write as _,
    path::Path,
    time::{Duration, Instant},
};

use switchyard::{channel::Spsc, context::Context};

/// Waits for the file named by `var` to exist (polling; at most 60 s).
fn wait_for(var: &str) -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::var(var).map_err(|_| format!("{var} is not set"))?;
    let start = Instant::now();
    while !Path::new(&path).exists() {
        if start.elapsed() > Duration::from_secs(60) {
            return Err(format!("no {path} after 60 s").into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let k: usize = args.next().map_or(Ok(1000), |s| s.parse())?;
    let g: usize = args.next().map_or(Ok(10), |s| s.parse())?;
    let c: u64 = args.next().map_or(Ok(0), |s| s.parse())?;
    let mut ctx = Context::from_env()?;
    let buf = ctx.alloc::<u64>(2)?;
    let mut ch = if ctx.n_pes() > 1 {
        ctx.spsc::<u64>(0, 1, 64)?
    } else {
        Spsc::Bystander
    };
    ctx.barrier_all()?;
    println!("phase1 job {:016x}", ctx.job_id());
    std::io::stdout().flush()?;
    wait_for("SY_GO")?;
    if ctx.my_pe() == 0 && ctx.n_pes() > 1 {
        for i in 0..k {
            ctx.put(&buf, 0, &[i as u64], 1)?;
        }
        let mut two = [0u64; 2];
        for _ in 0..g {
            ctx.get(&buf, 0, &mut two, 1)?;
        }
        ctx.quiet()?;
    }
    match &mut ch {
        Spsc::Producer(tx) => (0..c).try_for_each(|i| tx.send(&mut ctx, i))?,
        Spsc::Consumer(rx) => {
            for i in 0..c {
                if rx.recv(&mut ctx)? != i {
                    return Err(format!("channel message {i} out of order").into());
                }
            }
        }
        Spsc::Bystander => {}
    }
    println!("phase2");
    std::io::stdout().flush()?;
    wait_for("SY_END")?;
    drop(ch);
    ctx.finalize()?;
    Ok(())
}
