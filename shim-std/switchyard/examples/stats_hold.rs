//! A job that holds still between its phases, for `switchyard stat` to read
//! its counters from outside (the stat tests use it). Run with:
//!
//! ```text
//! SY_GO=/tmp/go SY_END=/tmp/end switchyard run -n 2 -- target/debug/examples/stats_hold [K] [G]
//! ```
//!
//! Every PE initialises, allocates and meets the others in a barrier, then
//! prints `phase1 job JOB` and waits for the file `$SY_GO`. PE 0 then does
//! K blocking 8-byte puts and G blocking 16-byte gets on PE 1, and a quiet;
//! every PE prints `phase2` and waits for the file `$SY_END`, then finalizes.
//! Nothing else runs between the two prints, so the counters of PE 0 toward
//! PE 1 grow by exactly K + G operations and 8K + 16G bytes. Each wait is
//! bounded (60 s; the PE then exits 1).

use std::{
    io::Write as _,
    path::Path,
    time::{Duration, Instant},
};

use switchyard::context::Context;

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
    let mut ctx = Context::from_env()?;
    let buf = ctx.alloc::<u64>(2)?;
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
    println!("phase2");
    std::io::stdout().flush()?;
    wait_for("SY_END")?;
    ctx.finalize()?;
    Ok(())
}
