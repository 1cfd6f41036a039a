//! Ping-pong between PE 0 and PE 1 over symmetric flags, then a round-trip
//! time summary. Run with:
//!
//! ```text
//! cargo run --release -p switchyard-cli -- run -n 2 -- \
//!     target/release/examples/pingpong [ITERS]
//! ```
//! (build it first with `cargo build --release -p switchyard --examples`).

use std::time::Instant;

use switchyard::context::{Cmp, Context};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iters: u64 = std::env::args().nth(1).map_or(Ok(10_000), |s| s.parse())?;
    let mut ctx = Context::from_env()?;
    if ctx.n_pes() < 2 {
        eprintln!(
            "pingpong needs 2 PEs: switchyard run -n 2 -- {}",
            std::env::args().next().unwrap_or_default()
        );
        std::process::exit(2);
    }
    let me = ctx.my_pe();
    let ping = ctx.alloc::<u64>(1)?;
    let pong = ctx.alloc::<u64>(1)?;
    let t0 = Instant::now();
    for i in 1..=iters {
        match me {
            0 => {
                ctx.put(&ping, 0, &[i], 1)?; // the flag is the message
                ctx.wait_until(&pong, 0, Cmp::Ge, i)?;
            }
            1 => {
                ctx.wait_until(&ping, 0, Cmp::Ge, i)?;
                ctx.put(&pong, 0, &[i], 0)?;
            }
            _ => {}
        }
    }
    let rtt = t0.elapsed() / iters.max(1) as u32;
    if me == 0 {
        println!("{iters} round trips, {rtt:?} each ({:?} one way)", rtt / 2);
    }
    ctx.finalize()?;
    Ok(())
}
