//! Route policy: exhaustive checks over every class × health × load × length band
//! × downgrade policy, exact decisions from docs/ARCHITECTURE.md, and a property test over
//! random role layouts (missing transports, several rails).
#![cfg(all(feature = "alloc", not(loom)))]

use proptest::prelude::*;
use switchyard_core::{
    class::{PathClass, TransportId},
    route::{
        Downgrade, Op, Policy, PolicyConfig, Route, SelectError, Selector, SelectorError,
        TransportRoles, UnreachableReason,
    },
    topology::{Shape, Topology, TopologyBox},
};

const SHM: u8 = 0;
const RDMA: u8 = 1;
const TCP: u8 = 2;
const THRESHOLD: u32 = 8192;

fn t(i: u8) -> TransportId {
    TransportId::new(i).unwrap()
}

/// Peer p of PE 0 has class `CLASSES[p]`.
const CLASSES: [PathClass; 5] = [
    PathClass::Local,
    PathClass::Shm,
    PathClass::Near,
    PathClass::Routed,
    PathClass::Unreachable,
];

fn default_roles() -> TransportRoles {
    TransportRoles {
        shm: Some(t(SHM)),
        rdma: Some(t(RDMA)),
        stream: [Some(t(TCP)), None, None, None],
    }
}

fn default_policy() -> Policy {
    Policy::new(PolicyConfig {
        roles: default_roles(),
        ..PolicyConfig::default()
    })
}

struct Fixture {
    store: TopologyBox,
    shape: Shape,
}

impl Fixture {
    fn new(n_transports: u8) -> Self {
        let shape = Shape {
            me: 0,
            n_pes: 5,
            n_transports,
            load_hints: true,
        };
        Fixture {
            store: TopologyBox::new(shape, 2),
            shape,
        }
    }
    fn topo(&self) -> Topology<'_> {
        Topology::new(self.store.mem(), self.shape, |p| CLASSES[p as usize]).unwrap()
    }
}

fn set_bits(topo: &Topology<'_>, peer: u32, health: u8, load: u8) {
    for tr in 0..topo.shape().n_transports {
        topo.set_health(t(tr), peer, health & (1 << tr) != 0);
        topo.set_overloaded(t(tr), peer, load & (1 << tr) != 0);
    }
}

fn check_invariants(
    policy: &Policy,
    class: PathClass,
    len: u32,
    health: u8,
    load: u8,
    got: Result<Route, SelectError>,
) {
    let healthy = |x: TransportId| health & (1 << x.index()) != 0;
    let over = |x: TransportId| load & (1 << x.index()) != 0;
    let cands: Vec<TransportId> = policy.candidates(class, len).collect();
    let forbid = policy.config().downgrade[class.index()] == Downgrade::Forbid;
    let allowed: Vec<TransportId> = if forbid {
        cands.iter().copied().take(1).collect()
    } else {
        cands.clone()
    };
    let ctx =
        format!("class {class} len {len} health {health:03b} load {load:03b} forbid {forbid}");
    match got {
        Ok(r) => {
            assert!(healthy(r.transport), "unhealthy transport chosen: {ctx}");
            assert_eq!(r.class, class, "{ctx}");
            assert!(
                allowed.contains(&r.transport),
                "not an allowed candidate: {ctx}"
            );
            assert_eq!(r.downgraded, r.transport != cands[0], "{ctx}");
            let rdma = policy.config().roles.rdma;
            if class == PathClass::Near
                && let Some(rdma) = rdma
                && healthy(rdma)
                && !over(rdma)
            {
                assert_eq!(
                    r.transport, rdma,
                    "NEAR must use verbs while it is healthy: {ctx}"
                );
            }
            // The first healthy candidate that is not overloaded wins, if any.
            if let Some(best) = allowed.iter().copied().find(|&x| healthy(x) && !over(x)) {
                assert_eq!(r.transport, best, "{ctx}");
            } else {
                let first = allowed.iter().copied().find(|&x| healthy(x)).unwrap();
                assert_eq!(r.transport, first, "load never fails a message: {ctx}");
            }
        }
        Err(SelectError::Unreachable {
            reason, class: c, ..
        }) => {
            assert_eq!(c, class);
            assert!(
                !allowed.iter().any(|&x| healthy(x)),
                "Unreachable although an allowed candidate is healthy: {ctx}"
            );
            if class == PathClass::Unreachable {
                assert_eq!(reason, UnreachableReason::NoLink);
            }
        }
        Err(SelectError::DowngradeForbidden { preferred, .. }) => {
            assert!(forbid, "{ctx}");
            assert_eq!(preferred, cands[0]);
            assert!(!healthy(cands[0]), "{ctx}");
            assert!(
                cands.iter().any(|&x| healthy(x)),
                "should have been Unreachable: {ctx}"
            );
        }
        Err(e) => panic!("unexpected {e:?}: {ctx}"),
    }
}

