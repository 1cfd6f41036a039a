//! Two contexts in two threads of one process, NEAR to each other, with TCP
//! over loopback and the verbs driver on the fake HCA (one fabric shared by
//! both): the wiring end to end, without RDMA hardware.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
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
use switchyard_shm::HugePages;
use switchyard_socket::{SocketDriver, TcpConfig};
use switchyard_verbs::fake::Fabric;

use super::*;
use crate::context::{PeerInfo, Progress, Setup, Sym, TCP, TRACE_RECORDS, VERBS, progress};

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
    /// The two PEs are on different switches (ROUTED), not NEAR.
    routed: bool,
    /// `verbs_atomics`.
    atomics: VerbsAtomics,
    /// `verbs_routed = off`.
    no_routed: bool,
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
    let corrupt = opts.corrupt;
    let wait = Duration::from_secs(20);
    let setup = Setup {
        job_id: job,
        me,
        n_pes: 2,
        heap_size: 1 << 20,
        huge_pages: HugePages::Off,
        numa_node: None,
        op_timeout: wait,
        progress: Progress::Adaptive { spin: 64 },
        policy: PolicyConfig {
            downgrade: [Downgrade::AllowAndCount; 5],
            ..PolicyConfig::default()
        },
        connect_timeout: wait,
        shm_peers: true,
        symmetric_data: None,
        verbs_atomics: opts.atomics,
        verbs_routed: !opts.no_routed,
        trace_records: TRACE_RECORDS,
    };
    let seg = Context::create_segment(&setup).expect("segment");
    let (heap, len) = (seg.mapped().heap_ptr(), seg.mapped().heap_len());
    let tcfg = TcpConfig {
        job_id: job,
        cookie: *b"verbs-fake-pair!",
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
    let want = !(corrupt || (opts.routed && opts.no_routed));
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
    let (done1, step1, vcfg1) = (Arc::clone(&done), Arc::clone(&step), vcfg.clone());
    let pe1 = std::thread::spawn(move || {
        let ctx = context_with(job, 1, &f1, (&tx1, &rx1), opts, vcfg1);
        drop(script(ctx, &f1, &done1, &step1));
    });
    let ctx = context_with(job, 0, &fabric, (&tx0, &rx0), opts, vcfg);
    let ctx = script(ctx, &fabric, &done, &step);
    pe1.join().expect("PE 1");
    drop(ctx);
    fabric
}

