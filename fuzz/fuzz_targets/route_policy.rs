//! The route policy against its specification: an arbitrary job (size, row
//! owner, classes, health and load bits of three transports, roles, threshold,
//! downgrade rules), an arbitrary sequence of selects interleaved with health,
//! load and class changes, and after every select the policy invariants of
//! docs/ARCHITECTURE.md ("The route policy"), checked against a model of the row kept here:
//!
//! * an out-of-range destination is `InvalidPe`;
//! * the route's class is the topology's class;
//! * the transport is healthy and one of `policy.candidates(class, len)`;
//! * NEAR never takes a stream (TCP) rail while RDMA is configured, healthy and
//!   not over its watermark;
//! * `Unreachable` only when no allowed candidate is healthy;
//! * with `Downgrade::Forbid` the result is the first candidate or an error;
//! * and the exact decision (first healthy candidate under its watermark, else
//!   the first healthy one), `downgraded`, `retry_allowed`, the context id and
//!   the downgrade counters.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use switchyard_core::{
    class::{PathClass, TransportId},
    route::{
        CONTEXT_COUNTER_BITS, Downgrade, Op, Policy, PolicyConfig, SelectError, Selector,
        SelectorError, TransportRoles, UnreachableReason,
    },
    topology::{Shape, Topology, TopologyBox},
};

const N_TRANSPORTS: u8 = 3;
/// The lane of the only selector: it takes reader slot 0.
const LANE: u8 = 0;

#[derive(Debug, Arbitrary)]
enum Step {
    Select { dst: u16, len: u32, op: u8 },
    Health { t: u8, peer: u16, up: bool },
    Load { t: u8, peer: u16, over: bool },
    Class { peer: u16, code: u8 },
}

#[derive(Debug, Arbitrary)]
struct Input {
    n_pes: u16,
    me: u16,
    load_hints: bool,
    /// Row codes (0 SHM, 1 NEAR, 2 ROUTED, 3 UNREACHABLE), cycled over the peers.
    classes: Vec<u8>,
    /// Per peer: bits 0..3 health of t0..t2, bits 3..6 load of t0..t2; cycled.
    links: Vec<u8>,
    /// Role ids: 0..=2 a transport with health bits, 3 an id without any
    /// (never healthy), 4 and above: no transport in that role.
    shm: u8,
    rdma: u8,
    stream: [u8; 4],
    short_threshold: u32,
    downgrade: [u8; 5],
    retry_atomics: bool,
    steps: Vec<Step>,
}

fn role(b: u8) -> Option<TransportId> {
    match b % 6 {
        i @ 0..=3 => TransportId::new(i),
        _ => None,
    }
}

fn op(b: u8) -> Op {
    [Op::Put, Op::Get, Op::FetchingAtomic, Op::Atomic][(b % 4) as usize]
}

/// What the fuzz target believes the row is.
struct Model {
    me: u32,
    class: Vec<PathClass>,
    /// `[transport][peer]`.
    health: Vec<Vec<bool>>,
    load: Vec<Vec<bool>>,
    load_hints: bool,
}

impl Model {
    fn class(&self, peer: u32) -> PathClass {
        if peer == self.me {
            PathClass::Local
        } else {
            self.class[peer as usize]
        }
    }
    fn healthy(&self, t: TransportId, peer: u32) -> bool {
        t.index() < N_TRANSPORTS as usize && self.health[t.index()][peer as usize]
    }
    fn over(&self, t: TransportId, peer: u32) -> bool {
        self.load_hints && t.index() < N_TRANSPORTS as usize && self.load[t.index()][peer as usize]
    }
}