#[test]
fn exhaustive_class_health_load_band_downgrade() {
    let fx = Fixture::new(3);
    let topo = fx.topo();
    let mut cases = 0;
    for dg in [
        Downgrade::Allow,
        Downgrade::AllowAndCount,
        Downgrade::Forbid,
    ] {
        let policy = Policy::new(PolicyConfig {
            roles: default_roles(),
            short_threshold: THRESHOLD,
            downgrade: [dg; 5],
            ..PolicyConfig::default()
        });
        let mut sel = Selector::new(&topo, policy).unwrap();
        // The per-message path (sticky pin, kept view, first- and
        // second-candidate shortcuts) on a reader of its own: the same
        // decisions, whatever the previous case's bits left in its memo.
        let mut sticky = Selector::new(&topo, policy).unwrap();
        for (peer, &class) in CLASSES.iter().enumerate() {
            for health in 0..8u8 {
                for load in 0..8u8 {
                    set_bits(&topo, peer as u32, health, load);
                    for len in [0, 8, THRESHOLD - 1, THRESHOLD, 1 << 20] {
                        for op in [Op::Put, Op::Get, Op::Atomic, Op::FetchingAtomic] {
                            let got = sel.select(peer as u32, len, op);
                            check_invariants(sel.policy(), class, len, health, load, got);
                            let fast = sticky.select_sticky(peer as u32, len, op);
                            assert_eq!(
                                fast.map(|r| (r.transport, r.class, r.retry_allowed, r.downgraded)),
                                got.map(|r| (r.transport, r.class, r.retry_allowed, r.downgraded)),
                                "sticky select, peer {peer} health {health:03b} load {load:03b} len {len} {op:?}"
                            );
                            cases += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(sel.downgrades(), sticky.downgrades(), "{dg:?}");
        assert_eq!(sel.decisions(), sticky.decisions());
        sticky.unpin();
    }
    assert_eq!(cases, 3 * 5 * 8 * 8 * 5 * 4);
}

/// `select_sticky` keeps the view of the version it holds and follows a
/// newly published one at its next call; its context ids continue the
/// selector's sequence whichever select made them; `unpin` lets the writer
/// reuse the slot.
#[test]
fn sticky_select_follows_published_versions() {
    let fx = Fixture::new(3);
    let topo = fx.topo();
    let mut sel = Selector::new(&topo, default_policy()).unwrap();
    let mut w = topo.writer().unwrap();
    set_bits(&topo, 2, 0b111, 0);
    let near = sel.select_sticky(2, 8, Op::Put).unwrap();
    assert_eq!((near.class, near.transport), (PathClass::Near, t(RDMA)));
    // Version 2 in the other slot; the sticky reader moves there at once.
    let mut u = w.try_update().unwrap();
    u.set_class(2, PathClass::Shm);
    assert_eq!(u.publish(), 2);
    let shm = sel.select_sticky(2, 8, Op::Put).unwrap();
    assert_eq!((shm.class, shm.transport), (PathClass::Shm, t(SHM)));
    // Held on version 2: version 3 may be written (slot 1), version 4 not
    // until the reader moves or unpins.
    let mut u = w.try_update().unwrap();
    u.set_class(2, PathClass::Routed);
    assert_eq!(u.publish(), 3);
    assert!(w.try_update().is_err(), "the sticky reader holds version 2");
    let routed = sel.select_sticky(2, 8, Op::Put).unwrap();
    assert_eq!(
        (routed.class, routed.transport),
        (PathClass::Routed, t(TCP))
    );
    let pinned = sel.pin().select(2, 8, Op::Put).unwrap();
    assert_eq!(pinned.class, PathClass::Routed);
    let again = sel.select_sticky(2, 8, Op::Put).unwrap();
    let seqs = [near, shm, routed, pinned, again].map(|r| r.context.seq);
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    sel.unpin();
    assert!(w.try_update().is_ok(), "unpinned");
}

/// What `select_sticky` remembers of a destination goes when the policy
/// changes, and a health bit cleared between two selects of the same
/// destination in the same version is seen by the second (failover at once).
#[test]
fn sticky_select_forgets_on_policy_change_and_sees_health_flips() {
    let fx = Fixture::new(3);
    let topo = fx.topo();
    let mut sel = Selector::new(&topo, default_policy()).unwrap();
    set_bits(&topo, 1, 0b111, 0);
    let r = sel.select_sticky(1, 8, Op::Put).unwrap();
    assert_eq!((r.transport, r.downgraded), (t(SHM), false));
    // Same version, same destination: shared memory goes down, then up.
    topo.set_health(t(SHM), 1, false);
    let r = sel.select_sticky(1, 8, Op::Put).unwrap();
    assert_eq!((r.transport, r.downgraded), (t(TCP), true));
    topo.set_health(t(SHM), 1, true);
    assert_eq!(sel.select_sticky(1, 8, Op::Put).unwrap().transport, t(SHM));
    // A policy without shared memory: the next select follows it.
    sel.set_policy(Policy::new(PolicyConfig {
        roles: TransportRoles {
            shm: None,
            ..default_roles()
        },
        short_threshold: THRESHOLD,
        ..PolicyConfig::default()
    }))
    .unwrap();
    assert_eq!(sel.select_sticky(1, 8, Op::Put).unwrap().transport, t(TCP));
    sel.unpin();
}

/// The decisions docs/ARCHITECTURE.md ("The route policy") spells out, one by one.
#[test]
fn design_rules() {
    let fx = Fixture::new(3);
    let topo = fx.topo();
    let policy = Policy::new(PolicyConfig {
        roles: default_roles(),
        short_threshold: THRESHOLD,
        ..PolicyConfig::default()
    });
    let mut sel = Selector::new(&topo, policy).unwrap();
    let all = 0b111;
    let pick = |sel: &mut Selector<'_>, peer: u32, health: u8, load: u8, len: u32| {
        set_bits(&topo, peer, health, load);
        sel.select(peer, len, Op::Put)
            .map(|r| r.transport.index() as u8)
    };
    let (short, long) = (64, 1 << 20);
    // 1. LOCAL/SHM → shared memory.
    assert_eq!(pick(&mut sel, 0, all, 0, short), Ok(SHM));
    assert_eq!(pick(&mut sel, 1, all, 0, long), Ok(SHM));
    // 2. NEAR → verbs; TCP only when verbs is unhealthy.
    assert_eq!(pick(&mut sel, 2, all, 0, short), Ok(RDMA));
    assert_eq!(pick(&mut sel, 2, all, 0, long), Ok(RDMA));
    assert_eq!(pick(&mut sel, 2, all & !(1 << RDMA), 0, short), Ok(TCP));
    // 3. ROUTED: short → TCP, long → verbs, else TCP.
    assert_eq!(pick(&mut sel, 3, all, 0, short), Ok(TCP));
    assert_eq!(pick(&mut sel, 3, all, 0, long), Ok(RDMA));
    assert_eq!(pick(&mut sel, 3, all & !(1 << RDMA), 0, long), Ok(TCP));
    //    SHM with shared memory down falls back the same way.
    assert_eq!(pick(&mut sel, 1, all & !(1 << SHM), 0, short), Ok(TCP));
    assert_eq!(pick(&mut sel, 1, all & !(1 << SHM), 0, long), Ok(RDMA));
    assert_eq!(pick(&mut sel, 1, 1 << TCP, 0, long), Ok(TCP));
    // 4. Over the watermark yields to the next healthy one; never fails for load.
    assert_eq!(pick(&mut sel, 2, all, 1 << RDMA, short), Ok(TCP));
    assert_eq!(pick(&mut sel, 2, 1 << RDMA, 1 << RDMA, short), Ok(RDMA));
    // 5. Nothing healthy → Unreachable with the reason, and UNREACHABLE ≠ ROUTED.
    assert_eq!(
        pick(&mut sel, 3, 0, 0, short),
        Err(SelectError::Unreachable {
            dst: 3,
            class: PathClass::Routed,
            reason: UnreachableReason::NoHealthyTransport
        })
    );
    assert_eq!(
        pick(&mut sel, 4, all, 0, short),
        Err(SelectError::Unreachable {
            dst: 4,
            class: PathClass::Unreachable,
            reason: UnreachableReason::NoLink
        })
    );
    assert_eq!(
        sel.select(5, 8, Op::Put),
        Err(SelectError::InvalidPe { dst: 5, n_pes: 5 })
    );
}

#[test]
fn downgrade_policies_count_and_forbid() {
    let fx = Fixture::new(3);
    let topo = fx.topo();
    let mut downgrade = [Downgrade::Allow; 5];
    downgrade[PathClass::Near.index()] = Downgrade::Forbid;
    downgrade[PathClass::Routed.index()] = Downgrade::AllowAndCount;
    let policy = Policy::new(PolicyConfig {
        roles: default_roles(),
        short_threshold: THRESHOLD,
        downgrade,
        ..PolicyConfig::default()
    });
    let mut sel = Selector::new(&topo, policy).unwrap();
    set_bits(&topo, 2, 1 << TCP, 0);
    assert_eq!(
        sel.select(2, 64, Op::Put),
        Err(SelectError::DowngradeForbidden {
            dst: 2,
            class: PathClass::Near,
            preferred: t(RDMA)
        })
    );
    set_bits(&topo, 3, 1 << TCP, 0);
    for _ in 0..3 {
        let r = sel.select(3, 1 << 20, Op::Put).unwrap();
        assert!(r.downgraded);
        assert_eq!(r.transport, t(TCP));
    }
    assert_eq!(sel.downgrades()[PathClass::Routed.index()], 3);
    assert_eq!(sel.downgrades()[PathClass::Near.index()], 0);
}

#[test]
fn context_ids_unique_per_pe_across_lanes_and_selector_lifetimes() {
    let fx = Fixture::new(3);
    let topo = fx.topo();
    let policy = default_policy();
    set_bits(&topo, 2, 0b111, 0);
    let mut seen = std::collections::HashSet::new();
    {
        let mut a = Selector::new(&topo, policy).unwrap();
        let mut b = Selector::new(&topo, policy).unwrap();
        assert_eq!(
            Selector::new(&topo, policy).unwrap_err(),
            SelectorError::NoReaderSlot,
            "two reader slots only"
        );
        for _ in 0..1000 {
            assert!(seen.insert(a.select(2, 8, Op::Put).unwrap().context));
            assert!(seen.insert(b.select(2, 8, Op::Put).unwrap().context));
        }
        // Failed selects consume no id.
        assert!(a.select(4, 8, Op::Put).is_err());
        assert_eq!(a.decisions(), 1000);
    }
    // New selectors on the same slots continue the sequences: no id repeats.
    for _ in 0..3 {
        let mut c = Selector::new(&topo, policy).unwrap();
        for _ in 0..100 {
            assert!(
                seen.insert(c.select(2, 8, Op::Put).unwrap().context),
                "context id reused"
            );
        }
        assert_eq!(c.decisions(), 100);
    }
}

#[test]
fn atomics_are_not_retried_elsewhere_by_default() {
    let fx = Fixture::new(3);
    let topo = fx.topo();
    set_bits(&topo, 2, 0b111, 0);
    let mut sel = Selector::new(&topo, default_policy()).unwrap();
    assert!(sel.select(2, 8, Op::Put).unwrap().retry_allowed);
    assert!(sel.select(2, 8, Op::Get).unwrap().retry_allowed);
    assert!(!sel.select(2, 8, Op::FetchingAtomic).unwrap().retry_allowed);
    assert!(
        !sel.select(2, 8, Op::Atomic).unwrap().retry_allowed,
        "add/xor are not idempotent"
    );
    drop(sel);
    let policy = Policy::new(PolicyConfig {
        roles: default_roles(),
        retry_atomics: true,
        ..PolicyConfig::default()
    });
    let mut sel = Selector::new(&topo, policy).unwrap();
    assert!(sel.select(2, 8, Op::Atomic).unwrap().retry_allowed);
    assert!(sel.select(2, 8, Op::FetchingAtomic).unwrap().retry_allowed);
}

#[test]
fn roles_without_health_bits_are_refused() {
    let fx = Fixture::new(3);
    let topo = fx.topo();
    let roles = TransportRoles {
        rdma: Some(t(5)),
        ..default_roles()
    };
    let policy = Policy::new(PolicyConfig {
        roles,
        ..PolicyConfig::default()
    });
    assert_eq!(
        Selector::new(&topo, policy).unwrap_err(),
        SelectorError::RoleOutOfRange {
            role: "rdma",
            id: t(5),
            n_transports: 3
        }
    );
}

#[test]
fn health_flip_is_seen_by_next_select_on_another_thread() {
    let fx = Fixture::new(3);
    let topo = fx.topo();
    set_bits(&topo, 2, 0b111, 0);
    let policy = default_policy();
    let v0 = topo.version();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut sel = Selector::new(&topo, policy).unwrap();
            assert_eq!(sel.select(2, 64, Op::Put).unwrap().transport, t(RDMA));
        })
        .join()
        .unwrap();
        topo.set_health(t(RDMA), 2, false);
        s.spawn(|| {
            let mut sel = Selector::new(&topo, policy).unwrap();
            assert_eq!(sel.select(2, 64, Op::Put).unwrap().transport, t(TCP));
        });
    });
    assert_eq!(topo.version(), v0, "a health flip swaps no version");
}

