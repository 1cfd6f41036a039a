//! A distributed counter: every PE adds 1 to a counter on PE 0, `N` times,
//! with fetch-add; PE 0 checks the exact total. Run with:
//!
//! ```text
//! cargo build --release -p switchyard --examples
//! cargo run --release -p switchyard-cli -- run -n 4 -- target/release/examples/counter [N]
//! ```

use switchyard::context::Context;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args().nth(1).map_or(Ok(10_000), |s| s.parse())?;
    let mut ctx = Context::from_env()?;
    let counter = ctx.alloc::<u64>(1)?;
    // Each PE's ticket numbers are unique: fetch-add returns distinct values.
    let mut last = 0;
    for _ in 0..n {
        last = ctx.fetch_add(&counter, 0, 1, 0)?;
    }
    ctx.barrier_all()?;
    let total = n * u64::from(ctx.n_pes());
    if ctx.my_pe() == 0 {
        let got = ctx.fetch(&counter, 0, 0)?;
        println!("counter = {got} (expected {total}); my last ticket was {last}");
        if got != total {
            std::process::exit(1);
        }
    }
    ctx.finalize()?;
    Ok(())
}