fuzz_target!(|input: Input| {
    let n_pes = u32::from(input.n_pes) % 300 + 1;
    let me = u32::from(input.me) % n_pes;
    let shape = Shape {
        me,
        n_pes,
        n_transports: N_TRANSPORTS,
        load_hints: input.load_hints,
    };
    let pick = |v: &[u8], i: u32| v.get(i as usize % v.len().max(1)).copied().unwrap_or(0);
    let mut model = Model {
        me,
        class: (0..n_pes)
            .map(|p| PathClass::from_row_code(pick(&input.classes, p) as usize))
            .collect(),
        health: (0..N_TRANSPORTS)
            .map(|t| {
                (0..n_pes)
                    .map(|p| pick(&input.links, p) >> t & 1 != 0)
                    .collect()
            })
            .collect(),
        load: (0..N_TRANSPORTS)
            .map(|t| {
                (0..n_pes)
                    .map(|p| pick(&input.links, p) >> (3 + t) & 1 != 0)
                    .collect()
            })
            .collect(),
        load_hints: input.load_hints,
    };

    let store = TopologyBox::new(shape, 2);
    let topo = Topology::new(store.mem(), shape, |p| model.class[p as usize]).expect("shape fits");
    for p in 0..n_pes {
        for t in 0..N_TRANSPORTS {
            let id = TransportId::new(t).unwrap();
            topo.set_health(id, p, model.health[t as usize][p as usize]);
            let r = topo.set_overloaded(id, p, model.load[t as usize][p as usize]);
            assert_eq!(
                r.is_some(),
                input.load_hints,
                "load bits exist iff load hints"
            );
        }
    }

    let roles = TransportRoles {
        shm: role(input.shm),
        rdma: role(input.rdma),
        stream: input.stream.map(role),
    };
    let downgrade = input.downgrade.map(|d| {
        [
            Downgrade::Allow,
            Downgrade::AllowAndCount,
            Downgrade::Forbid,
        ][(d % 3) as usize]
    });
    let config = PolicyConfig {
        roles,
        short_threshold: input.short_threshold,
        downgrade,
        retry_atomics: input.retry_atomics,
        ..PolicyConfig::default()
    };
    let policy = Policy::new(config);
    let mut sel = match Selector::new(&topo, policy) {
        Ok(sel) => sel,
        Err(SelectorError::RoleOutOfRange {
            id, n_transports, ..
        }) => {
            // A role without health bits could never be selected: refused.
            assert!(id.index() >= usize::from(n_transports));
            return;
        }
        Err(e) => panic!("selector: {e}"),
    };
    let mut writer = topo.writer().expect("the only writer");
    let mut successes = 0u64;
    let mut counted = [0u64; 5];

    for step in input.steps.iter().take(512) {
        match *step {
            Step::Health { t, peer, up } => {
                let (t, peer) = (t % N_TRANSPORTS, u32::from(peer) % n_pes);
                let prev = topo.set_health(TransportId::new(t).unwrap(), peer, up);
                assert_eq!(prev, Some(model.health[t as usize][peer as usize]));
                model.health[t as usize][peer as usize] = up;
            }
            Step::Load { t, peer, over } => {
                let (t, peer) = (t % N_TRANSPORTS, u32::from(peer) % n_pes);
                let prev = topo.set_overloaded(TransportId::new(t).unwrap(), peer, over);
                if input.load_hints {
                    assert_eq!(prev, Some(model.load[t as usize][peer as usize]));
                    model.load[t as usize][peer as usize] = over;
                } else {
                    assert_eq!(prev, None);
                }
            }
            Step::Class { peer, code } => {
                let peer = u32::from(peer) % n_pes;
                let class = PathClass::from_row_code(code as usize);
                let mut u = writer.try_update().expect("no reader is left pinned");
                assert_eq!(u.set_class(peer, class), peer != me);
                let v = u.publish();
                assert_eq!(topo.version(), v);
                if peer != me {
                    model.class[peer as usize] = class;
                }
            }
            Step::Select { dst, len, op: o } => {
                // Destinations up to 2 × n_pes: half of them out of range.
                let dst = u32::from(dst) % (2 * n_pes);
                let op = op(o);
                let got = sel.select(dst, len, op);
                check(
                    &model,
                    &policy,
                    dst,
                    len,
                    op,
                    got,
                    n_pes,
                    &mut successes,
                    &mut counted,
                );
                assert_eq!(sel.decisions(), successes);
                assert_eq!(sel.downgrades(), counted);
            }
        }
    }
});

