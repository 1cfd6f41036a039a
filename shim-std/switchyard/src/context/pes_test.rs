//! Tests' PEs as threads of one process, bounded in time.
//!
//! A PE's peers in the same process are always alive to the library (their
//! pid answers), so a wait on a PE whose thread panicked never ends: it is
//! a live peer that says nothing. [`run_pes`] watches the threads instead.
//! When one panics, the others get [`GRACE`] to end; when none does within
//! [`HUNG`], or the others outlive the grace, it names the test and the PEs
//! still running and ends the process, since nothing can stop those threads
//! and the test binary would otherwise hang until CI's step timeout. When
//! all end, a PE's panic is the test's.
//!
//! [`exit_barrier`] is what a pair built from parts needs for `finalize`
//! ([`Context::set_exit_barrier`]).

use std::{
    any::Any,
    io::Write,
    sync::{
        Arc,
        atomic::{AtomicU32, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use super::{Context, ExitBarrier};

/// How long the other PEs have to end once one panicked (past the waits
/// that depend on a dead peer: 20 s in these tests).
const GRACE: Duration = Duration::from_secs(45);

/// How long a test's PEs may run.
const HUNG: Duration = Duration::from_secs(300);

/// A PE's script, with what it needs moved in.
pub(super) type PeScript = Box<dyn FnOnce() + Send + 'static>;

/// Runs `pes[i]` as PE `i`, each in a thread of its own named after the
/// test, and returns when all have ended; a PE's panic is then resumed
/// here. Ends the process (exit status 101) when the PEs outlive the
/// bounds above.
pub(super) fn run_pes(pes: Vec<PeScript>) {
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let mut running: Vec<(usize, JoinHandle<()>)> = pes
        .into_iter()
        .enumerate()
        .map(|(pe, script)| {
            let t = std::thread::Builder::new()
                .name(format!("{test}: PE {pe}"))
                .spawn(script)
                .expect("a PE's thread");
            (pe, t)
        })
        .collect();
    let start = Instant::now();
    let mut panicked: Option<(usize, Box<dyn Any + Send>, Instant)> = None;
    while !running.is_empty() {
        let mut i = 0;
        while i < running.len() {
            if running[i].1.is_finished() {
                let (pe, t) = running.swap_remove(i);
                if let Err(e) = t.join()
                    && panicked.is_none()
                {
                    panicked = Some((pe, e, Instant::now()));
                }
            } else {
                i += 1;
            }
        }
        if running.is_empty() {
            break;
        }
        let late = match &panicked {
            Some((pe, e, at)) if at.elapsed() > GRACE => {
                let what = e
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| e.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("?");
                Some(format!("PE {pe} panicked {GRACE:?} ago ({what})"))
            }
            None if start.elapsed() > HUNG => Some(format!("its PEs ran past {HUNG:?}")),
            _ => None,
        };
        if let Some(why) = late {
            let left: Vec<usize> = running.iter().map(|(pe, _)| *pe).collect();
            // Straight to stderr: the test harness captures `eprintln!`,
            // and its capture dies with the process.
            let _ = writeln!(
                std::io::stderr(),
                "{test}: {why} and PE(s) {left:?} still run; ending the test process, \
                 which would otherwise hang"
            );
            std::process::exit(101);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if let Some((_, e, _)) = panicked {
        std::panic::resume_unwind(e);
    }
}

/// One exit barrier for `n` PEs: each PE's context gets a copy
/// ([`Context::set_exit_barrier`]); finalize waits there once.
pub(super) fn exit_barrier(n: u32) -> impl Fn(&mut Context) + Clone + Send + 'static {
    let arrived = Arc::new(AtomicU32::new(0));
    move |ctx: &mut Context| {
        let arrived = arrived.clone();
        let barrier: ExitBarrier = Box::new(move |limit| {
            arrived.fetch_add(1, Ordering::SeqCst);
            let start = Instant::now();
            while arrived.load(Ordering::SeqCst) < n {
                if start.elapsed() > limit {
                    return false;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
            true
        });
        ctx.set_exit_barrier(barrier);
    }
}
