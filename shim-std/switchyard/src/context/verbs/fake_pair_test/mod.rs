//! Two contexts in two threads of one process, NEAR to each other, with TCP
//! over loopback and the verbs driver on the fake HCA (one fabric shared by
//! both): the wiring end to end, without RDMA hardware.

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU32, Ordering},
        mpsc::{Receiver, Sender, channel},
    },
    time::{Duration, Instant},
};

use switchyard_core::{
    class::{NO_SWITCH, PathClass},
    route::{Downgrade, PolicyConfig},
    topology::LinkState,
    trace::TraceRecord,
    transport::{Instant as CoreInstant, Transport},
};
use switchyard_socket::{SocketDriver, TcpConfig};
use switchyard_verbs::fake::Fabric;

use super::*;
use crate::context::{
    Bitwise, Cmp, PeerInfo, Setup, Sym, TCP, TRACE_RECORDS, VERBS,
    pes_test::{PeScript, run_pes},
    progress,
    tcp_pair_test::{self, WAIT},
};

mod lazy;
mod load;
mod located;
mod routed_sets;
mod routing;
mod sets;
mod sets_fail;
mod threads;

const N: u64 = 64;

enum Msg {
    Addrs(Vec<SocketAddr>),
    Card(Option<Vec<u8>>),
}

/// How a test pair is set up.
#[derive(Debug, Clone, Copy, Default)]
struct Opts {
    /// Flip a byte of the card received from the other PE before it is
    /// attached.
    corrupt: bool,
    /// As `corrupt`, at this PE only: the other PE wants it, and is
    /// refused ([`Record::Refused`]).
    corrupt_at: Option<u32>,
    /// The two PEs are on different switches (ROUTED), not NEAR.
    routed: bool,
    /// `verbs_atomics`.
    atomics: VerbsAtomics,
    /// `verbs_routed = off`.
    no_routed: bool,
    /// `verbs_context_sets = on`.
    context_sets: bool,
    /// Clear the atomics flag of the card received from the other PE
    /// (its device does no RDMA atomics).
    peer_without_atomics: bool,
}

/// PE `me` of a NEAR (or, with `opts.routed`, ROUTED) pair.
fn context(
    job: u64,
    me: u32,
    fabric: &Fabric,
    chans: (&Sender<Msg>, &Receiver<Msg>),
    opts: Opts,
) -> Context {
    context_with(job, me, fabric, chans, opts, VerbsConfig::default())
}

/// [`context`] with the verbs driver's settings `vcfg`.
fn context_with(
    job: u64,
    me: u32,
    fabric: &Fabric,
    (tx, rx): (&Sender<Msg>, &Receiver<Msg>),
    opts: Opts,
    vcfg: VerbsConfig,
) -> Context {
    let corrupt = opts.corrupt || opts.corrupt_at == Some(me);
    let wait = WAIT;
    let policy = PolicyConfig {
        downgrade: [Downgrade::AllowAndCount; 5],
        ..PolicyConfig::default()
    };
    let setup = Setup {
        verbs_atomics: opts.atomics,
        verbs_routed: !opts.no_routed,
        verbs_context_sets: opts.context_sets,
        ..tcp_pair_test::setup(job, me, policy)
    };
    let seg = Context::create_segment(&setup).expect("segment");
    let (heap, len) = (seg.mapped().heap_ptr(), seg.mapped().heap_len());
    let tcfg = TcpConfig {
        job_id: job,
        key: switchyard_socket::JobKey(*b"verbs-fake-pair!verbs-fake-pair!"),
        me,
        n_pes: 2,
        listen: vec!["127.0.0.1".parse().expect("ip")],
        detection_window: Duration::from_secs(10),
        give_up: Duration::from_secs(20),
        ..TcpConfig::default()
    };
    #[allow(unsafe_code)]
    // SAFETY: the segment's heap mapping, valid for `len` bytes; the
    // segment moves into the context with the driver and outlives it.
    let tcp = unsafe { SocketDriver::new(tcfg, heap, len) }.expect("tcp driver");
    tx.send(Msg::Addrs(tcp.local_addrs().to_vec())).unwrap();
    let Ok(Msg::Addrs(other)) = rx.recv_timeout(wait) else {
        panic!("no addresses from the other PE");
    };
    let mine = tcp.local_addrs().to_vec();
    let info = |pe: u32, tcp: Vec<SocketAddr>| PeerInfo {
        node: 1000 + u64::from(pe),
        switch: if opts.routed { 5 + pe } else { 5 },
        tree: NO_SWITCH,
        shm: None,
        tcp,
    };
    let peers = if me == 0 {
        [info(0, mine), info(1, other)]
    } else {
        [info(0, other), info(1, mine)]
    };
    let mut ctx = Context::from_parts(setup, seg, &peers, Some(tcp)).expect("context");
    let class = if opts.routed {
        PathClass::Routed
    } else {
        PathClass::Near
    };
    assert_eq!(ctx.class(1 - me), Some(class));
    let (h, l) = ctx.shm.local_heap();
    #[allow(unsafe_code)]
    // SAFETY: the context's own heap; the driver is dropped with the
    // context, before its segment.
    let drv = unsafe { VerbsDriver::new_fake(vcfg, me, 2, job, h, l, fabric) }
        .expect("fake verbs driver");
    tx.send(Msg::Card(pe_card_bytes(Some(&drv)))).unwrap();
    let Ok(Msg::Card(mut card)) = rx.recv_timeout(wait) else {
        panic!("no card from the other PE");
    };
    if corrupt && let Some(c) = card.as_mut() {
        c[5] = 9; // the link layer
    }
    if opts.peer_without_atomics
        && let Some(c) = card.as_mut()
    {
        c[2] &= !2; // the flags: atomics
    }
    let mut cards = vec![None, None];
    cards[(1 - me) as usize] = card;
    cards[me as usize] = pe_card_bytes(Some(&drv));
    ctx.attach_verbs(drv, job, &cards);
    let up = ctx.verbs_connect(wait);
    // A PE whose peer refused its card is refused in turn.
    let want = !(corrupt || opts.corrupt_at.is_some() || (opts.routed && opts.no_routed));
    assert_eq!(up, u32::from(want), "verbs links up at init");
    ctx
}

