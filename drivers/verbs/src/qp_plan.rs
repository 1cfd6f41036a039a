//! QP state-machine planning: which `ibv_modify_qp` transitions take a QP
//! from where it is to RTS, with which validated attributes.
//!
//! Pure: [`plan_connect`] and [`plan_rebuild`] return a [`Plan`] (at most four
//! [`Step`]s, no allocation) that the driver executes one `ibv_modify_qp`
//! per step. A QP in error is *rebuilt*: RESET, INIT, RTR, RTS again, keeping
//! its QPN (so the peer needs no new card) with a new PSN from [`psn_for`]
//! for the new generation, which both ends compute the same way.

use crate::{
    card::{LinkLayer, MAX_24},
    params::{Mtu, QpParams},
};

/// A QP state (`enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Just created or reset.
    Reset,
    /// Initialized: port and access set.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error: every WR is flushed.
    Err,
}

impl QpState {
    /// From the verbs encoding; `None` for `IBV_QPS_UNKNOWN` and others.
    pub const fn from_ibv(v: u32) -> Option<QpState> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            _ => return None,
        })
    }

    /// The verbs encoding.
    pub const fn to_ibv(self) -> u32 {
        self as u32
    }
}

/// Access the responder grants on our heap through this QP.
pub const QP_ACCESS: u32 = REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC;
const REMOTE_WRITE: u32 = 2;
const REMOTE_READ: u32 = 4;
const REMOTE_ATOMIC: u32 = 8;

/// Where the remote QP is and how to reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteQp {
    /// Its QPN.
    pub qpn: u32,
    /// The PSN it sends with (our receive PSN).
    pub psn: u32,
    /// Its LID.
    pub lid: u16,
    /// Its GID, when routed by GID.
    pub gid: Option<[u8; 16]>,
    /// Its port's active MTU.
    pub mtu: Mtu,
}

/// What the local side brings to a connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalQp {
    /// Port number (from 1).
    pub port: u8,
    /// Link layer of that port.
    pub link_layer: LinkLayer,
    /// Source GID index (needed when the remote has a GID).
    pub gid_index: Option<u8>,
    /// The PSN we send with.
    pub psn: u32,
}

/// One `ibv_modify_qp` call, with its attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// To RESET (from any state).
    Reset,
    /// To ERROR (from any state): the QP stops executing incoming
    /// messages and flushes its work. The target of a failed link takes its
    /// QPs there before reporting which puts landed (the receipts).
    Error,
    /// RESET → INIT.
    Init {
        /// Port.
        port: u8,
        /// P_Key index.
        pkey_index: u16,
        /// Remote access granted (`qp_access_flags`).
        access: u32,
    },
    /// INIT → RTR.
    Rtr {
        /// Remote QPN.
        dest_qpn: u32,
        /// Expected first PSN from the remote.
        rq_psn: u32,
        /// Path MTU: the smaller of ours and the remote's.
        path_mtu: Mtu,
        /// Reads/atomics we serve at once.
        max_dest_rd_atomic: u8,
        /// Minimum RNR NAK timer.
        min_rnr_timer: u8,
        /// Destination LID.
        dlid: u16,
        /// Destination GID and our source GID index, when routed by GID.
        grh: Option<([u8; 16], u8)>,
        /// Port.
        port: u8,
    },
    /// RTR → RTS.
    Rts {
        /// Our first PSN.
        sq_psn: u32,
        /// ACK timeout exponent.
        timeout: u8,
        /// Retries.
        retry_cnt: u8,
        /// RNR retries.
        rnr_retry: u8,
        /// Reads/atomics we issue at once.
        max_rd_atomic: u8,
    },
}

impl Step {
    /// The state the QP is in after this step.
    pub const fn target(&self) -> QpState {
        match self {
            Step::Reset => QpState::Reset,
            Step::Error => QpState::Err,
            Step::Init { .. } => QpState::Init,
            Step::Rtr { .. } => QpState::Rtr,
            Step::Rts { .. } => QpState::Rts,
        }
    }
}

/// Up to four steps, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Plan {
    steps: [Option<Step>; 4],
}

impl Plan {
    fn push(&mut self, s: Step) {
        if let Some(slot) = self.steps.iter_mut().find(|x| x.is_none()) {
            *slot = Some(s);
        }
    }

