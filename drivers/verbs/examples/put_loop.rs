//! A put loop on the fake HCA, to count the data path's instructions
//! (`valgrind --tool=callgrind`): PE 0 of a job of `n_pes` PEs puts
//! `puts` 8-byte values to PE `n_pes - 1`, waiting for quiet every 32 puts
//! while the target polls its receipts. Counting two runs that differ only
//! in `puts` gives the instructions per put, setup excluded.
//!
//! ```text
//! cargo build -p switchyard-verbs --example put_loop \
//!     --config 'profile.dev.package.switchyard-verbs.opt-level=3' \
//!     --config 'profile.dev.package.switchyard-verbs.debug-assertions=false' \
//!     --config 'profile.dev.package.switchyard-core.opt-level=3' \
//!     --config 'profile.dev.package.switchyard-core.debug-assertions=false'
//! valgrind --tool=callgrind target/debug/examples/put_loop 64 1000
//! valgrind --tool=callgrind target/debug/examples/put_loop 64 11000
//! ```
//!
//! (The dev profile with the two crates optimized: a release build would
//! rebuild `ibverbs-sys`'s bindings.) Measured on the change that made the
//! eager lookup arithmetic: eager at 64 PEs 3,276 → 2,863 instructions per
//! put, eager at 2 PEs 1,778 → 1,640, lazy (`64 N lazy`) 1,779 → 1,817.
//!
//! Arguments: `n_pes` (at least 2; default 64), `puts` (default 10,000),
//! then `lazy` to create both drivers with lazy peers (PE 0 adds its one
//! peer) instead of eagerly. The values are checked after the loop.

use switchyard_core::{
    route::ContextId,
    transport::{Instant, Transport},
};
use switchyard_verbs::{VerbsDriver, fake::Fabric, params::VerbsConfig};

const CX: ContextId = ContextId { pe: 0, seq: 1 };
const HEAP: u64 = 1 << 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n_pes: u32 = args.next().map_or(Ok(64), |a| a.parse())?.max(2);
    let puts: u64 = args.next().map_or(Ok(10_000), |a| a.parse())?;
    let lazy = args.next().is_some_and(|a| a == "lazy");
    let last = n_pes - 1;
    let cfg = VerbsConfig {
        lazy_peers: lazy.then_some(4),
        ..VerbsConfig::default()
    };
    let f = Fabric::new();
    let mut a = VerbsDriver::fake_with_owned_heap(cfg.clone(), 0, n_pes, 3, HEAP, &f)?;
    let mut b = VerbsDriver::fake_with_owned_heap(cfg, last, n_pes, 3, HEAP, &f)?;
    if lazy {
        a.add_peer(last)?;
        b.add_peer(0)?;
    }
    a.set_peer_card(last, b.card_for(0)?)?;
    b.set_peer_card(0, a.card_for(last)?)?;
    b.connect(0)?;
    a.connect(last)?;
    while a.poll_event().is_some() {}
    let slots = HEAP / 8;
    for i in 0..puts {
        a.put(last, (i % slots) * 8, &i.to_le_bytes(), CX)?;
        if i % 32 == 31 || i + 1 == puts {
            let mut spins = 0u32;
            while !a.quiet_poll()? {
                spins += 1;
                if spins > 1_000_000 {
                    return Err("quiet did not complete".into());
                }
            }
            b.progress(Instant::default());
        }
    }
    // Check: the last value written to each of a few slots landed.
    for i in puts.saturating_sub(4)..puts {
        let t = a.get_start(last, (i % slots) * 8, 8, CX)?;
        let mut out = [0u8; 8];
        let mut spins = 0u32;
        while !a.get_poll(&t, &mut out)? {
            spins += 1;
            if spins > 1_000_000 {
                return Err("get did not complete".into());
            }
        }
        if u64::from_le_bytes(out) != i {
            return Err(format!("slot of put {i} holds {}", u64::from_le_bytes(out)).into());
        }
    }
    println!(
        "{puts} puts to PE {last} of {n_pes} ({}) checked",
        if lazy { "lazy" } else { "eager" }
    );
    Ok(())
}