/// Waits (bounded: 20 s) until the pair's `step` counter reaches `want`,
/// without calling the library.
fn wait_for_step(step: &AtomicU32, want: u32) {
    let start = Instant::now();
    while step.load(Ordering::SeqCst) < want {
        assert!(start.elapsed() < Duration::from_secs(20), "step {want}");
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// What each PE of a pair runs: its context, the shared fake fabric,
/// the pair's `done` counter (for [`close_together`]) and a `step`
/// counter the script may use to hand off between the two PEs.
type Script = fn(Context, &Fabric, &AtomicU32, &AtomicU32) -> Context;

/// Runs `script` as PE 1 (a thread) and PE 0 (this thread) of a pair
/// on one fake fabric, set up with `opts` and the driver settings
/// `vcfg`; `tag` makes the job id unique among this process's tests.
/// Returns the fabric, for checks after both PEs are done.
fn run_pair(tag: u64, opts: Opts, vcfg: VerbsConfig, script: Script) -> Fabric {
    let job = tag << 32 ^ u64::from(std::process::id()) << 8;
    let fabric = Fabric::new();
    let (tx0, rx1) = channel();
    let (tx1, rx0) = channel();
    let f1 = fabric.clone();
    let done = Arc::new(AtomicU32::new(0));
    let step = Arc::new(AtomicU32::new(0));
    // PE 0's context outlives PE 1's (dropped after both scripts end).
    let kept = Arc::new(Mutex::new(None));
    let pe = |me: u32, f: Fabric, tx: Sender<_>, rx: Receiver<_>| -> PeScript {
        let (done, step, vcfg, kept) = (done.clone(), step.clone(), vcfg.clone(), kept.clone());
        Box::new(move || {
            let ctx = context_with(job, me, &f, (&tx, &rx), opts, vcfg);
            let ctx = script(ctx, &f, &done, &step);
            if me == 0 {
                *kept.lock().unwrap() = Some(ctx);
            }
        })
    };
    run_pes(vec![pe(0, fabric.clone(), tx0, rx0), pe(1, f1, tx1, rx1)]);
    drop(kept.lock().unwrap().take());
    fabric
}

fn verbs_ops(ctx: &Context) -> u64 {
    ctx.stats().ops[VERBS.index()]
}

/// Puts `N` words (`base + i`) to the other PE of a pair and checks they
/// all went over verbs (the lazy tests').
fn puts_over_verbs(ctx: &mut Context, w: &Sym<u64>, base: u64) {
    let other = 1 - ctx.my_pe();
    let (v0, t0) = (verbs_ops(ctx), ctx.stats().ops[TCP.index()]);
    for i in 0..N {
        ctx.put(w, i as usize, &[base + i], other).unwrap();
    }
    ctx.quiet().unwrap();
    let s = ctx.stats();
    assert_eq!(verbs_ops(ctx) - v0, N, "{s:?}");
    assert_eq!(s.ops[TCP.index()], t0, "nothing over TCP: {s:?}");
}

/// Waits (bounded, progressing) until `w[0..N]` holds `base + i`.
fn expect_words(ctx: &mut Context, w: &Sym<u64>, base: u64) {
    assert_eq!(
        ctx.wait_until_for(w, N as usize - 1, Cmp::Eq, base + N - 1, WAIT)
            .unwrap(),
        base + N - 1
    );
    let mut v = [0u64; N as usize];
    ctx.read_local(w, 0, &mut v).unwrap();
    for (i, x) in v.iter().enumerate() {
        assert_eq!(*x, base + i as u64, "slot {i}");
    }
}

/// Waits (bounded) until this PE's verbs link to the other is up again,
/// progressing and quieting (which raises the bit) meanwhile.
fn wait_up(ctx: &mut Context) {
    let start = Instant::now();
    while ctx.verbs_status().peers_up == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the verbs link did not come back: {:?}",
            ctx.verbs_status()
        );
        ctx.poll_once();
        ctx.quiet().expect("quiet");
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn script(mut ctx: Context, fabric: &Fabric, done: &AtomicU32, _: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    let sym: Sym<u64> = ctx.alloc(256).expect("alloc");
    let near = PathClass::Near.index();
    // 1. Put, get and atomics go over verbs.
    if me == 0 {
        let (v0, t0) = (verbs_ops(&ctx), ctx.stats().ops[TCP.index()]);
        ctx.put(&sym, 0, &[11, 12, 13], 1).unwrap();
        let mut g = [0u64; 3];
        ctx.get(&sym, 0, &mut g, 1).unwrap();
        assert_eq!(g, [11, 12, 13]);
        assert_eq!(ctx.fetch_add(&sym, 10, 5, 1).unwrap(), 0);
        assert_eq!(ctx.fetch_add(&sym, 10, 1, 1).unwrap(), 5);
        assert_eq!(ctx.compare_swap(&sym, 10, 6, 7, 1).unwrap(), 6);
        ctx.quiet().unwrap();
        let s = ctx.stats();
        assert_eq!(verbs_ops(&ctx) - v0, 5, "{s:?}");
        assert_eq!(s.ops[TCP.index()], t0, "nothing went over TCP");
        assert_eq!(s.downgrades[near], 0);
        let mut recs = [TraceRecord::default(); TRACE_RECORDS];
        let n = ctx.trace().snapshot(&mut recs);
        let last = recs[n - 1];
        assert_eq!((last.dst, last.transport), (1, VERBS.index() as u8));
        let st = ctx.verbs_status();
        assert!(st.in_use && st.peers_up == 1, "{st:?}");
    }
    ctx.barrier_all().unwrap();
    if me == 1 {
        let mut v = [0u64; 11];
        ctx.read_local(&sym, 0, &mut v).unwrap();
        assert_eq!((v[0], v[1], v[2], v[10]), (11, 12, 13, 7));
    }
    ctx.barrier_all().unwrap();
    // 2. The link fails: the bit clears, what was in flight is replayed
    //    over TCP once, later operations go over TCP, in order.
    if me == 0 {
        fabric.break_links();
        let t0 = ctx.stats().ops[TCP.index()];
        for i in 0..N {
            ctx.put(&sym, 100 + i as usize, &[i + 1], 1).unwrap();
            ctx.put(&sym, 50, &[i + 1], 1).unwrap();
        }
        ctx.quiet().unwrap();
        let s = ctx.stats();
        assert!(s.verbs_failovers >= 1, "{s:?}");
        assert!(s.verbs_replays >= 1, "{s:?}");
        assert!(s.ops[TCP.index()] > t0, "{s:?}");
        assert!(s.downgrades[near] >= 1, "{s:?}");
        let mut recs = [TraceRecord::default(); TRACE_RECORDS];
        let n = ctx.trace().snapshot(&mut recs);
        assert!(
            recs[..n]
                .iter()
                .any(|r| r.transport == TCP.index() as u8
                    && r.flags & TraceRecord::DOWNGRADED != 0),
            "a downgraded NEAR put over TCP is traced"
        );
        assert!(
            recs[..n]
                .iter()
                .any(|r| r.transport == TCP.index() as u8 && r.flags & TraceRecord::FAILOVER != 0),
            "the failover from verbs to TCP is traced"
        );
        // The verbs driver's own counters, in the stats segment.
        ctx.sx_publish();
        ctx.leave();
        let seg = crate::statseg::Reader::open(ctx.stats_segment().expect("a segment"))
            .expect("readable")
            .snapshot();
        let drv = ctx.verbs_mut().drv.stats();
        let row = seg
            .wide
            .iter()
            .find(|w| w.transport == "verbs")
            .expect("a verbs row");
        assert_eq!(row.counters["work_requests"], drv.wrs, "{row:?}");
        assert_eq!(row.counters["peer_failures"], drv.peer_failures);
        assert!(drv.wrs > 0 && drv.peer_failures >= 1, "{drv:?}");
        assert!(
            crate::statseg::prometheus(&[seg]).contains("switchyard_verbs_work_requests_total{"),
            "in the Prometheus text"
        );
    }
    ctx.barrier_all().unwrap();
    if me == 1 {
        let mut v = [0u64; N as usize];
        ctx.read_local(&sym, 100, &mut v).unwrap();
        for (i, x) in v.iter().enumerate() {
            assert_eq!(*x, i as u64 + 1, "slot {i}");
        }
        let mut last = [0u64];
        ctx.read_local(&sym, 50, &mut last).unwrap();
        assert_eq!(last[0], N, "an older put (a replay) overtook a newer one");
    }
    ctx.barrier_all().unwrap();
    // 3. Healed: both sides rebuild, the bit is set again, verbs again.
    if me == 0 {
        fabric.heal();
    }
    ctx.barrier_all().unwrap();
    wait_up(&mut ctx);
    ctx.barrier_all().unwrap();
    if me == 0 {
        let v0 = verbs_ops(&ctx);
        ctx.put(&sym, 60, &[99], 1).unwrap();
        assert_eq!(ctx.fetch_add(&sym, 61, 1, 1).unwrap(), 0);
        ctx.quiet().unwrap();
        assert_eq!(verbs_ops(&ctx) - v0, 2, "{:?}", ctx.stats());
        assert!(ctx.verbs_mut().drv.stats().rebuilds >= 1);
    }
    ctx.barrier_all().unwrap();
    if me == 1 {
        let mut v = [0u64; 2];
        ctx.read_local(&sym, 60, &mut v).unwrap();
        assert_eq!(v, [99, 1]);
    }
    ctx.barrier_all().unwrap();
    close_together(&mut ctx, done);
    ctx
}

/// Quiet, then keep progressing (acks, verbs records) until the other
/// side is quiet too: nothing of either side is in flight when the other
/// closes (an operation in flight to a closed peer is reported, not
/// dropped).
fn close_together(ctx: &mut Context, done: &AtomicU32) {
    ctx.quiet().unwrap();
    done.fetch_add(1, Ordering::SeqCst);
    let start = Instant::now();
    while done.load(Ordering::SeqCst) < 2 {
        assert!(start.elapsed() < Duration::from_secs(20), "the other PE");
        ctx.poll_once();
        std::thread::sleep(Duration::from_micros(100));
    }
}

#[test]
fn near_traffic_goes_over_verbs_fails_over_to_tcp_and_comes_back() {
    // NIC atomics: this test fails atomics over verbs over too.
    let o = Opts {
        atomics: VerbsAtomics::Nic,
        ..Opts::default()
    };
    run_pair(0x7e, o, VerbsConfig::default(), script);
}

/// The known gap of the replay without receipts, made deterministic:
/// PE 0 puts data, fences and puts a flag over verbs; both land at
/// PE 1 but the flag's ack is lost (an in-doubt WRITE), so PE 0's link
/// fails with both puts in flight. Before PE 0's context acts on the
/// failure, PE 1 sees the flag and writes newer data, as the flag
/// allows. Then PE 0 fails over: its receipts handshake shows both puts
/// landed, so neither is replayed and PE 1's newer data stays. (A
/// blind replay over TCP writes the old data over it.)
fn gap_script(mut ctx: Context, fabric: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    let sym: Sym<u64> = ctx.alloc(16).expect("alloc");
    ctx.barrier_all().unwrap();
    // The barrier's last put may still be in a batch: post it (the
    // other PE waits for it while this one waits without progress).
    ctx.quiet().unwrap();
    if me == 1 {
        step.store(1, Ordering::SeqCst);
        // Wait for the flag reading the heap only: no progress, so
        // nothing of PE 0's failover can be applied meanwhile.
        let start = Instant::now();
        let mut flag = [0u64];
        while flag[0] != 1 {
            assert!(start.elapsed() < Duration::from_secs(20), "no flag");
            std::thread::sleep(Duration::from_micros(50));
            ctx.read_local(&sym, 8, &mut flag).unwrap();
        }
        let mut data = [0u64];
        ctx.read_local(&sym, 0, &mut data).unwrap();
        assert_eq!(data[0], 1, "the fence: the data landed before the flag");
        ctx.write_local(&sym, 0, &[2]).unwrap();
        step.store(2, Ordering::SeqCst);
    } else {
        wait_for_step(step, 1);
        let failovers = ctx.stats().verbs_failovers;
        fabric.lose_ack_after(1); // the data is acked, the flag is not
        ctx.put(&sym, 0, &[1], 1).unwrap();
        ctx.fence().unwrap();
        ctx.put(&sym, 8, &[1], 1).unwrap();
        // Post the batch (both land, the flag's ack is lost) without
        // letting the context act on the failure yet.
        let v = ctx.verbs_mut();
        v.drv.progress(CoreInstant::default());
        assert_eq!(v.drv.state(1), LinkState::Error);
        wait_for_step(step, 2);
        ctx.quiet().unwrap();
        let s = ctx.stats();
        assert_eq!(s.verbs_failovers, failovers + 1, "{s:?}");
        let d = ctx.verbs_mut().drv.stats();
        assert_eq!(d.receipts_settled, 2, "both puts known landed: {d:?}");
    }
    ctx.barrier_all().unwrap();
    if me == 1 {
        let mut data = [0u64];
        ctx.read_local(&sym, 0, &mut data).unwrap();
        assert_eq!(
            data[0], 2,
            "a replay of an in-doubt put overwrote the newer data"
        );
    }
    ctx.barrier_all().unwrap();
    close_together(&mut ctx, done);
    ctx
}

/// PE 0's put lands but its ack is lost, and no QP reports its last
/// WQE, so PE 1 cannot tell which of PE 0's puts landed: after its
/// collection deadline it says so ([`Record::Withheld`]) and PE 0
/// reports the put lost at once, instead of holding every operation
/// to PE 1 until its op timeout (20 s here).
fn withheld_script(
    mut ctx: Context,
    fabric: &Fabric,
    done: &AtomicU32,
    step: &AtomicU32,
) -> Context {
    let me = ctx.my_pe();
    let sym: Sym<u64> = ctx.alloc(16).expect("alloc");
    ctx.barrier_all().unwrap();
    ctx.quiet().unwrap();
    if me == 1 {
        step.store(1, Ordering::SeqCst);
        wait_for_step(step, 2); // no calls until PE 0's put is out
        // Progress (PE 0's Failed record, the collection deadline)
        // without sending PE 0 anything that could be in doubt too.
        let start = Instant::now();
        while step.load(Ordering::SeqCst) < 3 {
            assert!(start.elapsed() < Duration::from_secs(20), "PE 0's quiet");
            ctx.poll_once();
            std::thread::sleep(Duration::from_micros(100));
        }
    } else {
        wait_for_step(step, 1);
        fabric.suppress_last_wqe(true);
        fabric.lose_ack_after(0); // the put lands, its ack is lost
        ctx.put(&sym, 0, &[7], 1).unwrap();
        step.store(2, Ordering::SeqCst);
        let start = Instant::now();
        let r = ctx.quiet();
        let took = start.elapsed();
        fabric.suppress_last_wqe(false);
        assert!(
            matches!(r, Err(super::super::Error::ReplayLost { pe: 1, ops }) if ops >= 1),
            "the put in doubt was not reported lost: {r:?}"
        );
        assert!(
            took < Duration::from_secs(10),
            "PE 0 waited {took:?} for receipts PE 1 had withheld (op timeout 20 s)"
        );
        ctx.quiet().expect("reported once");
        step.store(3, Ordering::SeqCst);
    }
    ctx.barrier_all().unwrap();
    if me == 1 {
        let d = ctx.verbs_mut().drv.stats();
        assert!(d.receipts_withheld >= 1, "{d:?}");
        let mut v = [0u64];
        ctx.read_local(&sym, 0, &mut v).unwrap();
        assert_eq!(v[0], 7, "the put landed (reported lost: in doubt)");
    }
    ctx.barrier_all().unwrap();
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn withheld_receipts_are_reported_at_once() {
    run_pair(
        0x6b,
        Opts::default(),
        VerbsConfig::default(),
        withheld_script,
    );
}

#[test]
fn a_flag_acted_on_before_the_failover_is_not_undone_by_a_replay() {
    run_pair(0x7d, Opts::default(), VerbsConfig::default(), gap_script);
}

/// PE 0's put lands but its ack is lost (in doubt), and one of PE 1's
/// receipts records is lost on the way (a control record the TCP
/// driver could not queue is not resent by it): PE 0 asks again and
/// settles, instead of holding its operations to PE 1 until the op
/// timeout and reporting the put lost.
fn lost_receipt_script(
    mut ctx: Context,
    fabric: &Fabric,
    done: &AtomicU32,
    step: &AtomicU32,
) -> Context {
    let me = ctx.my_pe();
    let sym: Sym<u64> = ctx.alloc(16).expect("alloc");
    ctx.barrier_all().unwrap();
    ctx.quiet().unwrap();
    if me == 1 {
        // Both answers PE 1 may give without being asked again (when
        // it finds the failure itself, and to PE 0's first question).
        let v = ctx.verbs_mut();
        v.drop_applied = 2 * u32::from(v.drv.params().data_qps);
        step.store(1, Ordering::SeqCst);
        wait_for_step(step, 2);
    } else {
        wait_for_step(step, 1);
        fabric.lose_ack_after(0);
        ctx.put(&sym, 0, &[7], 1).unwrap();
        let v = ctx.verbs_mut();
        v.drv.progress(CoreInstant::default());
        assert_eq!(v.drv.state(1), LinkState::Error);
        step.store(2, Ordering::SeqCst);
        let start = Instant::now();
        ctx.quiet().expect("quiet: the put is known landed");
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the receipts took {:?}",
            start.elapsed()
        );
        let d = ctx.verbs_mut().drv.stats();
        assert_eq!(d.receipts_settled, 1, "{d:?}");
    }
    ctx.barrier_all().unwrap();
    if me == 1 {
        let mut data = [0u64];
        ctx.read_local(&sym, 0, &mut data).unwrap();
        assert_eq!(data[0], 7);
    }
    ctx.barrier_all().unwrap();
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn a_lost_receipts_record_is_asked_for_again() {
    run_pair(
        0x7a,
        Opts::default(),
        VerbsConfig::default(),
        lost_receipt_script,
    );
}

/// PE 0's device dies with a put in doubt (posted unsignaled, landed
/// at PE 1, not known complete): `quiet` must not return while that
/// put waits for PE 1's receipts, even though verbs is never used
/// again. PE 1 stays outside the library until PE 0 is in its quiet,
/// and answers only some time later.
fn fatal_script(mut ctx: Context, fabric: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    let _ = fabric;
    let me = ctx.my_pe();
    let sym: Sym<u64> = ctx.alloc(16).expect("alloc");
    ctx.barrier_all().unwrap();
    ctx.quiet().unwrap();
    if me == 1 {
        step.store(1, Ordering::SeqCst);
        wait_for_step(step, 2);
        // PE 0 is in its quiet now: answer (in the barrier) later.
        std::thread::sleep(Duration::from_millis(300));
    } else {
        wait_for_step(step, 1);
        ctx.put(&sym, 0, &[5], 1).unwrap();
        ctx.verbs_mut().drv.fake_device_fatal();
        let start = Instant::now();
        while ctx.verbs_status().in_use {
            assert!(start.elapsed() < Duration::from_secs(20), "no fatal");
            ctx.poll_once();
        }
        assert!(ctx.verbs_holds(1), "the put is in doubt");
        step.store(2, Ordering::SeqCst);
        ctx.quiet().unwrap();
        let holds = ctx.verbs_holds(1);
        let v = ctx.verbs_mut();
        assert!(
            !v.drv.awaits_receipts(1) && !holds,
            "quiet returned with a put still waiting for its receipts"
        );
        assert_eq!(v.drv.stats().receipts_settled, 1, "{:?}", v.drv.stats());
    }
    ctx.barrier_all().unwrap();
    if me == 1 {
        let mut data = [0u64];
        ctx.read_local(&sym, 0, &mut data).unwrap();
        assert_eq!(data[0], 5);
    }
    ctx.barrier_all().unwrap();
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn quiet_waits_for_receipts_after_the_device_died() {
    run_pair(0x7b, Opts::default(), VerbsConfig::default(), fatal_script);
}

/// PE 0's link fails with a put in flight that the driver has no room
/// to keep for replay (its replay list shrunk to nothing): the put is
/// lost, and the next `quiet` must say so ([`Error::ReplayLost`]),
/// not take the driver's report for "replays pending" and succeed.
fn no_room_script(mut ctx: Context, fabric: &Fabric, done: &AtomicU32, _: &AtomicU32) -> Context {
    let me = ctx.my_pe();
    let sym: Sym<u64> = ctx.alloc(16).expect("alloc");
    ctx.barrier_all().unwrap();
    ctx.quiet().unwrap();
    ctx.barrier_all().unwrap();
    if me == 0 {
        ctx.verbs_mut().drv.fake_limit_replays(1, 0);
        fabric.break_links();
        ctx.put(&sym, 0, &[5], 1).unwrap();
        let r = ctx.quiet();
        fabric.heal();
        assert!(
            matches!(r, Err(super::super::Error::ReplayLost { pe: 1, ops }) if ops >= 1),
            "the lost put was not reported: {r:?}"
        );
        ctx.quiet().expect("reported once");
    }
    ctx.barrier_all().unwrap();
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn a_put_with_no_room_to_replay_fails_the_next_quiet() {
    run_pair(
        0x71,
        Opts::default(),
        VerbsConfig::default(),
        no_room_script,
    );
}

/// PE 1 computes outside the library (no calls at all) while PE 0
/// puts far more than PE 1's shared receive queue holds (16): PE 1's
/// progress thread re-posts the receives, so PE 0's puts complete (no
/// failover) instead of waiting on RNR until PE 1 calls in. Between two
/// of its ticks the receives run dry and PE 0's verbs backlog can pass the
/// load watermark: the puts meanwhile take TCP as load yields, and verbs
/// again once it drained. Each put has a slot of its own: with no fence
/// between them, two puts to one word over two transports may land in
/// either order.
fn idle_target_script(mut ctx: Context, _: &Fabric, done: &AtomicU32, step: &AtomicU32) -> Context {
    const PUTS: u64 = 300;
    let me = ctx.my_pe();
    // As init starts it for `progress = adaptive`.
    let clock = ctx.clock;
    ctx.tcp
        .as_mut()
        .expect("tcp")
        .start(
            progress::ThreadMode::Adaptive {
                tick: Duration::from_millis(1),
            },
            clock,
            None,
            me,
        )
        .expect("progress thread");
    // A slot per put, and one for how many went over verbs.
    let sym: Sym<u64> = ctx.alloc(PUTS as usize + 1).expect("alloc");
    ctx.barrier_all().unwrap();
    ctx.quiet().unwrap(); // the barrier's last put is out
    let start = Instant::now();
    if me == 1 {
        step.store(1, Ordering::SeqCst);
        while step.load(Ordering::SeqCst) < 2 {
            assert!(start.elapsed() < Duration::from_secs(20), "PE 0's puts");
            std::thread::sleep(Duration::from_millis(1));
        }
    } else {
        while step.load(Ordering::SeqCst) < 1 {
            assert!(start.elapsed() < Duration::from_secs(20), "PE 1");
            std::thread::sleep(Duration::from_micros(50));
        }
        let s0 = ctx.stats();
        for i in 0..PUTS {
            ctx.put(&sym, i as usize, &[i + 1], 1).unwrap();
        }
        ctx.quiet().unwrap();
        let s = ctx.stats();
        let (dv, dt) = (
            s.ops[VERBS.index()] - s0.ops[VERBS.index()],
            s.ops[TCP.index()] - s0.ops[TCP.index()],
        );
        assert_eq!(dv + dt, PUTS, "{s:?}");
        assert!(dv > 16, "more than PE 1's receives over verbs: {s:?}");
        assert_eq!(
            dt,
            s.load_yields - s0.load_yields,
            "TCP for load only: {s:?}"
        );
        assert_eq!(s.verbs_failovers, 0, "{s:?}");
        ctx.put(&sym, PUTS as usize, &[dv], 1).unwrap();
        step.store(2, Ordering::SeqCst);
    }
    ctx.barrier_all().unwrap();
    if me == 1 {
        let mut v = [0u64; PUTS as usize + 1];
        ctx.read_local(&sym, 0, &mut v).unwrap();
        for (i, x) in v[..PUTS as usize].iter().enumerate() {
            assert_eq!(*x, i as u64 + 1, "slot {i}");
        }
        // Every put over verbs left its receipt (the last ones may still
        // be in the receive CQ: progress polls them).
        let start = Instant::now();
        let over_verbs = v[PUTS as usize];
        while ctx.verbs_mut().drv.stats().receipts < over_verbs {
            assert!(start.elapsed() < Duration::from_secs(10), "receipts");
            ctx.poll_once();
        }
    }
    ctx.barrier_all().unwrap();
    close_together(&mut ctx, done);
    ctx
}

#[test]
fn the_progress_thread_reposts_receives_while_the_target_computes() {
    let cfg = VerbsConfig {
        srq_depth: Some(16),
        ..VerbsConfig::default()
    };
    let fabric = run_pair(0x7c, Opts::default(), cfg, idle_target_script);
    assert!(fabric.rnr_naks() > 0, "PE 1's SRQ ran dry at times");
}

/// A bad verbs card from the bootstrap is a typed error in the
/// warnings, never a panic: that peer stays on TCP (counted as a NEAR
/// downgrade) and the status says no verbs link is up.
#[test]
fn a_bad_verbs_card_leaves_the_peer_on_tcp() {
    let job = 0x7f_0000_0000 ^ u64::from(std::process::id()) << 8;
    let fabric = Fabric::new();
    let (tx0, rx1) = channel();
    let (tx1, rx0) = channel();
    let f1 = fabric.clone();
    let done = Arc::new(AtomicU32::new(0));
    let done1 = Arc::clone(&done);
    let run = move |mut ctx: Context, done: &AtomicU32| {
        let me = ctx.my_pe();
        let w = ctx.warnings().join("\n");
        assert!(
            w.contains("verbs card is refused") && w.contains("link layer"),
            "{w}"
        );
        let st = ctx.verbs_status();
        assert!(!st.in_use && st.peers_up == 0, "{st:?}");
        let sym: Sym<u64> = ctx.alloc(4).expect("alloc");
        ctx.put(&sym, 0, &[u64::from(me) + 1], 1 - me).unwrap();
        ctx.barrier_all().unwrap();
        let mut v = [0u64];
        ctx.read_local(&sym, 0, &mut v).unwrap();
        assert_eq!(v[0], u64::from(1 - me) + 1);
        let s = ctx.stats();
        assert_eq!(s.ops[VERBS.index()], 0, "{s:?}");
        assert!(s.downgrades[PathClass::Near.index()] >= 1, "{s:?}");
        close_together(&mut ctx, done);
    };
    let o = Opts {
        corrupt: true,
        ..Opts::default()
    };
    run_pes(vec![
        Box::new(move || run(context(job, 0, &fabric, (&tx0, &rx0), o), &done)),
        Box::new(move || run(context(job, 1, &f1, (&tx1, &rx1), o), &done1)),
    ]);
}

/// Eager cards: PE 1 refuses PE 0's card, PE 0 does not know (it takes
/// PE 1's). PE 1 answers PE 0's QPNs with [`Record::Refused`]: PE 0's init
/// stops waiting for the link (no "did not come up"), and PE 1 stays on
/// TCP with the reason.
#[test]
fn an_eager_peer_that_refused_our_card_says_so() {
    let o = Opts {
        corrupt_at: Some(1),
        ..Opts::default()
    };
    run_pair(0x5e, o, VerbsConfig::default(), |mut ctx, _, done, _| {
        let me = ctx.my_pe();
        let w = ctx.warnings().join("\n");
        assert!(!w.contains("did not come up"), "PE {me}: {w}");
        if me == 0 {
            assert_eq!(ctx.verbs_refusal(1), Some(Refusal::NotWanted));
            let st = ctx.verbs_status();
            assert_eq!((st.peers_up, st.refused_by_peers), (0, 1), "{st:?}");
            assert!(
                st.why_not
                    .as_deref()
                    .is_some_and(|w| w.contains("PE 1 refused to pair over verbs")),
                "{st:?}"
            );
            assert!(w.contains("verbs to PE 1 refused by that PE"), "{w}");
        } else {
            assert!(w.contains("verbs card is refused"), "{w}");
            assert_eq!(ctx.verbs_refusal(0), None);
        }
        let sym: Sym<u64> = ctx.alloc(4).expect("alloc");
        ctx.put(&sym, 0, &[u64::from(me) + 1], 1 - me).unwrap();
        ctx.barrier_all().unwrap();
        let mut v = [0u64];
        ctx.read_local(&sym, 0, &mut v).unwrap();
        assert_eq!(v[0], u64::from(1 - me) + 1);
        assert_eq!(ctx.stats().ops[VERBS.index()], 0);
        close_together(&mut ctx, done);
        ctx
    });
}