    /// The steps, in order.
    pub fn steps(&self) -> impl Iterator<Item = &Step> {
        self.steps.iter().flatten()
    }

    /// How many steps.
    pub fn len(&self) -> usize {
        self.steps().count()
    }

    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.steps[0].is_none()
    }
}

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// An attribute is out of range.
    #[error("QP attribute {field} = {value}: expected {expected}")]
    Attr {
        /// The attribute.
        field: &'static str,
        /// Its value.
        value: u64,
        /// What was expected.
        expected: &'static str,
    },
    /// The QP is in a state a connect cannot continue from.
    #[error("QP is in state {state:?}: it must be rebuilt (reset, init, rtr, rts)")]
    NeedsRebuild {
        /// Its state.
        state: QpState,
    },
}

fn attr(field: &'static str, value: u64, expected: &'static str) -> PlanError {
    PlanError::Attr {
        field,
        value,
        expected,
    }
}

/// The INIT, RTR and RTS steps with their attributes, validated.
fn forward(local: &LocalQp, remote: &RemoteQp, p: &QpParams) -> Result<[Step; 3], PlanError> {
    if local.port == 0 {
        return Err(attr("port", 0, "a port number from 1"));
    }
    if remote.qpn == 0 || remote.qpn > MAX_24 {
        return Err(attr("dest_qpn", remote.qpn.into(), "1 to 2^24-1"));
    }
    if remote.psn > MAX_24 {
        return Err(attr("rq_psn", remote.psn.into(), "0 to 2^24-1"));
    }
    if local.psn > MAX_24 {
        return Err(attr("sq_psn", local.psn.into(), "0 to 2^24-1"));
    }
    if !(1..=31).contains(&p.timeout) {
        return Err(attr("timeout", p.timeout.into(), "1 to 31"));
    }
    if p.retry_cnt > 7 {
        return Err(attr("retry_cnt", p.retry_cnt.into(), "0 to 7"));
    }
    if p.rnr_retry > 7 {
        return Err(attr("rnr_retry", p.rnr_retry.into(), "0 to 7"));
    }
    if p.min_rnr_timer > 31 {
        return Err(attr("min_rnr_timer", p.min_rnr_timer.into(), "0 to 31"));
    }
    if p.max_rd_atomic == 0 || p.max_dest_rd_atomic == 0 {
        return Err(attr(
            "max_rd_atomic",
            p.max_rd_atomic.min(p.max_dest_rd_atomic).into(),
            "at least 1 (RDMA READ and atomics need it)",
        ));
    }
    let grh = match (remote.gid, local.link_layer) {
        (Some(g), _) => {
            if g == [0; 16] {
                return Err(attr("dgid", 0, "a non-zero GID"));
            }
            let idx = local.gid_index.ok_or_else(|| {
                attr(
                    "sgid_index",
                    0,
                    "a local GID index when the remote has a GID",
                )
            })?;
            Some((g, idx))
        }
        (None, LinkLayer::Ethernet) => {
            return Err(attr("dgid", 0, "a remote GID on an Ethernet (RoCE) port"));
        }
        (None, LinkLayer::InfiniBand) => {
            if remote.lid == 0 {
                return Err(attr("dlid", 0, "a non-zero LID on InfiniBand"));
            }
            None
        }
    };
    Ok([
        Step::Init {
            port: local.port,
            pkey_index: 0,
            access: QP_ACCESS,
        },
        Step::Rtr {
            dest_qpn: remote.qpn,
            rq_psn: remote.psn,
            path_mtu: p.path_mtu.min(remote.mtu),
            max_dest_rd_atomic: p.max_dest_rd_atomic,
            min_rnr_timer: p.min_rnr_timer,
            dlid: remote.lid,
            grh,
            port: local.port,
        },
        Step::Rts {
            sq_psn: local.psn,
            timeout: p.timeout,
            retry_cnt: p.retry_cnt,
            rnr_retry: p.rnr_retry,
            max_rd_atomic: p.max_rd_atomic,
        },
    ])
}

/// The steps from `current` to RTS for a first connect.
///
/// # Errors
///
/// [`PlanError::Attr`] for a bad attribute; [`PlanError::NeedsRebuild`] when
/// the QP is in SQD, SQE or ERR (use [`plan_rebuild`]).
pub fn plan_connect(
    current: QpState,
    local: &LocalQp,
    remote: &RemoteQp,
    p: &QpParams,
) -> Result<Plan, PlanError> {
    let steps = forward(local, remote, p)?;
    let from = match current {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        state => return Err(PlanError::NeedsRebuild { state }),
    };
    let mut plan = Plan::default();
    for s in &steps[from..] {
        plan.push(*s);
    }
    Ok(plan)
}

