//! Strangers at a PE's TCP rail listener: refused by the driver, and
//! counted, by reason, in the context's [`Stats::tcp_refused`].

use std::{io::Write, net::TcpStream, time::Instant};

use switchyard_core::route::PolicyConfig;
use switchyard_socket::{RefuseReason, TcpConfig};

use super::*;
use crate::context::tcp_pair_test::{Pair, WAIT, job};

/// Polls `ctx` (bounded by [`WAIT`]) until it has counted `want` refusals.
fn until_refused(ctx: &mut Context, want: u64) -> Stats {
    let start = Instant::now();
    loop {
        let s = ctx.stats();
        if s.tcp_refused.iter().sum::<u64>() >= want {
            return s;
        }
        assert!(start.elapsed() < WAIT, "{s:?}");
        ctx.poll_once();
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

#[test]
fn strangers_at_a_rail_listener_are_counted_by_reason() {
    let pair = Pair {
        job: job(0x5f),
        routed: false,
        policy: PolicyConfig::default(),
        tcp: TcpConfig::default(),
    };
    // Both PEs end by quieting and waiting for each other: a pair built
    // from parts has no bootstrap, whose barrier is what keeps `finalize`
    // from closing connections while the peer still waits for an ack.
    let left = std::sync::Arc::new(switchyard_core::sync::atomic::AtomicU32::new(0));
    pair.run(move |mut ctx| {
        assert_eq!(ctx.stats().tcp_refused, [0; RefuseReason::ALL.len()]);
        let addrs = ctx
            .tcp
            .as_mut()
            .map(|t| t.get().local_addrs().to_vec())
            .expect("a TCP driver");
        // Bytes that are no hello, twice.
        let strangers: Vec<TcpStream> = (0..2)
            .map(|_| {
                let mut s = TcpStream::connect(addrs[0]).expect("connect");
                s.write_all(&[0x5a; 128]).expect("write");
                s
            })
            .collect();
        let s = until_refused(&mut ctx, 2);
        assert_eq!(s.tcp_refused[RefuseReason::Garbage.index()], 2, "{s:?}");
        assert_eq!(s.tcp_refused.iter().sum::<u64>(), 2, "{s:?}");
        drop(strangers);
        // The job is unharmed.
        ctx.barrier_all().expect("barrier");
        ctx.quiet().expect("quiet");
        left.fetch_add(1, switchyard_core::sync::atomic::Ordering::SeqCst);
        crate::context::tcp_pair_test::wait_for(&mut ctx, &left, 2, true);
    });
}