fn verbs_ops(ctx: &Context) -> u64 {
    ctx.stats().ops[VERBS.index()]
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
        assert!(ctx.verbs.as_ref().unwrap().drv.stats().rebuilds >= 1);
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
        let v = ctx.verbs.as_mut().expect("verbs");
        v.drv.progress(CoreInstant::default());
        assert_eq!(v.drv.state(1), LinkState::Error);
        wait_for_step(step, 2);
        ctx.quiet().unwrap();
        let s = ctx.stats();
        assert_eq!(s.verbs_failovers, failovers + 1, "{s:?}");
        let d = ctx.verbs.as_ref().expect("verbs").drv.stats();
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
        let d = ctx.verbs.as_ref().expect("verbs").drv.stats();
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
        let v = ctx.verbs.as_mut().expect("verbs");
        v.drop_applied = 2 * u32::from(v.drv.params().data_qps);
        step.store(1, Ordering::SeqCst);
        wait_for_step(step, 2);
    } else {
        wait_for_step(step, 1);
        fabric.lose_ack_after(0);
        ctx.put(&sym, 0, &[7], 1).unwrap();
        let v = ctx.verbs.as_mut().expect("verbs");
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
        let d = ctx.verbs.as_ref().expect("verbs").drv.stats();
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
        ctx.verbs.as_ref().expect("verbs").drv.fake_device_fatal();
        let start = Instant::now();
        while ctx.verbs_status().in_use {
            assert!(start.elapsed() < Duration::from_secs(20), "no fatal");
            ctx.poll_once();
        }
        assert!(ctx.verbs_holds(1), "the put is in doubt");
        step.store(2, Ordering::SeqCst);
        ctx.quiet().unwrap();
        let v = ctx.verbs.as_ref().expect("verbs");
        assert!(
            !v.drv.awaits_receipts(1) && !ctx.verbs_holds(1),
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
        ctx.verbs
            .as_mut()
            .expect("verbs")
            .drv
            .fake_limit_replays(1, 0);
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
/// progress thread re-posts the receives, so PE 0's puts complete (over
/// verbs, no failover) instead of waiting on RNR until PE 1 calls in.
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
    let sym: Sym<u64> = ctx.alloc(64).expect("alloc");
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
        let (v0, t0) = (verbs_ops(&ctx), ctx.stats().ops[TCP.index()]);
        for i in 0..PUTS {
            ctx.put(&sym, (i % 64) as usize, &[i + 1], 1).unwrap();
        }
        ctx.quiet().unwrap();
        let s = ctx.stats();
        assert!(verbs_ops(&ctx) - v0 >= PUTS, "over verbs: {s:?}");
        assert_eq!(s.ops[TCP.index()], t0, "nothing over TCP: {s:?}");
        assert_eq!(s.verbs_failovers, 0, "{s:?}");
        step.store(2, Ordering::SeqCst);
    }
    ctx.barrier_all().unwrap();
    if me == 1 {
        let mut v = [0u64; 64];
        ctx.read_local(&sym, 0, &mut v).unwrap();
        for (i, x) in v.iter().enumerate() {
            let i = i as u64;
            let last = i + 64 * ((PUTS - 1 - i) / 64); // the last put there
            assert_eq!(*x, last + 1, "slot {i}");
        }
        // Every put left its receipt (the last ones may still be in
        // the receive CQ: progress polls them).
        let start = Instant::now();
        while ctx.verbs.as_ref().expect("verbs").drv.stats().receipts < PUTS {
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
    let pe1 = std::thread::spawn(move || {
        let o = Opts {
            corrupt: true,
            ..Opts::default()
        };
        run(context(job, 1, &f1, (&tx1, &rx1), o), &done1);
    });
    let o = Opts {
        corrupt: true,
        ..Opts::default()
    };
    run(context(job, 0, &fabric, (&tx0, &rx0), o), &done);
    pe1.join().expect("PE 1");
}

/// Runs `script` on both PEs of a pair set up as `opts` on a fake HCA
/// reporting `cap`, then closes them together.
fn pair<F>(opts: Opts, cap: AtomicCap, script: F)
where
    F: Fn(&mut Context) + Send + Clone + 'static,
{
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = u64::from(NEXT.fetch_add(1, Ordering::Relaxed));
    let job = (0x90_0000_0000 + (n << 32)) ^ u64::from(std::process::id()) << 8;
    let fabric = Fabric::new();
    fabric.set_atomic_cap(cap);
    let (tx0, rx1) = channel();
    let (tx1, rx0) = channel();
    let f1 = fabric.clone();
    let done = Arc::new(AtomicU32::new(0));
    let done1 = Arc::clone(&done);
    let script1 = script.clone();
    let pe1 = std::thread::spawn(move || {
        let mut ctx = context(job, 1, &f1, (&tx1, &rx1), opts);
        script1(&mut ctx);
        close_together(&mut ctx, &done1);
    });
    let mut ctx = context(job, 0, &fabric, (&tx0, &rx0), opts);
    script(&mut ctx);
    close_together(&mut ctx, &done);
    pe1.join().expect("PE 1");
}

fn tcp_ops(ctx: &Context) -> u64 {
    ctx.stats().ops[TCP.index()]
}

fn last_trace(ctx: &Context) -> TraceRecord {
    let mut recs = [TraceRecord::default(); TRACE_RECORDS];
    let n = ctx.trace().snapshot(&mut recs);
    recs[n - 1]
}

/// Both PEs add to a word of PE 1: PE 1's adds are its own (CPU
/// atomics), PE 0's remote. With NIC atomics allowed they go over
/// verbs, else over TCP (counted as `cpu_atomics`, traced with
/// `CPU_ATOMIC`, not downgrades); puts stay on verbs either way, and
/// no update is lost.
fn atomics_script(expect_nic: bool) -> impl Fn(&mut Context) + Send + Clone + 'static {
    move |ctx: &mut Context| {
        const ADDS: u64 = 100;
        let me = ctx.my_pe();
        let sym: Sym<u64> = ctx.alloc(4).expect("alloc");
        let st = ctx.verbs_status();
        assert_eq!((st.peers_up, st.nic_atomics), (1, expect_nic), "{st:?}");
        assert!(!ctx.verbs_atomics_reason().is_empty());
        let (v0, t0, s0) = (verbs_ops(ctx), tcp_ops(ctx), ctx.stats());
        let mut olds = Vec::new();
        for _ in 0..ADDS {
            olds.push(ctx.fetch_add(&sym, 0, 1, 1).unwrap());
        }
        ctx.add(&sym, 1, 2, 1).unwrap();
        if me == 0 {
            let (dv, dt) = (verbs_ops(ctx) - v0, tcp_ops(ctx) - t0);
            let s = ctx.stats();
            let last = last_trace(ctx);
            if expect_nic {
                assert_eq!((dv, dt), (ADDS + 1, 0), "{s:?}");
                assert_eq!(s.cpu_atomics, 0, "{s:?}");
                assert_eq!(last.transport, VERBS.index() as u8);
            } else {
                assert_eq!((dv, dt), (0, ADDS + 1), "{s:?}");
                assert_eq!(s.cpu_atomics - s0.cpu_atomics, ADDS + 1, "{s:?}");
                assert_eq!(last.transport, TCP.index() as u8);
                assert_ne!(last.flags & TraceRecord::CPU_ATOMIC, 0, "{last:?}");
            }
            assert_eq!(last.flags & TraceRecord::DOWNGRADED, 0, "{last:?}");
            assert_eq!(s.downgrades, s0.downgrades, "not downgrades");
            // A put still goes over verbs.
            let v1 = verbs_ops(ctx);
            ctx.put(&sym, 3, &[7], 1).unwrap();
            assert_eq!(verbs_ops(ctx) - v1, 1);
        } else {
            assert_eq!(ctx.stats().cpu_atomics, 0, "its own atomics are local");
        }
        // Old values are increasing and distinct on each PE.
        assert!(olds.windows(2).all(|w| w[0] < w[1]), "{olds:?}");
        ctx.barrier_all().unwrap();
        if me == 1 {
            let mut v = [0u64; 4];
            ctx.read_local(&sym, 0, &mut v).unwrap();
            assert_eq!((v[0], v[1], v[3]), (2 * ADDS, 4, 7), "an update was lost");
        }
        ctx.barrier_all().unwrap();
    }
}

/// An HCA-only device with `verbs_atomics = auto`: atomics to the NEAR
/// peer go over TCP (the target's CPU), coherent with its own.
#[test]
fn hca_only_atomics_go_over_tcp_with_auto() {
    pair(Opts::default(), AtomicCap::Hca, atomics_script(false));
}

/// `verbs_atomics = nic` forces NIC atomics on an HCA-only device.
#[test]
fn nic_forces_atomics_over_verbs() {
    let o = Opts {
        atomics: VerbsAtomics::Nic,
        ..Opts::default()
    };
    pair(o, AtomicCap::Hca, atomics_script(true));
}

/// A peer whose device does no RDMA atomics: even `nic` sends atomics
/// over TCP (the driver would refuse them).
#[test]
fn a_peer_without_rdma_atomics_gets_them_over_tcp() {
    let o = Opts {
        atomics: VerbsAtomics::Nic,
        peer_without_atomics: true,
        ..Opts::default()
    };
    pair(o, AtomicCap::Global, atomics_script(false));
}

/// A device with global atomics uses them with `auto`; `cpu` never.
#[test]
fn global_atomics_with_auto_and_cpu_forced() {
    pair(Opts::default(), AtomicCap::Global, atomics_script(true));
    let o = Opts {
        atomics: VerbsAtomics::Cpu,
        ..Opts::default()
    };
    pair(o, AtomicCap::Global, atomics_script(false));
}

/// The decision table of [`nic_atomics`].
#[test]
fn nic_atomics_rule() {
    use VerbsAtomics::{Auto, Cpu, Nic};
    for (set, cap, want) in [
        (Auto, AtomicCap::Global, true),
        (Auto, AtomicCap::Hca, false),
        (Auto, AtomicCap::None, false),
        (Nic, AtomicCap::Global, true),
        (Nic, AtomicCap::Hca, true),
        (Nic, AtomicCap::None, false),
        (Cpu, AtomicCap::Global, false),
        (Cpu, AtomicCap::Hca, false),
    ] {
        let (nic, why) = nic_atomics(set, cap);
        assert_eq!(nic, want, "{set:?} {cap:?}");
        assert!(!why.is_empty());
    }
}

const LONG: usize = 16 << 10;

/// ROUTED peers over verbs: long messages take verbs, short ones TCP,
/// and the ordering rules hold across the two.
fn routed_script(ctx: &mut Context) {
    let me = ctx.my_pe();
    let data: Sym<u8> = ctx.alloc(LONG).expect("alloc");
    let flag: Sym<u64> = ctx.alloc(1).expect("alloc");
    let st = ctx.verbs_status();
    assert_eq!(st.peers_up, 1, "a verbs link to the ROUTED peer: {st:?}");
    // 1. Split by size: short over TCP, long over verbs.
    if me == 0 {
        let (v0, t0) = (verbs_ops(ctx), tcp_ops(ctx));
        ctx.put(&data, 0, &[1u8; 64], 1).unwrap();
        assert_eq!((verbs_ops(ctx) - v0, tcp_ops(ctx) - t0), (0, 1));
        assert_eq!(last_trace(ctx).class, PathClass::Routed.to_wire());
        ctx.put(&data, 0, &[2u8; LONG], 1).unwrap();
        assert_eq!((verbs_ops(ctx) - v0, tcp_ops(ctx) - t0), (1, 1));
        let last = last_trace(ctx);
        assert_eq!(last.transport, VERBS.index() as u8);
        assert_eq!(last.flags & TraceRecord::DOWNGRADED, 0, "{last:?}");
        ctx.quiet().unwrap();
    }
    ctx.barrier_all().unwrap();
    // 2. put long (verbs) + fence + flag (TCP): the target sees the
    //    flag only after the data. PE 0 then sleeps without progress:
    //    whatever it left unposted stays so.
    //    Odd rounds start clean: the fence is the verbs driver's own and
    //    the flag put waits for the data (traced ORDERED). Even rounds
    //    start with the barrier's flag put (TCP) pending: the data makes
    //    the peer's writes mixed and the fence is a quiet.
    for round in 1..=4u8 {
        if me == 0 {
            if round % 2 == 1 {
                ctx.quiet().unwrap();
            }
            let w0 = ctx.stats().ordering_waits;
            ctx.put(&data, 0, &[round; LONG], 1).unwrap();
            ctx.fence().unwrap();
            ctx.put(&flag, 0, &[u64::from(round)], 1).unwrap();
            assert!(ctx.stats().ordering_waits > w0, "{:?}", ctx.stats());
            let ordered = last_trace(ctx).flags & TraceRecord::ORDERED != 0;
            assert_eq!(ordered, round % 2 == 1, "round {round}");
            std::thread::sleep(Duration::from_millis(30));
            ctx.quiet().unwrap();
        } else {
            ctx.wait_until(&flag, 0, crate::context::Cmp::Eq, u64::from(round))
                .unwrap();
            let mut v = vec![0u8; LONG];
            ctx.read_local(&data, 0, &mut v).unwrap();
            let stale = v.iter().filter(|&&b| b != round).count();
            assert_eq!(stale, 0, "round {round}: the flag overtook the data");
        }
        ctx.barrier_all().unwrap();
    }
    // 3. A get after a long put returns the new bytes, over TCP (short)
    //    and over verbs (long).
    if me == 0 {
        ctx.put(&data, 0, &[7u8; LONG], 1).unwrap();
        let mut g = [0u8; 64];
        ctx.get(&data, 100, &mut g, 1).unwrap();
        assert_eq!(g, [7u8; 64], "a short get (TCP) missed the long put");
    }
    ctx.barrier_all().unwrap();
    // 4. A long get (verbs) after a short put (TCP) while the target
    //    does not progress: it must wait for the put's ack.
    if me == 1 {
        std::thread::sleep(Duration::from_millis(100));
    } else {
        let w0 = ctx.stats().ordering_waits;
        ctx.put(&data, 200, &[9u8; 64], 1).unwrap();
        let mut g = vec![0u8; LONG];
        ctx.get(&data, 0, &mut g, 1).unwrap();
        assert_eq!(
            &g[200..264],
            &[9u8; 64],
            "a long get (verbs) missed the short put"
        );
        assert_eq!(g[0], 7);
        assert!(ctx.stats().ordering_waits > w0);
    }
    ctx.barrier_all().unwrap();
    // 5. A fetching atomic (over TCP: the fake is HCA-only) observes a
    //    long put (verbs) of the word.
    if me == 0 {
        let mut bytes = [0u8; LONG];
        bytes[..8].copy_from_slice(&1000u64.to_le_bytes());
        ctx.put(&data, 0, &bytes, 1).unwrap();
        // The first 8 bytes of `data`, as a word: a Sym<u64> over them.
        let word = Sym::<u64>::new(data.offset, 1, data.owner);
        assert_eq!(ctx.fetch_add(&word, 0, 1, 1).unwrap(), 1000);
    }
    ctx.barrier_all().unwrap();
}

/// A ROUTED pair: verbs QPs are connected to it too, long puts go over
/// verbs and short ones over TCP, a fence between them orders them,
/// reads see earlier writes over the other transport.
#[test]
fn routed_peers_split_by_size_and_stay_ordered() {
    let o = Opts {
        routed: true,
        ..Opts::default()
    };
    pair(o, AtomicCap::Hca, routed_script);
}

/// A put's work request is posted before the call returns, not left in
/// a doorbell batch for the application's next call: PE 1 sees the
/// bytes while PE 0 makes no further call (it waits on a plain atomic,
/// as an application computing between calls would). Before the fix,
/// the put waited in PE 0's batch until PE 0 called in again.
#[test]
fn a_put_is_posted_before_the_call_returns() {
    let step = Arc::new(AtomicU32::new(0));
    pair(Opts::default(), AtomicCap::Hca, move |ctx: &mut Context| {
        let a: Sym<u64> = ctx.alloc(8).expect("alloc");
        ctx.barrier_all().unwrap();
        let wait_for = |v: u32| {
            let start = Instant::now();
            while step.load(Ordering::Acquire) < v {
                assert!(start.elapsed() < Duration::from_secs(10), "step {v}");
                std::thread::sleep(Duration::from_micros(100));
            }
        };
        if ctx.my_pe() == 0 {
            let v0 = verbs_ops(ctx);
            ctx.put(&a, 0, &[42u64], 1).unwrap();
            assert_eq!(verbs_ops(ctx) - v0, 1, "the put went over verbs");
            step.store(1, Ordering::Release);
            wait_for(2);
        } else {
            wait_for(1);
            let mut w = [0u64];
            ctx.read_local(&a, 0, &mut w).unwrap();
            step.store(2, Ordering::Release);
            assert_eq!(w[0], 42, "the put is still batched at PE 0");
        }
        ctx.barrier_all().unwrap();
    });
}

/// `verbs_routed = off`: a ROUTED peer gets no verbs link; its long
/// messages go over TCP (its first choice then: not a downgrade).
#[test]
fn verbs_routed_off_keeps_routed_peers_on_tcp() {
    let o = Opts {
        routed: true,
        no_routed: true,
        ..Opts::default()
    };
    pair(o, AtomicCap::Hca, |ctx: &mut Context| {
        let data: Sym<u8> = ctx.alloc(LONG).expect("alloc");
        let st = ctx.verbs_status();
        assert_eq!(st.peers_up, 0, "{st:?}");
        assert!(st.why_not.is_some_and(|w| w.contains("verbs_routed = off")));
        if ctx.my_pe() == 0 {
            let (v0, t0) = (verbs_ops(ctx), tcp_ops(ctx));
            ctx.put(&data, 0, &[3u8; LONG], 1).unwrap();
            assert_eq!((verbs_ops(ctx) - v0, tcp_ops(ctx) - t0), (0, 1));
        }
        ctx.barrier_all().unwrap();
    });
}

/// After init, puts, gets and atomics over the fake verbs fabric (and
/// the TCP half of a split peer, the ordering waits, fence, quiet and
/// barriers) allocate nothing on either PE thread. Each pass is run
/// once to warm up (first-use paths, the fake's queues), then counted.
fn no_alloc_script(ctx: &mut Context) {
    use crate::test_alloc::{allocations, count_here};
    const ROUNDS: u64 = 200;
    let me = ctx.my_pe();
    let a: Sym<u64> = ctx.alloc(64).expect("alloc");
    let b: Sym<u8> = ctx.alloc(2 * LONG).expect("alloc");
    let src = vec![5u8; LONG];
    let mut dst = vec![0u8; LONG];
    let mut words = [0u64; 8];
    for pass in 0..2 {
        ctx.barrier_all().unwrap();
        let s0 = ctx.stats();
        let before = allocations();
        if pass == 1 {
            count_here(true);
        }
        if me == 0 {
            for i in 0..ROUNDS {
                ctx.put(&a, 0, &[i], 1).unwrap();
                ctx.put(&b, 0, &src, 1).unwrap();
                ctx.get(&a, 0, &mut words, 1).unwrap();
                ctx.get(&b, 0, &mut dst, 1).unwrap();
                ctx.fetch_add(&a, 1, 1, 1).unwrap();
                ctx.compare_swap(&a, 2, i, i + 1, 1).unwrap();
                ctx.swap(&a, 3, i, 1).unwrap();
                ctx.add(&a, 4, 1, 1).unwrap();
                ctx.put_nbi(&b, LONG, &b, 0, LONG, 1).unwrap();
                ctx.get_nbi(&b, 0, &b, LONG, 64, 1).unwrap();
                ctx.fence().unwrap();
                ctx.put(&a, 5, &[i], 1).unwrap();
                ctx.quiet().unwrap();
            }
        }
        ctx.barrier_all().unwrap();
        if pass == 1 {
            count_here(false);
            let n = allocations() - before;
            assert_eq!(n, 0, "PE {me}: {n} allocations on the data path");
            let s = ctx.stats();
            if me == 0 {
                // The long puts, long gets and put_nbi went over verbs.
                let dv = s.ops[VERBS.index()] - s0.ops[VERBS.index()];
                assert!(dv >= 3 * ROUNDS, "{s:?}");
            }
        }
    }
    if me == 1 {
        // fetch_add and add ran twice per round; the compare-swaps
        // matched in the first pass only.
        let mut v = [0u64; 4];
        ctx.read_local(&a, 1, &mut v).unwrap();
        assert_eq!((v[0], v[1], v[3]), (2 * ROUNDS, ROUNDS, 2 * ROUNDS));
    }
    ctx.barrier_all().unwrap();
}

/// NEAR with NIC atomics: everything over verbs.
#[test]
fn verbs_data_path_does_not_allocate() {
    let o = Opts {
        atomics: VerbsAtomics::Nic,
        ..Opts::default()
    };
    pair(o, AtomicCap::Hca, no_alloc_script);
}

/// ROUTED with atomics to the CPU: split over verbs and TCP, with the
/// ordering waits.
#[test]
fn split_data_path_does_not_allocate() {
    let o = Opts {
        routed: true,
        ..Opts::default()
    };
    pair(o, AtomicCap::Hca, no_alloc_script);
}