/// The steps that rebuild a QP from any state: RESET (unless already there),
/// INIT, RTR, RTS, with the PSNs of the new generation.
///
/// # Errors
///
/// [`PlanError::Attr`] for a bad attribute.
pub fn plan_rebuild(
    current: QpState,
    local: &LocalQp,
    remote: &RemoteQp,
    p: &QpParams,
) -> Result<Plan, PlanError> {
    let steps = forward(local, remote, p)?;
    let mut plan = Plan::default();
    if current != QpState::Reset {
        plan.push(Step::Reset);
    }
    for s in steps {
        plan.push(s);
    }
    Ok(plan)
}

/// The PSN the QP `qp` from PE `from` to PE `to` starts generation `gen`
/// with: 24 bits of a mix of the job seed and those numbers. Both ends
/// compute it, so a rebuild needs only the generation to be agreed on.
pub const fn psn_for(seed: u64, from: u32, to: u32, qp: u8, generation: u32) -> u32 {
    let mut x = seed
        ^ ((from as u64) << 32 | to as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ ((qp as u64) << 40 | generation as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    // splitmix64 finalizer.
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x as u32) & MAX_24
}

#[cfg(test)]
mod test {
    use proptest::prelude::*;

    use super::*;
    use crate::params::{AtomicCap, DeviceLimits, VerbsConfig, derive};

    fn params() -> QpParams {
        let limits = DeviceLimits {
            max_qp_wr: 1024,
            max_cqe: 4096,
            max_qp: 1024,
            max_sge: 4,
            max_qp_init_rd_atom: 16,
            max_qp_rd_atom: 16,
            atomic_cap: AtomicCap::Hca,
            max_mr_size: u64::MAX,
            max_srq_wr: 1 << 16,
            active_mtu: Mtu::M4096,
        };
        derive(&VerbsConfig::default(), &limits).unwrap()
    }

    fn roce() -> (LocalQp, RemoteQp) {
        (
            LocalQp {
                port: 1,
                link_layer: LinkLayer::Ethernet,
                gid_index: Some(3),
                psn: 100,
            },
            RemoteQp {
                qpn: 0x1234,
                psn: 200,
                lid: 0,
                gid: Some([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
                mtu: Mtu::M1024,
            },
        )
    }

    #[test]
    fn connect_from_reset_goes_init_rtr_rts() {
        let (l, r) = roce();
        let plan = plan_connect(QpState::Reset, &l, &r, &params()).unwrap();
        let states: Vec<QpState> = plan.steps().map(Step::target).collect();
        assert_eq!(states, [QpState::Init, QpState::Rtr, QpState::Rts]);
        let steps: Vec<&Step> = plan.steps().collect();
        assert_eq!(
            *steps[0],
            Step::Init {
                port: 1,
                pkey_index: 0,
                access: QP_ACCESS
            }
        );
        match steps[1] {
            Step::Rtr {
                dest_qpn,
                rq_psn,
                path_mtu,
                grh,
                ..
            } => {
                assert_eq!((*dest_qpn, *rq_psn), (0x1234, 200));
                assert_eq!(*path_mtu, Mtu::M1024, "the smaller of the two ports");
                assert_eq!(grh.unwrap().1, 3);
            }
            s => panic!("{s:?}"),
        }
        match steps[2] {
            Step::Rts {
                sq_psn, timeout, ..
            } => assert_eq!((*sq_psn, *timeout), (100, 14)),
            s => panic!("{s:?}"),
        }
        // Continuing a half-done connect; nothing to do at RTS.
        assert_eq!(
            plan_connect(QpState::Rtr, &l, &r, &params()).unwrap().len(),
            1
        );
        assert!(
            plan_connect(QpState::Rts, &l, &r, &params())
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            plan_connect(QpState::Err, &l, &r, &params()),
            Err(PlanError::NeedsRebuild {
                state: QpState::Err
            })
        );
    }

    #[test]
    fn rebuild_resets_first_with_the_new_psn() {
        let (mut l, mut r) = roce();
        l.psn = psn_for(7, 0, 1, 0, 2);
        r.psn = psn_for(7, 1, 0, 0, 2);
        let plan = plan_rebuild(QpState::Err, &l, &r, &params()).unwrap();
        let states: Vec<QpState> = plan.steps().map(Step::target).collect();
        assert_eq!(
            states,
            [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts]
        );
        let last = plan.steps().last().unwrap();
        assert!(matches!(last, Step::Rts { sq_psn, .. } if *sq_psn == l.psn));
        assert_eq!(
            plan_rebuild(QpState::Reset, &l, &r, &params())
                .unwrap()
                .len(),
            3
        );
        assert_ne!(
            psn_for(7, 0, 1, 0, 2),
            psn_for(7, 0, 1, 0, 3),
            "new generation, new PSN"
        );
    }

    #[test]
    fn attributes_are_validated() {
        let (l, r) = roce();
        let p = params();
        let field =
            |l: LocalQp, r: RemoteQp, p: QpParams| match plan_connect(QpState::Reset, &l, &r, &p) {
                Err(PlanError::Attr { field, .. }) => field,
                other => panic!("{other:?}"),
            };
        assert_eq!(field(LocalQp { port: 0, ..l }, r, p), "port");
        assert_eq!(field(l, RemoteQp { qpn: 0, ..r }, p), "dest_qpn");
        assert_eq!(field(l, RemoteQp { qpn: 1 << 24, ..r }, p), "dest_qpn");
        assert_eq!(field(l, RemoteQp { psn: 1 << 24, ..r }, p), "rq_psn");
        assert_eq!(field(LocalQp { psn: 1 << 24, ..l }, r, p), "sq_psn");
        assert_eq!(field(l, r, QpParams { timeout: 0, ..p }), "timeout");
        assert_eq!(field(l, r, QpParams { retry_cnt: 8, ..p }), "retry_cnt");
        assert_eq!(field(l, r, QpParams { rnr_retry: 9, ..p }), "rnr_retry");
        assert_eq!(
            field(
                l,
                r,
                QpParams {
                    min_rnr_timer: 32,
                    ..p
                }
            ),
            "min_rnr_timer"
        );
        assert_eq!(
            field(
                l,
                r,
                QpParams {
                    max_rd_atomic: 0,
                    ..p
                }
            ),
            "max_rd_atomic"
        );
        assert_eq!(field(l, RemoteQp { gid: None, ..r }, p), "dgid");
        assert_eq!(
            field(
                l,
                RemoteQp {
                    gid: Some([0; 16]),
                    ..r
                },
                p
            ),
            "dgid"
        );
        assert_eq!(
            field(
                LocalQp {
                    gid_index: None,
                    ..l
                },
                r,
                p
            ),
            "sgid_index"
        );
        // InfiniBand by LID.
        let ib = LocalQp {
            link_layer: LinkLayer::InfiniBand,
            gid_index: None,
            ..l
        };
        assert_eq!(
            field(
                ib,
                RemoteQp {
                    gid: None,
                    lid: 0,
                    ..r
                },
                p
            ),
            "dlid"
        );
        let plan = plan_connect(
            QpState::Reset,
            &ib,
            &RemoteQp {
                gid: None,
                lid: 9,
                ..r
            },
            &p,
        )
        .unwrap();
        assert!(plan.steps().any(|s| matches!(
            s,
            Step::Rtr {
                dlid: 9,
                grh: None,
                ..
            }
        )));
    }

    proptest! {
        /// PSNs are 24 bits for every input.
        #[test]
        fn psns_fit_24_bits(seed: u64, from: u32, to: u32, qp: u8, g: u32) {
            prop_assert!(psn_for(seed, from, to, qp, g) <= MAX_24);
        }

        /// From any state, the rebuild plan ends at RTS and passes through
        /// RESET, INIT and RTR in that order.
        #[test]
        fn rebuild_always_ends_at_rts(s in 0u32..7) {
            let (l, r) = roce();
            let state = QpState::from_ibv(s).unwrap();
            let plan = plan_rebuild(state, &l, &r, &params()).unwrap();
            let t: Vec<QpState> = plan.steps().map(Step::target).collect();
            prop_assert_eq!(&t[t.len() - 3..], &[QpState::Init, QpState::Rtr, QpState::Rts]);
            prop_assert_eq!(t.len() == 4, state != QpState::Reset);
        }
    }
}
