//! The stats segment seen from a running pair: every context of a PE
//! counts (each in its own slot, summed by the reader).

use std::thread;

use super::{Context, shm_pair_test::run_pair, tcp_pair_test};
use crate::statseg::{PeerWord, Reader, Snapshot};

/// Puts per thread.
const PUTS: u64 = 500;

/// `ctx`'s segment, read now.
fn snapshot(ctx: &Context) -> Snapshot {
    let path = ctx.stats_segment().expect("a stats segment");
    Reader::open(path).expect("readable").snapshot()
}

/// The (peer, shm) counter `word` of `s`.
fn shm_to(s: &Snapshot, peer: u32, word: PeerWord) -> u64 {
    s.peers
        .iter()
        .filter(|p| p.peer == peer && p.transport == "shm")
        .map(|p| p.counters[word.name()])
        .sum()
}

/// Two threads, each on a context of its own, put to the other PE: the
/// segment shows both threads' puts, while they run (the contexts alive)
/// and after their contexts are gone.
#[test]
fn every_context_counts_in_the_segment() {
    run_pair(tcp_pair_test::job(0x5E6), |mut ctx| {
        let other = 1 - ctx.my_pe();
        let data = ctx.alloc::<u64>(2).unwrap();
        ctx.barrier_all().unwrap();
        let before = snapshot(&ctx);
        let pe = ctx.pe();
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let go_rx = std::sync::Mutex::new(go_rx);
        thread::scope(|s| {
            for t in 0..2 {
                let (pe, tx, go) = (pe.clone(), tx.clone(), &go_rx);
                s.spawn(move || {
                    let mut c = pe.context().expect("a context per thread");
                    for i in 0..PUTS {
                        c.put(&data, t, &[i], other).unwrap();
                    }
                    tx.send(()).unwrap();
                    // Alive until the first context has looked.
                    go.lock().unwrap().recv().unwrap();
                });
            }
            rx.recv().unwrap();
            rx.recv().unwrap();
            let live = snapshot(&ctx);
            assert!(live.contexts >= 3, "{} slots", live.contexts);
            for w in [PeerWord::Ops, PeerWord::Bytes] {
                let got = shm_to(&live, other, w) - shm_to(&before, other, w);
                let want = if w == PeerWord::Ops {
                    2 * PUTS
                } else {
                    16 * PUTS
                };
                assert_eq!(got, want, "{} while the contexts live", w.name());
            }
            go_tx.send(()).unwrap();
            go_tx.send(()).unwrap();
        });
        let after = snapshot(&ctx);
        assert_eq!(
            shm_to(&after, other, PeerWord::Ops) - shm_to(&before, other, PeerWord::Ops),
            2 * PUTS
        );
        ctx.barrier_all().unwrap();
        ctx.finalize().unwrap();
    });
}
