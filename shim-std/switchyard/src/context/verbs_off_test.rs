//! A build without the `verbs` feature: two contexts in two threads, NEAR
//! (one switch) or ROUTED to each other, with TCP over loopback. Each says
//! why verbs is not used, and every operation goes over TCP, NEAR ones
//! counted as downgrades, as on a machine without RDMA.

use switchyard_core::{
    class::PathClass,
    route::{Downgrade, Op, PolicyConfig},
};
use switchyard_socket::TcpConfig;

use super::*;
use crate::context::{
    Sym, TCP, VERBS,
    tcp_pair_test::{Pair, job},
};

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
            refused_here: 0,
            refused_by_peers: 0,
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
        let pair = Pair {
            job: job(tag),
            routed,
            policy: PolicyConfig {
                downgrade: [Downgrade::AllowAndCount; 5],
                ..PolicyConfig::default()
            },
            tcp: TcpConfig::default(),
        };
        pair.run(move |ctx| script(ctx, routed));
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
