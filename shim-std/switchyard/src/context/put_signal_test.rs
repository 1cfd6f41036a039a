//! `put_signal` over a TCP pair: one `PutSignal` frame each, the data seen
//! by whoever sees the signal, set and add, and a link cut mid-stream with
//! nothing lost or doubled.

use std::time::Duration;

use switchyard_socket::TcpConfig;

use super::{
    Cmp, Context, Signal, progress,
    tcp_pair_test::{Pair, job},
};

/// Messages per test, and their size in words: a message and its signal
/// word make one 64-byte slot (signal first), as a channel's slot does, so
/// the two share a placement block and a connection.
const N: usize = 2_000;
const WORDS: usize = 7;
const SLOT: usize = WORDS + 1;

fn pair(tag: u64, data_connections: u8) -> Pair {
    Pair::near(
        job(tag),
        TcpConfig {
            listen: vec!["127.0.0.1".parse().unwrap()],
            data_connections,
            // No progress thread: generous detection, so that only the
            // test's own cuts take the link down.
            detection_window: Duration::from_secs(10),
            give_up: Duration::from_secs(20),
            ..TcpConfig::default()
        },
    )
}

fn message(i: usize) -> [u64; WORDS] {
    core::array::from_fn(|j| (i * WORDS + j + 1) as u64)
}

fn frames_sent(ctx: &mut Context) -> u64 {
    let n = ctx
        .tcp
        .as_mut()
        .map(progress::Tcp::get)
        .expect("a TCP driver")
        .stats()
        .frames_sent;
    ctx.leave();
    n
}

/// PE 0 streams `N` messages to PE 1 with `put_signal` (signal `i + 1` in
/// slot `i`: set for even `i`, added to 0 for odd `i`, or added for all
/// with `all_add`), cutting the link before the messages in `cuts`; PE 1
/// waits for each signal and checks the message. Returns PE 0's frames
/// sent during the stream.
fn stream(ctx: &mut Context, cuts: &[usize], all_add: bool) -> u64 {
    let slots = ctx.alloc::<u64>(N * SLOT).unwrap();
    let (data, sig) = (&slots, &slots);
    ctx.barrier_all().unwrap();
    let mut sent = 0;
    if ctx.my_pe() == 0 {
        let before = frames_sent(ctx);
        for i in 0..N {
            if cuts.contains(&i) {
                ctx.tcp
                    .as_mut()
                    .map(progress::Tcp::get)
                    .expect("a TCP driver")
                    .debug_cut(1, 0);
                ctx.leave();
            }
            let v = i as u64 + 1;
            let s = if i % 2 == 0 && !all_add {
                Signal::set(sig, i * SLOT, v)
            } else {
                Signal::add(sig, i * SLOT, v)
            };
            ctx.put_signal(data, i * SLOT + 1, &message(i), s, 1)
                .unwrap();
        }
        ctx.quiet().unwrap();
        sent = frames_sent(ctx) - before;
    } else {
        let mut got = [0u64; WORDS];
        for i in 0..N {
            let v = ctx
                .wait_until(sig, i * SLOT, Cmp::Ge, i as u64 + 1)
                .unwrap();
            assert_eq!(v, i as u64 + 1, "signal {i}");
            ctx.read_local(data, i * SLOT + 1, &mut got).unwrap();
            assert_eq!(got, message(i), "message {i} behind its signal");
        }
    }
    ctx.barrier_all().unwrap();
    if ctx.my_pe() == 1 {
        // Everything applied once: no signal added twice.
        let mut all = vec![0u64; N * SLOT];
        ctx.read_local(sig, 0, &mut all).unwrap();
        for (i, slot) in all.chunks(SLOT).enumerate() {
            assert_eq!(slot[0], i as u64 + 1, "signal {i} after the stream");
            assert_eq!(slot[1..], message(i), "message {i} after the stream");
        }
    }
    sent
}

#[test]
fn put_signal_over_tcp_is_one_frame_with_the_data_before_the_signal() {
    pair(0x5161, 1).run(|mut ctx| {
        let sent = stream(&mut ctx, &[], false);
        if ctx.my_pe() == 0 {
            assert_eq!(sent, N as u64, "one frame per put_signal");
        }
        ctx.finalize().unwrap();
    });
}

#[test]
fn put_signal_with_two_data_connections_is_one_frame() {
    pair(0x5162, 2).run(|mut ctx| {
        let sent = stream(&mut ctx, &[], true);
        if ctx.my_pe() == 0 {
            assert_eq!(sent, N as u64, "one frame per put_signal");
        }
        ctx.finalize().unwrap();
    });
}

#[test]
fn put_signals_cut_mid_stream_arrive_once() {
    pair(0x5163, 1).run(|mut ctx| {
        stream(&mut ctx, &[N / 3, 2 * N / 3], true);
        if ctx.my_pe() == 0 {
            let st = ctx
                .tcp
                .as_mut()
                .map(progress::Tcp::get)
                .expect("a TCP driver")
                .stats();
            ctx.leave();
            assert!(st.reconnects > 0, "{st:?}");
        }
        ctx.finalize().unwrap();
    });
}

#[test]
fn put_signal_larger_than_a_frame_falls_back_and_still_signals_after_the_data() {
    // 8 KiB frames: a 16 KiB message is a put, a fence and a signal.
    let mut p = pair(0x5164, 2);
    p.tcp.max_frame_payload = 8 << 10;
    p.tcp.window = 1 << 20;
    p.run(|mut ctx| {
        const BIG: usize = 2048;
        let data = ctx.alloc::<u64>(BIG).unwrap();
        let sig = ctx.alloc::<u64>(1).unwrap();
        ctx.barrier_all().unwrap();
        for round in 1..=20u64 {
            if ctx.my_pe() == 0 {
                let msg: Vec<u64> = (0..BIG as u64).map(|j| round << 32 | j).collect();
                ctx.put_signal(&data, 0, &msg, Signal::set(&sig, 0, round), 1)
                    .unwrap();
                // The next round waits for this one to be read.
                ctx.wait_until(&sig, 0, Cmp::Ge, round).unwrap();
            } else {
                ctx.wait_until(&sig, 0, Cmp::Ge, round).unwrap();
                let mut got = vec![0u64; BIG];
                ctx.read_local(&data, 0, &mut got).unwrap();
                for (j, &w) in got.iter().enumerate() {
                    assert_eq!(w, round << 32 | j as u64, "round {round} word {j}");
                }
                ctx.put_signal(&sig, 0, &[], Signal::set(&sig, 0, round), 0)
                    .unwrap();
            }
        }
        ctx.quiet().unwrap();
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}