#[allow(clippy::too_many_arguments)]
fn check(
    m: &Model,
    policy: &Policy,
    dst: u32,
    len: u32,
    op: Op,
    got: Result<switchyard_core::route::Route, SelectError>,
    n_pes: u32,
    successes: &mut u64,
    counted: &mut [u64; 5],
) {
    if dst >= n_pes {
        assert_eq!(got, Err(SelectError::InvalidPe { dst, n_pes }));
        return;
    }
    let class = m.class(dst);
    let cands: Vec<TransportId> = policy.candidates(class, len).collect();
    let cfg = policy.config();
    let forbid = cfg.downgrade[class.index()] == Downgrade::Forbid;
    let allowed = if forbid {
        &cands[..cands.len().min(1)]
    } else {
        &cands[..]
    };
    let healthy = |t: &TransportId| m.healthy(*t, dst);
    let streams: Vec<TransportId> = cfg.roles.stream.iter().flatten().copied().collect();

    // Specification-level invariants.
    match got {
        Ok(r) => {
            assert_eq!(r.class, class, "route class is the topology's");
            assert!(
                m.healthy(r.transport, dst),
                "unhealthy transport {} chosen",
                r.transport
            );
            assert!(cands.contains(&r.transport), "not a candidate");
            assert_eq!(r.downgraded, r.transport != cands[0]);
            if forbid {
                assert_eq!(r.transport, cands[0], "Forbid: first candidate or an error");
            }
            if let Some(rdma) = cfg.roles.rdma
                && class == PathClass::Near
                && m.healthy(rdma, dst)
                && !m.over(rdma, dst)
            {
                assert!(
                    r.transport == rdma || !streams.contains(&r.transport),
                    "NEAR took stream {} while rdma {rdma} is healthy",
                    r.transport
                );
            }
            assert_eq!(r.context.pe, m.me);
            assert_eq!(r.context.seq >> CONTEXT_COUNTER_BITS, u64::from(LANE));
            assert_eq!(
                r.context.seq & ((1 << CONTEXT_COUNTER_BITS) - 1),
                *successes
            );
            let retry = cands.len() > 1 && !forbid && (!op.is_atomic() || cfg.retry_atomics);
            assert_eq!(r.retry_allowed, retry);
        }
        Err(SelectError::Unreachable {
            dst: d,
            class: c,
            reason,
        }) => {
            assert_eq!((d, c), (dst, class));
            assert!(
                !allowed.iter().any(healthy),
                "Unreachable with a healthy candidate"
            );
            let want = if !cands.is_empty() {
                UnreachableReason::NoHealthyTransport
            } else if class == PathClass::Unreachable {
                UnreachableReason::NoLink
            } else {
                UnreachableReason::NoTransportConfigured
            };
            assert_eq!(reason, want);
        }
        Err(SelectError::DowngradeForbidden {
            dst: d,
            class: c,
            preferred,
        }) => {
            assert_eq!((d, c), (dst, class));
            assert!(forbid, "DowngradeForbidden without Forbid");
            assert_eq!(preferred, cands[0]);
            assert!(!healthy(&cands[0]));
            assert!(
                cands.iter().skip(1).any(healthy),
                "no fallback was healthy either"
            );
        }
        Err(e @ SelectError::InvalidPe { .. }) => panic!("{e} for an in-range PE"),
    }

    // The exact decision.
    let pick = allowed
        .iter()
        .position(|t| healthy(t) && !m.over(*t, dst))
        .or_else(|| allowed.iter().position(healthy));
    match pick {
        Some(i) => {
            let r = got.expect("a healthy allowed candidate exists");
            assert_eq!(r.transport, allowed[i]);
            *successes += 1;
            if i > 0 && cfg.downgrade[class.index()] == Downgrade::AllowAndCount {
                counted[class.index()] += 1;
            }
        }
        // Forbid is the reason only when a fallback would have been healthy.
        None if forbid && cands.iter().skip(1).any(healthy) => {
            assert!(matches!(got, Err(SelectError::DowngradeForbidden { .. })))
        }
        None => assert!(matches!(got, Err(SelectError::Unreachable { .. }))),
    }
}
