//! A two-PE job over shared memory: two contexts in two threads of one
//! process, on one node, shared memory their only link (no TCP driver).
//! The no-allocation test of the small operations between them.

use std::sync::mpsc::{Receiver, Sender, channel};

use switchyard_core::{class::NO_SWITCH, route::PolicyConfig};

use super::{
    Context, PeerInfo, Setup, Sym,
    pes_test::{PeScript, run_pes},
};
use crate::{
    context::tcp_pair_test::{WAIT, job, setup},
    test_alloc::{allocations, count_here},
};

/// PE `me`'s context of the shm pair `job`, its setup changed by `tweak`:
/// its segment's path goes to the other PE through `tx`, the other's comes
/// through `rx`.
fn context(
    job: u64,
    me: u32,
    tweak: fn(&mut Setup),
    tx: &Sender<String>,
    rx: &Receiver<String>,
) -> Context {
    let mut s = setup(job, me, PolicyConfig::default());
    tweak(&mut s);
    let seg = Context::create_segment(&s).expect("segment");
    let mine = seg.path().to_string_lossy().into_owned();
    tx.send(mine.clone()).expect("the other PE");
    let other = rx.recv_timeout(WAIT).expect("the other PE's segment");
    let info = |path: String| PeerInfo {
        node: 1,
        switch: NO_SWITCH,
        tree: NO_SWITCH,
        shm: Some(path.into()),
        tcp: Vec::new(),
    };
    let peers = if me == 0 {
        [info(mine), info(other)]
    } else {
        [info(other), info(mine)]
    };
    Context::from_parts(s, seg, &peers, None).expect("context")
}

/// Runs `script` as PE 0 and PE 1 of the shm pair `job` ([`run_pes`]).
pub(super) fn run_pair(job: u64, script: impl Fn(Context) + Send + Clone + 'static) {
    run_pair_with(job, |_| {}, script);
}

/// [`run_pair`] with both PEs' setups changed by `tweak`.
pub(super) fn run_pair_with(
    job: u64,
    tweak: fn(&mut Setup),
    script: impl Fn(Context) + Send + Clone + 'static,
) {
    let (tx0, rx1) = channel();
    let (tx1, rx0) = channel();
    let pe = |me: u32, tx: Sender<String>, rx: Receiver<String>| -> PeScript {
        let script = script.clone();
        Box::new(move || script(context(job, me, tweak, &tx, &rx)))
    };
    run_pes(vec![pe(0, tx0, rx0), pe(1, tx1, rx1)]);
}

/// `rounds` rounds of every small operation toward `pe`, on this PE's own
/// words of `sym` there (words `8 * me ..`): a put of one word and of four,
/// a get of each, the six atomics, a fence and a quiet. Checks what it
/// reads back, without formatting unless it fails.
fn small_ops(ctx: &mut Context, sym: &Sym<u64>, pe: u32, rounds: u64) {
    let base = 8 * ctx.my_pe() as usize;
    let mut one = [0u64];
    let mut four = [0u64; 4];
    for i in 0..rounds {
        ctx.put(sym, base, &[i], pe).unwrap();
        ctx.get(sym, base, &mut one, pe).unwrap();
        assert!(one[0] == i, "get after put");
        ctx.put(sym, base + 1, &[i, i + 1, i + 2, i + 3], pe)
            .unwrap();
        ctx.get(sym, base + 1, &mut four, pe).unwrap();
        assert!(four == [i, i + 1, i + 2, i + 3], "get of four after put");
        let old = ctx.fetch_add(sym, base + 5, 2, pe).unwrap();
        ctx.add(sym, base + 5, 1, pe).unwrap();
        assert!(ctx.fetch(sym, base + 5, pe).unwrap() == old + 3, "fetch");
        let prev = ctx.swap(sym, base + 6, i, pe).unwrap();
        assert!(
            ctx.compare_swap(sym, base + 6, i, i + 1, pe).unwrap() == i,
            "cswap"
        );
        assert!(i == 0 || prev == i, "swap returned the last value");
        ctx.set(sym, base + 6, i + 1, pe).unwrap();
        ctx.fence().unwrap();
        ctx.quiet().unwrap();
    }
}

/// Both PEs at once, each toward the other over shared memory, every
/// operation traced (`trace = all`): once warmed up, puts, gets, atomics,
/// fences and quiets allocate nothing.
#[test]
fn small_operations_between_two_pes_over_shm_allocate_nothing() {
    run_pair(job(0x5A11), |mut ctx| {
        let other = 1 - ctx.my_pe();
        let sym = ctx.alloc::<u64>(16).unwrap();
        assert_eq!(
            ctx.route(other, 8, switchyard_core::route::Op::Put)
                .unwrap()
                .transport,
            super::SHM,
            "the pair is on shared memory"
        );
        // First-use paths (the selector's first pin, the trace ring's
        // first records) before counting.
        small_ops(&mut ctx, &sym, other, 2);
        let a0 = allocations();
        count_here(true);
        small_ops(&mut ctx, &sym, other, 2000);
        count_here(false);
        let a1 = allocations();
        ctx.barrier_all().unwrap();
        assert_eq!(a1, a0, "allocations on PE {}", ctx.my_pe());
        assert!(ctx.trace().written() >= 2000 * 10, "every operation traced");
        ctx.finalize().unwrap();
    });
}