fn arb_role() -> impl Strategy<Value = Option<u8>> {
    prop_oneof![Just(None), (0u8..4).prop_map(Some)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    /// Random role layouts (missing transports, two rails) and random
    /// health/load: invariants hold.
    #[test]
    fn invariants_hold_for_any_roles(
        shm in arb_role(), rdma in arb_role(), s0 in arb_role(), s1 in arb_role(),
        health in 0u8..16, load in 0u8..16, len in 0u32..20_000, threshold in 1u32..16_384,
        dg in prop_oneof![Just(Downgrade::Allow), Just(Downgrade::AllowAndCount), Just(Downgrade::Forbid)],
    ) {
        let fx = Fixture::new(4);
        let topo = fx.topo();
        let roles = TransportRoles {
            shm: shm.map(t), rdma: rdma.map(t), stream: [s0.map(t), s1.map(t), None, None],
        };
        let policy = Policy::new(PolicyConfig { roles, short_threshold: threshold, downgrade: [dg; 5], ..PolicyConfig::default() });
        let mut sel = Selector::new(&topo, policy).unwrap();
        for peer in 0..5u32 {
            set_bits(&topo, peer, health, load);
            let class = CLASSES[peer as usize];
            let got = sel.select(peer, len, Op::Put);
            if policy.candidates(class, len).next().is_none() {
                let want = if class == PathClass::Unreachable {
                    UnreachableReason::NoLink
                } else {
                    UnreachableReason::NoTransportConfigured
                };
                let ok = matches!(got, Err(SelectError::Unreachable { reason, .. }) if reason == want);
                prop_assert!(ok, "expected Unreachable({:?}), got {:?}", want, got);
            } else {
                check_invariants(&policy, class, len, health, load, got);
            }
        }
    }
}

/// With RDMA atomics off, every atomic leaves RDMA out: a NEAR or ROUTED
/// atomic takes TCP as its first choice (not a downgrade, not counted, not
/// refused under `Forbid`), a same-node one shm; puts and gets are unchanged.
/// Turned on again with `set_policy`, NEAR atomics take RDMA.
#[test]
fn atomics_without_rdma_take_the_stream_first() {
    let fx = Fixture::new(3);
    let topo = fx.topo();
    for p in 0..4 {
        set_bits(&topo, p, 0b111, 0);
    }
    let mut downgrade = [Downgrade::Forbid; 5];
    downgrade[PathClass::Routed.index()] = Downgrade::AllowAndCount;
    let cfg = PolicyConfig {
        roles: default_roles(),
        downgrade,
        rdma_atomics: false,
        ..PolicyConfig::default()
    };
    let mut sel = Selector::new(&topo, Policy::new(cfg)).unwrap();
    for op in [Op::Atomic, Op::FetchingAtomic] {
        for len in [4, 8, THRESHOLD, u32::MAX] {
            for (p, want) in [(0, SHM), (1, SHM), (2, TCP), (3, TCP)] {
                let r = sel.select(p, len, op).unwrap();
                assert_eq!(r.transport, t(want), "PE {p}, {op:?}, {len}");
                assert!(!r.downgraded, "PE {p}, {op:?}");
            }
        }
        let c: Vec<_> = sel
            .policy()
            .candidates_for(PathClass::Near, 8, op)
            .collect();
        assert_eq!(c, [t(TCP)]);
    }
    assert_eq!(sel.downgrades(), [0; 5]);
    // Puts and gets keep RDMA.
    assert_eq!(sel.select(2, 8, Op::Put).unwrap().transport, t(RDMA));
    assert_eq!(
        sel.select(3, THRESHOLD, Op::Get).unwrap().transport,
        t(RDMA)
    );
    // TCP down: a NEAR atomic has nowhere to go (RDMA is not a fallback).
    topo.set_health(t(TCP), 2, false);
    assert!(matches!(
        sel.select(2, 8, Op::FetchingAtomic),
        Err(SelectError::Unreachable {
            reason: UnreachableReason::NoHealthyTransport,
            ..
        })
    ));
    topo.set_health(t(TCP), 2, true);
    sel.set_policy(Policy::new(PolicyConfig {
        rdma_atomics: true,
        ..cfg
    }))
    .unwrap();
    assert_eq!(
        sel.select(2, 8, Op::FetchingAtomic).unwrap().transport,
        t(RDMA)
    );
    // A policy naming a transport without health bits is refused.
    let bad = TransportRoles {
        rdma: Some(t(5)),
        ..default_roles()
    };
    assert!(matches!(
        sel.set_policy(Policy::new(PolicyConfig { roles: bad, ..cfg })),
        Err(SelectorError::RoleOutOfRange { .. })
    ));
}

/// Five to eight transports (the library's shm, verbs and four TCP rails
/// are six): every health and load state of the transports, both selects,
/// the invariants.
#[test]
fn wide_jobs_decide_like_narrow_ones() {
    for n in 5..=8u8 {
        let fx = Fixture::new(n);
        let topo = fx.topo();
        let mut roles = TransportRoles {
            shm: Some(t(SHM)),
            rdma: Some(t(RDMA)),
            stream: [None; 4],
        };
        for (i, s) in roles.stream.iter_mut().enumerate() {
            if 2 + (i as u8) < n {
                *s = Some(t(2 + i as u8));
            }
        }
        let policy = Policy::new(PolicyConfig {
            roles,
            short_threshold: THRESHOLD,
            ..PolicyConfig::default()
        });
        let mut sel = Selector::new(&topo, policy).unwrap();
        let mut sticky = Selector::new(&topo, policy).unwrap();
        let all = 1u16 << n.min(6);
        for (peer, &class) in CLASSES.iter().enumerate() {
            for health in 0..all {
                for load in (0..all).step_by(3) {
                    set_bits_wide(&topo, peer as u32, health, load);
                    for len in [8, THRESHOLD] {
                        let got = sel.select(peer as u32, len, Op::Put);
                        let fast = sticky.select_sticky(peer as u32, len, Op::Put);
                        assert_eq!(
                            fast.map(|r| (r.transport, r.downgraded)),
                            got.map(|r| (r.transport, r.downgraded))
                        );
                        check_wide(&policy, class, len, health, load, got);
                    }
                }
            }
        }
    }
}

fn set_bits_wide(topo: &Topology<'_>, peer: u32, health: u16, load: u16) {
    for tr in 0..topo.shape().n_transports {
        topo.set_health(t(tr), peer, health & (1 << tr) != 0);
        topo.set_overloaded(t(tr), peer, load & (1 << tr) != 0);
    }
}

/// The first allowed candidate that is usable (healthy, not over its
/// watermark) wins, else the first healthy one; nothing healthy fails.
fn check_wide(
    policy: &Policy,
    class: PathClass,
    len: u32,
    health: u16,
    load: u16,
    got: Result<Route, SelectError>,
) {
    let healthy = |x: &TransportId| health & (1 << x.index()) != 0;
    let usable = |x: &TransportId| healthy(x) && load & (1 << x.index()) == 0;
    let cands: Vec<TransportId> = policy.candidates(class, len).collect();
    let want = cands
        .iter()
        .find(|x| usable(x))
        .or_else(|| cands.iter().find(|x| healthy(x)));
    let ctx = format!("class {class} len {len} health {health:08b} load {load:08b}");
    match (got, want) {
        (Ok(r), Some(w)) => {
            assert_eq!(r.transport, *w, "{ctx}");
            assert_eq!(r.downgraded, r.transport != cands[0], "{ctx}");
        }
        (Err(SelectError::Unreachable { .. }), None) => {}
        (got, want) => panic!("{got:?}, want {want:?}: {ctx}"),
    }
}
