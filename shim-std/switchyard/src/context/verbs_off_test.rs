//! A build without the `verbs` feature: two contexts in two threads, NEAR
//! (one switch) or ROUTED to each other, with TCP over loopback. Each says
//! why verbs is not used, and every operation goes over TCP, NEAR ones
//! counted as downgrades, as on a machine without RDMA.

use std::{
    net::SocketAddr,
    sync::mpsc::{Receiver, Sender, channel},
    time::Duration,
};

use switchyard_core::{
    class::{NO_SWITCH, PathClass},
    route::{Downgrade, Op, PolicyConfig},
};
use switchyard_shm::HugePages;
use switchyard_socket::{SocketDriver, TcpConfig};

use super::*;
use crate::context::{PeerInfo, Progress, Setup, Sym, TCP, TRACE_RECORDS, VERBS};

type Chans<'a> = (&'a Sender<Vec<SocketAddr>>, &'a Receiver<Vec<SocketAddr>>);

/// PE `me` of the pair: each on a node of its own, on one switch (NEAR) or
/// on two (ROUTED), TCP their only link.
fn context(job: u64, me: u32, routed: bool, (tx, rx): Chans<'_>) -> Context {
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
        verbs_atomics: crate::config::VerbsAtomics::Auto,
        verbs_routed: true,
        trace_records: TRACE_RECORDS,
    };
    let seg = Context::create_segment(&setup).expect("segment");
    let (heap, len) = (seg.mapped().heap_ptr(), seg.mapped().heap_len());
    let tcfg = TcpConfig {
        job_id: job,
        cookie: *b"verbs-off-pair!!",
        me,
        n_pes: 2,
        listen: vec!["127.0.0.1".parse().expect("ip")],
        ..TcpConfig::default()
    };
    #[allow(unsafe_code)]
    // SAFETY: the segment's heap mapping, valid for `len` bytes; the
    // segment moves into the context with the driver and outlives it.
    let tcp = unsafe { SocketDriver::new(tcfg, heap, len) }.expect("tcp driver");
    tx.send(tcp.local_addrs().to_vec()).unwrap();
    let other = rx.recv_timeout(wait).expect("the other PE's addresses");
    let info = |pe: u32, tcp: Vec<SocketAddr>| PeerInfo {
        node: 1000 + u64::from(pe),
        switch: if routed { 5 + pe } else { 5 },
        tree: NO_SWITCH,
        shm: None,
        tcp,
    };
    let mine = tcp.local_addrs().to_vec();
    let peers = if me == 0 {
        [info(0, mine), info(1, other)]
    } else {
        [info(0, other), info(1, mine)]
    };
    Context::from_parts(setup, seg, &peers, Some(tcp)).expect("context")
}

fn script(mut ctx: Context, routed: bool) {
    let (me, other) = (ctx.my_pe(), 1 - ctx.my_pe());
    let class = if routed {
        PathClass::Routed
    } else {
        PathClass::Near
    };
    assert_eq!(ctx.class(other), Some(class));
    assert_eq!(
        ctx.verbs_status(),
        VerbsStatus {
            device_usable: false,
            in_use: false,
            peers_up: 0,
            why_not: Some(NO_VERBS.into()),
            nic_atomics: false,
        }
    );
    assert_eq!(ctx.verbs_atomics_reason(), "");
    // Short and long messages (rule 3 would take verbs for long ones to a
    // ROUTED peer), gets and atomics: TCP.
    for (len, op) in [
        (8, Op::Put),
        (1 << 20, Op::Put),
        (8, Op::Get),
        (8, Op::Atomic),
    ] {
        let r = ctx.route(other, len, op).unwrap();
        assert_eq!(r.transport, TCP, "{class:?} {len} {op:?}");
    }
    let sym: Sym<u64> = ctx.alloc(64).expect("alloc");
    if me == 0 {
        ctx.put(&sym, 0, &[11, 12, 13], 1).unwrap();
        let mut g = [0u64; 3];
        ctx.get(&sym, 0, &mut g, 1).unwrap();
        assert_eq!(g, [11, 12, 13]);
        assert_eq!(ctx.fetch_add(&sym, 10, 5, 1).unwrap(), 0);
        ctx.quiet().unwrap();
        let s = ctx.stats();
        assert_eq!(s.ops[VERBS.index()], 0, "{s:?}");
        assert!(s.ops[TCP.index()] >= 3, "{s:?}");
        let near = s.downgrades[PathClass::Near.index()];
        assert_eq!(
            near > 0,
            !routed,
            "NEAR operations count as downgrades: {s:?}"
        );
        assert_eq!((s.verbs_failovers, s.verbs_replays), (0, 0));
    }
    ctx.barrier_all().unwrap();
    if me == 1 {
        let mut v = [0u64; 11];
        ctx.read_local(&sym, 0, &mut v).unwrap();
        assert_eq!((v[0], v[1], v[2], v[10]), (11, 12, 13, 5));
    }
    ctx.barrier_all().unwrap();
    ctx.finalize().unwrap();
}

#[test]
fn near_and_routed_peers_use_tcp_and_the_status_says_why() {
    for (tag, routed) in [(1u64, false), (2, true)] {
        let job = tag << 32 ^ u64::from(std::process::id()) << 8;
        let (tx0, rx1) = channel();
        let (tx1, rx0) = channel();
        let pe1 = std::thread::spawn(move || script(context(job, 1, routed, (&tx1, &rx1)), routed));
        script(context(job, 0, routed, (&tx0, &rx0)), routed);
        pe1.join().expect("PE 1");
    }
}

/// A context from the environment (a job of one PE) gives the same reason.
#[test]
fn from_env_says_this_build_has_no_verbs() {
    let ctx = Context::with_config(&crate::config::Config::default()).expect("context");
    assert_eq!(ctx.verbs_status().why_not.as_deref(), Some(NO_VERBS));
    assert!(!Record::is_verbs(&[0; 32]));
    let mut rec = [0; 32];
    rec[..3].copy_from_slice(b"SYV");
    assert!(Record::is_verbs(&rec));
}
