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
//! * `init`: init and finalize only (bad-environment checks).

use std::process::ExitCode;

use switchyard::context::{Cmp, Context, Error};
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
    let mut ctx = Context::from_env()?;
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
        other => return Err(format!("unknown scenario {other}").into()),
    }
    ctx.finalize()?;
    Ok(())
}
